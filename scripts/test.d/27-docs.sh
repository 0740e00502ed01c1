#!/usr/bin/env bash
# The documentation's commands, run as written (tests/docs/test_snippets.py):
# the Python blocks of README.md and docs/*.md against the package the
# 20-python stage installed, the cheap shell blocks with the programs of
# build/ (the C++ build of make test). Blocks it does not run are named in
# the test's SKIP table with the reason. Under 2 minutes.
#
# Environment: GPUSHARE_PY_BUILD_DIR and GPUSHARE_PY_VENV as for 20-python
# (default build-py/venv), whose virtual environment is reused, not rebuilt.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
build="${GPUSHARE_PY_BUILD_DIR:-$root/build-py}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
venv="${GPUSHARE_PY_VENV:-$build/venv}"
py="$venv/bin/python"
if [ ! -x "$py" ]; then
  echo "27-docs: no virtual environment at $venv; run scripts/test.d/20-python.sh first" >&2
  exit 1
fi
for program in build/cli/gpushare build/extender/gpushare-extender; do
  if [ ! -x "$program" ]; then
    echo "27-docs: $program is missing; build first (cmake --build build)" >&2
    exit 1
  fi
done
set +e
GPUSHARE_DOCS_STRICT=1 "$py" -m pytest -q -p no:cacheprovider -rs "$root/tests/docs"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "27-docs: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
