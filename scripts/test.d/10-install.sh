#!/usr/bin/env bash
# Installs the library into a scratch prefix and builds examples/consumer, a
# separate CMake project, against it with find_package(gpushare), checks
# that every program is installed to bin/, and builds and runs the C ABI's
# test (tests/c/c_abi_test.c) against the installed libgpushare_c through
# its pkg-config file, as a cgo host links it. Needs the
# build of build/ (scripts/test-cpp.sh; `make test-install` runs it first).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -f build/build.ninja ]; then
  echo "10-install: build/ is not built; scripts/test-cpp.sh --build-only (make test-install does)" >&2
  exit 1
fi
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install build --prefix "$prefix" >/dev/null
# The programs land in bin/ (build/ builds them all; see scripts/test-cpp.sh).
for program in gpushare gpushare-extender kubectl-inspect-gpushare gpushare-device-plugin; do
  [ -x "$prefix/bin/$program" ] || { echo "10-install: bin/$program was not installed" >&2; exit 1; }
done
cmake -S examples/consumer -B "$prefix/consumer-build" -G Ninja \
      -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/consumer-build" >/dev/null
"$prefix/consumer-build/consumer"
# The C ABI as a cgo host finds it: the installed gpushare_c.pc alone.
pc=$(find "$prefix" -name gpushare_c.pc -path '*/pkgconfig/*' | head -n 1)
[ -n "$pc" ] || { echo "10-install: gpushare_c.pc was not installed" >&2; exit 1; }
# shellcheck disable=SC2046
cc -std=c11 -pthread -o "$prefix/c_abi_test" tests/c/c_abi_test.c \
   $(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs gpushare_c)
LD_LIBRARY_PATH=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --variable=libdir gpushare_c) \
  "$prefix/c_abi_test" >/dev/null
