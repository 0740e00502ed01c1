#!/usr/bin/env bash
# Builds the images of the three programs from this checkout (buildah, no
# daemon, no root; deploy/build-image-local.sh) and, with REGISTRY, pushes
# them there, named as the Helm chart expects:
#
#   make images [REGISTRY=registry.example.com/gpushare] [TAG=0.1.0]
#
#   REGISTRY/gpushare-extender:TAG        gpushare-extender, kubectl-inspect-gpushare
#   REGISTRY/gpushare-device-plugin:TAG   gpushare-device-plugin, gpushare-dra-driver
#   REGISTRY/gpushare-scheduler:TAG       kube-scheduler with GpuShare
#
# then: helm install gpushare deploy/chart -n kube-system --set imageRegistry=REGISTRY
# (docs/helm.md). Without REGISTRY they stay in buildah's store as
# localhost/...:TAG. TAG defaults to the project's version (the chart's
# appVersion). Credentials: `buildah login REGISTRY` first.
#
# Two ways to build them:
#   default        FROM scratch with the programs of this machine's build and
#                  the libraries they load (deploy/build-image-local.sh): no
#                  registry needed, the way make test builds them;
#   FROM_SOURCE=1  deploy/Dockerfile's stages (extender, device-plugin,
#                  scheduler): everything compiled inside debian:bookworm,
#                  Go from golang:1.26-bookworm; needs those base images from
#                  a registry and an OCI runtime, and costs one Release build
#                  of the project (the build stage is shared by the three).
# Environment: BUILD (the CMake build folder, default build), FROM_SOURCE.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
version=$(sed -n 's/^project(gpushare VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
tag=${TAG:-$version}
registry=${REGISTRY:-localhost}
registry=${registry%/}
command -v buildah >/dev/null 2>&1 || scripts/install-deps.sh --image
export STORAGE_DRIVER=${STORAGE_DRIVER:-vfs}
# push IMAGE: to the registry when one is given.
push() {
  if [ -n "${REGISTRY:-}" ]; then
    buildah --storage-driver "$STORAGE_DRIVER" push "$1"
    echo "images: pushed $1"
  fi
}
if [ -n "${FROM_SOURCE:-}" ]; then
  revision=$(git rev-parse HEAD)
  git diff --quiet HEAD || revision="$revision-dirty"
  for kind in extender device-plugin scheduler; do
    image="$registry/gpushare-$kind:$tag"
    buildah --storage-driver "$STORAGE_DRIVER" build --layers -f deploy/Dockerfile \
      --target "$kind" --build-arg VERSION="$version" --build-arg REVISION="$revision" \
      -t "$image" .
    echo "images: built $image from source"
    push "$image"
  done
  exit 0
fi
cmake -S . -B "$build" -G Ninja -DGPUSHARE_WERROR=ON -DGPUSHARE_BUILD_DEVICE_PLUGIN=ON >/dev/null
cmake --build "$build" --target gpushare-extender kubectl-inspect-gpushare gpushare-device-plugin gpushare_c
for kind in extender device-plugin scheduler; do
  flag=()
  [ "$kind" = extender ] || flag=("--$kind")
  image="$registry/gpushare-$kind:$tag"
  BUILD="$build" deploy/build-image-local.sh "${flag[@]}" "$image" >/dev/null
  echo "images: built $image"
  push "$image"
done
