#!/usr/bin/env bash
# `make check`: the fast tier for the edit-test loop. The C++ unit suite and
# the Python unit suite against an incremental build; `make test` remains the
# whole truth (installed package, sanitizers, wheel, extender, fuzzing).
#
#  1. scripts/test-cpp.sh with GPUSHARE_QUICK=1: the incremental build of
#     build/ (the library, the tests, the tools, the extender and the
#     pybind11 module in build/bindings/python), then ctest, the randomised
#     tests run the short way.
#  2. The pytest suite of bindings/python/tests against that module
#     (PYTHONPATH=build/bindings/python), with the interpreter of a virtual
#     environment kept between runs, build-check/venv: made the first time,
#     and again only when the test tools of pyproject.toml's `test` extra
#     change. Nothing is pip-installed from the source tree.
#  3. One NOTE line if tests skipped for want of the openb traces.
#
# Environment: GPUSHARE_CHECK_DIR (default build-check): the virtual
# environment, pytest's working directory and JUnit report; PYTEST_ARGS adds
# arguments to pytest (e.g. "-k sweep"); CTEST_ARGS as for scripts/test-cpp.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dir="${GPUSHARE_CHECK_DIR:-$root/build-check}"
case "$dir" in /*) ;; *) dir="$root/$dir" ;; esac
venv="$dir/venv"
mkdir -p "$dir"

reports=("$root/build/Testing/ctest-junit.xml" "$dir/pytest-junit.xml")
rm -f "${reports[@]}"
trap 'rc=$?; python3 "$root/scripts/lib/paper_skips.py" "${reports[@]}" || true; exit $rc' EXIT

echo "==== C++ build and unit tests (GPUSHARE_QUICK=1) ===="
GPUSHARE_QUICK=1 scripts/test-cpp.sh

echo
echo "==== Python unit tests against build/bindings/python ===="
# The test tools, as pyproject.toml's `test` extra lists them.
tools=$(python3 - <<'PY'
import re
text = open("pyproject.toml", encoding="utf-8").read()
try:
    import tomllib
    print(" ".join(tomllib.loads(text)["project"]["optional-dependencies"]["test"]))
except ImportError:  # Python < 3.11: the one line of the extra
    line = re.search(r"^test = \[(.*?)\]", text, re.M | re.S).group(1)
    print(" ".join(re.findall(r'"([^"]+)"', line)))
PY
)
python=$(python3 -c 'import sys; print(sys.executable)')
stamp="$venv/.gpushare-check"
want="$python $tools"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "making $venv (once): $tools"
  rm -rf "$venv"
  if ! python3 -m venv "$venv"; then
    echo "check: python3 -m venv failed; on Debian install python3-venv (scripts/install-deps.sh)" >&2
    exit 1
  fi
  read -r -a tool_list <<<"$tools"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${tool_list[@]}"
  echo "$want" >"$stamp"
fi
py="$venv/bin/python"

# Run from outside the source tree, and make sure the module is the one just
# built.
cd "$dir"
export PYTHONPATH="$root/build/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
"$py" - "$root/build/bindings/python" <<'PY'
import pathlib, sys
import gpushare
where = pathlib.Path(sys.argv[1]).resolve()
if where not in pathlib.Path(gpushare.__file__).resolve().parents:
    sys.exit(f"check: gpushare was imported from {gpushare.__file__}, not from {where}")
PY
set +e
# shellcheck disable=SC2086
"$py" -m pytest -q -p no:cacheprovider --junitxml="$dir/pytest-junit.xml" \
  "$root/bindings/python/tests" ${PYTEST_ARGS:-}
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "check: pytest collected no tests" >&2
  exit 1
fi
[ "$rc" -eq 0 ] || exit "$rc"
echo
echo "check passed (make test runs every stage)"
