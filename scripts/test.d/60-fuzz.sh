#!/usr/bin/env bash
# A short run of every libFuzzer target of fuzz/ (scripts/fuzz.sh): about
# GPUSHARE_FUZZ_SECONDS (default 60) seconds each, plus the clang build of the
# library (about 4 minutes of one core cold, seconds with ccache warm). Fails
# on any crash, leak, timeout or sanitizer report and prints the reproducer.
# Installs clang-14 and libclang-rt-14-dev on first use.
set -euo pipefail
cd "$(dirname "$0")/../.."
FUZZ_SECONDS="${GPUSHARE_FUZZ_SECONDS:-60}" exec scripts/fuzz.sh
