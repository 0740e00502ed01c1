#!/usr/bin/env bash
# The container image of gpushare-extender, built the daemonless way: buildah
# (Debian's, installed on first use by scripts/install-deps.sh --image), FROM
# scratch with the programs of $BUILD and the libraries they load
# (deploy/build-image-local.sh): no registry, no daemon, no root (in an
# unprivileged account buildah uses a user namespace). Checks the image's
# configuration (user 65532, the entrypoint), then, from the image's root file
# system and as user 65532, runs kubectl-inspect-gpushare --help and serves the
# sample state with gpushare-extender, reading /readyz and /metrics: a missing
# library or file fails it.
# Then the same for gpushare-device-plugin's image (--device-plugin): root,
# its entrypoint, and NVML loaded in it from a fixture through the stand-in
# library of the tests; gpushare-dra-driver beside it turns that discovery
# into the node's ResourceSlice (the chart's dra.enabled runs it).
# Then kube-scheduler with GpuShare (--scheduler).
# Last, deploy/Dockerfile (the images from source, on Debian base images) is
# checked against the tree, not built: no registry is reachable here
# (deploy/README.md#the-images).
# Cost: about 40 s once the programs are built (each image ~1-3 s, the
# Dockerfile's check ~25 s: it configures the tree with its options).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build}
command -v buildah >/dev/null 2>&1 || scripts/install-deps.sh --image
cmake -S . -B "$build" -G Ninja -DGPUSHARE_WERROR=ON -DGPUSHARE_BUILD_DEVICE_PLUGIN=ON >/dev/null
cmake --build "$build" --target gpushare-extender kubectl-inspect-gpushare \
  gpushare-device-plugin nvml_stub

export STORAGE_DRIVER=vfs
tag="localhost/gpushare-extender:stage-test-$$"
dp_tag="localhost/gpushare-device-plugin:stage-test-$$"
sched_tag="localhost/gpushare-scheduler:stage-test-$$"
cleanup() {
  buildah --storage-driver vfs rmi -f "$tag" "$dp_tag" "$sched_tag" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# build TAG USER ENTRYPOINT [build-image-local.sh flags]: builds the image,
# prints its time and size, and checks its user and entrypoint.
build() {
  local tag=$1 want_user=$2 want_entry=$3 start user entry
  shift 3
  start=$(date +%s.%N)
  BUILD="$build" deploy/build-image-local.sh "$@" "$tag" >/dev/null
  echo "55-image: built $tag in $(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $start }") s," \
       "$(buildah --storage-driver vfs images --format '{{.Size}}' "$tag")"
  user=$(buildah --storage-driver vfs inspect --type image --format '{{.OCIv1.Config.User}}' "$tag")
  entry=$(buildah --storage-driver vfs inspect --type image \
            --format '{{range .OCIv1.Config.Entrypoint}}{{.}} {{end}}' "$tag")
  [ "$user" = "$want_user" ] ||
    { echo "55-image: $tag runs as '$user', not $want_user" >&2; exit 1; }
  [ "$entry" = "$want_entry " ] ||
    { echo "55-image: $tag's entrypoint is '$entry', not $want_entry" >&2; exit 1; }
  # Versioned from git: the commit built (a tree with changes says -dirty).
  revision=$(buildah --storage-driver vfs inspect --type image \
               --format '{{index .OCIv1.Config.Labels "org.opencontainers.image.revision"}}' "$tag")
  case "$revision" in
    "$(git rev-parse HEAD)"|"$(git rev-parse HEAD)-dirty") ;;
    *) echo "55-image: $tag's revision label is '$revision', not $(git rev-parse HEAD)" >&2; exit 1 ;;
  esac
}

# inside SCRIPT ARGS...: runs SCRIPT with ARGS where chroot works (as root, or
# as the root of buildah's user namespace).
inside() {
  local script=$1
  shift
  if [ "$(id -u)" -eq 0 ]; then
    bash -c "$script" check "$@"
  else
    buildah unshare bash -c "$script" check "$@"
  fi
}

build "$tag" 65532:65532 /usr/local/bin/gpushare-extender

# Inside the image's file system, as user 65532 (chroot needs the namespace's root).
check='
set -euo pipefail
b() { buildah --storage-driver vfs "$@"; }
c=$(b from "$1"); m=$(b mount "$c")
pid=""
# The server is stopped and waited for before the root file system goes.
finish() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  b umount "$c" >/dev/null; b rm "$c" >/dev/null
}
trap finish EXIT
# exec: in the background, $! is then the program itself (chroot execs it),
# not a subshell that would outlive a kill and leave the server running.
as_user() { exec chroot --userspec=65532:65532 "$m" "$@"; }
(as_user /usr/local/bin/kubectl-inspect-gpushare --help) | grep -q "^usage: kubectl inspect gpushare"
(as_user /usr/local/bin/gpushare-extender --version) | grep -Eq "^gpushare-extender [0-9]+\.[0-9]+\.[0-9]+"
cp extender/samples/nodes.json extender/samples/pods.json "$m/tmp/"
as_user /usr/local/bin/gpushare-extender --nodes /tmp/nodes.json --pods /tmp/pods.json \
  --address 127.0.0.1 --port 0 --port-file /tmp/port > "$m/tmp/log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do [ -s "$m/tmp/port" ] && break; sleep 0.1; done
[ -s "$m/tmp/port" ] || { cat "$m/tmp/log"; echo "the extender did not start in the image" >&2; exit 1; }
port=$(cat "$m/tmp/port")
python3 - "$port" <<EOF
import sys, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}"
assert urllib.request.urlopen(base + "/readyz").status == 200
text = urllib.request.urlopen(base + "/metrics").read().decode()
assert "gpushare_node_gpu_memory_total_units{node=" in text, text[:500]
print("55-image: the image serves /readyz and /metrics as user 65532")
EOF
'
inside "$check" "$tag"

# The device plugin's image: root (the kubelet's socket folder is root's),
# its entrypoint, and inside it: --help, the clear error of a node without
# the NVIDIA driver, and the GPUs of an NVML fixture read through the
# stand-in libnvidia-ml.so.1 (so the image can load NVML at run time).
build "$dp_tag" 0:0 /usr/local/bin/gpushare-device-plugin --device-plugin
dp_check='
set -euo pipefail
b() { buildah --storage-driver vfs "$@"; }
c=$(b from "$1"); m=$(b mount "$c")
trap "b umount $c >/dev/null; b rm $c >/dev/null" EXIT
run() { chroot "$m" /usr/local/bin/gpushare-device-plugin --node-name n1 "$@" 2>&1 || true; }
chroot "$m" /usr/local/bin/gpushare-device-plugin --help | grep -q "^usage: gpushare-device-plugin"
chroot "$m" /usr/local/bin/gpushare-device-plugin --version | grep -Eq "^gpushare-device-plugin [0-9]+\.[0-9]+"
run | grep -q "is the NVIDIA driver installed on this node?"
mkdir -p "$m/tmp/nvml"
cp "$2" "$m/tmp/nvml/libnvidia-ml.so.1"
cp tests/data/nvml/two-a100.json "$m/tmp/nvml/"
out=$(GPUSHARE_NVML_FIXTURE=/tmp/nvml/two-a100.json KUBERNETES_SERVICE_HOST= run --nvml-library /tmp/nvml/libnvidia-ml.so.1)
echo "$out" | grep -q "GPU 1 GPU-1b1b1b1b-0000-0000-0000-000000000000 NVIDIA A100-SXM4-40GB, 40 GiB" ||
  { echo "$out"; echo "the device plugin did not read NVML in its image" >&2; exit 1; }
echo "55-image: the device plugin image loads NVML and reads the GPUs"
# gpushare-dra-driver, as the chart runs it beside the device plugin: the GPUs
# of gpushare-device-plugin --discover (the same NVML) as DRA devices of node n1.
inventory=$(GPUSHARE_NVML_FIXTURE=/tmp/nvml/two-a100.json KUBERNETES_SERVICE_HOST= \
  chroot "$m" /usr/local/bin/gpushare-device-plugin --discover --node-name n1 \
  --nvml-library /tmp/nvml/libnvidia-ml.so.1 2>/dev/null)
slice=$(echo "$inventory" | chroot "$m" /usr/local/bin/gpushare-dra-driver slice --node-name n1 --inventory -)
python3 - "$slice" <<EOF
import json, sys
spec = json.loads(sys.argv[1])["spec"]
assert spec["driver"] == "gpu.gpushare.dev" and spec["nodeName"] == "n1", spec
assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1"], spec
EOF
echo "55-image: gpushare-dra-driver in the device plugin image publishes the GPUs as DRA devices"
'
inside "$dp_check" "$dp_tag" "$PWD/$build/tests/nvml_stub/libnvidia-ml.so.1"

# kube-scheduler with the GpuShare plugin (deploy/scheduler/): built by
# scheduler-plugin/build.sh (its cache is warm after the 51-scheduler-plugin
# stage), user 65532, its entrypoint; inside, as that user, --version (the
# binary and every library it loads are there).
build "$sched_tag" 65532:65532 /usr/local/bin/kube-scheduler --scheduler
sched_check='
set -euo pipefail
b() { buildah --storage-driver vfs "$@"; }
c=$(b from "$1"); m=$(b mount "$c")
trap "b umount $c >/dev/null; b rm $c >/dev/null" EXIT
as_user() { chroot --userspec=65532:65532 "$m" "$@"; }
as_user /usr/local/bin/kube-scheduler --version | grep -q "^Kubernetes v1\."
echo "55-image: the scheduler image runs kube-scheduler as user 65532"
'
inside "$sched_check" "$sched_tag"

# deploy/Dockerfile, the images built from source: it cannot be built here
# (its base images are on a registry), so what the tree can contradict is
# checked (tests/image/check_dockerfile.py): stages, COPY sources, the CMake
# targets under its options, each image's Debian packages against what its
# programs load, users and entrypoints. Parsed with dockerfile-parse (PyPI).
venv=${GPUSHARE_KUBE_VENV:-$build/venv-kube}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c 'import dockerfile_parse' 2>/dev/null ||
  "$venv/bin/python" -m pip install -q --disable-pip-version-check dockerfile-parse
"$venv/bin/python" tests/image/check_dockerfile.py "$PWD" "$PWD/$build" \
  "$(BUILD="$build" scheduler-plugin/build.sh)"
echo "55-image: deploy/Dockerfile agrees with the tree"
