#!/usr/bin/env bash
# Builds containerd, containerd-shim-runc-v2 and ctr of the containerd
# release pinned in tests/node/containerd/go.mod, through the Go module
# proxy, and caches them outside the source tree:
#
#   ${GPUSHARE_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpushare}/containerd-<version>-<go>/
#
# Prints that folder on stdout (nothing else); progress goes to stderr. The
# DRA end-to-end tests (tests/dra-node/) need containerd 2: it injects the
# CDI devices a DRA driver hands the kubelet, which Debian's containerd 1.6
# does not. A warm cache costs a `go version`; a cold build about a minute
# (58 s on 2026-12-03, AMD EPYC, 2 cores, modules downloaded).
#
# Go: tests/kube/find-go.sh.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { echo "build-containerd: $*" >&2; }
mod="$here/containerd"
version="$(awk '$1 == "require" && $2 == "github.com/containerd/containerd/v2" {print $3}' "$mod/go.mod")"
if [ -z "$version" ]; then
  log "cannot read containerd's version from $mod/go.mod"; exit 1
fi
go_bin="$("$here/../kube/find-go.sh")"
export GOTOOLCHAIN=local
out="${GPUSHARE_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpushare}/containerd-${version}-$("$go_bin" env GOVERSION)"
programs=(containerd containerd-shim-runc-v2 ctr)
missing=0
for p in "${programs[@]}"; do [ -x "$out/$p" ] || missing=1; done
if [ "$missing" = 0 ]; then
  log "cached: $out"
  echo "$out"
  exit 0
fi
mkdir -p "$out"
tmp="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
log "building containerd $version into $out"
start=$(date +%s)
ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$version"
for p in "${programs[@]}"; do
  # The shim is linked statically, as containerd's release builds it.
  (cd "$mod" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -p=${GPUSHARE_KUBE_GO_JOBS:-2}" \
     nice -n 10 "$go_bin" build -trimpath -ldflags "$ldflags" -o "$tmp/$p" \
     "github.com/containerd/containerd/v2/cmd/$p")
done
for p in "${programs[@]}"; do mv -f "$tmp/$p" "$out/$p"; done
log "built in $(( $(date +%s) - start )) s"
echo "$out"
