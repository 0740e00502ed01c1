"""End-to-end tests of gpushare-extender over loopback HTTP.

Speaks to a running extender exactly as kube-scheduler does (JSON with the Go
field names of k8s.io/kube-scheduler/extender/v1) using only the standard
library. Environment:
  GPUSHARE_EXTENDER_URL  base URL of a server started from samples/, e.g.
                         http://127.0.0.1:40123
  GPUSHARE_EXTENDER      path of the binary (for the restart test, which
                         starts and stops servers of its own)
  GPUSHARE_EXTENDER_CA   with an https:// URL: the PEM CA that signed the
                         server's certificate

Run: python3 tests/extender/e2e_test.py -v  (E2E_ORDER=reverse to reverse
the order of the tests, which must not matter).
"""

import copy
import http.client
import http.server
import json
import os
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLES = os.path.join(HERE, "..", "..", "extender", "samples")
# The annotation of the extender's requeue nudge (extender/requeue.h).
REQUEUE_ANNOTATION = "scheduler.framework.gpushare.requeue-at"


class Client:
    """One keep-alive HTTP/1.1 connection to the extender."""

    def __init__(self, base_url):
        url = urllib.parse.urlsplit(base_url)
        assert url.hostname == "127.0.0.1", "tests talk to loopback only"
        if url.scheme == "https":
            context = ssl.create_default_context(cafile=os.environ["GPUSHARE_EXTENDER_CA"])
            self.conn = http.client.HTTPSConnection(url.hostname, url.port, timeout=30,
                                                    context=context)
        else:
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

    def setUp(self):
        # Every test leaves the shared server as it found it, so that the
        # tests do not depend on their order.
        self.before = self.client.inspect()
        self.addCleanup(self.release_bound)

    def release_bound(self):
        def held(view):
            return {(p["namespace"], p["name"]) for n in view["nodes"] for d in n["devs"]
                    for p in d["pods"]}
        for namespace, name in held(self.client.inspect()) - held(self.before):
            self.client.post("release", {"PodNamespace": namespace, "PodName": name})
        self.assertEqual(self.client.inspect(), self.before)

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
            self.assertEqual((status, body["Error"]), (200, ""))


def start_server(binary, nodes, pods, workdir, ttl_ms=60000, extra=()):
    """Starts gpushare-extender on a free loopback port; returns (proc, url)."""
    port_file = os.path.join(workdir, "port-%d" % time.monotonic_ns())
    state = ["--nodes", nodes, "--pods", pods] if nodes else []
    proc = subprocess.Popen(
        [binary, *state, "--address", "127.0.0.1", "--port", "0",
         "--port-file", port_file, "--ttl-ms", str(ttl_ms), *extra],
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


class BinaryTest(unittest.TestCase):
    """Runs the binary of $GPUSHARE_EXTENDER, with a temporary folder."""

    def setUp(self):
        self.binary = os.environ.get("GPUSHARE_EXTENDER")
        if not self.binary:
            self.skipTest("GPUSHARE_EXTENDER is not set")
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()


class TargetWorkloadTest(BinaryTest):
    """--policy fgdpack --target-workload FILE: refused when bad, served when good."""

    def write(self, name, doc):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
        return path

    def run_refused(self, target_path):
        proc = subprocess.run(
            [self.binary, "--nodes", os.path.join(SAMPLES, "nodes.json"),
             "--pods", os.path.join(SAMPLES, "pods.json"), "--address", "127.0.0.1",
             "--port", "0", "--policy", "fgdpack", "--target-workload", target_path],
            capture_output=True, timeout=30)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        return proc.stderr.decode()

    def test_a_bad_target_is_refused_at_start_naming_the_value(self):
        bad = self.write("bad.json", {"tasks": [{"gpu_share": 4, "gpu_count": 1, "weight": -1}]})
        self.assertIn("tasks[0].weight: -1 is not a positive number", self.run_refused(bad))
        self.assertIn("malformed JSON", self.run_refused(self.write("broken.json", "{")))
        missing = os.path.join(self.tmp.name, "missing.json")
        self.assertIn("cannot read " + missing, self.run_refused(missing))

    def test_fgdpack_with_a_memory_target_places_and_never_oversubscribes(self):
        # Shares of 3 and 8 units: 8 + 3 + 3 fill a 14-unit GPU exactly.
        target = self.write("target.json", {"resource": "memory", "tasks": [
            {"cpu": 0, "gpu_share": 3, "gpu_count": 1, "weight": 0.6},
            {"cpu": 0, "gpu_share": 8, "gpu_count": 1, "weight": 0.4}]})
        proc, url = start_server(self.binary, os.path.join(SAMPLES, "nodes.json"),
                                 os.path.join(SAMPLES, "pods.json"), self.tmp.name,
                                 extra=["--policy", "fgdpack", "--target-workload", target])
        try:
            c = Client(url)
            names = ["sd-cluster-04", "sd-cluster-05", "v100-node"]
            placed = 0
            for i, units in enumerate([8, 3, 3, 8, 3, 3, 3, 8, 3]):
                host, _ = schedule(c, make_pod("t%d" % i, units), names)
                placed += host is not None
            self.assertEqual(placed, 9)
            for node in c.inspect()["nodes"]:
                for dev in node["devs"]:
                    self.assertLessEqual(dev["usedGPU"], dev["totalGPU"], node["name"])
                    self.assertEqual(dev["usedGPU"], sum(p["usedGPU"] for p in dev["pods"]))
            c.close()
        finally:
            stop_server(proc)


class FlagSyntaxTest(BinaryTest):
    """--flag=value is --flag value (deploy/ writes its flags so)."""

    def test_equals_form_is_the_same_flag(self):
        proc, url = start_server(
            self.binary, None, None, self.tmp.name,
            extra=["--nodes=" + os.path.join(SAMPLES, "nodes.json"),
                   "--pods=" + os.path.join(SAMPLES, "pods.json"), "--policy=spread",
                   "--max-body-bytes=1Mi", "--address=127.0.0.1"])
        try:
            c = Client(url)
            # spread, not the default binpack: of two equal T4 nodes with a pod
            # on one, the other.
            names = ["sd-cluster-04", "sd-cluster-05"]
            first, _ = schedule(c, make_pod("f1", 2), names)
            second, _ = schedule(c, make_pod("f2", 2), names)
            self.assertEqual({first, second}, set(names))
            c.close()
        finally:
            stop_server(proc)

    def test_bad_values_and_unknown_flags_are_named(self):
        def refused(*args):
            proc = subprocess.run([self.binary, *args], capture_output=True, timeout=30)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            return proc.stderr.decode().splitlines()[0]
        self.assertIn("unknown or incomplete flag --bogus=1", refused("--bogus=1"))
        self.assertIn("--max-body-bytes takes a byte count like 1048576 or 192Mi, not lots",
                      refused("--max-body-bytes=lots"))
        self.assertIn("--leader-elect takes true or false", refused("--leader-elect=maybe"))
        self.assertIn("--port must be in 0..65535", refused("--port=70000"))


class FakeApiServer:
    """The few Kubernetes API calls the extender makes, over loopback HTTP/1.1,
    answered as the real API server answers them.

    GET /api/v1/nodes and /api/v1/pods list the objects with the list's
    resourceVersion; with ?watch=1&resourceVersion=RV they stream the events
    after RV as chunked newline-delimited JSON until timeoutSeconds (an RV
    older than drop_watches_and_compact() left gets an ERROR event with code
    410, as etcd compaction does); every change bumps the resourceVersion and
    records a watch event. GET
    /api/v1/namespaces/NS/pods/NAME reads one; PATCH of a pod takes a JSON merge
    patch of its annotations; POST .../binding sets spec.nodeName once and
    merges the Binding's annotations into the pod, as kube-apiserver does: a pod
    already bound, or a Binding whose metadata.uid is not the pod's, gets 409
    Conflict (pods named "refuse-*" get 409 too, as when a pod is being
    deleted). A successful Binding takes `binding_delay` seconds to answer,
    after the pod is bound (a slow winner).

    Faults: add_fault(verb, name, kind) makes the next `verb` ("PATCH",
    "BINDING" or "GET") about pod `name` fail once with `kind`: "429" (with
    Retry-After), "500", "drop" (the connection is closed without a reply),
    "slow-drop" (the same after 1.5 s, as a timeout looks to the client), or,
    for a Binding, "500-after" / "drop-after" (the pod is bound, then the
    reply is a 500 / nothing: the client cannot know the outcome)."""

    def __init__(self, nodes, pods):
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.rv = 100
        self.compacted = 0
        self.generation = 0  # Bumped by drop_watches_and_compact(): open watches end.
        self.stopped = False
        self.events = []  # (rv, "nodes"|"pods", type, object)
        self.nodes = {}
        self.pods = {}
        for n in nodes:
            self.add_node(n)
        for p in pods:
            self.add_pod(p)
        self.calls = []
        self.faults = {}  # (verb, name) -> [kind, ...]
        self.binding_delay = 0.0
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def reply(self, code, obj, headers=()):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def drop(self):
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

            def body(self):
                return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

            def fault(self, verb, parts):
                """The fault planned for this call, taken off the plan."""
                name = parts[6] if len(parts) >= 7 else None
                with api.lock:
                    plan = api.faults.get((verb, name))
                    return plan.pop(0) if plan else None

            def early_fault(self, kind):
                """Faults that answer before anything is applied; True if one did."""
                if kind == "429":
                    self.reply(429, {"kind": "Status", "code": 429,
                                     "message": "too many requests"}, [("Retry-After", "1")])
                elif kind == "500":
                    self.reply(500, {"kind": "Status", "code": 500, "message": "etcd timeout"})
                elif kind == "drop":
                    self.drop()
                elif kind == "slow-drop":
                    time.sleep(1.5)
                    self.drop()
                else:
                    return False
                return True

            def chunk(self, obj):
                data = (json.dumps(obj) + "\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def watch(self, kind, query):
                since = int(query.get("resourceVersion", ["0"])[0] or 0)
                timeout = float(query.get("timeoutSeconds", ["30"])[0])
                deadline = time.monotonic() + timeout
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                with api.lock:
                    generation = api.generation
                    if since < api.compacted:
                        self.chunk({"type": "ERROR", "object": {
                            "kind": "Status", "status": "Failure", "reason": "Expired",
                            "code": 410,
                            "message": "too old resource version: %d (%d)" % (
                                since, api.compacted)}})
                        self.wfile.write(b"0\r\n\r\n")
                        return
                    while not api.stopped and generation == api.generation:
                        for rv, k, type_, obj in api.events:
                            if rv > since and k == kind:
                                self.chunk({"type": type_, "object": obj})
                                since = rv
                        left = deadline - time.monotonic()
                        if left <= 0:
                            break
                        api.changed.wait(min(left, 0.5))
                    if generation != api.generation:
                        self.close_connection = True  # Dropped: no last chunk.
                        return
                self.wfile.write(b"0\r\n\r\n")

            def do_GET(self):
                parts = self.path.split("/")
                if self.early_fault(self.fault("GET", parts)):
                    return
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                kind = {"/api/v1/nodes": "nodes", "/api/v1/pods": "pods"}.get(url.path)
                if kind is not None and query.get("watch") == ["1"]:
                    return self.watch(kind, query)
                with api.lock:
                    if kind is not None:
                        items = list(api.nodes.values() if kind == "nodes"
                                     else api.pods.values())
                        return self.reply(200, {
                            "kind": "NodeList" if kind == "nodes" else "PodList",
                            "metadata": {"resourceVersion": str(api.rv)}, "items": items})
                    pod = self.pod_of(parts)
                    if pod is not None and len(parts) == 7:
                        return self.reply(200, pod)
                self.reply(404, {"kind": "Status", "code": 404})

            def pod_of(self, parts):
                # /api/v1/namespaces/<ns>/pods/<name>[/binding]
                return api.pods.get((parts[4], parts[6])) if len(parts) >= 7 else None

            def do_PATCH(self):
                parts = self.path.split("/")
                patch = self.body()
                if self.early_fault(self.fault("PATCH", parts)):
                    return
                with api.lock:
                    pod = self.pod_of(parts)
                    api.calls.append(("PATCH", self.path, self.headers["Content-Type"], patch))
                    if pod is None:
                        return self.reply(404, {"kind": "Status", "code": 404})
                    pod["metadata"].setdefault("annotations", {}).update(
                        patch["metadata"]["annotations"])
                    api._record("pods", "MODIFIED", pod)
                    self.reply(200, pod)

            def do_POST(self):
                parts = self.path.split("/")
                binding = self.body()
                kind = self.fault("BINDING", parts)
                if self.early_fault(kind):
                    return
                with api.lock:
                    pod = self.pod_of(parts)
                    api.calls.append(("POST", self.path, self.headers["Content-Type"], binding))
                    if pod is None or parts[-1] != "binding":
                        return self.reply(404, {"kind": "Status", "code": 404})
                    name = pod["metadata"]["name"]
                    uid = binding["metadata"].get("uid")
                    if name.startswith("refuse"):
                        return self.reply(409, {"kind": "Status", "code": 409,
                                                "message": "pod is being deleted"})
                    if uid and uid != pod["metadata"].get("uid"):
                        return self.reply(409, {"kind": "Status", "code": 409,
                                                "message": "Precondition failed: UID in "
                                                           "precondition: %s" % uid})
                    if pod["spec"].get("nodeName"):
                        return self.reply(409, {
                            "kind": "Status", "code": 409, "reason": "Conflict",
                            "message": 'Operation cannot be fulfilled on pods/binding "%s": '
                                       'pod %s is already assigned to node "%s"'
                                       % (name, name, pod["spec"]["nodeName"])})
                    pod["spec"]["nodeName"] = binding["target"]["name"]
                    if binding["metadata"].get("annotations"):
                        pod["metadata"].setdefault("annotations", {}).update(
                            binding["metadata"]["annotations"])
                    pod["status"]["phase"] = "Running"
                    api._record("pods", "MODIFIED", pod)
                    delay = api.binding_delay
                time.sleep(delay)
                if kind == "500-after":
                    return self.reply(500, {"kind": "Status", "code": 500,
                                            "message": "the server was unable to respond"})
                if kind == "drop-after":
                    return self.drop()
                self.reply(201, {"kind": "Status", "status": "Success"})

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # A client that went away (a killed extender) is not news.

        self.server = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def _record(self, kind, type_, obj):
        """Bumps the resourceVersion and records an event; self.lock is held."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, kind, type_, copy.deepcopy(obj)))
        self.changed.notify_all()

    def add_node(self, node):
        with self.lock:
            self.nodes[node["metadata"]["name"]] = node
            self._record("nodes", "ADDED", node)

    def delete_node(self, name):
        with self.lock:
            node = self.nodes.pop(name)
            self._record("nodes", "DELETED", node)

    def add_pod(self, pod):
        with self.lock:
            self.pods[(pod["metadata"].get("namespace", "default"),
                       pod["metadata"]["name"])] = pod
            self._record("pods", "ADDED", pod)

    def delete_pod(self, name, namespace="default"):
        with self.lock:
            pod = self.pods.pop((namespace, name))
            self._record("pods", "DELETED", pod)

    def drop_watches_and_compact(self):
        """Ends every open watch without its last chunk, and forgets the
        events so far: watching from an older resourceVersion gets 410."""
        with self.lock:
            self.generation += 1
            self.compacted = self.rv
            self.events = []
            self.changed.notify_all()

    def pod_calls(self, method, name):
        with self.lock:
            return [c for c in self.calls if c[0] == method and c[1].endswith("/pods/" + name)]

    def add_fault(self, verb, name, kind):
        with self.lock:
            self.faults.setdefault((verb, name), []).append(kind)

    def calls_about(self, name):
        """(bind PATCHes, Bindings) the API received for pod `name`. A PATCH
        that sets only the requeue annotation is not a bind's: it is the nudge
        the extender sends pending pods that fit after GPUs were freed
        (extender/requeue.h), which may meet a pod made after a release."""
        def nudge(patch):
            return set(patch["metadata"]["annotations"]) == {REQUEUE_ANNOTATION}
        with self.lock:
            patches = sum(1 for c in self.calls
                          if c[0] == "PATCH" and c[1].endswith("/pods/" + name)
                          and not nudge(c[3]))
            bindings = sum(1 for c in self.calls
                           if c[0] == "POST" and c[1].endswith("/pods/%s/binding" % name))
        return patches, bindings

    def bound(self):
        """{(node, gpu): [(pod, units)]} from the pods' nodeName and bind annotations."""
        out = {}
        with self.lock:
            pods = copy.deepcopy(list(self.pods.values()))
        for pod in pods:
            node = pod["spec"].get("nodeName")
            if not node or pod["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            ann = pod["metadata"].get("annotations") or {}
            if "ALIYUN_COM_GPU_MEM_IDX" not in ann:
                continue
            gpus = [int(g) for g in ann["ALIYUN_COM_GPU_MEM_IDX"].split("-")]
            per_gpu = int(ann["ALIYUN_COM_GPU_MEM_POD"]) // len(gpus)
            for g in gpus:
                out.setdefault((node, g), []).append((pod["metadata"]["name"], per_gpu))
        return out

    def gpu_capacity(self):
        """{(node, gpu): units} from the nodes' capacity."""
        out = {}
        with self.lock:
            for n in self.nodes.values():
                cap = n["status"]["capacity"]
                count = int(cap.get("aliyun.com/gpu-count", "1"))
                for g in range(count):
                    out[(n["metadata"]["name"], g)] = int(cap["aliyun.com/gpu-mem"]) // count
        return out

    def stop(self):
        with self.lock:
            self.stopped = True
            self.changed.notify_all()
        self.server.shutdown()
        self.server.server_close()


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


class ApiServerTest(unittest.TestCase):
    """The extender in front of an API server: it binds and keeps up."""

    def setUp(self):
        binary = os.environ.get("GPUSHARE_EXTENDER")
        if not binary:
            self.skipTest("GPUSHARE_EXTENDER is not set")
        with open(os.path.join(SAMPLES, "nodes.json")) as f:
            nodes = json.load(f)["items"]
        with open(os.path.join(SAMPLES, "pods.json")) as f:
            pods = json.load(f)["items"]
        self.api = FakeApiServer(nodes, pods)
        self.addCleanup(self.api.stop)
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        proc, url = start_server(binary, None, None, tmp.name,
                                 # Changes must arrive by the watches, not
                                 # by the safety-net resync.
                                 extra=("--apiserver", self.api.url, "--resync-ms", "600000"))
        self.addCleanup(stop_server, proc)
        self.client = Client(url)
        self.addCleanup(self.client.close)
        self.names = [n["metadata"]["name"] for n in nodes]
        status, ready = self.client.request("GET", "/readyz")
        self.assertEqual(status, 200, ready)

    def pods_on(self, node):
        view = self.client.inspect(node)["nodes"][0]
        return {p["name"]: p for d in view["devs"] for p in d["pods"]}

    def test_binds_through_the_api_and_confirms(self):
        pod = make_pod("api-1", 4)
        self.api.add_pod(copy.deepcopy(pod))
        host, bound = schedule(self.client, pod, self.names)
        self.assertIsNotNone(host)
        # One write: the Binding carries the annotations.
        self.assertEqual([c for c in self.api.calls if c[0] == "PATCH"], [])
        post = [c for c in self.api.calls if c[0] == "POST"]
        self.assertEqual(len(post), 1)
        self.assertEqual(post[0][1], "/api/v1/namespaces/default/pods/api-1/binding")
        self.assertEqual(post[0][3]["kind"], "Binding")
        self.assertEqual(post[0][3]["target"]["name"], host)
        self.assertEqual(post[0][3]["metadata"]["annotations"], bound["Annotations"])
        with self.api.lock:
            annotations = self.api.pods[("default", "api-1")]["metadata"]["annotations"]
        self.assertEqual({k: annotations[k] for k in bound["Annotations"]}, bound["Annotations"])
        # Bound, so confirmed at once: no time-to-live can take it away.
        self.assertFalse(self.pods_on(host)["api-1"]["reserved"])

    def test_a_refused_binding_frees_the_gpus_and_reports_the_error(self):
        before = self.client.inspect()
        pod = make_pod("refuse-1", 4)
        self.api.add_pod(copy.deepcopy(pod))
        status, result = self.client.post("filter", extender_args(pod, ["sd-cluster-04"]))
        self.assertEqual(result["NodeNames"], ["sd-cluster-04"])
        status, reply = self.client.post("bind", {
            "PodName": "refuse-1", "PodNamespace": "default", "PodUID": "uid-refuse-1",
            "Node": "sd-cluster-04"})
        self.assertEqual(status, 200)
        self.assertIn("409", reply["Error"])
        self.assertEqual(self.client.inspect(), before)

    def test_follows_new_nodes_deleted_pods_and_other_replicas(self):
        late = copy.deepcopy(self.api.nodes["sd-cluster-04"])
        late["metadata"]["name"] = "late-node"
        self.api.add_node(late)
        self.assertTrue(wait_for(lambda: any(
            n["name"] == "late-node" for n in self.client.inspect()["nodes"])))
        pod = make_pod("api-2", 6)
        self.api.add_pod(copy.deepcopy(pod))
        host, _ = schedule(self.client, pod, ["late-node"])
        self.assertEqual(host, "late-node")
        # A pod another replica bound, with its annotations, is taken into account.
        other = make_pod("other-replica", 5)
        other["spec"]["nodeName"] = "late-node"
        other["status"]["phase"] = "Running"
        other["metadata"]["annotations"] = {"ALIYUN_COM_GPU_MEM_IDX": "0",
                                            "ALIYUN_COM_GPU_MEM_POD": "5"}
        self.api.add_pod(other)
        self.assertTrue(wait_for(lambda: "other-replica" in self.pods_on("late-node")))
        # Deleted pods give their units back.
        self.api.delete_pod("api-2")
        self.api.delete_pod("other-replica")
        self.assertTrue(wait_for(lambda: not self.pods_on("late-node")))

    def test_a_delete_nudges_pending_pods_that_now_fit(self):
        # Fill sd-cluster-04 (14 units), park a pod that fits nowhere else and
        # not there now, then delete the holder and nothing else: the parked
        # pod is touched, so kube-scheduler retries it at once.
        holder = make_pod("holder", 14)
        self.api.add_pod(copy.deepcopy(holder))
        host, _ = schedule(self.client, holder, ["sd-cluster-04"])
        self.assertEqual(host, "sd-cluster-04")
        parked = make_pod("parked", 10)
        parked["spec"]["affinity"] = {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In",
                                  "values": ["sd-cluster-04"]}]}]}}}
        self.api.add_pod(copy.deepcopy(parked))
        status, result = self.client.post("filter", extender_args(parked, ["sd-cluster-04"]))
        self.assertEqual(result["NodeNames"], [])
        time.sleep(0.3)
        self.assertEqual(self.api.pod_calls("PATCH", "parked"), [])
        self.api.delete_pod("holder")
        self.assertTrue(wait_for(lambda: self.api.pod_calls("PATCH", "parked"), timeout=5))
        patch = self.api.pod_calls("PATCH", "parked")[0][3]
        self.assertIn(REQUEUE_ANNOTATION, patch["metadata"]["annotations"])
        # And it now fits.
        host, _ = schedule(self.client, parked, ["sd-cluster-04"])
        self.assertEqual(host, "sd-cluster-04")

    def test_a_deleted_node_goes_once_its_pods_are_gone(self):
        pod = make_pod("on-doomed", 3)
        self.api.add_pod(copy.deepcopy(pod))
        host, _ = schedule(self.client, pod, ["sd-cluster-05"])
        self.assertEqual(host, "sd-cluster-05")
        self.api.delete_node("sd-cluster-05")
        time.sleep(0.3)
        # Still holding a pod: kept, cordoned, so nothing new lands there.
        self.assertIn("on-doomed", self.pods_on("sd-cluster-05"))
        status, result = self.client.post("filter", extender_args(make_pod("new", 1),
                                                                  ["sd-cluster-05"]))
        self.assertEqual(result["NodeNames"], [])
        self.api.delete_pod("on-doomed")
        self.assertTrue(wait_for(lambda: "sd-cluster-05" not in used_by_node(
            self.client.inspect())))

    def test_converges_after_a_dropped_watch_and_410(self):
        pod = make_pod("api-3", 5)
        self.api.add_pod(copy.deepcopy(pod))
        host, _ = schedule(self.client, pod, ["v100-node"])
        self.assertEqual(host, "v100-node")
        self.assertTrue(wait_for(lambda: not self.pods_on("v100-node")["api-3"]["reserved"]))
        # The watches drop and the history is compacted; meanwhile the pod
        # goes away. The extender must list again (410) and release it.
        self.api.drop_watches_and_compact()
        self.api.delete_pod("api-3")
        self.assertTrue(wait_for(lambda: "api-3" not in self.pods_on("v100-node"), timeout=15))


class HostileApiTest(unittest.TestCase):
    """Duplicate and concurrent binds, API faults and restarts, against an API
    server that answers like the real one. After each: every reply came within
    kube-scheduler's patience, no GPU is promised twice in the API, and the
    extender's inspect agrees with the API."""

    REPLY_WITHIN = 10.0  # Seconds; kube-scheduler's extender timeout is 30 s.

    def setUp(self):
        self.binary = os.environ.get("GPUSHARE_EXTENDER")
        if not self.binary:
            self.skipTest("GPUSHARE_EXTENDER is not set")
        with open(os.path.join(SAMPLES, "nodes.json")) as f:
            nodes = json.load(f)["items"]
        with open(os.path.join(SAMPLES, "pods.json")) as f:
            pods = json.load(f)["items"]
        self.api = FakeApiServer(nodes, pods)
        self.addCleanup(self.api.stop)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.proc = None
        self.addCleanup(lambda: self.proc and stop_server(self.proc))
        self.start_extender()

    def start_extender(self):
        self.proc, self.url = start_server(
            self.binary, None, None, self.tmp.name,
            extra=("--apiserver", self.api.url, "--resync-ms", "100"))

    def bind(self, client, pod, node):
        t0 = time.monotonic()
        status, reply = client.post("bind", {
            "PodName": pod["metadata"]["name"], "PodNamespace": "default",
            "PodUID": pod["metadata"]["uid"], "Node": node})
        self.assertLess(time.monotonic() - t0, self.REPLY_WITHIN)
        self.assertEqual(status, 200, reply)
        return reply

    def new_pod(self, name, units, node):
        """A pending pod, known to the API and seen by filter on `node`."""
        pod = make_pod(name, units)
        self.api.add_pod(copy.deepcopy(pod))
        client = Client(self.url)
        status, result = client.post("filter", extender_args(pod, [node]))
        client.close()
        self.assertEqual(status, 200, result)
        return pod, result["NodeNames"] == [node]

    def burst(self, pod, node, threads=8):
        """`threads` binds of one pod to one node at once; their replies."""
        replies = [None] * threads
        barrier = threading.Barrier(threads)

        def bind(i):
            client = Client(self.url)
            barrier.wait()
            try:
                replies[i] = self.bind(client, pod, node)
            except (OSError, http.client.HTTPException) as e:  # A killed extender.
                replies[i] = {"Error": "connection: %r" % e}
            finally:
                client.close()

        workers = [threading.Thread(target=bind, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        return workers, replies

    def check_no_gpu_promised_twice(self):
        capacity = self.api.gpu_capacity()
        for key, pods in self.api.bound().items():
            self.assertLessEqual(sum(u for _, u in pods), capacity[key],
                                 "GPU %s promised twice in the API: %s" % (key, pods))

    def extender_view(self):
        client = Client(self.url)
        view = client.inspect()
        client.close()
        return {(n["name"], d["id"]): sorted((p["name"], p["usedGPU"]) for p in d["pods"])
                for n in view["nodes"] for d in n["devs"] if d["pods"]}

    def check_inspect_agrees(self):
        api = {k: sorted(v) for k, v in self.api.bound().items()}
        ok = wait_for(lambda: self.extender_view() == api, timeout=5)
        self.assertTrue(ok, "inspect %s != API %s" % (self.extender_view(), api))

    def test_bursts_of_eight_binds_of_one_pod_bind_it_once(self):
        self.api.binding_delay = 0.15  # The winning Binding answers slowly.
        node = "sd-cluster-04"  # One GPU of 14 units.
        for i in range(10):
            pod, fits = self.new_pod("race-%d" % i, 14, node)
            self.assertTrue(fits)
            workers, replies = self.burst(pod, node)
            for w in workers:
                w.join()
            # The pod is bound, so every reply says so; the API saw one bind.
            self.assertEqual([r["Error"] for r in replies], [""] * 8, replies)
            self.assertEqual(self.api.calls_about(pod["metadata"]["name"]), (0, 1))
            # The GPU is full: a rival is refused and not bound.
            rival, fits = self.new_pod("rival-%d" % i, 14, node)
            self.assertFalse(fits)
            client = Client(self.url)
            self.assertNotEqual(self.bind(client, rival, node)["Error"], "")
            client.close()
            self.check_no_gpu_promised_twice()
            self.check_inspect_agrees()
            # The pod ends; the resync frees its GPU for the next burst.
            self.api.delete_pod(pod["metadata"]["name"])
            self.api.delete_pod(rival["metadata"]["name"])
            self.check_inspect_agrees()

    def test_api_faults_never_lose_or_double_a_bind(self):
        node = "v100-node"  # Four GPUs of 15 units.
        cases = [
            # (faults, whether the first reply already succeeds)
            # The API client retries what surely was not applied (a 429) and
            # idempotent calls (the GET of the pod) by itself.
            ([("BINDING", "429")], True),
            ([("BINDING", "500")], False),
            ([("BINDING", "drop")], False),
            ([("BINDING", "slow-drop")], False),
            # The Binding is applied, but the reply is lost or an error: the
            # extender reads the pod and keeps the bind.
            ([("BINDING", "500-after")], True),
            ([("BINDING", "drop-after")], True),
            ([("BINDING", "500-after"), ("GET", "500")], True),
            # A Binding whose fate is unknown and a pod not bound: forgotten,
            # and kube-scheduler's retry binds it.
            ([("BINDING", "drop"), ("GET", "drop")], False),
        ]
        client = Client(self.url)
        for i, (faults, first_ok) in enumerate(cases):
            name = "fault-%d" % i
            with self.subTest(faults=faults):
                pod, fits = self.new_pod(name, 4, node)
                self.assertTrue(fits)
                for verb, kind in faults:
                    self.api.add_fault(verb, name, kind)
                replies = []
                for _ in range(4):  # kube-scheduler retries a failed bind.
                    replies.append(self.bind(client, pod, node)["Error"])
                    if replies[-1] == "":
                        break
                self.assertEqual(replies[-1], "", replies)
                self.assertEqual(replies[0] == "", first_ok, replies)
                with self.api.lock:
                    self.assertEqual(self.api.pods[("default", name)]["spec"]["nodeName"], node)
                self.check_no_gpu_promised_twice()
                self.check_inspect_agrees()
        client.close()

    def test_a_restart_mid_burst_loses_nothing(self):
        self.api.binding_delay = 1.0
        node = "sd-cluster-04"
        pod, fits = self.new_pod("restart-0", 14, node)
        self.assertTrue(fits)
        workers, replies = self.burst(pod, node)
        # The winning Binding is applied and still answering: kill the extender.
        self.assertTrue(wait_for(lambda: self.api.bound().get((node, 0)), timeout=5))
        self.proc.kill()
        self.proc.wait()
        self.proc.stderr.close()
        self.proc = None
        for w in workers:
            w.join()
        # The new extender rebuilds from the pods' annotations; kube-scheduler's
        # retry is answered at once, without binding again.
        self.start_extender()
        client = Client(self.url)
        self.assertEqual(self.bind(client, pod, node)["Error"], "")
        self.assertEqual(self.api.calls_about("restart-0"), (0, 1))
        rival, fits = self.new_pod("rival", 14, node)
        self.assertFalse(fits)
        self.assertNotEqual(self.bind(client, rival, node)["Error"], "")
        client.close()
        self.check_no_gpu_promised_twice()
        self.check_inspect_agrees()


def load_tests(loader, standard_tests, pattern):
    """E2E_ORDER=reverse runs the tests in reverse order (they must not care)."""
    if os.environ.get("E2E_ORDER") != "reverse":
        return standard_tests
    loader.sortTestMethodsUsing = lambda a, b: (a < b) - (a > b)
    suite = unittest.TestSuite()
    for case in reversed([ExtenderE2ETest, ApiServerTest, RestartTest, HostileApiTest]):
        suite.addTests(loader.loadTestsFromTestCase(case))
    return suite


if __name__ == "__main__":
    unittest.main()
