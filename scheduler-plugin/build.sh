#!/usr/bin/env bash
# Builds kube-scheduler with the GpuShare plugin (cmd/kube-scheduler) against
# the C ABI library of a gpushare CMake build folder, and caches the binary
# outside the source tree, as tests/kube/build-kube.sh does:
#
#   BUILD=build scheduler-plugin/build.sh
#
# BUILD (default build, relative to the repository root) must hold the
# gpushare_c target: bindings/c/libgpushare_c.so and its uninstalled
# bindings/c/pkgconfig/gpushare_c.pc, found through PKG_CONFIG_PATH; the
# binary gets an rpath to that folder, so it runs without LD_LIBRARY_PATH
# while the folder exists. Prints the binary's path on stdout (and nothing
# else); progress and the time the build took go to stderr.
#
# Cache: ${GPUSHARE_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpushare}/
#   scheduler-plugin-<k8s>-<go>-<key>/kube-scheduler, where <key> hashes the
# Go sources of scheduler-plugin/ and go/gpushare/, their go.mod and go.sum,
# the C header and the library's folder: an unchanged tree costs a hash. The
# library itself may be rebuilt without relinking (its ABI is versioned).
# A cold build compiles much of Kubernetes: minutes and ~2 GB of memory; it
# runs under `nice` with GOFLAGS=-p=2 (GPUSHARE_KUBE_GO_JOBS to change).
#
# Go: tests/kube/find-go.sh (a new enough Go, else the toolchain module).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
log() { echo "scheduler-plugin: $*" >&2; }

# shellcheck source=../go/gpushare/cgo-env.sh
. "$root/go/gpushare/cgo-env.sh"

k8s_version="$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$here/go.mod")"
if [ -z "$k8s_version" ]; then
  log "cannot read the Kubernetes version from $here/go.mod"; exit 1
fi
go_version="$("$go_bin" env GOVERSION)"

key="$( (cd "$root" && find scheduler-plugin go/gpushare -type f \
           \( -name '*.go' -o -name go.mod -o -name go.sum -o -name go-tags.sh \) -print0 | sort -z |
           xargs -0 sha256sum; sha256sum include/gpushare/c/gpushare.h; echo "$lib_dir") |
        sha256sum | cut -c1-16)"
cache_root="${GPUSHARE_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpushare}"
out="$cache_root/scheduler-plugin-${k8s_version}-${go_version}-${key}"
if [ -x "$out/kube-scheduler" ]; then
  log "cached: $out/kube-scheduler"
  echo "$out/kube-scheduler"
  exit 0
fi

# kube-scheduler reports the release it was built from, as build-kube.sh sets it.
minor="${k8s_version#v1.}"; minor="${minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

mkdir -p "$out"
tmp="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
log "building kube-scheduler $k8s_version + GpuShare with $go_version against $lib_dir (minutes on a cold cache)"
start=$(date +%s)
(cd "$here" &&
 CGO_LDFLAGS="${CGO_LDFLAGS:-} -Wl,-rpath,$lib_dir" \
   nice -n 10 "$go_bin" build -trimpath -tags "$("$here/go-tags.sh")" -ldflags "$ldflags" \
     -o "$tmp/kube-scheduler" ./cmd/kube-scheduler)
mv -f "$tmp/kube-scheduler" "$out/kube-scheduler"
log "built in $(( $(date +%s) - start )) s: $out/kube-scheduler"
echo "$out/kube-scheduler"
