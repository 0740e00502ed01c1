#!/usr/bin/env python3
"""Times a burst of pods through a real kube-scheduler calling gpushare-extender.

Starts the control plane of tests/kube (etcd, kube-apiserver, kube-scheduler,
the extender; all on 127.0.0.1), creates --nodes nodes of --gpus GPUs with
--units units each, then --pods pods of 1-4 units as fast as 8 client threads
can, and reports:
  - end to end: from the first create to the last pod bound (pods/s);
  - from kube-scheduler's /metrics: scheduler_scheduling_algorithm_duration_seconds
    (filter + score of one pod, the extender's filter and prioritize calls
    included) and scheduler_scheduling_attempt_duration_seconds (that plus the
    binding, here the extender's bind: annotations patch + Binding); the
    histograms' buckets double, so quantiles are bucket bounds;
  - the extender's own filter latency from its --access-log, when it has one.

  python3 bench/kube_burst.py --kube-bin DIR --extender BIN [--nodes 200 --pods 1000]
                              [--node-cache-capable]
"""

import argparse
import os
import random
import re
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "kube"))

import harness  # noqa: E402


def histogram(metrics, name, labels=None):
    """[(le, cumulative count)] and (sum, count) of a Prometheus histogram,
    summed over series whose labels include `labels`."""
    buckets, total, count = {}, 0.0, 0.0
    for line in metrics.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        m = re.match(r'(\w+)(?:\{(.*)\})? ([0-9.eE+-]+|\+Inf|NaN)$', line)
        if not m:
            continue
        metric, labeltext, value = m.group(1), m.group(2) or "", float(m.group(3))
        series = dict(re.findall(r'(\w+)="([^"]*)"', labeltext))
        if labels and any(series.get(k) != v for k, v in labels.items()):
            continue
        if metric == name + "_bucket":
            le = float(series["le"])
            buckets[le] = buckets.get(le, 0) + value
        elif metric == name + "_sum":
            total += value
        elif metric == name + "_count":
            count += value
    return sorted(buckets.items()), total, count


def quantile(buckets, q):
    """Upper bound of the bucket holding quantile q (histograms give no more)."""
    if not buckets:
        return float("nan")
    target = q * buckets[-1][1]
    for le, c in buckets:
        if c >= target:
            return le
    return float("inf")


UNIT_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3}


def access_log_latencies(path):
    """Filter latencies (ms) from the extender's access log, if it has any:
    lines naming the filter route with a duration either as a number with a
    unit ("412us", "0.4 ms") or as a field named with its unit
    ("latency_us": 412, duration_ms=0.4)."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                if "/filter" not in line:
                    continue
                m = re.search(r'_(ns|us|ms|s)"?\s*[:=]\s*"?([0-9.]+)', line)
                if m:
                    out.append(float(m.group(2)) * UNIT_MS[m.group(1)])
                    continue
                m = re.search(r'\b([0-9]+(?:\.[0-9]+)?)\s*(ns|us|µs|ms|s)\b', line)
                if m:
                    out.append(float(m.group(1)) * UNIT_MS[m.group(2)])
    except OSError:
        pass
    return sorted(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kube-bin", required=True)
    ap.add_argument("--extender", required=True)
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--units", type=int, default=16)
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--node-cache-capable", action="store_true",
                    help="kube-scheduler sends node names instead of Node objects")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    args = ap.parse_args()

    workdir = tempfile.mkdtemp(prefix="gpushare-kube-bench-")
    cp = harness.ControlPlane(args.kube_bin, args.extender, workdir)
    ok = False
    try:
        cp.start()
        cp.start_extender()
        cp.start_scheduler(with_extender=True, node_cache_capable=args.node_cache_capable)
        api = cp.api
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: api.create_node(f"n{i:04d}", gpus=args.gpus,
                                                    gpu_memory=args.units), range(args.nodes)))
        rng = random.Random(1)
        sizes = [rng.choice([1, 2, 3, 4]) for _ in range(args.pods)]
        assert sum(sizes) <= args.nodes * args.gpus * args.units, "the burst must fit"
        time.sleep(2)  # Let kube-scheduler and the extender see every node.
        series = [("scheduling algorithm (filter + score, extender calls included)",
                   "scheduler_scheduling_algorithm_duration_seconds", None),
                  ("scheduling attempt (algorithm + binding through the extender)",
                   "scheduler_scheduling_attempt_duration_seconds", {"result": "scheduled"})]
        before = [histogram(cp.scheduler_metrics(), n, lab) for _, n, lab in series]
        start = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: api.create_pod(f"p{i:05d}", gpu_memory=sizes[i]),
                          range(args.pods)))
        created = time.monotonic() - start

        def all_bound():
            return sum(1 for p in api.pods() if p["spec"].get("nodeName")) == args.pods
        harness.wait_until("every pod bound", all_bound, args.timeout, 0.2)
        elapsed = time.monotonic() - start
        after_text = cp.scheduler_metrics()
        stats = []
        for (label, name, lab), (b0, s0, c0) in zip(series, before):
            b, s, c = histogram(after_text, name, lab)
            base = dict(b0)
            stats.append((label, [(le, n - base.get(le, 0)) for le, n in b], s - s0, c - c0))
        used = harness.used_per_gpu(api)
        nodes = {n["metadata"]["name"]: harness.node_gpus(n) for n in api.nodes()}
        for node, gpus in used.items():
            for g, units in gpus.items():
                assert units <= nodes[node][1], f"{node} GPU {g} oversubscribed"
        mode = "--kubeconfig"
        print(f"burst: {args.pods} pods on {args.nodes} nodes x {args.gpus} GPUs x {args.units} "
              f"units, extender {mode}, "
              f"nodeCacheCapable {args.node_cache_capable}")
        print(f"  created in {created:.2f} s; all bound after {elapsed:.2f} s "
              f"({args.pods / elapsed:.0f} pods/s end to end)")
        for label, b, s, c in stats:
            if c:
                print(f"  kube-scheduler {label}: mean {1e3 * s / c:.1f} ms, "
                      f"p50 <= {1e3 * quantile(b, 0.5):.0f} ms, "
                      f"p99 <= {1e3 * quantile(b, 0.99):.0f} ms over {int(c)}")
        lat = access_log_latencies(os.path.join(cp.logs, "extender-access.log"))
        if lat:
            print(f"  extender filter (access log): p50 {lat[len(lat) // 2]:.2f} ms, "
                  f"p99 {lat[int(len(lat) * 0.99)]:.2f} ms over {len(lat)} calls")
        else:
            print("  extender filter: no access log (extender without --access-log)")
        ok = True
    finally:
        cp.stop()
        if ok and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"work folder: {workdir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
