#!/usr/bin/env bash
# Vets and tests the Go binding (go/gpushare) against the C ABI library of a
# CMake build folder:
#
#   BUILD=build go/gpushare/test.sh [go test flags...]
#
# BUILD (default build, relative to the repository root) must hold
# bindings/c/libgpushare_c.so and bindings/c/pkgconfig/gpushare_c.pc (the
# uninstalled .pc of the gpushare_c target); PKG_CONFIG_PATH and
# LD_LIBRARY_PATH are pointed there. Go: tests/kube/find-go.sh, run with
# GOTOOLCHAIN=local and GOFLAGS=-p=2. Runs `go vet` and `go test -race`.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${BUILD:-build}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
log() { echo "go/gpushare: $*" >&2; }

pc_dir="$build/bindings/c/pkgconfig"
lib_dir="$build/bindings/c"
if [ ! -f "$pc_dir/gpushare_c.pc" ] || [ ! -e "$lib_dir/libgpushare_c.so" ]; then
  log "no $pc_dir/gpushare_c.pc or $lib_dir/libgpushare_c.so: build the gpushare_c target of $build first"
  log "  cmake -S $root -B $build -G Ninja && ninja -C $build gpushare_c"
  exit 1
fi

go_bin="$("$root/tests/kube/find-go.sh")"
export GOTOOLCHAIN=local CGO_ENABLED=1
export GOFLAGS="${GOFLAGS:-} -p=2"
export PKG_CONFIG_PATH="$pc_dir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

cd "$here"
log "go vet ($("$go_bin" env GOVERSION), library $lib_dir)"
"$go_bin" vet ./...
log "go test -race"
"$go_bin" test -race -count=1 "$@" ./...
