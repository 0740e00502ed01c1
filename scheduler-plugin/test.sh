#!/usr/bin/env bash
# Vets and unit-tests the GpuShare kube-scheduler plugin against the C ABI
# library of a gpushare CMake build folder:
#
#   BUILD=build scheduler-plugin/test.sh [go test flags...]
#
# BUILD as for build.sh (default build, relative to the repository root).
# RACE=1 adds -race (it recompiles the Kubernetes packages the plugin uses
# with the race detector: minutes more on a cold cache). The first run
# compiles much of Kubernetes (minutes, ~2 GB); it runs under `nice` with
# GOFLAGS=-p=2. Go: tests/kube/find-go.sh. -trimpath, as build.sh builds:
# the Kubernetes packages compiled for vet and the tests are then the ones
# build.sh links (without it, a cold cache compiles them twice: 6-7 minutes
# more on 2 cores).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
log() { echo "scheduler-plugin: $*" >&2; }
build="${BUILD:-build}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
lib_dir="$build/bindings/c"
pc_dir="$lib_dir/pkgconfig"
if [ ! -f "$pc_dir/gpushare_c.pc" ] || [ ! -e "$lib_dir/libgpushare_c.so" ]; then
  log "no $pc_dir/gpushare_c.pc or $lib_dir/libgpushare_c.so: build the gpushare_c target first"
  exit 1
fi
go_bin="$("$root/tests/kube/find-go.sh")"
export GOTOOLCHAIN=local CGO_ENABLED=1
export GOFLAGS="${GOFLAGS:-} -p=${GPUSHARE_KUBE_GO_JOBS:-2}"
export PKG_CONFIG_PATH="$pc_dir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
race=()
[ -z "${RACE:-}" ] || race=(-race)

cd "$here"
start=$(date +%s)
log "go vet"
nice -n 10 "$go_bin" vet -trimpath ./...
log "go test ${race[*]}"
nice -n 10 "$go_bin" test -trimpath "${race[@]}" -count=1 "$@" ./...
log "done in $(( $(date +%s) - start )) s"
