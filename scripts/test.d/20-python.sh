#!/usr/bin/env bash
# The Python package the way a user gets it: `pip install .` into a fresh
# virtual environment, then the pytest suite (which also runs the example
# script and executes the notebook) and the quickstart example against it.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
venv="$root/build-py/venv"
log="$root/build-py/pip-install.log"
mkdir -p build-py

rm -rf "$venv"
if ! python3 -m venv "$venv"; then
  echo "20-python: python3 -m venv failed; on Debian install python3-venv (scripts/install-deps.sh)" >&2
  exit 1
fi
py="$venv/bin/python"
"$py" -m pip install -q --disable-pip-version-check pytest nbclient nbformat ipykernel

# Quiet unless it fails; the CMake build tree is kept for faster rebuilds.
echo "pip install . (log: build-py/pip-install.log)"
if ! "$py" -m pip install --disable-pip-version-check -v . \
      --config-settings=build-dir="$root/build-py/skbuild" \
      --config-settings=cmake.define.GPUSHARE_WERROR=ON >"$log" 2>&1; then
  grep -E "error|Error|ERROR" "$log" | head -n 40 >&2 || true
  echo "---- last lines of $log ----" >&2
  tail -n 40 "$log" >&2
  exit 1
fi

# Run from outside the source tree so that only the installed package is seen.
cd "$root/build-py"
set +e
"$py" -m pytest -q -p no:cacheprovider "$root/bindings/python/tests"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "20-python: pytest collected no tests" >&2
  exit 1
fi
[ "$rc" -eq 0 ] || exit "$rc"
"$py" "$root/examples/python/quickstart.py" >/dev/null
echo "examples/python/quickstart.py ran"
