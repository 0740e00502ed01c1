#!/usr/bin/env bash
# The scheduling throughput benchmark of docs/performance.md: kube-scheduler
# alone (CPU-only pods, the ceiling), kube-scheduler with gpushare's GpuShare
# plugin, and gpushare-extender with nodeCacheCapable true and false, on the
# same nodes (API objects, no kubelets) and the same openb burst, one row after
# the other in one run (bench/kube_compare.py says how each is measured).
#
#   scripts/bench-kube.sh                       # 1,000 and 5,000 nodes
#   BENCH_KUBE_ARGS="--nodes 200 --pods 500" scripts/bench-kube.sh
#   GO_ORIGINAL_SRC=~/src/gpushare-scheduler-extender scripts/bench-kube.sh
#
# GO_ORIGINAL_SRC, a checkout of github.com/AliyunContainerService/
# gpushare-scheduler-extender (the Go module proxy does not serve it), adds the
# go-original row: its extender is built from that source with `go build`.
#
# Builds in Release into build-bench/ (the extender and the C ABI library),
# the Kubernetes programs (tests/kube/build-kube.sh, cached) and the plugin's
# kube-scheduler (scheduler-plugin/build.sh, cached). Results: a table on
# stdout and build-bench/kube-compare.json. Cost: about 20 minutes at the
# default sizes on 2 cores (AMD EPYC, 2026-11-28), most of it the extender
# without node names (about 10 pods/s), plus about 5 minutes per churn row
# and 10 for the Go original (2.9 pods/s; Intel Xeon, 2 cores, 2026-12-02).
set -euo pipefail
cd "$(dirname "$0")/.."
out=build-bench
cmake -S . -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUSHARE_BUILD_TESTS=OFF \
      -DGPUSHARE_BUILD_TOOLS=OFF -DGPUSHARE_BUILD_BENCH=ON >/dev/null
cmake --build "$out" -j "$(nproc 2>/dev/null || echo 2)" --target gpushare-extender gpushare_c
kube_bin="$(tests/kube/build-kube.sh)"
plugin="$(BUILD="$out" scheduler-plugin/build.sh)"
original=()
if [[ -n "${GO_ORIGINAL_SRC:-}" ]]; then
  (cd "$GO_ORIGINAL_SRC" && go build -o "$OLDPWD/$out/go-original/gpushare-sche-extender" ./cmd)
  original=(--go-original "$out/go-original/gpushare-sche-extender")
fi
# shellcheck disable=SC2086 # BENCH_KUBE_ARGS is a list of arguments.
python3 bench/kube_compare.py --kube-bin "$kube_bin" --extender "$out/extender/gpushare-extender" \
    --plugin-scheduler "$plugin" "${original[@]}" --json "$out/kube-compare.json" \
    ${BENCH_KUBE_ARGS:-}
