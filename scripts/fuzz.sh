#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (ASan + UBSan + libFuzzer)
# and runs each for FUZZ_SECONDS, one after the other. Any crash, leak,
# timeout or sanitizer report fails the run and prints the reproducer.
#
# Environment:
#   FUZZ_SECONDS  seconds per target (default 600)
#   FUZZ_TARGETS  space-separated target names (default: every fuzz/*_fuzzer.cc)
#   FUZZ_BUILD    build folder (default build-fuzz); the corpus each run grows
#                 goes to $FUZZ_BUILD/corpus/<target>, reproducers to
#                 $FUZZ_BUILD/artifacts/<target>; fuzz/corpus/ is only read.
#   FUZZ_ARGS     extra libFuzzer flags, e.g. "-jobs=2 -workers=2"
# Reproduce a failure: $FUZZ_BUILD/<target> <reproducer file>
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
seconds=${FUZZ_SECONDS:-600}
build=${FUZZ_BUILD:-build-fuzz}
case "$build" in /*) ;; *) build="$root/$build" ;; esac
jobs=$(nproc 2>/dev/null || echo 2)

scripts/install-deps.sh --fuzz
cxx=$(command -v clang++-14 || command -v clang++ || true)
if [ -z "$cxx" ]; then
  echo "fuzz: no clang++ (scripts/install-deps.sh --fuzz installs clang-14)" >&2
  exit 1
fi
cmake -S fuzz -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
cmake --build "$build" -j "$jobs"

targets=${FUZZ_TARGETS:-$(cd fuzz && ls ./*_fuzzer.cc | sed 's|^\./||; s|_fuzzer\.cc$||')}
# Dictionaries: json.dict for every target that reads JSON, plus its own.
declare -A dicts=(
  [snapshot]="json snapshot"
  [k8s_objects]="json k8s"
  [extender]="json k8s extender"
  [http]="json k8s extender http"
  [quantity]="quantity"
  [openb]="openb"
)

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
failed=()
start=$(date +%s)
for t in $targets; do
  bin="$build/${t}_fuzzer"
  [ -x "$bin" ] || { echo "fuzz: no target $t ($bin)" >&2; exit 1; }
  corpus="$build/corpus/$t"
  artifacts="$build/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  dict="$build/$t.dict"
  : >"$dict"
  for d in ${dicts[$t]:-}; do cat "fuzz/dict/$d.dict" >>"$dict"; done
  dict_flag=()
  [ -s "$dict" ] && dict_flag=("-dict=$dict")
  log="$build/$t.log"
  echo "fuzz: $t for ${seconds}s (log $log)"
  set +e
  # shellcheck disable=SC2086
  "$bin" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 -max_len=65536 \
         -print_final_stats=1 "${dict_flag[@]}" -artifact_prefix="$artifacts/" \
         ${FUZZ_ARGS:-} "$corpus" "fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  set -e
  grep -E "^(stat::number_of_executed_units|stat::new_units_added)" "$log" | sed 's/^/  /' || true
  if [ "$rc" -ne 0 ]; then
    echo "fuzz: $t FAILED (exit $rc); report:" >&2
    grep -E -A25 "ERROR: |runtime error|property violated|terminate called" "$log" |
      head -n 60 >&2 || tail -n 40 "$log" >&2
    for f in "$artifacts"/*; do
      [ -e "$f" ] || continue
      echo "fuzz: reproducer $f" >&2
      echo "fuzz: rerun with: $bin $f" >&2
    done
    failed+=("$t")
  fi
done
echo "fuzz: $(( $(date +%s) - start ))s for ${targets//$'\n'/ }"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: every target ran clean"
