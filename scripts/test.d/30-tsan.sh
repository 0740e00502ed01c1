#!/usr/bin/env bash
# ThreadSanitizer: builds only what the scheduler tests need in build-tsan
# (tests/tsan/CMakeLists.txt), then runs the 8-thread stress test (random
# filter / reserve / confirm / forget / release / expiry, with the invariant
# checked after every step) and the scheduler unit tests under TSAN.
# GPUSHARE_STRESS_STEPS sets the steps per thread (default 1000). Then the
# extender's bind races (tests/extender_bind_test.cc) under TSAN.
set -euo pipefail
cd "$(dirname "$0")/../.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S tests/tsan -B build-tsan -G Ninja >/dev/null
if ! cmake --build build-tsan -j "$jobs" --target scheduler_tsan_test; then
  echo "30-tsan: the core sources alone did not build; building the whole library" >&2
  cmake -S tests/tsan -B build-tsan -G Ninja -DGPUSHARE_TSAN_FULL_LIBRARY=ON >/dev/null
  cmake --build build-tsan -j "$jobs" --target scheduler_tsan_test
fi
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
  GPUSHARE_STRESS_STEPS="${GPUSHARE_STRESS_STEPS:-1000}" \
  build-tsan/scheduler_tsan_test --gtest_filter='Scheduler*'
# The extender's concurrent binds of one pod (tests/extender_bind_test.cc).
cmake --build build-tsan -j "$jobs" --target extender_tsan_test
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
  build-tsan/extender_tsan_test
