{{/*
gpushare.image: "[imageRegistry/]repository:tag" of one program; the tag
defaults to the chart's appVersion. Called with (dict "image" .Values.x.image "root" $).
*/}}
{{- define "gpushare.image" -}}
{{- with .root.Values.imageRegistry }}{{ . }}/{{ end -}}
{{ .image.repository }}:{{ .image.tag | default .root.Chart.AppVersion }}
{{- end }}

{{/* The DNS name of the extender's Service, which its certificate carries. */}}
{{- define "gpushare.extenderHost" -}}
gpushare-extender.{{ .Release.Namespace }}.svc
{{- end }}

{{/* The users the admission policies trust as schedulers, comma-separated. */}}
{{- define "gpushare.schedulers" -}}
{{- $users := list (printf "system:serviceaccount:%s:gpushare-extender" .Release.Namespace) -}}
{{- $users = concat $users .Values.admission.extraSchedulers -}}
{{- $users = append $users (printf "system:serviceaccount:%s:gpushare-scheduler" .Release.Namespace) -}}
{{- join "," $users -}}
{{- end }}
