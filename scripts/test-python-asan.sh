#!/usr/bin/env bash
# The Python suite against an extension built with AddressSanitizer and
# UndefinedBehaviorSanitizer (`make test-python-asan`): memory errors and
# undefined behaviour in the bindings or the library show up as a crash with
# a report instead of passing silently. The interpreter is not instrumented,
# so libasan is preloaded into it; leak detection is off because CPython
# keeps objects alive until exit by design.
#
# Environment: GPUSHARE_PY_ASAN_BUILD_DIR, the build tree, pip log and the
# working directory of pytest (default build-py-asan); GPUSHARE_PY_ASAN_VENV,
# the virtual environment to recreate (default $GPUSHARE_PY_ASAN_BUILD_DIR/venv).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build="${GPUSHARE_PY_ASAN_BUILD_DIR:-$root/build-py-asan}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
venv="${GPUSHARE_PY_ASAN_VENV:-$build/venv}"
log="$build/pip-install.log"
mkdir -p "$build"

libasan=$(g++ -print-file-name=libasan.so)
if [ ! -e "$libasan" ]; then
  echo "test-python-asan: g++ has no libasan.so ($libasan)" >&2
  exit 1
fi

rm -rf "$venv"
python3 -m venv "$venv"
py="$venv/bin/python"
# The same tools as scripts/test.d/20-python.sh, so that every test runs.
"$py" -m pip install -q --disable-pip-version-check pytest nbclient nbformat ipykernel mypy pandas matplotlib

echo "pip install . with -fsanitize=address,undefined (log: $log)"
if ! "$py" -m pip install --disable-pip-version-check -v . \
      --config-settings=build-dir="$build/skbuild" \
      --config-settings=cmake.build-type=Debug \
      --config-settings=cmake.define.GPUSHARE_WERROR=ON \
      --config-settings=cmake.define.GPUSHARE_SANITIZE=address,undefined >"$log" 2>&1; then
  grep -E "error|Error|ERROR" "$log" | head -n 40 >&2 || true
  echo "---- last lines of $log ----" >&2
  tail -n 40 "$log" >&2
  exit 1
fi

cd "$build"
# libstdc++ is preloaded too: python does not link it, and ASan can only
# intercept __cxa_throw (every exception the bindings raise) if it is loaded
# at startup ("CHECK failed: real___cxa_throw != 0" otherwise).
export LD_PRELOAD="$libasan $(g++ -print-file-name=libstdc++.so)"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:strict_init_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# pytest captures stderr, and an abort loses what it captured: -s lets the
# sanitizer's report through.
set +e
"$py" -m pytest -q -s -p no:cacheprovider "$root/bindings/python/tests"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "test-python-asan: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
