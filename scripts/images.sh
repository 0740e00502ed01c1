#!/usr/bin/env bash
# Builds the images of the three programs from this checkout (buildah, no
# daemon, no root; deploy/build-image-local.sh) and, with REGISTRY, pushes
# them there, named as the Helm chart expects:
#
#   make images [REGISTRY=registry.example.com/gpushare] [TAG=0.1.0]
#
#   REGISTRY/gpushare-extender:TAG        gpushare-extender, kubectl-inspect-gpushare
#   REGISTRY/gpushare-device-plugin:TAG   gpushare-device-plugin
#   REGISTRY/gpushare-scheduler:TAG       kube-scheduler with GpuShare
#
# then: helm install gpushare deploy/chart -n kube-system --set imageRegistry=REGISTRY
# (docs/helm.md). Without REGISTRY they stay in buildah's store as
# localhost/...:TAG. TAG defaults to the project's version (the chart's
# appVersion). Credentials: `buildah login REGISTRY` first.
# Environment: BUILD (the CMake build folder, default build).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
version=$(sed -n 's/^project(gpushare VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
tag=${TAG:-$version}
registry=${REGISTRY:-localhost}
registry=${registry%/}
command -v buildah >/dev/null 2>&1 || scripts/install-deps.sh --image
cmake -S . -B "$build" -G Ninja -DGPUSHARE_WERROR=ON -DGPUSHARE_BUILD_DEVICE_PLUGIN=ON >/dev/null
cmake --build "$build" --target gpushare-extender kubectl-inspect-gpushare gpushare-device-plugin gpushare_c
export STORAGE_DRIVER=${STORAGE_DRIVER:-vfs}
for kind in extender device-plugin scheduler; do
  flag=()
  [ "$kind" = extender ] || flag=("--$kind")
  image="$registry/gpushare-$kind:$tag"
  BUILD="$build" deploy/build-image-local.sh "${flag[@]}" "$image" >/dev/null
  echo "images: built $image"
  if [ -n "${REGISTRY:-}" ]; then
    buildah --storage-driver "$STORAGE_DRIVER" push "$image"
    echo "images: pushed $image"
  fi
done
