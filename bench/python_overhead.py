"""What the Python layer adds: per-call overhead and bulk placement vs C++.

Runs the same calls on the same clusters as bench/python_baseline_benchmark.cc
and prints medians side by side:

    plan         Cluster.plan(request)                  vs Cluster::Plan(request, "binpack")
    place+release  place() then release()              vs Place() + Release()
    bulk         place_many() of 100,000 requests      vs the same loop in C++

Usage (the C++ program must be built in Release, like the wheel):
    python3 bench/python_overhead.py --cpp build-py/cpp-release/bench/python_baseline_benchmark
Without --cpp only the Python side is measured. Targets: <= 2 us added per
place call; bulk within 1.5x of C++.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import gpushare as gs


def make_cluster(nodes: int, gpus: int, memory: int) -> gs.Cluster:
    c = gs.Cluster()
    for i in range(nodes):
        c.add_node(f"node-{i}", gpus=[gs.Gpu(memory=memory, model="T4")] * gpus,
                   labels={"gpushare": "true"})
    return c


def per_call_ns(fn, calls: int, repeats: int) -> float:
    """Median over `repeats` of the mean time of one call, in ns."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        fn(calls)
        samples.append((time.perf_counter_ns() - start) / calls)
    return statistics.median(samples)


def python_side(calls: int, repeats: int, bulk_nodes: int, bulk_count: int,
                bulk_repeats: int) -> dict[str, float]:
    c = make_cluster(16, 4, 16)
    req = gs.Request("probe", gpu_memory=2)

    def plan_loop(n: int) -> None:
        plan = c.plan
        for _ in range(n):
            plan(req)

    def place_release_loop(n: int) -> None:
        place, release = c.place, c.release
        for _ in range(n):
            place(req)
            release("probe")

    out = {
        "plan": per_call_ns(plan_loop, calls, repeats),
        "place+release": per_call_ns(place_release_loop, calls, repeats),
    }
    empty = make_cluster(bulk_nodes, 8, 32)
    requests = [gs.Request(f"req-{i}", gpu_memory=1 + i % 4) for i in range(bulk_count)]
    samples = []
    placed = 0
    # One untimed run first: the C++ side reports warm repetitions too (the
    # first run of a process also pays for growing the heap).
    warm = empty.copy()
    warm.place_many(requests, policy="binpack")
    del warm
    for _ in range(bulk_repeats):
        cluster = empty.copy()
        start = time.perf_counter_ns()
        result = cluster.place_many(requests, policy="binpack")
        samples.append(time.perf_counter_ns() - start)
        placed = sum(p is not None for p in result)
        del result, cluster  # Freed outside the timed region.
    out["bulk"] = statistics.median(samples)
    out["bulk_placed"] = placed
    return out


def cpp_side(binary: str, repeats: int) -> dict[str, float]:
    text = subprocess.run(
        [binary, "--benchmark_format=json", f"--benchmark_repetitions={repeats}",
         "--benchmark_report_aggregates_only=true", "--benchmark_min_time=0.2"],
        check=True, capture_output=True, text=True).stdout
    scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
    out = {}
    for b in json.loads(text)["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        ns = b["real_time"] * scale[b["time_unit"]]
        name = b["run_name"]
        if name.startswith("BM_PlanCpp"):
            out["plan"] = ns
        elif name.startswith("BM_PlaceReleaseCpp"):
            out["place+release"] = ns
        elif name.startswith("BM_BulkPlaceCpp"):
            out["bulk"] = ns
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpp", help="path of python_baseline_benchmark (Release build)")
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--bulk-nodes", type=int, default=1000)
    parser.add_argument("--bulk-requests", type=int, default=100_000)
    parser.add_argument("--bulk-repeats", type=int, default=5)
    args = parser.parse_args()

    py = python_side(args.calls, args.repeats, args.bulk_nodes, args.bulk_requests,
                     args.bulk_repeats)
    cpp = cpp_side(args.cpp, args.repeats) if args.cpp else {}
    print(f"gpushare {gs.__version__}, Python {sys.version.split()[0]}; medians")
    print(f"{'call':28}{'python':>14}{'c++':>14}{'added':>14}")
    ok = True
    for key, label in (("plan", "plan (per call)"), ("place+release", "place+release (per pair)")):
        line = f"{label:28}{py[key] / 1e3:>11.3f} us"
        if key in cpp:
            added = (py[key] - cpp[key]) / 1e3
            line += f"{cpp[key] / 1e3:>11.3f} us{added:>11.3f} us"
            ok = ok and (key != "place+release" or added <= 2 * 2.0)
        print(line)
    label = f"bulk {args.bulk_requests:,} on {args.bulk_nodes} nodes"
    line = f"{label:28}{py['bulk'] / 1e6:>11.1f} ms"
    if "bulk" in cpp:
        ratio = py["bulk"] / cpp["bulk"]
        line += f"{cpp['bulk'] / 1e6:>11.1f} ms{ratio:>12.2f} x"
        ok = ok and ratio <= 1.5
    print(line + f"   ({int(py['bulk_placed']):,} placed)")
    if cpp:
        print("targets (<= 2 us per call, bulk <= 1.5x):", "met" if ok else "NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
