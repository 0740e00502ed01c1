#!/usr/bin/env bash
# The Python package the way a user gets it: `pip install .` into a fresh
# virtual environment, then the pytest suite (which also runs the example
# script and executes the notebook) and the quickstart example against it.
#
# Environment: GPUSHARE_PY_BUILD_DIR, the directory for the CMake build tree,
# the install log and the working directory of pytest (default build-py);
# GPUSHARE_PY_VENV, the virtual environment to recreate (default
# $GPUSHARE_PY_BUILD_DIR/venv). Two checkouts or two runs side by side need
# different values.
#
# pytest's JUnit report, $GPUSHARE_PY_BUILD_DIR/pytest-junit.xml, tells
# scripts/test.sh which tests skipped for want of the openb traces.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
build="${GPUSHARE_PY_BUILD_DIR:-$root/build-py}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
venv="${GPUSHARE_PY_VENV:-$build/venv}"
log="$build/pip-install.log"
mkdir -p "$build"

rm -rf "$venv"
if ! python3 -m venv "$venv"; then
  echo "20-python: python3 -m venv failed; on Debian install python3-venv (scripts/install-deps.sh)" >&2
  exit 1
fi
py="$venv/bin/python"
# mypy checks the .pyi stubs against the compiled module (stubtest); pandas
# shows that to_records() makes a DataFrame and is what gs.sweep() returns;
# matplotlib lets the FGD example and gpushare.plot draw; tqdm is the sweep's
# progress bar; dask[distributed] runs a sweep on a real LocalCluster. The
# package itself needs none of them.
"$py" -m pip install -q --disable-pip-version-check pytest nbclient nbformat ipykernel mypy \
  pandas matplotlib tqdm "dask[distributed]"

# Quiet unless it fails; the CMake build tree is kept for faster rebuilds.
echo "pip install . (log: $log)"
if ! "$py" -m pip install --disable-pip-version-check -v . \
      --config-settings=build-dir="$build/skbuild" \
      --config-settings=cmake.define.GPUSHARE_WERROR=ON >"$log" 2>&1; then
  grep -E "error|Error|ERROR" "$log" | head -n 40 >&2 || true
  echo "---- last lines of $log ----" >&2
  tail -n 40 "$log" >&2
  exit 1
fi

# Run from outside the source tree so that only the installed package is seen.
cd "$build"
"$py" - <<'PY'
import sys
import gpushare
if not gpushare.__file__.startswith(sys.prefix):
    sys.exit(f"20-python: gpushare was imported from {gpushare.__file__}, not from {sys.prefix}")
PY
set +e
rm -f "$build/pytest-junit.xml"
"$py" -m pytest -q -p no:cacheprovider --junitxml="$build/pytest-junit.xml" \
  "$root/bindings/python/tests"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "20-python: pytest collected no tests" >&2
  exit 1
fi
[ "$rc" -eq 0 ] || exit "$rc"
"$py" "$root/examples/python/quickstart.py" >/dev/null
echo "examples/python/quickstart.py ran"
