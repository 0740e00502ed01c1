#!/usr/bin/env python3
"""Bind latency of gpushare-extender while readers and planners press on it
(not part of `make test`; `make bench-contention` runs it).

Starts the extender on 127.0.0.1 from files with --nodes N nodes of 8 GPUs of
16 units, one 6-unit pod bound on each GPU (so /plan has placements to move and
/metrics has a line per GPU), then, at once:
  * --scrapers clients (4) GET /metrics back to back;
  * --planners clients (8) POST /plan {"FreeGPUs": 2, "MaxMoves": 2} back to
    back (each from 127.0.0.1, so the extender runs one at a time and answers
    the others 429 at once);
  * one scheduler-like client: filter (the first --candidates node names) then
    bind then release, --binds times, timing each bind.
Prints bind p50/p99/max, and how many scrapes and plans completed. Compare two
binaries (e.g. before and after a change) with --binary twice; the runs
alternate, --rounds times.

  python3 bench/extender_contention.py --binary build/extender/gpushare-extender

Standard library only.
"""

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def make_state(nodes, gpus, units, pod_units):
    node_items, pod_items = [], []
    for i in range(nodes):
        name = "node-%05d" % i
        node_items.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"gpushare": "true",
                                                  "kubernetes.io/hostname": name}},
            "spec": {},
            "status": {"capacity": {"aliyun.com/gpu-mem": str(gpus * units),
                                    "aliyun.com/gpu-count": str(gpus)}}})
        for g in range(gpus):
            pod = "held-%05d-%d" % (i, g)
            pod_items.append({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod, "namespace": "bench", "uid": "uid-" + pod,
                             "annotations": {"ALIYUN_COM_GPU_MEM_IDX": str(g),
                                             "ALIYUN_COM_GPU_MEM_POD": str(pod_units),
                                             "ALIYUN_COM_GPU_MEM_ASSIGNED": "true"}},
                "spec": {"nodeName": name, "containers": [{
                    "name": "main", "resources": {"limits": {
                        "aliyun.com/gpu-mem": str(pod_units)}}}]},
                "status": {"phase": "Running"}})
    return ({"kind": "List", "apiVersion": "v1", "items": node_items},
            {"kind": "List", "apiVersion": "v1", "items": pod_items})


def start(binary, nodes_file, pods_file, workdir):
    port_file = os.path.join(workdir, "port")
    if os.path.exists(port_file):
        os.remove(port_file)
    proc = subprocess.Popen(
        [binary, "--nodes", nodes_file, "--pods", pods_file, "--address", "127.0.0.1",
         "--port", "0", "--port-file", port_file, "--ttl-ms", "600000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (os.path.exists(port_file) and open(port_file).read().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("the extender did not start")
        time.sleep(0.05)
    return proc, int(open(port_file).read())


def request(conn, method, path, body=None):
    data = None if body is None else json.dumps(body)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    conn.request(method, path, body=data, headers=headers)
    resp = conn.getresponse()
    return resp.status, resp.read()


def loop(port, stop, count, method, path, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    while not stop.is_set():
        try:
            status, _ = request(conn, method, path, body)
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            continue
        if status == 200:
            count[0] += 1
        else:
            time.sleep(0.01)  # 429: a plan of this client is running.
    conn.close()


def run_once(binary, files, args, workdir):
    proc, port = start(binary, files[0], files[1], workdir)
    stop = threading.Event()
    scrapes, plans = [0], [0]
    threads = [threading.Thread(target=loop, args=(port, stop, scrapes, "GET", "/metrics", None))
               for _ in range(args.scrapers)]
    threads += [threading.Thread(target=loop, args=(
        port, stop, plans, "POST", "/gpushare-scheduler/plan",
        {"FreeGPUs": 2, "MaxMoves": 2})) for _ in range(args.planners)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # Let the pressure build.
    names = ["node-%05d" % i for i in range(min(args.candidates, args.nodes))]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    binds = []
    try:
        for i in range(args.binds):
            pod = {"kind": "Pod", "apiVersion": "v1",
                   "metadata": {"name": "b-%d" % i, "namespace": "bench", "uid": "u-%d" % i},
                   "spec": {"containers": [{"name": "main", "resources": {
                       "limits": {"aliyun.com/gpu-mem": "2"}}}]},
                   "status": {"phase": "Pending"}}
            status, body = request(conn, "POST", "/gpushare-scheduler/filter",
                                   {"Pod": pod, "Nodes": None, "NodeNames": names})
            fit = json.loads(body)["NodeNames"] if status == 200 else []
            if not fit:
                raise RuntimeError("no node fits: %r" % body[:200])
            t0 = time.monotonic()
            status, body = request(conn, "POST", "/gpushare-scheduler/bind", {
                "PodName": "b-%d" % i, "PodNamespace": "bench", "PodUID": "u-%d" % i,
                "Node": fit[0]})
            binds.append(time.monotonic() - t0)
            if status != 200 or json.loads(body)["Error"]:
                raise RuntimeError("bind failed: %r" % body[:200])
            request(conn, "POST", "/gpushare-scheduler/release",
                    {"PodNamespace": "bench", "PodName": "b-%d" % i})
    finally:
        stop.set()
        conn.close()
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for t in threads:
            t.join(60)
    binds.sort()
    return {"p50_ms": 1000 * statistics.median(binds),
            "p99_ms": 1000 * binds[min(len(binds) - 1, int(0.99 * len(binds)))],
            "max_ms": 1000 * binds[-1], "scrapes": scrapes[0], "plans": plans[0]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", action="append", required=True)
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--scrapers", type=int, default=4)
    ap.add_argument("--planners", type=int, default=8)
    ap.add_argument("--binds", type=int, default=200)
    ap.add_argument("--candidates", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        nodes, pods = make_state(args.nodes, 8, 16, 6)
        files = (os.path.join(workdir, "nodes.json"), os.path.join(workdir, "pods.json"))
        for path, obj in zip(files, (nodes, pods)):
            with open(path, "w") as f:
                json.dump(obj, f)
        for r in range(args.rounds):
            for binary in args.binary:
                res = run_once(binary, files, args, workdir)
                print("round %d %s: bind p50 %.2f ms, p99 %.2f ms, max %.2f ms; "
                      "%d scrapes, %d plans" % (r + 1, binary, res["p50_ms"], res["p99_ms"],
                                                 res["max_ms"], res["scrapes"], res["plans"]),
                      flush=True)


if __name__ == "__main__":
    sys.exit(main())
