#!/usr/bin/env bash
# Prints the folder of the kubelet's API definitions (pkg/apis of the
# k8s.io/kubelet module of the Kubernetes release pinned in tests/kube/go.mod),
# which holds deviceplugin/v1beta1/api.proto and podresources/v1/api.proto.
# The module comes through the Go module proxy into Go's module cache, as for
# any Go build; a warm cache costs one `go mod download`. CMake runs this when
# GPUSHARE_BUILD_DEVICE_PLUGIN is on and GPUSHARE_KUBELET_API_DIR is not given.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kube="$root/tests/kube"
version="$(awk '$1 == "k8s.io/kubelet" && $2 == "=>" {print $4}' "$kube/go.mod")"
if [ -z "$version" ]; then
  echo "kubelet-api: no k8s.io/kubelet replace directive in $kube/go.mod" >&2; exit 1
fi
go_bin="$("$kube/find-go.sh")"
dir="$(cd "$kube" && GOTOOLCHAIN=local "$go_bin" mod download -json "k8s.io/kubelet@$version" |
       sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
apis="$dir/pkg/apis"
for f in deviceplugin/v1beta1/api.proto podresources/v1/api.proto; do
  if [ ! -f "$apis/$f" ]; then
    echo "kubelet-api: k8s.io/kubelet@$version has no $f (download failed?)" >&2; exit 1
  fi
done
echo "$apis"
