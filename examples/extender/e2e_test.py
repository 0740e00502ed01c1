"""End-to-end tests of gpushare_extender over loopback HTTP.

Speaks to a running extender exactly as kube-scheduler does (JSON with the Go
field names of k8s.io/kube-scheduler/extender/v1) using only the standard
library. Environment:
  GPUSHARE_EXTENDER_URL  base URL of a server started from samples/, e.g.
                         http://127.0.0.1:40123
  GPUSHARE_EXTENDER      path of the binary (for the restart test, which
                         starts and stops servers of its own)

Run: python3 -m unittest examples/extender/e2e_test.py  (or pytest).
"""

import copy
import http.client
import json
import os
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLES = os.path.join(HERE, "samples")


class Client:
    """One keep-alive HTTP/1.1 connection to the extender."""

    def __init__(self, base_url):
        url = urllib.parse.urlsplit(base_url)
        assert url.hostname == "127.0.0.1", "tests talk to loopback only"
        self.conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)

    def request(self, method, path, body=None):
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        headers = {"Content-Type": "application/json"} if data is not None else {}
        self.conn.request(method, path, body=data, headers=headers)
        resp = self.conn.getresponse()
        raw = resp.read()
        return resp.status, json.loads(raw) if raw else None

    def post(self, verb, body):
        return self.request("POST", "/gpushare-scheduler/" + verb, body)

    def inspect(self, node=""):
        status, body = self.request("GET", "/gpushare-scheduler/inspect" +
                                    ("/" + node if node else ""))
        assert status == 200, body
        return body

    def close(self):
        self.conn.close()


def make_pod(name, units, gpu_count=None, namespace="default"):
    """A pending v1.Pod as kube-scheduler sends it in ExtenderArgs."""
    labels = {"app": name.rsplit("-", 1)[0]}
    if gpu_count:
        labels["aliyun.com/gpu-count"] = str(gpu_count)
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": "uid-" + name,
            "resourceVersion": "4711",
            "creationTimestamp": "2024-03-01T10:00:00Z",
            "labels": labels,
        },
        "spec": {
            "containers": [{
                "name": "main",
                "image": "cheyang/gpu-player:v2",
                "resources": {
                    "limits": {"aliyun.com/gpu-mem": str(units)},
                    "requests": {"aliyun.com/gpu-mem": str(units)},
                },
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }],
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "priority": 0,
        },
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }


def extender_args(pod, names):
    # nodeCacheCapable: true -> NodeNames, Nodes is null.
    return {"Pod": pod, "Nodes": None, "NodeNames": names}


def schedule(client, pod, names):
    """filter -> prioritize -> pick the best score (first on ties) -> bind."""
    status, result = client.post("filter", extender_args(pod, names))
    assert status == 200, result
    assert result["Error"] == "", result
    fit = result["NodeNames"] or []
    if not fit:
        return None, result
    status, priorities = client.post("prioritize", extender_args(pod, fit))
    assert status == 200, priorities
    best = max(priorities, key=lambda h: h["Score"])  # max keeps the first on ties
    status, bound = client.post("bind", {
        "PodName": pod["metadata"]["name"],
        "PodNamespace": pod["metadata"]["namespace"],
        "PodUID": pod["metadata"]["uid"],
        "Node": best["Host"],
    })
    assert status == 200, bound
    assert bound["Error"] == "", bound
    return best["Host"], bound


def used_by_node(inspect):
    return {n["name"]: n["usedGPU"] for n in inspect["nodes"]}


class ExtenderE2ETest(unittest.TestCase):
    """Conversations with the shared server (started by the test stage)."""

    @classmethod
    def setUpClass(cls):
        base = os.environ.get("GPUSHARE_EXTENDER_URL")
        if not base:
            raise unittest.SkipTest("GPUSHARE_EXTENDER_URL is not set")
        cls.client = Client(base)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def test_version_and_health(self):
        status, body = self.client.request("GET", "/version")
        self.assertEqual(status, 200)
        self.assertIn("gpushare", body["version"])
        status, body = self.client.request("GET", "/healthz")
        self.assertEqual((status, body["status"]), (200, "ok"))

    def test_s1_binpack_on_two_single_gpu_nodes(self):
        c = self.client
        names = ["sd-cluster-04", "sd-cluster-05"]
        self.assertEqual(used_by_node(c.inspect()),
                         {"sd-cluster-04": 0, "sd-cluster-05": 0, "v100-node": 0})
        a, bound = schedule(c, make_pod("binpack-1", 2), names)
        self.assertIn(a, names)
        b = names[1 - names.index(a)]
        self.assertEqual(bound["Annotations"]["ALIYUN_COM_GPU_MEM_DEV"], "14")
        self.assertEqual(bound["Annotations"]["ALIYUN_COM_GPU_MEM_POD"], "2")
        self.assertEqual(schedule(c, make_pod("binpack-2-0", 8), names)[0], a)
        self.assertEqual(schedule(c, make_pod("binpack-2-1", 8), names)[0], b)
        used = used_by_node(c.inspect())
        self.assertEqual((used[a], used[b]), (10, 8))  # 18/28 (64%)
        self.assertEqual(schedule(c, make_pod("binpack-3", 2), names)[0], a)
        # 8 GiB are free in total, but the largest request that fits is 6.
        host, result = schedule(c, make_pod("too-big", 7), names)
        self.assertIsNone(host)
        self.assertIn("largest free 6", result["FailedNodes"][b])
        self.assertEqual(schedule(c, make_pod("binpack-4", 5), names)[0], b)
        used = used_by_node(c.inspect())
        self.assertEqual((used[a], used[b]), (12, 13))  # 25/28 (89%)
        detail = c.inspect(a)
        self.assertEqual(len(detail["nodes"]), 1)
        dev = detail["nodes"][0]["devs"][0]
        self.assertEqual((dev["totalGPU"], dev["usedGPU"]), (14, 12))
        self.assertEqual(sorted(p["name"] for p in dev["pods"]),
                         ["binpack-1", "binpack-2-0", "binpack-3"])
        # The device plugin takes binpack-1: confirm it.
        status, body = c.post("confirm", {"PodNamespace": "default", "PodName": "binpack-1"})
        self.assertEqual((status, body["Error"]), (200, ""))

    def test_s3_multi_card_split(self):
        c = self.client
        host, bound = schedule(c, make_pod("sts-0", 8, gpu_count=4), ["v100-node"])
        self.assertEqual(host, "v100-node")
        self.assertEqual(bound["Placement"]["gpus"], [0, 1, 2, 3])
        self.assertEqual(bound["Placement"]["memoryPerGpu"], 2)
        ann = bound["Annotations"]
        self.assertEqual(ann["ALIYUN_COM_GPU_MEM_IDX"], "0-1-2-3")
        self.assertEqual(ann["ALIYUN_COM_GPU_MEM_POD"], "8")
        self.assertEqual(ann["ALIYUN_COM_GPU_MEM_DEV"], "15")
        self.assertEqual(ann["ALIYUN_COM_GPU_MEM_ASSIGNED"], "false")
        devs = c.inspect("v100-node")["nodes"][0]["devs"]
        self.assertEqual([d["usedGPU"] for d in devs], [2, 2, 2, 2])
        # 8 over 3 GPUs is rejected with the reason, not an HTTP error.
        status, result = c.post("filter", extender_args(make_pod("odd", 8, 3), ["v100-node"]))
        self.assertEqual(status, 200)
        self.assertEqual(result["NodeNames"], [])
        self.assertIn("not divisible by gpu count 3", result["FailedNodes"]["v100-node"])

    def test_malformed_bodies_get_400_and_change_nothing(self):
        c = self.client
        before = c.inspect()
        pod = make_pod("mal", 2)
        bad_quantity = copy.deepcopy(pod)
        bad_quantity["spec"]["containers"][0]["resources"]["limits"]["aliyun.com/gpu-mem"] = "x"
        cases = [
            ("filter", b"{not json"),
            ("filter", b""),
            ("filter", {"NodeNames": ["sd-cluster-04"]}),
            ("filter", {"Pod": pod, "NodeNames": "sd-cluster-04"}),
            ("filter", extender_args(bad_quantity, ["sd-cluster-04"])),
            ("prioritize", b"[1, 2]"),
            ("bind", {"PodName": "mal"}),
            ("bind", b"\x00\x01"),
            ("preempt", {"Pod": 5}),
            ("confirm", {}),
            ("release", b"{"),
        ]
        for verb, body in cases:
            status, reply = c.post(verb, body)
            self.assertEqual(status, 400, (verb, body, reply))
            self.assertTrue(reply["Error"], (verb, body))
            self.assertEqual(reply["Code"], "INVALID_ARGUMENT")
        status, _ = c.request("GET", "/gpushare-scheduler/inspect/no-such-node")
        self.assertEqual(status, 404)
        status, _ = c.request("GET", "/gpushare-scheduler/filter")
        self.assertEqual(status, 405)
        self.assertEqual(c.inspect(), before)

    def test_preempt_returns_only_the_victims_needed(self):
        c = self.client
        names = ["v100-node"]
        victims = []
        for i in range(4):  # One per GPU; none has 14 free afterwards.
            host, _ = schedule(c, make_pod("low-%d" % i, 13), names)
            self.assertEqual(host, "v100-node")
            victims.append("uid-low-%d" % i)
        args = {
            "Pod": make_pod("urgent", 14),
            "NodeNameToVictims": None,
            "NodeNameToMetaVictims": {
                "v100-node": {"Pods": [{"UID": u} for u in victims], "NumPDBViolations": 0},
            },
        }
        status, result = c.post("preempt", args)
        self.assertEqual(status, 200, result)
        kept = [p["UID"] for p in result["NodeNameToMetaVictims"]["v100-node"]["Pods"]]
        self.assertEqual(len(kept), 1)
        for u in victims:
            status, body = c.post("release", {"PodUID": u})
            self.assertEqual(body["Error"], "")


def start_server(binary, nodes, pods, workdir, ttl_ms=60000):
    port_file = os.path.join(workdir, "port-%d" % time.monotonic_ns())
    proc = subprocess.Popen(
        [binary, "--nodes", nodes, "--pods", pods, "--address", "127.0.0.1", "--port", "0",
         "--port-file", port_file, "--ttl-ms", str(ttl_ms)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 15
    while not os.path.exists(port_file):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("extender did not start: %s" % proc.stderr.read().decode())
        time.sleep(0.02)
    with open(port_file) as f:
        return proc, "http://127.0.0.1:%d" % int(f.read())


def stop_server(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    proc.stderr.close()


class RestartTest(unittest.TestCase):
    """Servers of its own: concurrent binds, then a restart from pod annotations."""

    def setUp(self):
        self.binary = os.environ.get("GPUSHARE_EXTENDER")
        if not self.binary:
            self.skipTest("GPUSHARE_EXTENDER is not set")
        self.tmp = tempfile.TemporaryDirectory()
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            stop_server(p)
        self.tmp.cleanup()

    def start(self, pods_path):
        proc, url = start_server(self.binary, os.path.join(SAMPLES, "nodes.json"), pods_path,
                                 self.tmp.name)
        self.procs.append(proc)
        return url

    def test_concurrent_binds_never_oversubscribe_and_a_restart_loses_nothing(self):
        url = self.start(os.path.join(SAMPLES, "pods.json"))
        names = ["sd-cluster-04", "sd-cluster-05", "v100-node"]
        bound, lock = [], threading.Lock()

        def worker(t):
            client = Client(url)
            for i in range(12):
                pod = make_pod("w%d-%d" % (t, i), 3)
                status, result = client.post("filter", extender_args(pod, names))
                if not result["NodeNames"]:
                    continue
                # Everyone races for the first node that passed filter.
                status, reply = client.post("bind", {
                    "PodName": pod["metadata"]["name"], "PodNamespace": "default",
                    "PodUID": pod["metadata"]["uid"], "Node": result["NodeNames"][0]})
                self.assertEqual(status, 200)
                if reply["Error"] == "":
                    with lock:
                        bound.append((pod, result["NodeNames"][0], reply["Annotations"]))
            client.close()

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        probe = Client(url)
        before = probe.inspect()
        probe.close()
        for node in before["nodes"]:
            for dev in node["devs"]:
                self.assertLessEqual(dev["usedGPU"], dev["totalGPU"], node["name"])
                self.assertEqual(dev["usedGPU"], sum(p["usedGPU"] for p in dev["pods"]))
        # 4 + 4 + 4*5 pods of 3 units fit on 14, 14 and 4x15.
        self.assertEqual(len(bound), 28)

        # What the API server would hold after these binds: the pods with their
        # node and annotations. A new extender rebuilt from it sees the same.
        with open(os.path.join(SAMPLES, "pods.json")) as f:
            pods = json.load(f)
        for pod, node, annotations in bound:
            pod = copy.deepcopy(pod)
            pod["spec"]["nodeName"] = node
            pod["metadata"]["annotations"] = annotations
            pod["status"]["phase"] = "Running"
            pods["items"].append(pod)
        pods_path = os.path.join(self.tmp.name, "pods-after.json")
        with open(pods_path, "w") as f:
            json.dump(pods, f)
        probe = Client(self.start(pods_path))
        after = probe.inspect()
        probe.close()

        def shape(view):
            return {(n["name"], d["id"]): (d["usedGPU"], sorted(p["name"] for p in d["pods"]))
                    for n in view["nodes"] for d in n["devs"]}

        self.assertEqual(shape(after), shape(before))


if __name__ == "__main__":
    unittest.main()
