#!/usr/bin/env bash
# End-to-end test of extender/ (gpushare-extender) over loopback HTTP: starts the built
# gpushare-extender on 127.0.0.1 on a free port with the sample state, runs
# extender/e2e_test.py (standard-library HTTP client, JSON shaped like
# kube-scheduler's), and always stops the server on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build}
# Always build: a binary left from an older checkout would test old code.
cmake --build "$build" --target gpushare-extender
bin="$PWD/$build/extender/gpushare-extender"
tmp=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

"$bin" --nodes extender/samples/nodes.json --pods extender/samples/pods.json \
       --address 127.0.0.1 --port 0 --port-file "$tmp/port" >"$tmp/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 150); do
  [ -s "$tmp/port" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$tmp/server.log"; echo "extender exited" >&2; exit 1; }
  sleep 0.1
done
[ -s "$tmp/port" ] || { cat "$tmp/server.log"; echo "extender did not start" >&2; exit 1; }
port=$(cat "$tmp/port")
echo "extender listening on 127.0.0.1:$port"
# The tests on the shared server must not depend on their order: run them
# once in the usual order and once reversed.
for order in forward reverse; do
  GPUSHARE_EXTENDER_URL="http://127.0.0.1:$port" GPUSHARE_EXTENDER="$bin" E2E_ORDER=$order \
    python3 extender/e2e_test.py -v
done
