#!/usr/bin/env bash
# Builds a gpushare-extender image without a daemon, a registry or root:
# buildah, FROM scratch, from the programs already built in $BUILD (default
# build): gpushare-extender and kubectl-inspect-gpushare, the shared libraries
# they load (as ldd lists them, copied from this Debian system), the system's
# CA certificates, and passwd/group entries for user 65532, which it runs as.
# deploy/Dockerfile is the canonical build (it needs registry access for
# debian:bookworm); this one needs nothing but buildah (see deploy/README.md).
#
#   deploy/build-image-local.sh [TAG]     (default localhost/gpushare-extender:0.1.0-local)
#
# Environment: BUILD; STORAGE_DRIVER (buildah's, default vfs: works in
# unprivileged containers).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
tag=${1:-localhost/gpushare-extender:0.1.0-local}
programs=("$build/extender/gpushare-extender" "$build/extender/kubectl-inspect-gpushare")
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
for lib in $(for p in "${programs[@]}"; do ldd "$p"; done |
             awk '/=>/ && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' | sort -u); do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
printf 'root:x:0:0:root:/:/nonexistent\nnonroot:x:65532:65532:nonroot:/:/nonexistent\n' \
  > "$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$root/etc/group"
chmod 1777 "$root/tmp"
cat > "$ctx/Containerfile" <<'EOF'
FROM scratch
COPY root/ /
USER 65532:65532
EXPOSE 32766
ENTRYPOINT ["/usr/local/bin/gpushare-extender"]
CMD ["--address=0.0.0.0", "--port=32766"]
EOF
buildah --storage-driver "${STORAGE_DRIVER:-vfs}" build --quiet --layers=false \
  -f "$ctx/Containerfile" -t "$tag" "$ctx"
