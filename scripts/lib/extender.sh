# Shared by the extender's test stages: build gpushare-extender, start it on a
# free loopback port with the sample state, and stop it on exit.
#
#   . scripts/lib/extender.sh
#   start_sample_extender [extra flags...]   # sets $bin, $tmp, $pid, $port
#
# $tmp is a scratch folder removed on exit; the server's output goes to
# $tmp/server.log, printed if it fails to start.

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

start_sample_extender() {
  "$bin" --nodes extender/samples/nodes.json --pods extender/samples/pods.json \
         --address 127.0.0.1 --port 0 --port-file "$tmp/port" "$@" >"$tmp/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 150); do
    [ -s "$tmp/port" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/server.log"; echo "extender exited" >&2; exit 1; }
    sleep 0.1
  done
  [ -s "$tmp/port" ] || { cat "$tmp/server.log"; echo "extender did not start" >&2; exit 1; }
  port=$(cat "$tmp/port")
}
