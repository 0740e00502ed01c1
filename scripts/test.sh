#!/usr/bin/env bash
# Runs every test: the C++ suite, the same suite under AddressSanitizer and
# UndefinedBehaviorSanitizer, the installed-package consumer, and the Python
# suite against the package installed with pip in a fresh virtual environment.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
steps=()

step() { echo; echo "==== $* ===="; }

step "C++ build and tests"
cmake -S . -B build -G Ninja -DGPUSHARE_WERROR=ON >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"

step "C++ tests under AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DGPUSHARE_WERROR=ON \
      -DGPUSHARE_SANITIZE=address,undefined -DGPUSHARE_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j "$jobs"
GPUSHARE_QUICK=1 ctest --test-dir build-asan --output-on-failure -j "$jobs"

for extra in scripts/test.d/*.sh; do
  [ -e "$extra" ] || continue
  step "$(basename "$extra" .sh)"
  bash "$extra"
done
echo
echo "all test stages passed"
