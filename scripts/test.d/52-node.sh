#!/usr/bin/env bash
# End-to-end tests of gpushare-device-plugin on a real node: a kubelet built
# from the Kubernetes release pinned in tests/kube/go.mod (cached beside
# kube-apiserver and friends by tests/kube/build-kube.sh), Debian's containerd
# 1.6 and runc 1.1, joined to the control plane of tests/kube/harness.py
# (etcd, kube-apiserver, kube-scheduler calling gpushare-extender). The GPUs
# are simulated: the plugin loads the NVML stand-in of the test build
# (target nvml_stub) on a fixture file. The pytest scenarios of tests/node/:
# the Node's capacity from the plugin, the environment each container gets
# (read back from its log), multi-card, GPU faults, and restarts of the
# kubelet and the plugin during a burst of pods. The tests need root
# (containerd, the kubelet's cgroups, a private mount namespace for its fixed
# paths): as another user they run through password-less sudo, else the stage
# says SKIPPED; they put back what the kubelet changes (sysctls, kubepods
# cgroups, mounts).
# Then tests/dra-node/: gpushare-dra-driver on a node of its own, the same
# kubelet with containerd 2 (tests/node/build-containerd.sh, cached like the
# Kubernetes programs; it injects the CDI devices Debian's 1.6 does not) and
# kube-scheduler built with GpuShare (scheduler-plugin/build.sh's cache, warm
# after 51-scheduler-plugin): claims of each kind reach their containers,
# a burst never overcommits a GPU, an unhealthy GPU is tainted, a forged
# allocation is refused by the node (74 s for the 4 tests, 2026-12-03, AMD
# EPYC, 2 cores; a cold cache adds containerd's build, about a minute).
# Why: only a real kubelet shows what the device plugin API really does
# (GetPreferredAllocation, checkpoints, re-registration, admission errors),
# and what DRA's kubelet side does with a driver's CDI devices.
# Cost: about 140 s for the 18 tests on a warm machine (runs on 2026-12-02,
# Intel Xeon, 2 cores), after the programs build; a cache
# without the kubelet adds its build (166 s wall beside the other three
# programs' warm Go build cache).
#
# Environment: BUILD (the CMake build folder, default build; configured with
# GPUSHARE_BUILD_DEVICE_PLUGIN=ON); GPUSHARE_KUBE_CACHE (binary cache root);
# GPUSHARE_KUBE_VENV (a virtual environment with pytest, default
# $BUILD/venv-kube) when python3 lacks it; PYTEST_ARGS (e.g. "-k burst").
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build}
case "$build" in /*) ;; *) build="$PWD/$build" ;; esac

# The tests run as root (containerd, cgroups, mount namespaces); the builds
# run as the caller, so that build/ stays theirs.
as_root=()
if [ "$(id -u)" -ne 0 ]; then
  if ! sudo -n true 2>/dev/null; then
    echo "52-node: SKIPPED: the node tests need root or password-less sudo" >&2
    exit 0
  fi
  as_root=(sudo -n --preserve-env=GPUSHARE_TEST_RUN,PATH)
fi
need=()
for tool in etcd openssl containerd runc; do
  command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done
[ -x /bin/busybox ] && [ -x /usr/lib/cni/loopback ] || need+=(busybox-static)
if [ "${#need[@]}" -gt 0 ]; then
  echo "52-node: installing etcd-server openssl containerd runc busybox-static" \
       "containernetworking-plugins (missing: ${need[*]})"
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends etcd-server openssl containerd runc busybox-static \
    containernetworking-plugins >/dev/null
fi

start=$(date +%s)
programs=(kube-apiserver kube-scheduler kubectl kubelet kube-controller-manager)
[ -n "${GPUSHARE_HELM:-}" ] || programs+=(helm)
kube_bin=$(tests/kube/build-kube.sh "${programs[@]}")
echo "52-node: Kubernetes binaries in $kube_bin ($(( $(date +%s) - start )) s)"

if ! grep -Eq '^GPUSHARE_BUILD_DEVICE_PLUGIN:[A-Z]+=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  cmake -S . -B "$build" -G Ninja -DGPUSHARE_WERROR=ON -DGPUSHARE_BUILD_DEVICE_PLUGIN=ON >/dev/null
fi
cmake --build "$build" --target gpushare-device-plugin nvml_stub gpushare-extender \
  kubectl-inspect-gpushare gpushare_c

# gpushare-dra-driver (Go; Go's build cache makes this cheap after 50-kube),
# containerd 2 and kube-scheduler with GpuShare for tests/dra-node/.
go_bin=$(tests/kube/find-go.sh)
dra_driver="$build/dra-driver/gpushare-dra-driver"
(cd dra-driver && GOTOOLCHAIN=local "$go_bin" build -o "$dra_driver" ./cmd/gpushare-dra-driver)
containerd_bin=$(tests/node/build-containerd.sh)
plugin_scheduler=$(BUILD="$build" scheduler-plugin/build.sh)

# The three images for tests/install/, as docker archives for the node's
# containerd (deploy/build-image-local.sh; kube-scheduler with GpuShare from
# scheduler-plugin/build.sh's cache, warm after 51-scheduler-plugin).
command -v buildah >/dev/null 2>&1 || scripts/install-deps.sh --image
images="$build/install-images"
mkdir -p "$images"
start=$(date +%s)
for kind in extender device-plugin scheduler; do
  flag=()
  [ "$kind" = extender ] || flag=("--$kind")
  tag="localhost/gpushare-$kind:e2e"
  BUILD="$build" STORAGE_DRIVER=vfs deploy/build-image-local.sh "${flag[@]}" "$tag" >/dev/null
  rm -f "$images/$kind.tar"
  buildah --storage-driver vfs push -q "$tag" "docker-archive:$images/$kind.tar:$tag" >/dev/null
  buildah --storage-driver vfs rmi -f "$tag" >/dev/null
done
echo "52-node: three images built in $(( $(date +%s) - start )) s"

py=$(command -v python3)  # A full path: sudo looks commands up in its own PATH.
if ! "$py" -c 'import pytest, yaml' 2>/dev/null; then
  venv=${GPUSHARE_KUBE_VENV:-$build/venv-kube}
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check pytest pyyaml
  py="$(cd "$venv" && pwd)/bin/python"
fi
start=$(date +%s)
# shellcheck disable=SC2086
"${as_root[@]}" env GPUSHARE_KUBE_BIN="$kube_bin" \
  GPUSHARE_EXTENDER="$build/extender/gpushare-extender" \
  GPUSHARE_DEVICE_PLUGIN="$build/device-plugin/gpushare-device-plugin" \
  GPUSHARE_NVML_STUB="$build/tests/nvml_stub/libnvidia-ml.so.1" \
  GPUSHARE_KUBE_KEEP="${GPUSHARE_KUBE_KEEP:-}" \
  timeout 900 "$py" -m pytest tests/node -v -s -p no:cacheprovider ${PYTEST_ARGS:-}
echo "52-node: tests/node took $(( $(date +%s) - start )) s"
# The Helm chart installed for real, on a cluster of its own (tests/install/).
start=$(date +%s)
# shellcheck disable=SC2086
"${as_root[@]}" env GPUSHARE_KUBE_BIN="$kube_bin" GPUSHARE_HELM="${GPUSHARE_HELM:-}" \
  GPUSHARE_NVML_STUB="$build/tests/nvml_stub/libnvidia-ml.so.1" \
  GPUSHARE_INSTALL_IMAGES="$images" GPUSHARE_KUBE_KEEP="${GPUSHARE_KUBE_KEEP:-}" \
  timeout 600 "$py" -m pytest tests/install -v -s -p no:cacheprovider ${INSTALL_PYTEST_ARGS:-}
echo "52-node: tests/install took $(( $(date +%s) - start )) s"
# DRA: gpushare-dra-driver on a node with containerd 2 (tests/dra-node/).
start=$(date +%s)
helm_bin="${GPUSHARE_HELM:-$kube_bin/helm}"
# shellcheck disable=SC2086
"${as_root[@]}" env GPUSHARE_KUBE_BIN="$kube_bin" GPUSHARE_HELM="$helm_bin" \
  GPUSHARE_CONTAINERD_BIN="$containerd_bin" GPUSHARE_DRA_DRIVER="$dra_driver" \
  GPUSHARE_PLUGIN_SCHEDULER="$plugin_scheduler" \
  GPUSHARE_EXTENDER="$build/extender/gpushare-extender" \
  GPUSHARE_DEVICE_PLUGIN="$build/device-plugin/gpushare-device-plugin" \
  GPUSHARE_NVML_STUB="$build/tests/nvml_stub/libnvidia-ml.so.1" \
  GPUSHARE_KUBE_KEEP="${GPUSHARE_KUBE_KEEP:-}" \
  timeout 600 "$py" -m pytest tests/dra-node -v -s -p no:cacheprovider ${DRA_PYTEST_ARGS:-}
echo "52-node: tests/dra-node took $(( $(date +%s) - start )) s"
