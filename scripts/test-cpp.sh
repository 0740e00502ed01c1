#!/usr/bin/env bash
# The C++ build and the GoogleTest suite under ctest: the first two stages of
# scripts/test.sh, `make test-cpp` and `make test-sanitize`, and the C++ half
# of `make check`.
#
#   scripts/test-cpp.sh              build/ (warnings as errors, with the Python
#                                    module in build/bindings/python), ctest
#   scripts/test-cpp.sh --sanitize   build-asan/ (Debug, AddressSanitizer +
#                                    UndefinedBehaviorSanitizer), ctest with
#                                    GPUSHARE_QUICK=1
#   scripts/test-cpp.sh --build-only either, without ctest
#
# Both build gpushare-device-plugin's gRPC server (GPUSHARE_BUILD_DEVICE_PLUGIN,
# which takes the kubelet's api.proto through device-plugin/kubelet-api.sh).
# build/ also builds the pybind11 module (GPUSHARE_BUILD_PYTHON=ON) for the
# interpreter `python3` names, so that `make check` tests the bindings
# against the same library build; the pip-installed package of the 20-python
# stage is built on its own.
#
# ctest writes a JUnit report to <build>/Testing/ctest-junit.xml, which
# scripts/lib/paper_skips.py reads to say which tests skipped for want of the
# openb traces. Environment: GPUSHARE_QUICK shortens the randomised tests
# (tests/testing/sim_fixtures.h); CTEST_ARGS adds arguments to ctest
# (e.g. "-R Fgd").
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

sanitize=0
run_tests=1
for arg in "$@"; do
  case "$arg" in
    --sanitize) sanitize=1 ;;
    --build-only) run_tests=0 ;;
    *) echo "test-cpp: unknown argument $arg (--sanitize, --build-only)" >&2; exit 2 ;;
  esac
done

if [ "$sanitize" -eq 1 ]; then
  build=build-asan
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DGPUSHARE_WERROR=ON \
        -DGPUSHARE_SANITIZE=address,undefined -DGPUSHARE_BUILD_BENCH=OFF \
        -DGPUSHARE_BUILD_DEVICE_PLUGIN=ON >/dev/null
  # The sanitized suite is slow; its randomised tests run the short way.
  export GPUSHARE_QUICK=1
else
  build=build
  python=$(python3 -c 'import sys; print(sys.executable)')
  cmake -S . -B "$build" -G Ninja -DGPUSHARE_WERROR=ON \
        -DGPUSHARE_BUILD_PYTHON=ON -DPython_EXECUTABLE="$python" \
        -DGPUSHARE_BUILD_DEVICE_PLUGIN=ON >/dev/null
fi
cmake --build "$build" -j "$jobs"
[ "$run_tests" -eq 1 ] || exit 0

junit="$PWD/$build/Testing/ctest-junit.xml"
rm -f "$junit"
# shellcheck disable=SC2086
ctest --test-dir "$build" --output-on-failure --no-tests=error -j "$jobs" \
      --output-junit "$junit" ${CTEST_ARGS:-}
