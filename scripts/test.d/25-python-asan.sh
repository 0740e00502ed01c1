#!/usr/bin/env bash
# The Python suite against an extension built with AddressSanitizer and
# UndefinedBehaviorSanitizer (scripts/test-python-asan.sh, also
# `make test-python-asan`). About 2 CPU-minutes to build with a cold ccache,
# 35 s of tests.
set -euo pipefail
exec "$(dirname "$0")/../test-python-asan.sh"
