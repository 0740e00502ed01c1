#!/usr/bin/env bash
# Builds the benchmark programs in Release (build-bench/) and runs them all.
# Each program reports the median of its repetitions; the results of all
# programs are merged into build-bench/results.json (Google Benchmark's JSON
# format) and a table of medians is printed.
#
#   scripts/bench.sh                     # everything, about 5 minutes on 2 cores
#                                        # (openb_benchmark alone about 15 s)
#   BENCH_FILTER=BM_PlaceRelease scripts/bench.sh
#   BENCH_REPETITIONS=3 BENCH_MIN_TIME=0.1 scripts/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
out=build-bench
reps=${BENCH_REPETITIONS:-5}
min_time=${BENCH_MIN_TIME:-0.2}
filter=${BENCH_FILTER:-.}

cmake -S . -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUSHARE_BUILD_TESTS=OFF \
      -DGPUSHARE_BUILD_TOOLS=OFF -DGPUSHARE_BUILD_BENCH=ON -DGPUSHARE_BUILD_DEVICE_PLUGIN=ON >/dev/null
programs=()
for src in bench/*_benchmark.cc; do
  programs+=("$(basename "$src" .cc)")
done
cmake --build "$out" -j "$jobs" --target "${programs[@]}"

parts=()
for prog in "${programs[@]}"; do
  echo "==== $prog ===="
  part="$out/results-$prog.json"
  "$out/bench/$prog" --benchmark_filter="$filter" \
      --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true \
      --benchmark_min_time="$min_time" \
      --benchmark_out="$part" --benchmark_out_format=json
  parts+=("$part")
done

python3 - "$out/results.json" "${parts[@]}" <<'PY'
import json, sys
out, parts = sys.argv[1], sys.argv[2:]
merged = None
for path in parts:
    with open(path) as f:
        text = f.read()
    if not text.strip():
        continue  # BENCH_FILTER matched nothing in this program.
    data = json.loads(text)
    if merged is None:
        merged = data
    else:
        merged["benchmarks"].extend(data["benchmarks"])
if merged is None:
    sys.exit("bench.sh: no benchmark matched BENCH_FILTER")
with open(out, "w") as f:
    json.dump(merged, f, indent=1)
print(f"\nmedians ({out}):")
for b in merged["benchmarks"]:
    if b.get("aggregate_name") != "median":
        continue
    extra = ""
    if "items_per_second" in b:
        extra += f"  {b['items_per_second']:>14,.0f} items/s"
    for key in ("bytes_per_gpu", "bytes_per_gpu_placed", "bytes_per_gpu_indexed"):
        if key in b:
            extra += f"  {key}={b[key]:.1f}"
    print(f"  {b['run_name']:<58} {b['real_time']:>12.3f} {b['time_unit']}{extra}")
PY
