#!/usr/bin/env bash
# A short run of every libFuzzer target of fuzz/ (scripts/fuzz.sh):
# GPUSHARE_FUZZ_SECONDS (default 60) seconds each, one after the other (seven
# targets: 7 minutes), plus the clang build of the library and the targets
# (235 s wall cold on 2 cores, seconds with a warm ccache). Fails on any
# crash, leak, timeout or sanitizer report and prints the reproducer.
# Installs clang-14 and libclang-rt-14-dev on first use.
#
# The mutations follow a fixed seed (GPUSHARE_FUZZ_SEED, default 1), so that a
# run of an unchanged tree repeats the inputs of the last one instead of
# drawing new ones from the clock: the test stage checks the change, and
# `make fuzz` (random seeds, 10 minutes a target) goes looking for new bugs.
set -euo pipefail
cd "$(dirname "$0")/../.."
FUZZ_SECONDS="${GPUSHARE_FUZZ_SECONDS:-60}" \
  FUZZ_ARGS="-seed=${GPUSHARE_FUZZ_SEED:-1} ${FUZZ_ARGS:-}" exec scripts/fuzz.sh
