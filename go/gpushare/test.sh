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
log() { echo "go/gpushare: $*" >&2; }
# shellcheck source=cgo-env.sh
. "$here/cgo-env.sh"

cd "$here"
log "go vet ($("$go_bin" env GOVERSION), library $lib_dir)"
"$go_bin" vet ./...
log "go test -race"
"$go_bin" test -race -count=1 "$@" ./...
