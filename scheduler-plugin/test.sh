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
# shellcheck source=../go/gpushare/cgo-env.sh
. "$root/go/gpushare/cgo-env.sh"
race=()
[ -z "${RACE:-}" ] || race=(-race)

cd "$here"
tags="$("$here/go-tags.sh")"
start=$(date +%s)
log "go vet"
nice -n 10 "$go_bin" vet -trimpath -tags "$tags" ./...
log "go test ${race[*]}"
nice -n 10 "$go_bin" test -trimpath -tags "$tags" "${race[@]}" -count=1 "$@" ./...
log "done in $(( $(date +%s) - start )) s"
