#!/usr/bin/env bash
# End-to-end test of extender/ (gpushare-extender) over loopback HTTP: starts the built
# gpushare-extender on 127.0.0.1 on a free port with the sample state, runs
# tests/extender/e2e_test.py (standard-library HTTP client, JSON shaped like
# kube-scheduler's), and always stops the server on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/extender.sh
start_sample_extender
echo "extender listening on 127.0.0.1:$port"
# The tests on the shared server must not depend on their order: run them
# once in the usual order and once reversed.
for order in forward reverse; do
  GPUSHARE_EXTENDER_URL="http://127.0.0.1:$port" GPUSHARE_EXTENDER="$bin" E2E_ORDER=$order \
    python3 tests/extender/e2e_test.py -v
done
