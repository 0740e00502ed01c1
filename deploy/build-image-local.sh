#!/usr/bin/env bash
# Builds a gpushare image without a daemon, a registry or root: buildah, FROM
# scratch, from the programs already built in $BUILD (default build), the
# shared libraries they load (as ldd lists them, copied from this Debian
# system), the system's CA certificates, and passwd/group entries.
#
#   deploy/build-image-local.sh [TAG]
#       gpushare-extender and kubectl-inspect-gpushare, run as user 65532
#       (default tag localhost/gpushare-extender:0.1.0-local). deploy/Dockerfile
#       is the canonical build of this one (it needs registry access for
#       debian:bookworm); this needs nothing but buildah (deploy/README.md).
#   deploy/build-image-local.sh --device-plugin [TAG]
#       gpushare-device-plugin (configure with -DGPUSHARE_BUILD_DEVICE_PLUGIN=ON)
#       and gpushare-dra-driver ($BUILD/dra-driver/gpushare-dra-driver, built
#       static with Go from dra-driver/ when missing: tests/kube/find-go.sh),
#       run as root, the owner of the kubelet's socket folder (the DaemonSet
#       drops every capability); NVML comes from the node's driver at run time
#       (default tag localhost/gpushare-device-plugin:0.1.0-local).
#   deploy/build-image-local.sh --scheduler [TAG]
#       kube-scheduler with the GpuShare plugin (scheduler-plugin/build.sh,
#       against $BUILD's libgpushare_c), run as user 65532, for
#       deploy/scheduler/ (default tag localhost/gpushare-scheduler:0.1.0-local).
#
# Environment: BUILD; STORAGE_DRIVER (buildah's, default vfs: works in
# unprivileged containers).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
if [ "${1:-}" = "--device-plugin" ]; then
  shift
  tag=${1:-localhost/gpushare-device-plugin:0.1.0-local}
  dra_driver="$build/dra-driver/gpushare-dra-driver"
  if [ ! -x "$dra_driver" ]; then
    # As deploy/Dockerfile builds it: static, from the module in dra-driver/.
    go_bin=$(tests/kube/find-go.sh)
    mkdir -p "$(dirname "$dra_driver")"
    out=$(cd "$(dirname "$dra_driver")" && pwd)
    (cd dra-driver && CGO_ENABLED=0 GOTOOLCHAIN=local nice "$go_bin" build -trimpath \
       -o "$out/gpushare-dra-driver" ./cmd/gpushare-dra-driver)
  fi
  programs=("$build/device-plugin/gpushare-device-plugin" "$dra_driver")
  user="0:0"
  expose=""
  entrypoint="/usr/local/bin/gpushare-device-plugin"
  cmd=""
elif [ "${1:-}" = "--scheduler" ]; then
  shift
  tag=${1:-localhost/gpushare-scheduler:0.1.0-local}
  scheduler=$(BUILD="$build" scheduler-plugin/build.sh)
  programs=("$scheduler")
  user="65532:65532"
  expose="EXPOSE 10259"
  entrypoint="/usr/local/bin/kube-scheduler"
  cmd=""
else
  tag=${1:-localhost/gpushare-extender:0.1.0-local}
  programs=("$build/extender/gpushare-extender" "$build/extender/kubectl-inspect-gpushare")
  user="65532:65532"
  expose="EXPOSE 32766"
  entrypoint="/usr/local/bin/gpushare-extender"
  cmd='CMD ["--address=0.0.0.0", "--port=32766"]'
fi
for p in "${programs[@]}"; do
  [ -x "$p" ] || { echo "build-image-local: $p is not built" >&2; exit 1; }
done
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
root="$ctx/root"
mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/tmp"
install -m 0755 "${programs[@]}" "$root/usr/local/bin/"
strip --strip-debug "$root"/usr/local/bin/*   # The build's -g is for debugging here.
# The loader and every library, at the paths the programs look for them.
# (A static program, e.g. gpushare-dra-driver built without cgo, lists none.)
for lib in $(for p in "${programs[@]}"; do ldd "$p" 2>/dev/null || true; done |
             awk '/=>/ && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' | sort -u); do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
printf 'root:x:0:0:root:/:/nonexistent\nnonroot:x:65532:65532:nonroot:/:/nonexistent\n' \
  > "$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$root/etc/group"
chmod 1777 "$root/tmp"
# Versioned from the tree: the project's version and the git commit (with
# "-dirty" when the tree has uncommitted changes), as OCI labels.
version=$(sed -n 's/^project(gpushare VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$revision" != unknown ] && ! git diff --quiet HEAD 2>/dev/null; then revision="$revision-dirty"; fi
cat > "$ctx/Containerfile" <<EOF
FROM scratch
COPY root/ /
LABEL org.opencontainers.image.title="$(basename "$entrypoint")" \
      org.opencontainers.image.version="$version" \
      org.opencontainers.image.revision="$revision" \
      org.opencontainers.image.licenses="Apache-2.0"
USER $user
$expose
ENTRYPOINT ["$entrypoint"]
$cmd
EOF
buildah --storage-driver "${STORAGE_DRIVER:-vfs}" build --quiet --layers=false \
  -f "$ctx/Containerfile" -t "$tag" "$ctx"
