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

{{/*
The users the admission policies trust, as CEL lists of strings:
gpushare.schedulers (the extender's and the standalone scheduler's service
accounts, and admission.extraSchedulers) and gpushare.devicePlugins (the
device plugin's service account, and admission.extraDevicePlugins). The
schema keeps quotes and backslashes out of the names.
*/}}
{{- define "gpushare.celList" -}}
[{{ range $i, $user := . }}{{ if $i }}, {{ end }}{{ $user | squote }}{{ end }}]
{{- end }}
{{- define "gpushare.schedulers" -}}
{{- $users := list (printf "system:serviceaccount:%s:gpushare-extender" .Release.Namespace) -}}
{{- $users = concat $users .Values.admission.extraSchedulers -}}
{{- $users = append $users (printf "system:serviceaccount:%s:gpushare-scheduler" .Release.Namespace) -}}
{{- include "gpushare.celList" $users -}}
{{- end }}
{{- define "gpushare.devicePlugins" -}}
{{- $users := list (printf "system:serviceaccount:%s:gpushare-devices" .Release.Namespace) -}}
{{- $users = concat $users .Values.admission.extraDevicePlugins -}}
{{- include "gpushare.celList" $users -}}
{{- end }}
