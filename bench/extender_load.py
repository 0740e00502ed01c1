#!/usr/bin/env python3
"""Load test of gpushare-extender over loopback HTTP (not part of `make test`).

Starts the extender on 127.0.0.1 with a generated cluster, then runs N client
processes (16 by default), each on one keep-alive connection, that together
schedule --pods pods (100,000 by default) the way kube-scheduler does: POST
filter with every node name, then POST bind to a node that passed (a random
one, or with --pick first the first one, so that every client races for the
same node). Each client holds its last --hold bound pods and releases the oldest
(POST release) so that capacity keeps turning over. A monitor polls
/inspect during the run and the final state is checked: no GPU may ever be
promised more than it has. Prints p50/p99/p99.9 latency per verb and
requests/s.

  cmake --build build --target gpushare-extender
  python3 bench/extender_load.py --binary build/extender/gpushare-extender

Standard library only.
"""

import argparse
import http.client
import json
import multiprocessing as mp
import os
import random
import subprocess
import sys
import tempfile
import time


def make_nodes(count, gpus, units):
    items = []
    for i in range(count):
        name = "load-node-%03d" % i
        items.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"gpushare": "true",
                                                  "kubernetes.io/hostname": name}},
            "spec": {},
            "status": {"capacity": {"aliyun.com/gpu-mem": str(gpus * units),
                                    "aliyun.com/gpu-count": str(gpus)},
                       "addresses": [{"type": "InternalIP", "address": "10.1.%d.%d" % (
                           i // 250, i % 250 + 1)}]},
        })
    return {"apiVersion": "v1", "kind": "List", "items": items}


def make_pod(name, units):
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "load", "uid": "uid-" + name,
                     "labels": {"app": "load"}},
        "spec": {"schedulerName": "default-scheduler", "containers": [{
            "name": "main", "image": "cheyang/gpu-player:v2",
            "resources": {"limits": {"aliyun.com/gpu-mem": str(units)}}}]},
        "status": {"phase": "Pending"},
    }


def check_inspect(conn):
    conn.request("GET", "/gpushare-scheduler/inspect")
    view = json.loads(conn.getresponse().read())
    bad = []
    for node in view["nodes"]:
        for dev in node["devs"]:
            if dev["usedGPU"] > dev["totalGPU"] or \
               dev["usedGPU"] != sum(p["usedGPU"] for p in dev["pods"]):
                bad.append((node["name"], dev["id"], dev["usedGPU"], dev["totalGPU"]))
    return bad


def client(args):
    worker, port, pods, names, hold, seed, out, pick = args
    rng = random.Random(seed)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/json"}
    lat = {"filter": [], "bind": [], "release": []}
    held, bound, refused, lost, errors = [], 0, 0, 0, 0

    def post(verb, body):
        data = json.dumps(body)
        t0 = time.perf_counter()
        conn.request("POST", "/gpushare-scheduler/" + verb, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        lat[verb].append(time.perf_counter() - t0)
        if resp.status != 200:
            raise RuntimeError("%s -> HTTP %d %s" % (verb, resp.status, raw[:200]))
        return json.loads(raw)

    for i in range(pods):
        name = "w%02d-%06d" % (worker, i)
        pod = make_pod(name, rng.choice((1, 2, 2, 4, 4, 8)))
        result = post("filter", {"Pod": pod, "Nodes": None, "NodeNames": names})
        fit = result["NodeNames"] or []
        if not fit:
            refused += 1
        else:
            node = fit[0] if pick == "first" else rng.choice(fit)
            reply = post("bind", {"PodName": name, "PodNamespace": "load",
                                  "PodUID": "uid-" + name, "Node": node})
            if reply["Error"]:
                lost += 1
            else:
                bound += 1
                held.append(name)
        # Past the hold, or full (no fit, lost a race): give back the oldest
        # pod, as a finished job would.
        placed = bool(held) and held[-1] == name
        limit = hold if placed else min(hold, len(held) - 1)
        while held and len(held) > limit:
            reply = post("release", {"PodNamespace": "load", "PodName": held.pop(0)})
            errors += 1 if reply["Error"] else 0
    conn.close()
    with open(out, "w") as f:
        json.dump({"lat": lat, "bound": bound, "refused": refused, "lost": lost,
                   "errors": errors}, f)


def monitor(port, stop, result):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    checks, bad = 0, []
    while not stop.is_set():
        bad += check_inspect(conn)
        checks += 1
        stop.wait(0.5)
    conn.close()
    result.put((checks, bad))


def pct(values, p):
    values = sorted(values)
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(p / 100.0 * len(values)))] * 1000.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default="build/extender/gpushare-extender")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--pods", type=int, default=100000, help="filter+bind pairs in total")
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--units", type=int, default=16, help="memory units per GPU")
    parser.add_argument("--hold", type=int, default=64, help="pods each client keeps bound")
    parser.add_argument("--policy", default="binpack")
    parser.add_argument("--pick", choices=("random", "first"), default="random",
                        help="which node that passed filter to bind to")
    args = parser.parse_args()

    tmp = tempfile.TemporaryDirectory()
    nodes_path = os.path.join(tmp.name, "nodes.json")
    pods_path = os.path.join(tmp.name, "pods.json")
    with open(nodes_path, "w") as f:
        json.dump(make_nodes(args.nodes, args.gpus, args.units), f)
    with open(pods_path, "w") as f:
        json.dump({"items": []}, f)
    port_file = os.path.join(tmp.name, "port")
    server = subprocess.Popen([args.binary, "--nodes", nodes_path, "--pods", pods_path,
                               "--address", "127.0.0.1", "--port", "0", "--port-file",
                               port_file, "--policy", args.policy],
                              stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while not os.path.exists(port_file):
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit("extender did not start")
            time.sleep(0.05)
        with open(port_file) as f:
            port = int(f.read())
        names = ["load-node-%03d" % i for i in range(args.nodes)]
        per = [args.pods // args.clients + (1 if w < args.pods % args.clients else 0)
               for w in range(args.clients)]
        outs = [os.path.join(tmp.name, "client-%d.json" % w) for w in range(args.clients)]
        stop, result = mp.Event(), mp.Queue()
        mon = mp.Process(target=monitor, args=(port, stop, result))
        mon.start()
        t0 = time.perf_counter()
        procs = [mp.Process(target=client, args=((w, port, per[w], names, args.hold, 1000 + w,
                                                  outs[w], args.pick),))
                 for w in range(args.clients)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        elapsed = time.perf_counter() - t0
        stop.set()
        checks, bad = result.get()
        mon.join()
        if any(p.exitcode != 0 for p in procs):
            sys.exit("a client failed")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        bad += check_inspect(conn)
        conn.close()

        lat = {"filter": [], "bind": [], "release": []}
        bound = refused = lost = errors = 0
        for out in outs:
            with open(out) as f:
                r = json.load(f)
            for k in lat:
                lat[k] += r["lat"][k]
            bound += r["bound"]
            refused += r["refused"]
            lost += r["lost"]
            errors += r["errors"]
        total = sum(len(v) for v in lat.values())
        print("extender load: %d clients, %d pods (filter+bind), %d nodes x %d GPUs x %d units,"
              " policy %s, pick %s" % (args.clients, args.pods, args.nodes, args.gpus, args.units,
                                       args.policy, args.pick))
        print("  bound %d; no node fits %d; bind refused (lost a race) %d; release errors %d"
              % (bound, refused, lost, errors))
        print("  %d HTTP requests in %.1f s: %.0f requests/s, %.0f filter+bind pairs/s"
              % (total, elapsed, total / elapsed, args.pods / elapsed))
        for verb, values in lat.items():
            print("  %-8s n=%-7d p50 %.2f ms  p99 %.2f ms  p99.9 %.2f ms"
                  % (verb, len(values), pct(values, 50), pct(values, 99), pct(values, 99.9)))
        print("  oversubscription: %d inspect checks during the run + 1 at the end, %d violations"
              % (checks, len(bad)))
        if bad:
            print("  VIOLATIONS:", bad[:10])
            sys.exit(1)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        tmp.cleanup()


if __name__ == "__main__":
    main()
