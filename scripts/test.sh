#!/usr/bin/env bash
# Runs every test: the C++ suite, the same suite under AddressSanitizer and
# UndefinedBehaviorSanitizer, the installed-package consumer, and the Python
# suite against the package installed with pip in a fresh virtual environment.
#
# Every process the run starts carries GPUSHARE_TEST_RUN in its environment;
# after each stage scripts/lib/leftovers.py lists those still running (a
# server a stage forgot to stop), ends them so the next stage starts clean,
# and the run fails at the end naming them.
#
# The first two stages are scripts/test-cpp.sh (also `make test-cpp` and
# `make test-sanitize`); each stage of scripts/test.d/ runs alone as well.
set -euo pipefail
cd "$(dirname "$0")/.."

GPUSHARE_TEST_RUN="$(date +%s%N)-$$"
export GPUSHARE_TEST_RUN
leftovers=()
current=""

step() { echo; echo "==== $* ===="; current="$*"; }
# Lists what the stage just ended left running, and ends it.
check_leftovers() {
  local found
  if ! found=$(env -u GPUSHARE_TEST_RUN python3 scripts/lib/leftovers.py --kill "$GPUSHARE_TEST_RUN"); then
    echo "test.sh: '$current' left processes running (ended now):" >&2
    echo "$found" | sed 's/^/  /' >&2
    leftovers+=("$current: $(echo "$found" | awk '{print $2}' | sort -u | paste -sd, -)")
  fi
}

# The check is checked: a process detached into a session of its own must be
# found and ended.
setsid sleep 600 </dev/null >/dev/null 2>&1 &
if env -u GPUSHARE_TEST_RUN python3 scripts/lib/leftovers.py --wait 0 --kill "$GPUSHARE_TEST_RUN" >/dev/null; then
  echo "test.sh: scripts/lib/leftovers.py did not find a detached process" >&2
  exit 1
fi

# The tests that need the FGD paper's data (the openb traces, the golden
# fragmentation values) skip when it is absent, so that a plain clone passes;
# at the end, even after a failure, a NOTE line says how many skipped
# (scripts/lib/paper_skips.py reads the JUnit reports of this run only).
reports=(build/Testing/ctest-junit.xml "${GPUSHARE_PY_BUILD_DIR:-build-py}/pytest-junit.xml")
rm -f "${reports[@]}"
trap 'rc=$?; python3 scripts/lib/paper_skips.py "${reports[@]}" || true; exit $rc' EXIT

step "C++ build and tests"
scripts/test-cpp.sh
check_leftovers

step "C++ tests under AddressSanitizer + UndefinedBehaviorSanitizer"
scripts/test-cpp.sh --sanitize
check_leftovers

for extra in scripts/test.d/*.sh; do
  [ -e "$extra" ] || continue
  step "$(basename "$extra" .sh)"
  bash "$extra"
  check_leftovers
done
echo
if [ ${#leftovers[@]} -gt 0 ]; then
  echo "test stages passed, but these left processes running:" >&2
  printf '  %s\n' "${leftovers[@]}" >&2
  exit 1
fi
echo "all test stages passed"
