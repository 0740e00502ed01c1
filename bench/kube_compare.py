#!/usr/bin/env python3
"""Pods per second through a real kube-scheduler, side by side: kube-scheduler
alone, gpushare's scheduler plugin, and gpushare-extender with and without
node names, on the same nodes and the same burst, in one run.

For each cluster size and each row, a fresh control plane of tests/kube
(etcd, kube-apiserver, kube-scheduler and, for the extender rows, the
extender; all on 127.0.0.1; nodes are API objects, no kubelets) gets
--nodes nodes of --gpus GPUs x --units memory units, then a burst of --pods
pods sampled from an openb trace (the task mix of Alibaba's GPU cluster:
CPU-only, shared fractions of one GPU, whole GPUs):

  ceiling         kube-scheduler alone; every pod CPU-only (the trace's CPU
                  and memory, no GPU): what the scheduler itself can do
  ceiling-gpu     kube-scheduler alone with the trace's GPU pods, their
                  aliyun.com/gpu-mem and nvidia.com/gpu counted per node
                  only (no GPU is chosen: not a usable scheduler, but what
                  kube-scheduler itself spends on such pods)
  plugin          the kube-scheduler built with gpushare's plugin
                  (scheduler-plugin/), the trace's pods
  extender-names  gpushare-extender, nodeCacheCapable: true
  extender-nodes  gpushare-extender, nodeCacheCapable: false
  go-original     AliyunContainerService/gpushare-scheduler-extender, the Go
                  original (--go-original: its binary, built from its
                  source), configured as its docs configure it (filter and
                  bind, nodeCacheCapable: true, aliyun.com/gpu-mem only). It
                  knows no whole GPUs: a whole-GPU task asks one GPU's memory
                  instead (the trace's few multi-GPU tasks too). It has no
                  setting for its API client's rate: client-go's default
                  (5/s, burst 10), with two writes per bind.

  plugin-churn    plugin and extender-names as users run them, under churn:
  extender-churn  kube-scheduler's default client rate (50/s, burst 100) and
                  the extender's default; the burst fills the cluster to
                  --fill of its GPU memory (the throughput phase), then
                  --latency-pods pods arrive at --churn-rate, each after a
                  bound GPU pod is deleted (the latency phase); at
                  --churn-nodes nodes only

kube-scheduler's client QPS, and the extender's (--kube-api-qps), are raised
(--qps) so that an API client's rate limit is not what is measured, except
in the churn rows. Each row has two phases. Throughput: the burst is created before
kube-scheduler starts, so that pod creation (8 client threads on the same
machine) is not what is measured: pods/s from the first bind to the last.
Latency: --latency-pods more pods created at half that rate (at most 100/s),
creation -> bound p50/p99 (the create request's start, to the time of
kube-scheduler's "Successfully bound" log line). Also: the scheduler's CPU seconds
(and the extender's) from the scheduler's readiness to the burst's last
bind, from /proc; resident memory (VmHWM) of the scheduler and the extender;
and GPUs given more units than they have (must be 0).

  python3 bench/kube_compare.py --kube-bin DIR --extender BIN
      [--plugin-scheduler BIN --plugin-config deploy/scheduler-plugin/...]
      [--go-original BIN]
      [--nodes 1000,5000] [--pods 2000] [--rows ceiling,plugin,...] [--json OUT]

`make bench-kube` runs it with the programs it builds.
"""

import argparse
import csv
import json
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

ROWS = ("ceiling", "ceiling-gpu", "plugin", "extender-names", "extender-nodes", "go-original",
        "plugin-churn", "extender-churn")
DEFAULT_QPS, DEFAULT_BURST = 50, 100  # kube-scheduler's own defaults
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User + system CPU seconds of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def openb_mix(path, count, units, seed):
    """`count` pods sampled (with replacement, seeded) from an openb pod
    list: (cpu_milli, memory_mib, kind, amount) where kind is "cpu" (no GPU),
    "shared" (amount = memory units on one GPU, the task's share of `units`,
    at least 1) or "whole" (amount = whole GPUs)."""
    tasks = []
    with open(path) as f:
        for row in csv.DictReader(f):
            num_gpu, milli = int(row["num_gpu"]), int(row["gpu_milli"])
            cpu, mem = int(row["cpu_milli"]), int(row["memory_mib"])
            if num_gpu == 0:
                tasks.append((cpu, mem, "cpu", 0))
            elif milli < 1000:
                tasks.append((cpu, mem, "shared", max(1, round(milli * units / 1000))))
            else:
                tasks.append((cpu, mem, "whole", num_gpu))
    rng = random.Random(seed)
    return [rng.choice(tasks) for _ in range(count)]


def pod_object(name, task, cpu_only, memory_only_units=None):
    """The Pod of a task; CPU-only when `cpu_only`. With
    `memory_only_units` (the units of a GPU), a whole-GPU task asks that
    many aliyun.com/gpu-mem instead: one GPU's memory, for a scheduler that
    knows only memory."""
    cpu, mem, kind, amount = task
    requests = {"cpu": f"{cpu}m", "memory": f"{mem}Mi"}
    limits = {}
    if not cpu_only and kind == "shared":
        limits[harness.GPU_MEM] = str(amount)
    elif not cpu_only and kind == "whole" and memory_only_units:
        limits[harness.GPU_MEM] = str(memory_only_units)
    elif not cpu_only and kind == "whole":
        limits[harness.WHOLE_GPU] = str(amount)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "gpushare-bench"}},
        "spec": {
            "containers": [{"name": "main", "image": "registry.invalid/bench:never-pulled",
                            "resources": {"requests": requests, "limits": limits}}],
            "terminationGracePeriodSeconds": 0,
        },
    }


class BindLog:
    """Follows kube-scheduler's log (--v=2) and records, per pod name, the
    wall-clock time of its "Successfully bound pod to node" line: the bind
    as the scheduler saw it succeed (the Binding, or the extender's bind,
    returned). Log times are in the machine's local clock, like the client's
    time.time()."""

    PATTERN = re.compile(r'^I(\d\d)(\d\d) (\d\d):(\d\d):(\d\d\.\d+) .*"Successfully bound pod '
                         r'to node" pod="[^/"]+/([^"]+)"')

    def __init__(self, path):
        self.path, self.offset, self.bound = path, 0, {}
        self.error = None

    def poll(self):
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        year = time.localtime().tm_year
        for line in data[:end].decode(errors="replace").splitlines():
            m = self.PATTERN.match(line)
            if m and m.group(6) not in self.bound:
                month, day, hour, minute, sec = m.groups()[:5]
                whole = time.mktime((year, int(month), int(day), int(hour), int(minute),
                                     int(float(sec)), 0, 0, -1))
                self.bound[m.group(6)] = whole + float(sec) % 1


def wait_settled(what, names, watch, timeout, idle):
    """Waits until every pod of `names` shows bound in `watch` (a BindLog),
    or no pod has been bound for `idle` seconds (the rest do not fit: a
    burst larger than the cluster), or `timeout`. Returns the names not
    bound, and says how many."""
    deadline = time.monotonic() + timeout
    seen, last_change = -1, time.monotonic()
    while True:
        watch.poll()
        bound = sum(1 for n in names if n in watch.bound)
        now = time.monotonic()
        if bound != seen:
            seen, last_change = bound, now
        if bound == len(names) or now - last_change >= idle or now >= deadline:
            break
        time.sleep(0.2)
    pending = sorted(n for n in names if n not in watch.bound)
    if pending:
        why = "timed out" if now >= deadline else f"no bind for {idle:g} s"
        print(f"{what}: {len(pending)} of {len(names)} pods not bound ({why}), "
              f"e.g. {pending[:5]}", file=sys.stderr)
    return pending


def fill_mix(trace, units, gpus_total, fill, seed):
    """Tasks of the openb mix, sampled until their GPU memory reaches `fill`
    of `gpus_total` GPUs of `units` (a whole GPU counts `units`)."""
    pool = openb_mix(trace, 10_000, units, seed)
    tasks, demand, i = [], 0, 0
    while demand < fill * gpus_total * units:
        task = pool[i % len(pool)]
        i += 1
        tasks.append(task)
        demand += task[3] * (units if task[2] == "whole" else 1)
    return tasks


def percentile(values, q):
    values = sorted(values)
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(q * len(values)))]


def oversubscribed(api, nodes_units):
    """GPUs given more units than they have, from the pods' annotations."""
    over = 0
    for node, gpus in harness.used_per_gpu(api).items():
        for _, units in gpus.items():
            if units > nodes_units:
                over += 1
    return over


def as_default_scheduler(config_path, workdir):
    """A copy of the plugin's KubeSchedulerConfiguration whose profile is
    default-scheduler, so the burst's pods (no schedulerName) go to it."""
    with open(config_path) as f:
        config = harness.yaml_or_json(f.read())
    for profile in config.get("profiles", []):
        profile["schedulerName"] = "default-scheduler"
    path = os.path.join(workdir, "plugin-config.json")
    with open(path, "w") as f:
        json.dump(config, f)
    return path


def apply_cluster_rbac(api, path):
    """Creates the cluster-scoped RBAC objects of a manifest (the plugin's
    ClusterRole and binding: patch on pods for kube-scheduler's user)."""
    import yaml
    with open(path) as f:
        for obj in yaml.safe_load_all(f):
            if obj and obj["kind"] in ("ClusterRole", "ClusterRoleBinding"):
                kind = obj["kind"].lower() + "s"
                api.request("POST", f"/apis/rbac.authorization.k8s.io/v1/{kind}", obj)


def run_row(args, row, node_count, tasks):
    """One row at one cluster size, in two phases on a fresh control plane:
    throughput (the burst created before kube-scheduler starts, so creation
    is not what is measured: pods/s from the first bind to the last, CPU from
    the scheduler's readiness to the last bind) and latency (--latency-pods
    more, created at half that throughput, at most 100/s: creation -> bound
    p50/p99)."""
    workdir = tempfile.mkdtemp(prefix=f"gpushare-bench-{row}-{node_count}-")
    cp = harness.ControlPlane(args.kube_bin, args.extender, workdir)
    churn = row.endswith("-churn")
    if churn:
        # What users run: kube-scheduler's and the extender's own client rates.
        tasks = fill_mix(args.trace, args.units, node_count * args.gpus, args.fill, args.seed)
        qps, burst, extender_args = DEFAULT_QPS, DEFAULT_BURST, ()
        row = {"plugin-churn": "plugin", "extender-churn": "extender-names"}[row]
    else:
        qps, burst, extender_args = args.qps, 2 * args.qps, ("--kube-api-qps", str(args.qps))
    result = {"row": row.removesuffix("-names") + "-churn" if churn else row,
              "nodes": node_count, "pods": len(tasks), "qps": qps}
    cpu_only = row == "ceiling"
    memory_only = args.units if row == "go-original" else None
    gpus_unchecked = row == "ceiling-gpu"  # No annotations to check.
    ok = False
    try:
        cp.start()
        api = cp.api
        if row.startswith("extender"):
            # Its own API client (binds) gets the same limit.
            cp.start_extender(extra_args=extender_args)
        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: api.create_node(
                f"n{i:05d}", gpus=args.gpus, gpu_memory=args.units, cpu="96", memory="768Gi"),
                range(node_count)))
        result["nodes_created_s"] = round(time.monotonic() - t0, 1)

        def create(name, task, created):
            created[name] = time.time()
            api.request("POST", f"/api/v1/namespaces/{harness.NAMESPACE}/pods",
                        pod_object(name, task, cpu_only, memory_only))
        backlog = {}
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: create(f"p{i:05d}", tasks[i], backlog), range(len(tasks))))
        if row == "go-original":
            cp.start_go_original(args.go_original)
            cp.start_scheduler(with_extender=True, qps=qps, burst=burst,
                               extender_overrides={
                                   "prioritizeVerb": None, "nodeCacheCapable": True,
                                   "managedResources": [{"name": harness.GPU_MEM,
                                                         "ignoredByScheduler": False}]})
        elif row.startswith("extender"):
            cp.start_scheduler(with_extender=True, node_cache_capable=(row == "extender-names"),
                               qps=qps, burst=burst)
        elif row == "plugin":
            apply_cluster_rbac(api, args.plugin_rbac)
            cp.start_scheduler(with_extender=False, binary=args.plugin_scheduler,
                               plugin_config=as_default_scheduler(args.plugin_config, workdir),
                               qps=qps, burst=burst)
        else:
            cp.start_scheduler(with_extender=False, qps=qps, burst=burst)
        watch = BindLog(cp.procs["kube-scheduler"].log_path)
        scheduler = cp.procs["kube-scheduler"].proc.pid
        extender = cp.procs.get("gpushare-extender") or cp.procs.get("gpushare-sche-extender")
        extender = extender.proc.pid if extender else None
        cpu0 = cpu_seconds(scheduler), (cpu_seconds(extender) if extender else 0.0)

        pending = wait_settled(f"the burst ({result['row']}, {node_count} nodes)", backlog,
                               watch, args.timeout, args.idle)
        cpu1 = cpu_seconds(scheduler), (cpu_seconds(extender) if extender else 0.0)
        times = [watch.bound[n] for n in backlog if n in watch.bound]
        throughput = (len(times) - 1) / max(1e-9, max(times) - min(times)) if times else 0.0

        # Latency: at half the throughput (at most 100 pods/s), or under churn
        # at --churn-rate, each new pod after a bound GPU pod is deleted.
        rate = args.churn_rate if churn else max(1.0, min(100.0, throughput / 2))
        paced = {}
        start = time.monotonic()
        rng = random.Random(args.seed + 1)
        victims = [n for n in backlog if n in watch.bound and tasks[int(n[1:])][2] != "cpu"]
        rng.shuffle(victims)
        for i in range(args.latency_pods):
            while time.monotonic() < start + i / rate:
                time.sleep(0.002)
            if churn and victims:
                api.delete_pod(victims.pop())
            create(f"q{i:05d}", rng.choice(tasks), paced)
        pending += wait_settled("the paced pods", paced, watch, args.timeout, args.idle)
        latencies = [watch.bound[n] - paced[n] for n in paced if n in watch.bound]
        result.update({
            "pending": len(pending),
            "pods_per_s": round(throughput, 1),
            "paced_rate": round(rate, 1),
            "bound_p50_ms": round(1e3 * percentile(latencies, 0.5), 1),
            "bound_p99_ms": round(1e3 * percentile(latencies, 0.99), 1),
            "scheduler_cpu_s": round(cpu1[0] - cpu0[0], 2),
            "extender_cpu_s": round(cpu1[1] - cpu0[1], 2) if extender else None,
            "scheduler_rss_mib": round(peak_rss_mib(scheduler), 1),
            "extender_rss_mib": round(peak_rss_mib(extender), 1) if extender else None,
            "oversubscribed_gpus": (None if gpus_unchecked else
                                    0 if cpu_only else oversubscribed(api, args.units)),
        })
        ok = True
    finally:
        cp.stop()
        if ok and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"work folder: {workdir}", file=sys.stderr)
    return result


def median_row(runs):
    """Per field, the median over the runs of one row (the lower middle
    value of an even count; None stays None)."""
    out = dict(runs[0])
    for key, value in runs[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            values = sorted(r[key] for r in runs if r[key] is not None)
            out[key] = values[(len(values) - 1) // 2]
    out["rounds"] = len(runs)
    return out


def table(results):
    head = ("| nodes | row | pods | client QPS | pods/s | ×ceiling | bound p50 ms | p99 ms"
            " | scheduler CPU s | its CPU ms/pod | extender CPU s | scheduler RSS MiB"
            " | extender RSS MiB | oversubscribed | pending |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    ceilings = {r["nodes"]: r["pods_per_s"] for r in results if r["row"] == "ceiling"}
    ceilings_qps = {r["nodes"]: r["qps"] for r in results if r["row"] == "ceiling"}
    for r in results:
        ceiling = ceilings.get(r["nodes"])
        same_rate = r["qps"] == ceilings_qps.get(r["nodes"])
        ratio = f"{r['pods_per_s'] / ceiling:.2f}" if ceiling and same_rate else "—"
        per_pod = 1e3 * r["scheduler_cpu_s"] / r["pods"]
        lines.append(
            f"| {r['nodes']} | {r['row']} | {r['pods']} | {r['qps']} | {r['pods_per_s']}"
            f" | {ratio} | {r['bound_p50_ms']}"
            f" | {r['bound_p99_ms']} | {r['scheduler_cpu_s']} | {per_pod:.2f}"
            f" | {r['extender_cpu_s'] if r['extender_cpu_s'] is not None else '—'}"
            f" | {r['scheduler_rss_mib']}"
            f" | {r['extender_rss_mib'] if r['extender_rss_mib'] is not None else '—'}"
            f" | {r['oversubscribed_gpus'] if r['oversubscribed_gpus'] is not None else '—'}"
            f" | {r['pending']} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kube-bin", required=True)
    ap.add_argument("--extender", required=True)
    ap.add_argument("--plugin-scheduler", help="kube-scheduler built with the plugin")
    ap.add_argument("--plugin-config", help="its KubeSchedulerConfiguration (profiles)",
                    default=os.path.join(ROOT, "deploy", "scheduler-plugin",
                                         "scheduler-config.yaml"))
    ap.add_argument("--go-original",
                    help="the Go original's extender binary (gpushare-scheduler-extender, "
                         "built from its source), for the go-original row")
    ap.add_argument("--plugin-rbac", help="the RBAC it needs",
                    default=os.path.join(ROOT, "deploy", "scheduler-plugin", "rbac.yaml"))
    ap.add_argument("--nodes", default="1000,5000", help="cluster sizes, comma-separated")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--units", type=int, default=32, help="memory units per GPU")
    ap.add_argument("--pods", type=int, default=2000, help="pods in each burst")
    ap.add_argument("--trace", default=os.path.join(ROOT, "..", "shared", "traces", "openb",
                                                    "openb_pod_list_default.csv"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--latency-pods", type=int, default=200,
                    help="pods created at a steady rate after the burst, for latency")
    ap.add_argument("--rows",
                    help=f"rows, comma-separated, of: {', '.join(ROWS)} (default: all; "
                         "go-original only with --go-original)")
    ap.add_argument("--qps", type=int, default=5000,
                    help="kube-scheduler's and the extender's client QPS")
    ap.add_argument("--churn-nodes", type=int, default=1000,
                    help="churn rows: the cluster size (they run at this size only)")
    ap.add_argument("--fill", type=float, default=0.7,
                    help="churn rows: the share of GPU memory the burst asks")
    ap.add_argument("--churn-rate", type=float, default=10.0,
                    help="churn rows: pods deleted and created per second")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--idle", type=float, default=30.0,
                    help="seconds without a bind after which the pods not bound are "
                         "counted as pending")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds of every row; the table gives medians")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--keep", action="store_true", help="keep the work folders (logs)")
    args = ap.parse_args()
    if args.rows is None:
        args.rows = ",".join(r for r in ROWS if r != "go-original" or args.go_original)
    rows = [r for r in args.rows.split(",") if r]
    for r in rows:
        if r not in ROWS:
            ap.error(f"unknown row '{r}' (known: {', '.join(ROWS)})")
    if "plugin" in rows and not args.plugin_scheduler:
        ap.error("the plugin row needs --plugin-scheduler (scheduler-plugin/build.sh)")
    if "go-original" in rows and not args.go_original:
        ap.error("the go-original row needs --go-original (the Go original's binary)")
    tasks = openb_mix(args.trace, args.pods, args.units, args.seed)
    runs = []
    plain = [r for r in rows if not r.endswith("-churn")]
    churned = [r for r in rows if r.endswith("-churn")]
    # The churn rows fill a cluster to --fill at 50 binds/s: one size only.
    plan = [(int(n), plain) for n in args.nodes.split(",")] + [(args.churn_nodes, churned)]
    for size, these in plan:
        # Rounds of every row in turn, so that a noisy spell of the machine
        # touches every row alike; the table gives each row's median.
        for _ in range(args.repeat if these else 0):
            for row in these:
                r = run_row(args, row, size, tasks)
                print(json.dumps(r), flush=True)
                runs.append(r)
    results = [median_row([r for r in runs if (r["nodes"], r["row"]) == key])
               for key in dict.fromkeys((r["nodes"], r["row"]) for r in runs)]
    cpu = os.cpu_count()
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                  if line.startswith("model name")), "unknown CPU")
    print(f"\n{time.strftime('%Y-%m-%d')}, {model}, {cpu} cores; burst of {args.pods} pods "
          f"from {os.path.basename(args.trace)} (seed {args.seed}); nodes of {args.gpus} GPUs "
          f"x {args.units} units; kube-scheduler client QPS {args.qps}; medians of "
          f"{args.repeat} round(s)\n")
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": model, "cores": cpu, "results": results, "runs": runs}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
