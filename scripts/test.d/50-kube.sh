#!/usr/bin/env bash
# End-to-end tests of gpushare-extender against a real control plane on
# 127.0.0.1: etcd (Debian's etcd-server), kube-apiserver and kube-scheduler
# built from the Kubernetes release pinned in tests/kube/go.mod (cached
# outside the build folders by tests/kube/build-kube.sh, so only a cold
# machine pays the build), then the pytest scenarios of tests/kube/:
# test_scenarios.py (placement, restarts) and test_operations.py (two
# replicas with leader election, the leader killed during a burst; /metrics
# parsed with prometheus_client; deploy/ applied and its RBAC checked;
# `kubectl inspect gpushare`; the deploy/fgdpack overlay rendered and its
# Deployment's arguments run; test_dra.py: gpushare-dra-driver's ResourceSlice
# allocated by kube-scheduler's own DRA allocator, after the driver's Go unit
# tests). Cost: 85-98 s for the 21 tests on a warm
# machine (about 55 s of it test_operations.py, mostly the 15 s lease of the
# takeover), after gpushare-extender and kubectl-inspect-gpushare build.
#
# Environment: BUILD (the CMake build folder, default build);
# GPUSHARE_KUBE_CACHE (binary cache root); GPUSHARE_KUBE_VENV (the virtual
# environment with pytest, prometheus_client and PyYAML from PyPI, default
# $BUILD/venv-kube) when python3 lacks either; PYTEST_ARGS (e.g. "-k s1");
# GPUSHARE_HELM (a Helm binary; else the one build-kube.sh builds).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build}
case "$build" in /*) ;; *) build="$PWD/$build" ;; esac

if ! command -v etcd >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "50-kube: installing etcd-server and openssl"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends etcd-server openssl >/dev/null
fi

start=$(date +%s)
programs=(kube-apiserver kube-scheduler kubectl)
[ -n "${GPUSHARE_HELM:-}" ] || programs+=(helm)  # The chart's tests (test_chart.py).
kube_bin=$(tests/kube/build-kube.sh "${programs[@]}")
echo "50-kube: control plane binaries in $kube_bin ($(( $(date +%s) - start )) s)"

[ -f "$build/build.ninja" ] || cmake -S . -B "$build" -G Ninja -DGPUSHARE_WERROR=ON >/dev/null
cmake --build "$build" --target gpushare-extender kubectl-inspect-gpushare
extender="$build/extender/gpushare-extender"

# gpushare-dra-driver (Go): its unit tests, and the program for test_dra.py.
go_bin=$(tests/kube/find-go.sh)
dra_driver="$build/dra-driver/gpushare-dra-driver"
(cd dra-driver && GOTOOLCHAIN=local "$go_bin" test ./... &&
   GOTOOLCHAIN=local "$go_bin" build -o "$dra_driver" ./cmd/gpushare-dra-driver)

py=python3
if ! python3 -c 'import pytest, prometheus_client, yaml' 2>/dev/null; then
  venv=${GPUSHARE_KUBE_VENV:-$build/venv-kube}
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check pytest prometheus_client pyyaml
  py="$venv/bin/python"
fi
# shellcheck disable=SC2086
GPUSHARE_KUBE_BIN="$kube_bin" GPUSHARE_EXTENDER="$extender" GPUSHARE_DRA_DRIVER="$dra_driver" \
  timeout 1800 "$py" -m pytest tests/kube -v -s -p no:cacheprovider ${PYTEST_ARGS:-}
