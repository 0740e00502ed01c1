#!/usr/bin/env bash
# gpushare as a kube-scheduler framework plugin (scheduler-plugin/, GpuShare)
# over the C ABI (target gpushare_c) and its Go binding (go/gpushare): the
# binding's `go vet` and `go test -race` (go/gpushare/test.sh), the plugin's
# `go vet` and unit tests (scheduler-plugin/test.sh), kube-scheduler built
# with the plugin (scheduler-plugin/build.sh, cached by source hash outside
# the build folder), then tests/kube's scenarios against it
# (GPUSHARE_KUBE_SCHEDULER=plugin: deploy/scheduler-plugin/'s configuration
# with its profile named default-scheduler and its RBAC; etcd, kube-apiserver
# as in 50-kube). The scenarios of test_scenarios.py run as in 50-kube, with
# kube-scheduler killed and restarted where 50-kube kills the extender; the
# extender's own tests (test_operations.py, and the "kube-scheduler alone"
# half of the comparison, the same run as 50-kube's) skip, each saying why.
# Why: the plugin reaches the scheduler core through cgo, kube-scheduler's
# framework, its informers and queueing hints; only a real kube-scheduler and
# kube-apiserver show that it places, rejects (with gpushare's reasons),
# requeues and restarts as the extender does.
# Cost (runs of this script, 2026-11-28, AMD EPYC, 2 cores, beside another
# person's benchmarks): 46-62 s warm (go/gpushare/test.sh 3-4 s, the plugin's
# vet and unit tests 6-16 s, build.sh cached 0 s, the 12 tests and 9 skips
# 35-42 s; a first run adds the venv, 6 s); 14 tests and 10 skips took 54 s
# on 2026-12-02 (Intel Xeon, 2 cores). With an empty Go build cache
# (GOCACHE; modules downloaded, kube-apiserver cached, gpushare_c built):
# 6 min 24 s, 11.2 CPU-minutes (the binding's -race build 32 s, the plugin's
# vet and tests 289 s, which compile much of Kubernetes with cgo, the binary
# 25 s, since it links what they compiled, the tests 38 s).
#
# Environment: BUILD (the CMake build folder, default build); RACE=1 (the
# plugin's unit tests with -race: minutes more on a cold cache);
# GPUSHARE_KUBE_CACHE (binary cache root); GPUSHARE_KUBE_VENV (the virtual
# environment with pytest and PyYAML from PyPI, default $BUILD/venv-kube)
# when python3 lacks either; PYTEST_ARGS (e.g. "-k burst").
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build}
case "$build" in /*) ;; *) build="$PWD/$build" ;; esac
export BUILD="$build"
log() { echo "51-scheduler-plugin: $*"; }

if ! command -v etcd >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  log "installing etcd-server and openssl"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends etcd-server openssl >/dev/null
fi
if ! command -v pkg-config >/dev/null 2>&1; then
  log "pkg-config is missing (cgo finds gpushare_c.pc with it): run scripts/install-deps.sh" >&2
  exit 1
fi

t=$(date +%s)
lap() { local now; now=$(date +%s); log "$1: $(( now - t )) s"; t=$now; }

kube_bin=$(tests/kube/build-kube.sh kube-apiserver)
lap "kube-apiserver in $kube_bin"

[ -f "$build/build.ninja" ] || cmake -S . -B "$build" -G Ninja -DGPUSHARE_WERROR=ON >/dev/null
cmake --build "$build" --target gpushare_c
lap "gpushare_c built"

go/gpushare/test.sh
lap "go/gpushare: go vet, go test -race"
scheduler-plugin/test.sh
lap "scheduler-plugin: go vet, go test${RACE:+ -race}"
plugin=$(scheduler-plugin/build.sh)
lap "kube-scheduler with GpuShare: $plugin"

py=python3
if ! python3 -c 'import pytest, yaml' 2>/dev/null; then
  venv=${GPUSHARE_KUBE_VENV:-$build/venv-kube}
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check pytest pyyaml
  py="$venv/bin/python"
fi
# shellcheck disable=SC2086
GPUSHARE_KUBE_SCHEDULER=plugin GPUSHARE_KUBE_BIN="$kube_bin" GPUSHARE_PLUGIN_SCHEDULER="$plugin" \
  timeout 1200 "$py" -m pytest tests/kube -v -s -p no:cacheprovider -rs ${PYTEST_ARGS:-}
lap "tests/kube in plugin mode"
