#!/usr/bin/env bash
# Builds Kubernetes programs from the release pinned in tests/kube/go.mod,
# through the Go module proxy, and caches them outside the source tree so that
# `make clean` keeps them:
#
#   ${GPUSHARE_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpushare}/kube-<k8s>-<go>/
#
#   tests/kube/build-kube.sh [PROGRAM...]
#
# PROGRAMs: kube-apiserver, kube-scheduler, kubectl (the default three, for
# tests/kube/), kubelet (for tests/node/), kube-controller-manager (for
# tests/install/: Deployments, DaemonSets, service account tokens) and helm
# (the Helm release go.mod pins, for the chart of deploy/chart/). Only the programs missing from
# the cache are built, so asking for the kubelet later adds it beside the
# others. Prints that directory on stdout (and nothing else); progress goes to
# stderr. A warm cache costs a `go version` and a file check per program. A
# cold build takes minutes and ~2 GB of memory; it runs under `nice` with
# GOFLAGS=-p=2.
#
# Go: tests/kube/find-go.sh (a new enough Go, else the toolchain module).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { echo "build-kube: $*" >&2; }

k8s_version="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3; exit} $1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")"
if [ -z "$k8s_version" ]; then
  log "cannot read the Kubernetes version from $here/go.mod"; exit 1
fi

go_bin="$("$here/find-go.sh")"
export GOTOOLCHAIN=local
go_version="$("$go_bin" env GOVERSION)"

cache_root="${GPUSHARE_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpushare}"
out="$cache_root/kube-${k8s_version}-${go_version}"
known=(kube-apiserver kube-scheduler kubectl kubelet kube-controller-manager helm)
wanted=("$@")
[ "${#wanted[@]}" -gt 0 ] || wanted=(kube-apiserver kube-scheduler kubectl)
programs=()  # The wanted ones not yet in the cache.
for p in "${wanted[@]}"; do
  case " ${known[*]} " in
    *" $p "*) ;;
    *) log "unknown program '$p' (known: ${known[*]})"; exit 2 ;;
  esac
  [ -x "$out/$p" ] || programs+=("$p")
done
if [ "${#programs[@]}" -eq 0 ]; then
  log "cached: $out"
  echo "$out"
  exit 0
fi

mkdir -p "$out"
# kubectl refuses a server whose version it cannot parse, and kube-apiserver
# reports what these variables hold, so set them as the release build does.
minor="${k8s_version#v1.}"; minor="${minor%%.*}"
commit="$(cd "$here" && "$go_bin" mod download -json "k8s.io/kubernetes@$k8s_version" |
          sed -n 's/^[[:space:]]*"Hash": "\([0-9a-f]*\)",*$/\1/p' | head -1)"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitCommit=${commit:-unknown} -X $pkg.gitTreeState=clean"
  ldflags+=" -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

helm_version="$(awk '$1 == "helm.sh/helm/v4" {print $2}' "$here/go.mod")"
helm_ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version"

log "building ${programs[*]} $k8s_version with $go_version into $out (minutes on a cold machine)"
tmp="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
for p in "${programs[@]}"; do
  pkg="k8s.io/kubernetes/cmd/$p" flags="$ldflags"
  if [ "$p" = helm ]; then pkg="helm.sh/helm/v4/cmd/helm" flags="$helm_ldflags"; fi
  (cd "$here" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -p=${GPUSHARE_KUBE_GO_JOBS:-2}" \
     nice -n 10 "$go_bin" build -trimpath -ldflags "$flags" -o "$tmp/$p" "$pkg")
  log "  $p built ($(( $(date +%s) - start )) s so far)"
done
# Move into place only once all of them exist, so an interrupted build is redone.
for p in "${programs[@]}"; do mv -f "$tmp/$p" "$out/$p"; done
log "built in $(( $(date +%s) - start )) s"
echo "$out"
