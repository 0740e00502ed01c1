#!/usr/bin/env bash
# Points the Go modules of the end-to-end tests at another Kubernetes release:
# tests/kube/go.mod (kube-apiserver, kube-scheduler, kubectl, the kubelet) and
# scheduler-plugin/go.mod (kube-scheduler with GpuShare). k8s.io/kubernetes
# refers to its staging modules as v0.0.0, so each one that release lists is
# pinned to the matching v0.<minor>.<patch> with a replace directive, the
# indirect requirements are dropped, and `go mod tidy` works them out again
# from that release (else the newer ones of the pinned release stay, and
# the kubelet of an older one does not build). Helm is dropped from
# tests/kube: run the chart's tests with the pinned one (GPUSHARE_HELM), a
# client of every supported API server.
#
#   scripts/set-kube-version.sh v1.36.3
#
# scripts/kube-matrix.sh runs it in a copy of the tree; run on a checkout, it
# changes both go.mod files (git diff shows how).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version=${1:-}
if ! [[ "$version" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]]; then
  echo "set-kube-version.sh: '$version' is not a Kubernetes release such as v1.36.3" >&2; exit 2
fi
staging="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
go_bin="$("$root/tests/kube/find-go.sh")"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod

# The staging modules of that release, from its own go.mod.
modfile=$(cd "$root/tests/kube" && "$go_bin" mod download -json "k8s.io/kubernetes@$version" |
          sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
[ -f "$modfile" ] || { echo "set-kube-version.sh: no go.mod for k8s.io/kubernetes@$version" >&2; exit 1; }
mapfile -t modules < <(awk '/^replace \(/{f=1;next} f&&/^\)/{f=0}
  f && $1 ~ /^k8s\.io\// && $3 ~ /^\.\/staging\// && $1 !~ /sample-/ {print $1}' "$modfile")
[ "${#modules[@]}" -gt 0 ] || { echo "set-kube-version.sh: no staging modules in $modfile" >&2; exit 1; }
go_min=$(awk '$1 == "go" {print $2; exit}' "$modfile")

pin() {  # pin DIR: the release and its staging modules in DIR/go.mod
  local dir=$1 args=() m
  for m in $(awk '$1 == "replace" || /^\t/ {print $1}' "$dir/go.mod" | grep '^k8s\.io/' | sort -u); do
    args+=("-dropreplace=$m")
  done
  for m in "${modules[@]}"; do args+=("-replace=$m=$m@$staging"); done
  # Staging modules of the old release that this one does not have (they
  # exist only as v0.0.0 under the old one's replace directives).
  for m in $(grep -E "^[[:space:]]*(require[[:space:]]+)?k8s\.io/[a-z0-9-]+ v0\.0\.0" "$dir/go.mod" |
             sed -E 's/^[[:space:]]*(require[[:space:]]+)?//' | awk '{print $1}'); do
    case " ${modules[*]} " in *" $m "*) ;; *) args+=("-droprequire=$m") ;; esac
  done
  (cd "$dir" && "$go_bin" mod edit "${args[@]}" -require="k8s.io/kubernetes@$version" -go="$go_min")
  sed -i '/\/\/ indirect$/d' "$dir/go.mod"
  # Requirements of staging modules at a release follow it (v0.0.0 ones stay).
  args=()
  for m in "${modules[@]}"; do
    if grep -Eq "^[[:space:]]*(require[[:space:]]+)?$m v0\.[1-9]" "$dir/go.mod"; then
      args+=("-require=$m@$staging")
    fi
  done
  [ "${#args[@]}" -eq 0 ] || (cd "$dir" && "$go_bin" mod edit "${args[@]}")
}

sed -i '/helm\.sh\/helm/d' "$root/tests/kube/tools.go"
(cd "$root/tests/kube" && "$go_bin" mod edit -droprequire=helm.sh/helm/v4)
pin "$root/tests/kube"
(cd "$root/tests/kube" && "$go_bin" mod tidy)
pin "$root/scheduler-plugin"
(cd "$root/scheduler-plugin" && "$go_bin" mod tidy)
echo "set-kube-version.sh: tests/kube and scheduler-plugin now build Kubernetes $version"
