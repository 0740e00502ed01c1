"""A real Kubernetes control plane on 127.0.0.1 for gpushare's end-to-end tests.

etcd (Debian's etcd-server), kube-apiserver and kube-scheduler (built by
build-kube.sh) and gpushare-extender, or in place of the last two
kube-scheduler with the GpuShare plugin (scheduler-plugin/build.sh;
use_plugin), each on free loopback ports, with TLS and client certificates
everywhere: a throwaway CA made with `openssl`, an admin in system:masters for
the tests, kube-scheduler as system:kube-scheduler, and the extender as user
`gpushare-extender` with a least-privilege ClusterRole. No kubelet and no
kube-controller-manager: the tests create Nodes (with their status) through
the API and delete pods with grace period 0.

Everything started is stopped by ControlPlane.stop(), also after a failure;
each component logs to <workdir>/logs/<name>.log. Every wait has a deadline.
Standard library only.
"""

import base64
import http.client
import http.server
import json
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
import urllib.request

GPU_MEM = "aliyun.com/gpu-mem"
GPU_COUNT = "aliyun.com/gpu-count"
WHOLE_GPU = "nvidia.com/gpu"
NAMESPACE = "default"
# kube-controller-manager's controllers with `controllers=True`: only those
# that make workloads' pods and their service account tokens, and release
# DRA claims, so that no node lifecycle controller taints or evicts while a
# test restarts a kubelet.
CONTROLLERS = ("serviceaccount-controller", "root-ca-certificate-publisher-controller",
               "deployment-controller", "replicaset-controller", "daemonset-controller",
               "garbage-collector-controller", "resourceclaim-controller")

# Deadlines (seconds).
START_TIMEOUT = 60
STOP_TIMEOUT = 10
REQUEST_TIMEOUT = 30


class HarnessError(Exception):
    pass


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, predicate, timeout, interval=0.1):
    """Calls predicate() until it returns a true value (returned) or timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = predicate()
        except (OSError, http.client.HTTPException, ApiError) as e:
            last = None
            error = e
        else:
            error = None
        if last:
            return last
        if time.monotonic() >= deadline:
            raise HarnessError(f"timed out after {timeout}s waiting for {what}"
                               + (f" (last error: {error})" if error else ""))
        time.sleep(interval)


# ---------------------------------------------------------------- certificates

def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, timeout=60,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Pki:
    """A CA and the certificates of one test cluster, in `directory`."""

    def __init__(self, directory):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.ca_crt = self.path("ca.crt")
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
                 "-out", "ca.crt", "-days", "2", "-subj", "/CN=gpushare-e2e-ca", cwd=directory)

    def path(self, name):
        return os.path.join(self.dir, name)

    def issue(self, name, subject, server=False, client=False):
        """Signs an EC P-256 key for `subject`; returns (cert path, key path)."""
        usages = []
        lines = ["basicConstraints=critical,CA:FALSE",
                 "keyUsage=critical,digitalSignature,keyEncipherment"]
        if server:
            usages.append("serverAuth")
            lines.append("subjectAltName=IP:127.0.0.1,DNS:localhost")
        if client:
            usages.append("clientAuth")
        lines.append("extendedKeyUsage=" + ",".join(usages))
        with open(self.path(name + ".ext"), "w") as f:
            f.write("\n".join(lines) + "\n")
        _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                 "-nodes", "-keyout", name + ".key", "-out", name + ".csr", "-subj", subject,
                 cwd=self.dir)
        _openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", name + ".crt", "-days", "2",
                 "-extfile", name + ".ext", cwd=self.dir)
        return self.path(name + ".crt"), self.path(name + ".key")

    def rsa_key(self, name):
        _openssl("genrsa", "-out", name + ".key", "2048", cwd=self.dir)
        _openssl("rsa", "-in", name + ".key", "-pubout", "-out", name + ".pub", cwd=self.dir)
        return self.path(name + ".key"), self.path(name + ".pub")


def write_kubeconfig(path, server, ca, cert, key, user):
    """A kubeconfig in the form kubeadm writes (certificates embedded)."""
    def b64(p):
        with open(p, "rb") as f:
            return base64.b64encode(f.read()).decode()
    text = f"""apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: {b64(ca)}
    server: {server}
  name: e2e
contexts:
- context:
    cluster: e2e
    user: {user}
  name: {user}@e2e
current-context: {user}@e2e
preferences: {{}}
users:
- name: {user}
  user:
    client-certificate-data: {b64(cert)}
    client-key-data: {b64(key)}
"""
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
    return path


# ---------------------------------------------------------------- API client

class ApiError(Exception):
    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


class Api:
    """A JSON client of kube-apiserver with a client certificate, or a bearer
    `token` (one keep-alive connection per thread)."""

    def __init__(self, host, port, ca, cert=None, key=None, token=None):
        self.host, self.port = host, port
        self.context = ssl.create_default_context(cafile=ca)
        if cert:
            self.context.load_cert_chain(cert, key)
        self.token = token
        self.local = threading.local()

    def _connection(self):
        c = getattr(self.local, "conn", None)
        if c is None:
            c = http.client.HTTPSConnection(self.host, self.port, context=self.context,
                                            timeout=REQUEST_TIMEOUT)
            self.local.conn = c
        return c

    def request(self, method, path, body=None, content_type="application/json", ok=(200, 201)):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in range(2):
            c = self._connection()
            try:
                c.request(method, path, body=data, headers=headers)
                r = c.getresponse()
                text = r.read().decode()
                break
            except (OSError, http.client.HTTPException):
                c.close()
                self.local.conn = None
                if attempt == 1:
                    raise
        if r.status not in ok:
            raise ApiError(r.status, text)
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return text  # /readyz and friends answer plain text.

    def get(self, path, **params):
        if params:
            path += "?" + urllib.parse.urlencode(params)
        return self.request("GET", path)

    # Objects.
    def create_node(self, name, gpus, gpu_memory, labels=None, cpu="64", memory="256Gi",
                    extra_capacity=None):
        """A Node with `gpus` GPUs of `gpu_memory` units each, Ready, labelled
        gpushare=true; its status is kept on create (no kubelet here)."""
        capacity = {"cpu": cpu, "memory": memory, "pods": "110",
                    GPU_MEM: str(gpus * gpu_memory), GPU_COUNT: str(gpus), WHOLE_GPU: str(gpus)}
        capacity.update(extra_capacity or {})
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        node = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"gpushare": "true",
                                                  "kubernetes.io/hostname": name,
                                                  **(labels or {})}},
            "spec": {},
            "status": {
                "capacity": capacity, "allocatable": dict(capacity),
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "hand-made node of the e2e tests",
                                "lastHeartbeatTime": now, "lastTransitionTime": now}],
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            },
        }
        return self.request("POST", "/api/v1/nodes", node)

    def delete_node(self, name):
        self.request("DELETE", f"/api/v1/nodes/{name}", ok=(200, 202, 404))

    def create_priority_class(self, name, value):
        """A PriorityClass (kept between tests: cluster-scoped, idempotent)."""
        self.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", {
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value}, ok=(200, 201, 409))

    def create_pod(self, name, gpu_memory=None, gpu_count=None, whole_gpus=None,
                   namespace=NAMESPACE, labels=None, priority_class=None, grace_seconds=0,
                   node_name=None):
        """A pod as users write it: limits aliyun.com/gpu-mem, the label
        aliyun.com/gpu-count for multi-card, limits nvidia.com/gpu for whole GPUs.
        With no kubelet, a pod with grace_seconds > 0 that is deleted stays
        Terminating until delete_pod() (what its kubelet would confirm).
        node_name binds it at creation, past every scheduler."""
        limits = {}
        if gpu_memory is not None:
            limits[GPU_MEM] = str(gpu_memory)
        if whole_gpus is not None:
            limits[WHOLE_GPU] = str(whole_gpus)
        pod_labels = {"app": "gpushare-e2e", **(labels or {})}
        if gpu_count is not None:
            pod_labels[GPU_COUNT] = str(gpu_count)
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": pod_labels},
            "spec": {
                "containers": [{"name": "main", "image": "registry.invalid/e2e:never-pulled",
                                "resources": {"limits": limits}}],
                "terminationGracePeriodSeconds": grace_seconds,
            },
        }
        if priority_class:
            pod["spec"]["priorityClassName"] = priority_class
        if node_name:
            pod["spec"]["nodeName"] = node_name
        return self.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)

    def pod(self, name, namespace=NAMESPACE):
        return self.get(f"/api/v1/namespaces/{namespace}/pods/{name}")

    def pods(self, namespace=NAMESPACE):
        return self.get(f"/api/v1/namespaces/{namespace}/pods")["items"]

    def delete_pod(self, name, namespace=NAMESPACE):
        """Force delete: with no kubelet, a graceful delete never completes."""
        self.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}",
                     {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
                     ok=(200, 202, 404))

    def nodes(self):
        return self.get("/api/v1/nodes")["items"]

    def events_for(self, pod_name, namespace=NAMESPACE):
        return self.get(f"/api/v1/namespaces/{namespace}/events",
                        fieldSelector=f"involvedObject.name={pod_name}")["items"]

    def wait_bound(self, name, timeout=30):
        return wait_until(f"pod {name} bound",
                          lambda: self.pod(name)["spec"].get("nodeName"), timeout)


# ---------------------------------------------------------------- processes

class Process:
    def __init__(self, name, argv, log_path, env=None):
        self.name, self.argv, self.log_path = name, argv, log_path
        self.log = open(log_path, "ab")
        self.log.write(("$ " + " ".join(argv) + "\n").encode())
        self.log.flush()
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True,
                                     env=env)

    def alive(self):
        return self.proc.poll() is None

    def check_alive(self):
        if not self.alive():
            raise HarnessError(f"{self.name} exited with {self.proc.returncode}; "
                               f"log: {self.log_path}\n{tail(self.log_path)}")
        return True

    def stop(self, sig=signal.SIGTERM):
        if self.alive():
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=STOP_TIMEOUT)
        self.log.close()

    def kill(self):
        """SIGKILL, as a crash."""
        self.stop(signal.SIGKILL)


def tail(path, lines=60):
    try:
        with open(path, "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


# ---------------------------------------------------------------- the control plane

EXTENDER_RBAC = [
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
     "metadata": {"name": "gpushare-e2e-extender"},
     "rules": [
         {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
         {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
         {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
         {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
     ]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
     "metadata": {"name": "gpushare-e2e-extender"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                 "name": "gpushare-e2e-extender"},
     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                   "name": "gpushare-extender"}]},
    # Reviews of bearer tokens for /metrics (deploy/base/rbac.yaml binds
    # the same built-in ClusterRole).
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
     "metadata": {"name": "gpushare-e2e-extender-auth-delegator"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                 "name": "system:auth-delegator"},
     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                   "name": "gpushare-extender"}]},
    # Leader election (the rules of deploy/base/rbac.yaml's Role).
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
     "metadata": {"name": "gpushare-e2e-leader-election", "namespace": "kube-system"},
     "rules": [
         {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
         {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
          "resourceNames": ["gpushare-extender"], "verbs": ["get", "update"]},
     ]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
     "metadata": {"name": "gpushare-e2e-leader-election", "namespace": "kube-system"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                 "name": "gpushare-e2e-leader-election"},
     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                   "name": "gpushare-extender"}]},
]

LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/gpushare-extender"


class TcpBalancer:
    """What a Service does for kube-scheduler's calls to the extender
    replicas: each new TCP connection goes to the next backend that accepts
    it (round robin), bytes are copied both ways (TLS passes through)."""

    def __init__(self, backends):
        self.backends = list(backends)   # [(host, port)]
        self.next = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.closed = False
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client):
        upstream = None
        for i in range(len(self.backends)):
            backend = self.backends[(self.next + i) % len(self.backends)]
            try:
                upstream = socket.create_connection(backend, timeout=2)
                upstream.settimeout(None)
                self.next = (self.next + i + 1) % len(self.backends)
                break
            except OSError:
                upstream = None
        if upstream is None:
            client.close()
            return
        self.connections += 1

        def pump(src, dst):
            try:
                while True:
                    data = src.recv(65536)
                    if not data:
                        break
                    dst.sendall(data)
            except OSError:
                pass
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        t = threading.Thread(target=pump, args=(upstream, client), daemon=True)
        t.start()
        pump(client, upstream)
        t.join()
        client.close()
        upstream.close()

    def stop(self):
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass


class Processes:
    """Named processes of a harness, each logging to <self.logs>/<name>.log;
    starting a name again stops the one running under it first. The class
    using it keeps `procs` (name -> Process) and `logs`."""

    def _start(self, name, argv, env=None):
        old = self.procs.pop(name, None)
        if old:
            old.stop()
        p = Process(name, argv, os.path.join(self.logs, name + ".log"), env=env)
        self.procs[name] = p
        return p


def user_cluster_role(name, user, rules):
    """A ClusterRole `name` of `rules` and its binding to the User `user`
    (a client certificate's CN), for ControlPlane.create_rbac."""
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": name}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": name},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]},
    ]


class ControlPlane(Processes):
    """etcd + kube-apiserver (started by start()), then kube-scheduler and the
    extender, which each test may start and stop (start_scheduler,
    start_extender)."""

    def __init__(self, kube_bin, extender_bin, workdir, extender_tls=True,
                 apiserver_args=(), controllers=False):
        """`apiserver_args` are appended to kube-apiserver's command line
        (tests/node/ adds what a kubelet needs). With `controllers`, start()
        also runs kube-controller-manager with the controllers that turn
        Deployments and DaemonSets into pods and give pods service account
        tokens (CONTROLLERS), and the API server admits pods through the
        ServiceAccount plugin (tests/install/ runs the chart's pods).
        `controllers` may instead name the controllers to run (a tuple, e.g.
        ("resourceclaim-controller",) for DRA's claims): then the pods'
        admission is as without controllers."""
        self.kube_bin, self.extender_bin, self.workdir = kube_bin, extender_bin, workdir
        self.extender_tls = extender_tls
        self.controllers = controllers
        self.apiserver_args = tuple(apiserver_args)
        self.logs = os.path.join(workdir, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.procs = {}
        self.api = None
        self.extender_port = None
        self.scheduler_port = None
        self.balancer = None
        self.replicas = {}   # name -> port
        # (binary, KubeSchedulerConfiguration path) of kube-scheduler with the
        # GpuShare plugin, once use_plugin() is called.
        self.plugin = None

    def start(self):
        try:
            self._start_pki()
            self._start_etcd()
            self._start_apiserver()
            self.create_rbac(EXTENDER_RBAC)
            if self.controllers:
                self._start_controller_manager()
        except BaseException:
            self.stop()
            raise
        return self

    def create_rbac(self, objects):
        """Creates RBAC objects (Role, ClusterRole and their bindings) given as dicts."""
        for obj in objects:
            kind = obj["kind"].lower() + "s"
            ns = obj["metadata"].get("namespace")
            where = f"namespaces/{ns}/{kind}" if ns else kind
            self.api.request("POST", f"/apis/rbac.authorization.k8s.io/v1/{where}", obj)

    def service_account_token(self, name, cluster_role=None, namespace=NAMESPACE):
        """A token (TokenRequest, 10 minutes) of the ServiceAccount `name`,
        created if missing and, when `cluster_role` names one, bound to that
        ClusterRole (existing objects are kept: tests may share a cluster)."""
        self.api.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                         {"apiVersion": "v1", "kind": "ServiceAccount",
                          "metadata": {"name": name, "namespace": namespace}}, ok=(201, 409))
        if cluster_role:
            self.api.request(
                "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                 "metadata": {"name": f"e2e-{namespace}-{name}-{cluster_role}"},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                             "name": cluster_role},
                 "subjects": [{"kind": "ServiceAccount", "name": name,
                               "namespace": namespace}]}, ok=(201, 409))
        r = self.api.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                             {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                              "spec": {"expirationSeconds": 600}})
        return r["status"]["token"]

    def _start_pki(self):
        pki = self.pki = Pki(os.path.join(self.workdir, "pki"))
        self.etcd_server = pki.issue("etcd", "/CN=etcd", server=True, client=True)
        self.etcd_client = pki.issue("apiserver-etcd", "/CN=kube-apiserver-etcd-client",
                                     client=True)
        self.apiserver_cert = pki.issue("apiserver", "/CN=kube-apiserver", server=True)
        self.admin = pki.issue("admin", "/O=system:masters/CN=e2e-admin", client=True)
        self.scheduler_client = pki.issue("scheduler", "/CN=system:kube-scheduler", client=True)
        self.scheduler_serving = pki.issue("scheduler-serving", "/CN=kube-scheduler",
                                           server=True)
        self.extender_client = pki.issue("extender", "/CN=gpushare-extender", client=True)
        # Serving, and presented by a follower forwarding a bind to the leader,
        # whose listener verifies client certificates.
        self.extender_serving = pki.issue("extender-serving", "/CN=gpushare-extender",
                                          server=True, client=True)
        self.sa_key, self.sa_pub = pki.rsa_key("service-account")

    def _start_etcd(self):
        client, peer = free_port(), free_port()
        self.etcd_url = f"https://127.0.0.1:{client}"
        cert, key = self.etcd_server
        p = self._start("etcd", [
            "etcd", "--name", "e2e", "--data-dir", os.path.join(self.workdir, "etcd"),
            "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"e2e=http://127.0.0.1:{peer}",
            "--cert-file", cert, "--key-file", key, "--client-cert-auth",
            "--trusted-ca-file", self.pki.ca_crt,
            "--listen-metrics-urls", f"http://127.0.0.1:{free_port()}",
            "--logger", "zap", "--log-level", "warn", "--unsafe-no-fsync"])
        ctx = ssl.create_default_context(cafile=self.pki.ca_crt)
        ctx.load_cert_chain(*self.etcd_client)

        def healthy():
            p.check_alive()
            c = http.client.HTTPSConnection("127.0.0.1", client, context=ctx, timeout=5)
            try:
                c.request("GET", "/health")
                return b'"true"' in c.getresponse().read()
            finally:
                c.close()
        wait_until("etcd healthy", healthy, START_TIMEOUT, 0.2)

    def _start_apiserver(self):
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        cert, key = self.apiserver_cert
        ecert, ekey = self.etcd_client
        p = self._start("kube-apiserver", [
            os.path.join(self.kube_bin, "kube-apiserver"),
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            # Since 1.37 the `kubernetes` Service's endpoints may not name a
            # loopback address; nothing here routes to that Service anyway.
            "--endpoint-reconciler-type=none",
            f"--secure-port={port}",
            f"--etcd-servers={self.etcd_url}", f"--etcd-cafile={self.pki.ca_crt}",
            f"--etcd-certfile={ecert}", f"--etcd-keyfile={ekey}",
            f"--tls-cert-file={cert}", f"--tls-private-key-file={key}",
            f"--client-ca-file={self.pki.ca_crt}",
            "--authorization-mode=Node,RBAC", "--anonymous-auth=false",
            f"--service-account-key-file={self.sa_pub}",
            f"--service-account-signing-key-file={self.sa_key}",
            f"--service-account-issuer=https://127.0.0.1:{port}",
            "--service-cluster-ip-range=10.96.0.0/24",
            # Without kube-controller-manager the `default` ServiceAccount never
            # appears, and nothing removes the not-ready taint of a new Node.
            "--disable-admission-plugins=" +
            ("TaintNodesByCondition" if self.controllers is True
             else "ServiceAccount,TaintNodesByCondition"),
            "--profiling=false", "--v=1", *self.apiserver_args])
        self.api = Api("127.0.0.1", port, self.pki.ca_crt, *self.admin)
        self.admin_kubeconfig = write_kubeconfig(
            os.path.join(self.workdir, "admin.kubeconfig"), self.server, self.pki.ca_crt,
            *self.admin, "e2e-admin")
        self.scheduler_kubeconfig = write_kubeconfig(
            os.path.join(self.workdir, "scheduler.kubeconfig"), self.server, self.pki.ca_crt,
            *self.scheduler_client, "system:kube-scheduler")
        self.extender_kubeconfig = write_kubeconfig(
            os.path.join(self.workdir, "extender.kubeconfig"), self.server, self.pki.ca_crt,
            *self.extender_client, "gpushare-extender")

        def ready():
            p.check_alive()
            try:
                self.api.request("GET", "/readyz")
            except ApiError:
                return False
            # The bootstrap RBAC of kube-scheduler must be in place too.
            self.api.get("/apis/rbac.authorization.k8s.io/v1/clusterroles/system:kube-scheduler")
            self.api.get(f"/api/v1/namespaces/{NAMESPACE}")
            return True
        wait_until("kube-apiserver ready", ready, START_TIMEOUT * 2, 0.25)

    def _start_controller_manager(self):
        kcm = os.path.join(self.kube_bin, "kube-controller-manager")
        if not os.access(kcm, os.X_OK):
            raise HarnessError(f"{kcm} is missing (tests/kube/build-kube.sh kube-controller-manager)")
        names = CONTROLLERS if self.controllers is True else tuple(self.controllers)
        port = free_port()
        p = self._start("kube-controller-manager", [
            kcm, f"--kubeconfig={self.admin_kubeconfig}", "--leader-elect=false",
            "--controllers=" + ",".join(names), f"--root-ca-file={self.pki.ca_crt}",
            f"--service-account-private-key-file={self.sa_key}",
            "--bind-address=127.0.0.1", f"--secure-port={port}", "--v=1"])
        if self.controllers is not True:
            def healthy():
                p.check_alive()
                ctx = ssl._create_unverified_context()  # Its own self-signed certificate.
                try:
                    with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz",
                                                timeout=2, context=ctx) as r:
                        return r.status == 200
                except OSError:
                    return False
            wait_until("kube-controller-manager healthy", healthy, START_TIMEOUT, 0.25)
            return

        def ready():  # The ServiceAccount admission plugin needs `default`'s.
            p.check_alive()
            try:
                self.api.get(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default")
                self.api.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps/kube-root-ca.crt")
                self.api.get("/api/v1/namespaces/kube-system/serviceaccounts/default")
                return True
            except ApiError as e:
                if e.status == 404:
                    return False
                raise
        wait_until("kube-controller-manager's service accounts", ready, START_TIMEOUT, 0.25)

    # -- the extender ---------------------------------------------------------

    def start_extender(self, restart=False, policy="binpack", extra_args=()):
        """Starts gpushare-extender against the API server; returns its URL prefix.
        `extra_args` are appended to its command line."""
        name = "gpushare-extender"
        if restart and name in self.procs:
            self.procs[name].stop()
        port_file = os.path.join(self.workdir, "extender.port")
        if os.path.exists(port_file):
            os.remove(port_file)
        # The first start picks a free port; a restart keeps it, as kube-scheduler's
        # configuration names it.
        port = self.extender_port or 0
        argv = [self.extender_bin, "--kubeconfig", self.extender_kubeconfig,
                "--address", "127.0.0.1", "--policy", policy,
                "--access-log", os.path.join(self.logs, "extender-access.log"), *extra_args]
        if self.extender_tls:
            # Only clients with a certificate of the cluster's CA are served:
            # kube-scheduler (its tlsConfig), the other replicas, the tests.
            argv += ["--tls-cert-file", self.extender_serving[0],
                     "--tls-private-key-file", self.extender_serving[1],
                     "--client-ca-file", self.pki.ca_crt]
        self.extender_scheme = "https" if self.extender_tls else "http"
        argv += ["--port", str(port), "--port-file", port_file]
        p = self._start(name, argv)
        got = wait_until("extender port file",
                         lambda: p.check_alive() and os.path.exists(port_file)
                         and open(port_file).read().strip(), START_TIMEOUT, 0.05)
        self.extender_port = int(got)
        return self.extender_url()

    def start_go_original(self, binary):
        """AliyunContainerService/gpushare-scheduler-extender (built from its
        source; bench/kube_compare.py compares against it) in place of
        gpushare-extender: plain HTTP on a free port, configured as it is
        (environment only), with the admin identity, as its RBAC is not what
        is measured. start_scheduler(with_extender=True) then calls it."""
        port = free_port()
        env = dict(os.environ, KUBECONFIG=self.admin_kubeconfig, PORT=str(port),
                   LOG_LEVEL="warn")
        p = self._start("gpushare-sche-extender", [binary], env=env)
        self.extender_port, self.extender_scheme = port, "http"

        def serving():
            p.check_alive()
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                c.request("GET", "/version")
                return c.getresponse().status == 200
            except OSError:
                return False
            finally:
                c.close()
        wait_until("the Go original extender serving", serving, START_TIMEOUT, 0.1)
        return self.extender_url()

    def start_replicas(self, names=("replica-a", "replica-b"), extra_args=()):
        """Extender replicas with leader election behind a TcpBalancer, which
        kube-scheduler's configuration names. Returns {name: port}."""
        assert self.extender_tls
        self.replicas = {name: free_port() for name in names}
        self.balancer = TcpBalancer([("127.0.0.1", p) for p in self.replicas.values()])
        self.extender_port = self.balancer.port
        self.extender_scheme = "https"
        for name in names:
            self.start_replica(name, extra_args)
        return dict(self.replicas)

    def start_replica(self, name, extra_args=()):
        port = self.replicas[name]
        url = f"https://127.0.0.1:{port}"
        argv = [self.extender_bin, "--kubeconfig", self.extender_kubeconfig,
                "--address", "127.0.0.1", "--port", str(port), "--policy", "binpack",
                "--tls-cert-file", self.extender_serving[0],
                "--tls-private-key-file", self.extender_serving[1],
                "--client-ca-file", self.pki.ca_crt,
                "--leader-elect", "true", "--leader-elect-namespace", "kube-system",
                "--leader-elect-identity", name, "--leader-elect-url", url,
                "--leader-forward-ca", self.pki.ca_crt, *extra_args]
        p = self._start(name, argv)
        wait_until(f"{name} ready", lambda: p.check_alive() and
                   self.extender_get(port, "/readyz")[0] == 200, START_TIMEOUT, 0.1)
        return p

    def extender_get(self, port, path):
        """(status, body) of GET path on an extender replica."""
        return self.extender_request(port, "GET", path)

    def extender_request(self, port, method, path, body=None, client_cert=True, token=None):
        """(status, body) of a request (body: an object sent as JSON) to an
        extender replica, presenting the admin's client certificate unless
        `client_cert` is false, and `token` as a bearer token when given."""
        ctx = ssl.create_default_context(cafile=self.pki.ca_crt)
        if client_cert:
            ctx.load_cert_chain(*self.admin)
        c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=REQUEST_TIMEOUT)
        try:
            data = None if body is None else json.dumps(body)
            headers = {} if body is None else {"Content-Type": "application/json"}
            if token is not None:
                headers["Authorization"] = "Bearer " + token
            c.request(method, path, body=data, headers=headers)
            r = c.getresponse()
            return r.status, r.read().decode()
        finally:
            c.close()

    def lease(self):
        try:
            return self.api.get(LEASE_PATH)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def extender_url(self):
        return f"{self.extender_scheme}://127.0.0.1:{self.extender_port}/gpushare-scheduler"

    def kill_extender(self):
        p = self.procs.get("gpushare-extender")
        if p:
            p.kill()

    # -- gpushare: the extender, or the GpuShare plugin in kube-scheduler ------

    def use_plugin(self, binary, config):
        """From now on start_gpushare() runs gpushare as the GpuShare plugin:
        kube-scheduler `binary` (scheduler-plugin/build.sh) with the profiles
        of the KubeSchedulerConfiguration file `config` (a profile named
        default-scheduler, so that pods need no schedulerName), and no
        extender. kube-scheduler's identity needs the plugin's RBAC
        (deploy/scheduler-plugin/rbac.yaml)."""
        self.plugin = (binary, config)

    def start_gpushare(self, qps=200, burst=400):
        """gpushare-extender and kube-scheduler calling it, or (use_plugin)
        kube-scheduler with the GpuShare plugin; kube-scheduler's client
        rate limit is `qps`, `burst` (its own defaults: 50, 100)."""
        if self.plugin:
            self.start_plugin_scheduler(qps=qps, burst=burst)
        else:
            self.start_extender()
            self.start_scheduler(with_extender=True, qps=qps, burst=burst)

    def start_plugin_scheduler(self, qps=200, burst=400):
        binary, config = self.plugin
        self.start_scheduler(with_extender=False, binary=binary, plugin_config=config, qps=qps,
                             burst=burst)

    def kill_gpushare(self):
        """SIGKILL of what holds gpushare's state: the extender, or
        kube-scheduler with the plugin."""
        if self.plugin:
            self.kill_scheduler()
        else:
            self.kill_extender()

    def restart_gpushare(self):
        """Starts again what kill_gpushare() killed: the extender on its port
        (kube-scheduler's configuration names it), or kube-scheduler with
        the plugin, which lists the cluster again."""
        if self.plugin:
            self.start_plugin_scheduler()
        else:
            self.start_extender()

    # -- kube-scheduler -------------------------------------------------------

    def start_scheduler(self, with_extender=True, node_cache_capable=False, binary=None,
                        plugin_config=None, qps=200, burst=400, extender_overrides=None):
        """Starts kube-scheduler: the one of kube_bin, or `binary` (a
        kube-scheduler built with out-of-tree plugins), calling the extender
        when `with_extender`. `plugin_config`, when given, is a path to a
        KubeSchedulerConfiguration whose "profiles" (and "extenders", if
        any) are used as they are; this harness sets the connection, the
        client's `qps` and `burst`, and leader election.
        `extender_overrides` replaces fields of the extender's entry (a value
        of None removes the field)."""
        config = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": self.scheduler_kubeconfig,
                                 "qps": qps, "burst": burst},
            "leaderElection": {"leaderElect": False},
        }
        if plugin_config:
            with open(plugin_config) as f:
                given = yaml_or_json(f.read())
            for key in ("profiles", "extenders", "percentageOfNodesToScore"):
                if key in given:
                    config[key] = given[key]
        if with_extender:
            ext = {
                "urlPrefix": self.extender_url(),
                "filterVerb": "filter", "prioritizeVerb": "prioritize", "bindVerb": "bind",
                # Extender scores are 0..10, scaled by weight x 10 against the
                # plugins' 0..100: weight 10 lets binpack decide among nodes
                # that kube-scheduler's own scores leave close.
                "weight": 10,
                # False: every call carries the full Node objects, so the
                # extender needs no node cache of its own.
                "nodeCacheCapable": node_cache_capable,
                "httpTimeout": "10s",
                "ignorable": False,
                "managedResources": [
                    # kube-scheduler's node-total check of gpu-mem is a true
                    # necessary condition: keep it (cheap pre-filter).
                    {"name": GPU_MEM, "ignoredByScheduler": False},
                    # Whole GPUs: only the extender knows which GPUs are idle.
                    {"name": WHOLE_GPU, "ignoredByScheduler": True},
                ],
            }
            if self.extender_scheme == "https":
                ext["enableHTTPS"] = True
                # kube-scheduler presents its client certificate to the
                # extender, which serves only certificates of this CA.
                ext["tlsConfig"] = {"caFile": self.pki.ca_crt,
                                    "certFile": self.scheduler_client[0],
                                    "keyFile": self.scheduler_client[1]}
            for key, value in (extender_overrides or {}).items():
                if value is None:
                    ext.pop(key, None)
                else:
                    ext[key] = value
            config["extenders"] = [ext]
        path = os.path.join(self.workdir, "scheduler-config.json")
        with open(path, "w") as f:
            json.dump(config, f, indent=1)
        self.scheduler_port = free_port()
        kc = self.scheduler_kubeconfig
        p = self._start("kube-scheduler", [
            binary or os.path.join(self.kube_bin, "kube-scheduler"), f"--config={path}",
            "--bind-address=127.0.0.1", f"--secure-port={self.scheduler_port}",
            f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            f"--client-ca-file={self.pki.ca_crt}",
            f"--tls-cert-file={self.scheduler_serving[0]}",
            f"--tls-private-key-file={self.scheduler_serving[1]}", "--v=2"])
        ctx = ssl.create_default_context(cafile=self.pki.ca_crt)

        def healthy():
            p.check_alive()
            c = http.client.HTTPSConnection("127.0.0.1", self.scheduler_port, context=ctx,
                                            timeout=5)
            try:
                c.request("GET", "/readyz")
                return c.getresponse().status == 200
            finally:
                c.close()
        wait_until("kube-scheduler ready", healthy, START_TIMEOUT, 0.2)

    def stop_scheduler(self):
        p = self.procs.pop("kube-scheduler", None)
        if p:
            p.stop()

    def kill_scheduler(self):
        """SIGKILL of kube-scheduler, as a crash; start_scheduler() starts it again."""
        p = self.procs.get("kube-scheduler")
        if p:
            p.kill()

    def scheduler_metrics(self):
        """kube-scheduler's /metrics, fetched as the admin (delegated authn/authz)."""
        ctx = ssl.create_default_context(cafile=self.pki.ca_crt)
        ctx.load_cert_chain(*self.admin)
        c = http.client.HTTPSConnection("127.0.0.1", self.scheduler_port, context=ctx,
                                        timeout=REQUEST_TIMEOUT)
        try:
            c.request("GET", "/metrics")
            r = c.getresponse()
            body = r.read().decode()
            if r.status != 200:
                raise HarnessError(f"/metrics: HTTP {r.status}: {body[:300]}")
            return body
        finally:
            c.close()

    # -- state between tests ----------------------------------------------------

    def wait_admission_policies_gone(self, timeout=30):
        """After deploy/admission's policies were deleted: waits until the API
        server no longer enforces them (its admission informers follow the
        deletion a moment later), probing with a pod that carries a gpushare
        annotation."""
        probe = {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": "admission-probe",
                              "annotations": {"ALIYUN_COM_GPU_MEM_IDX": "0"}},
                 "spec": {"containers": [{"name": "main",
                                          "image": "registry.invalid/e2e:never-pulled"}],
                          "terminationGracePeriodSeconds": 0}}

        def gone():
            try:
                self.api.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", probe)
            except ApiError as e:
                if e.status in (403, 422) and "gpushare" in e.body:
                    return False
                raise
            self.api.delete_pod("admission-probe")
            return True
        wait_until("gpushare's admission policies no longer enforced", gone, timeout, 0.2)

    def reset(self):
        """Stops kube-scheduler and the extender, deletes every pod, node and event."""
        self.stop_clients()
        self.extender_port = None
        self.api.request("DELETE", LEASE_PATH, ok=(200, 202, 404))
        for pod in self.api.pods():
            self.api.delete_pod(pod["metadata"]["name"])
        for node in self.api.nodes():
            self.api.delete_node(node["metadata"]["name"])
        self.api.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/events", ok=(200,))
        wait_until("pods and nodes gone",
                   lambda: not self.api.pods() and not self.api.nodes(), 30, 0.2)

    def stop_clients(self):
        """Stops kube-scheduler, the extender and its replicas (not etcd or
        the API server)."""
        for name in list(self.procs):
            if name not in ("etcd", "kube-apiserver"):
                self.procs.pop(name).stop()
        if self.balancer:
            self.balancer.stop()
            self.balancer = None
        self.replicas = {}

    def log_tails(self, lines=80):
        out = []
        for name in sorted(os.listdir(self.logs)):
            out.append(f"----- {name} (last {lines} lines) -----")
            out.append(tail(os.path.join(self.logs, name), lines))
        return "\n".join(out)

    def stop(self):
        # Reverse start order: clients first, etcd last.
        for name in reversed(list(self.procs)):
            try:
                self.procs[name].stop()
            except Exception:  # Keep stopping the others.
                pass
        self.procs.clear()


# ---------------------------------------------------------------- allocation views

class SlowBindWebhook:
    """A validating admission webhook on pods/binding that answers "allowed"
    after `delay` seconds for pods whose name starts with `prefix`, at once
    for the others: a slow bind, as a slow webhook, an overloaded API server
    or a rate-limited client make one, with the real kube-apiserver and
    kube-scheduler. Registered on `cp` (failurePolicy Ignore) until close()."""

    NAME = "gpushare-e2e-slow-bind"

    def __init__(self, cp, prefix, delay):
        self.cp, self.prefix, self.delay = cp, prefix, delay
        self.seen = []
        cert, key = cp.pki.issue("slow-bind-webhook", "/CN=slow-bind-webhook", server=True)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        hook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                request = review["request"]
                hook.seen.append(request.get("name", ""))
                if request.get("name", "").startswith(hook.prefix):
                    time.sleep(hook.delay)
                body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                   "response": {"uid": request["uid"], "allowed": True}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        with open(cp.pki.ca_crt, "rb") as f:
            ca = base64.b64encode(f.read()).decode()
        cp.api.request("POST", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": self.NAME},
            "webhooks": [{
                "name": "slow-bind.gpushare.io",
                "clientConfig": {"url": f"https://127.0.0.1:{self.server.server_address[1]}/",
                                 "caBundle": ca},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                           "resources": ["pods/binding"]}],
                "sideEffects": "None", "admissionReviewVersions": ["v1"],
                "timeoutSeconds": min(30, int(delay) + 5), "failurePolicy": "Ignore"}]})

    def wait_active(self, api, timeout=20):
        """Binds probe pods (no GPU) until the API server calls the webhook."""
        deadline = time.monotonic() + timeout
        for i in range(1000):
            name = f"webhook-probe-{i}"
            api.create_pod(name)
            api.wait_bound(name, 30)
            if name in self.seen:
                return
            assert time.monotonic() < deadline, "the slow-bind webhook is never called"
            time.sleep(0.5)

    def close(self):
        try:
            self.cp.api.request("DELETE", "/apis/admissionregistration.k8s.io/v1/"
                                f"validatingwebhookconfigurations/{self.NAME}", ok=(200, 404))
        finally:
            self.server.shutdown()


def gpu_allocation(pod):
    """{gpu index: units} that the bind annotations give this pod, or None."""
    ann = pod["metadata"].get("annotations") or {}
    alloc = ann.get("scheduler.framework.gpushare.allocation")
    if alloc:
        per_container = json.loads(alloc)
        total = {}
        for gpus in per_container.values():
            for g, units in gpus.items():
                total[int(g)] = total.get(int(g), 0) + int(units)
        return total
    idx = ann.get("ALIYUN_COM_GPU_MEM_IDX")
    if idx is None:
        return None
    gpus = [int(g) for g in idx.replace(",", "-").split("-")]
    pod_units = int(ann["ALIYUN_COM_GPU_MEM_POD"])
    return {g: pod_units // len(gpus) for g in gpus}


def yaml_or_json(text):
    """A configuration file's object: JSON, else YAML (PyYAML)."""
    try:
        return json.loads(text)
    except ValueError:
        import yaml  # Only plugin configurations are YAML.
        return yaml.safe_load(text)


def node_gpus(node):
    """(GPU count, units per GPU) from a Node's capacity."""
    cap = node["status"]["capacity"]
    count = int(cap.get(GPU_COUNT, cap.get(WHOLE_GPU, "0")))
    memory = int(cap.get(GPU_MEM, "0"))
    return count, (memory // count if count else 0)


def used_per_gpu(api):
    """{node: {gpu: units}} over the bound pods, from their annotations."""
    used = {}
    for pod in api.pods():
        node = pod["spec"].get("nodeName")
        alloc = gpu_allocation(pod)
        if node and alloc:
            for g, units in alloc.items():
                used.setdefault(node, {}).setdefault(g, 0)
                used[node][g] += units
    return used


PLUGIN_DEPLOY = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "deploy", "scheduler-plugin")


def use_shipped_plugin(cp, binary):
    """Has `cp` run kube-scheduler `binary` (built with the GpuShare plugin)
    with deploy/scheduler-plugin/'s configuration and RBAC as shipped, but
    the profile named default-scheduler (the tests' pods name no
    scheduler). Needs PyYAML."""
    import yaml
    with open(os.path.join(PLUGIN_DEPLOY, "rbac.yaml")) as f:
        cp.create_rbac([o for o in yaml.safe_load_all(f) if o])
    with open(os.path.join(PLUGIN_DEPLOY, "scheduler-config.yaml")) as f:
        config = yaml.safe_load(f)
    (profile,) = config["profiles"]
    profile["schedulerName"] = "default-scheduler"
    path = os.path.join(cp.workdir, "gpushare-plugin-config.json")
    with open(path, "w") as f:
        json.dump(config, f, indent=1)
    cp.use_plugin(binary, path)
