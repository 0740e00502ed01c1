#!/usr/bin/env bash
# Installs what gpushare needs to build and test on Debian/Ubuntu, skipping
# apt entirely when everything is already there.
set -euo pipefail

packages=(g++ cmake ninja-build ccache libgtest-dev libgmock-dev libbenchmark-dev
          libabsl-dev libboost-dev libboost-graph-dev nlohmann-json3-dev
          pybind11-dev python3-dev python3-venv python3-matplotlib
          libsimdjson-dev  # the fast readers of snapshots and Kubernetes lists
          libssl-dev openssl libyaml-cpp-dev  # gpushare-extender: HTTPS, kubeconfig
          libcli11-dev  # the programs' flags (tools/flags/flags.h)
          pkg-config  # the C ABI's gpushare_c.pc (docs/c-abi.md, the 10-install stage)
          libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler)  # the device plugin
# --fuzz: also clang and its libFuzzer and sanitizer runtimes, for
# scripts/fuzz.sh (`make fuzz`, the 60-fuzz stage of `make test`); `make demo`
# does without them.
if [ "${1:-}" = "--fuzz" ]; then
  packages+=(clang-14 libclang-rt-14-dev)
fi
# --image: buildah, for scripts/test.d/55-image.sh and deploy/build-image-local.sh.
if [ "${1:-}" = "--image" ]; then
  packages+=(buildah)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: missing ${missing[*]}, and this is not a Debian/Ubuntu system;" >&2
  echo "install them with your package manager." >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
