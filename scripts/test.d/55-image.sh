#!/usr/bin/env bash
# The container image of gpushare-extender, built the daemonless way: buildah
# (Debian's, installed on first use by scripts/install-deps.sh --image), FROM
# scratch with the programs of $BUILD and the libraries they load
# (deploy/build-image-local.sh): no registry, no daemon, no root (in an
# unprivileged account buildah uses a user namespace). Checks the image's
# configuration (user 65532, the entrypoint), then, from the image's root file
# system and as user 65532, runs kubectl-inspect-gpushare --help and serves the
# sample state with gpushare-extender, reading /readyz and /metrics: a missing
# library or file fails it. deploy/Dockerfile (Debian base images) is not built:
# no registry is reachable here (deploy/README.md).
# Cost: about 10 s once the two programs are built (the image itself ~2.5 s).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build}
command -v buildah >/dev/null 2>&1 || scripts/install-deps.sh --image
[ -f "$build/build.ninja" ] || cmake -S . -B "$build" -G Ninja -DGPUSHARE_WERROR=ON >/dev/null
cmake --build "$build" --target gpushare-extender kubectl-inspect-gpushare

export STORAGE_DRIVER=vfs
tag="localhost/gpushare-extender:stage-test-$$"
cleanup() { buildah --storage-driver vfs rmi -f "$tag" >/dev/null 2>&1 || true; }
trap cleanup EXIT
start=$(date +%s.%N)
BUILD="$build" deploy/build-image-local.sh "$tag" >/dev/null
echo "55-image: built $tag in $(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $start }") s," \
     "$(buildah --storage-driver vfs images --format '{{.Size}}' "$tag")"

user=$(buildah --storage-driver vfs inspect --type image --format '{{.OCIv1.Config.User}}' "$tag")
entry=$(buildah --storage-driver vfs inspect --type image \
          --format '{{range .OCIv1.Config.Entrypoint}}{{.}} {{end}}' "$tag")
[ "$user" = "65532:65532" ] || { echo "55-image: image user is '$user', not 65532:65532" >&2; exit 1; }
[ "$entry" = "/usr/local/bin/gpushare-extender " ] ||
  { echo "55-image: entrypoint is '$entry'" >&2; exit 1; }

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
if [ "$(id -u)" -eq 0 ]; then
  bash -c "$check" check "$tag"
else
  buildah unshare bash -c "$check" check "$tag"
fi
