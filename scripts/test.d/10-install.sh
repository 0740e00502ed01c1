#!/usr/bin/env bash
# Installs the library into a scratch prefix and builds examples/consumer, a
# separate CMake project, against it with find_package(gpushare), and checks
# that every program is installed to bin/. Needs the
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
