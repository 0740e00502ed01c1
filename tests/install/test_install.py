"""The Helm chart deploy/chart/ installed for real: its Deployments and
DaemonSet run as pods on a real kubelet (containerd, runc) from the images
built of this tree, imported into the node's containerd; a GPU pod is placed
and started through each scheduler mode; `helm upgrade` to new images keeps a
running pod's GPUs; `helm uninstall` leaves nothing of the release behind.

The node has no pod network (loopback-only CNI) and no kube-proxy, so the
chart's pods use the host's network and reach the API server at its address
(KUBERNETES_SERVICE_HOST, as clusters whose Service network is not routable
from the host network do); everything else is the chart's own: its service
accounts and their tokens, RBAC, admission policies, certificates, and the
KubeSchedulerConfiguration of its ConfigMap, which the test's kube-scheduler
runs in extender mode. The GPUs are simulated: the DaemonSet mounts the NVML
stand-in and a fixture from the host (extraVolumes), as a driver's files are.
"""

import base64
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import urllib.parse

import pytest
import yaml

import harness
from harness import ApiError, HarnessError, wait_until
from node_harness import GPU_MEM, IMAGE, NODE_NAME, TWO_A100, fixture_gpus

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CHART = os.path.join(ROOT, "deploy", "chart")
NS = "kube-system"
POD_NS = "default"
SCRIPT = ("env | grep -E '^(NVIDIA_VISIBLE_DEVICES|ALIYUN_COM_GPU_MEM_[A-Z]+)=' | sort; "
          "echo END-OF-ENV; exec sleep 3600")
READY = 120


def helm(node, *args, check=True):
    cp = node.cp
    env = {**os.environ, "KUBECONFIG": cp.admin_kubeconfig,
           "HELM_CACHE_HOME": os.path.join(cp.workdir, "helm-cache"),
           "HELM_CONFIG_HOME": os.path.join(cp.workdir, "helm-config"),
           "HELM_DATA_HOME": os.path.join(cp.workdir, "helm-data")}
    binary = os.environ.get("GPUSHARE_HELM") or os.path.join(cp.kube_bin, "helm")
    r = subprocess.run([binary, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=300)
    if check and r.returncode != 0:
        raise HarnessError(f"helm {' '.join(args)}: {r.returncode}\n{r.stdout}\n{r.stderr}\n"
                           + chart_pod_logs(node))
    return r


def chart_pod_logs(node):
    """The status and log tail of every pod in the chart's namespace."""
    out = []
    for pod in node.api.get(f"/api/v1/namespaces/{NS}/pods")["items"]:
        name = pod["metadata"]["name"]
        out.append(f"----- {NS}/{name}: {json.dumps(pod.get('status', {}).get('containerStatuses'))}")
        try:
            out.append(str(node.api.request("GET", f"/api/v1/namespaces/{NS}/pods/{name}/log"
                                                   "?tailLines=30"))[-3000:])
        except Exception as e:  # noqa: BLE001 - a diagnostic only
            out.append(f"(no log: {e})")
    return "\n".join(out)


def values(node, tag, mode):
    """The values of an install on this node (see the module's docstring)."""
    port = urllib.parse.urlparse(node.cp.server).port
    api_env = [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
               {"name": "KUBERNETES_SERVICE_PORT", "value": str(port)}]
    nvml = os.path.join(node.dir, "install-nvml")
    return {
        "mode": mode,
        "imageRegistry": "localhost",
        "imagePullPolicy": "Never",
        "extender": {"image": {"tag": tag}, "replicas": 1, "hostNetwork": True,
                     "extraEnv": api_env},
        "scheduler": {"image": {"tag": tag}, "replicas": 1, "hostNetwork": True,
                      "extraEnv": api_env},
        "devicePlugin": {
            "image": {"tag": tag}, "hostNetwork": True,
            "hostPaths": {"devicePlugins": node.plugin_dir,
                          "podResources": os.path.join(node.kubelet_root, "pod-resources")},
            "extraArgs": ["--nvml-library=/nvml/libnvidia-ml.so.1", "--health-interval-ms=500"],
            "extraEnv": api_env + [
                {"name": "GPUSHARE_NVML_FIXTURE", "value": "/nvml/fixture.json"},
                {"name": "GPUSHARE_NVML_FAULTS", "value": "/nvml/faults.json"}],
            "extraVolumes": [{"name": "nvml", "hostPath": {"path": nvml, "type": "Directory"}}],
            "extraVolumeMounts": [{"name": "nvml", "mountPath": "/nvml", "readOnly": True}],
        },
    }


def dra_values(node, tag, mode):
    """values() with gpushare-dra-driver on, on the node's folders, loading
    the NVML stand-in as the device plugin does."""
    v = values(node, tag, mode)
    dp = v["devicePlugin"]
    v["dra"] = {
        "enabled": True, "hostNetwork": True,
        "hostPaths": {"pluginsRegistry": os.path.join(node.kubelet_root, "plugins_registry"),
                      "plugins": os.path.join(node.dir, "dra-plugins"), "cdi": node.cdi_dir},
        "extraArgs": dp["extraArgs"], "extraEnv": dp["extraEnv"],
        "extraVolumes": dp["extraVolumes"], "extraVolumeMounts": dp["extraVolumeMounts"],
    }
    return v


def write_values(node, tag, mode, dra=False):
    nvml = os.path.join(node.dir, "install-nvml")
    os.makedirs(nvml, exist_ok=True)
    for src, name in ((node.nvml_library, "libnvidia-ml.so.1"), (TWO_A100, "fixture.json")):
        with open(src, "rb") as f, open(os.path.join(nvml, name), "wb") as out:
            out.write(f.read())
    with open(os.path.join(nvml, "faults.json"), "w") as f:
        f.write("{}")
    path = os.path.join(node.cp.workdir, f"values-{mode}-{tag}{'-dra' if dra else ''}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump((dra_values if dra else values)(node, tag, mode), f)
    return path


def tag_images(node, old, new):
    """Names each gpushare image of tag `old` also `new` (a "new release")."""
    for kind in ("extender", "device-plugin", "scheduler"):
        node.ctr("images", "tag", "--force", f"localhost/gpushare-{kind}:{old}",
                 f"localhost/gpushare-{kind}:{new}")


def wait_capacity(node):
    want = sum(units for _, units in fixture_gpus(TWO_A100))
    return wait_until(f"the Node's {GPU_MEM} {want} (from the chart's device plugin)",
                      lambda: node.gpu_capacity("allocatable")[GPU_MEM] == want, READY, 0.5)


def gpu_pod(node, name, units, scheduler=None):
    spec = {"hostNetwork": True, "automountServiceAccountToken": False,
            "enableServiceLinks": False, "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "Never",
                            "command": ["/bin/sh", "-c", SCRIPT],
                            "resources": {"limits": {GPU_MEM: str(units)}}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    node.api.request("POST", f"/api/v1/namespaces/{POD_NS}/pods",
                     {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})

    def started():
        pod = node.api.pod(name)
        if pod["status"].get("phase") == "Failed":
            raise HarnessError(f"pod {name} failed: {pod['status']}")
        annotations = pod["metadata"].get("annotations") or {}
        ok = (pod["status"].get("phase") == "Running"
              and annotations.get("ALIYUN_COM_GPU_MEM_ASSIGNED") == "true")
        return pod if ok else None
    try:
        return wait_until(f"pod {name} Running with its GPUs assigned", started, READY, 0.5)
    except HarnessError as e:
        raise HarnessError(f"{e}\n{json.dumps(node.api.pod(name).get('status'))}\n"
                           + chart_pod_logs(node)) from e


def container_env(node, name):
    path = f"/api/v1/namespaces/{POD_NS}/pods/{name}/log?container=main"

    def printed():
        text = node.api.request("GET", path)
        return text if isinstance(text, str) and "END-OF-ENV" in text else None
    text = wait_until(f"the log of {name}", printed, 30, 0.2)
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def scrape(ca, token):
    """(status, body) of GET /metrics of the installed extender, checked
    against `ca` under the Service's name, with `token` as the bearer."""
    ctx = ssl.create_default_context(cafile=ca)
    conn = http.client.HTTPSConnection("127.0.0.1", 32766, context=ctx, timeout=10)
    conn.sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", 32766), timeout=10),
                                server_hostname="gpushare-extender.kube-system.svc")
    try:
        conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"} if token else {})
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def chart_pods(node):
    """{pod name: (image, ready)} of the chart's pods."""
    out = {}
    for pod in node.api.get(f"/api/v1/namespaces/{NS}/pods")["items"]:
        labels = pod["metadata"].get("labels") or {}
        if not labels.get("app.kubernetes.io/name", "").startswith("gpushare-"):
            continue
        statuses = pod["status"].get("containerStatuses") or [{}]
        out[pod["metadata"]["name"]] = (pod["spec"]["containers"][0]["image"],
                                        bool(statuses[0].get("ready")))
    return out


def wait_chart_pods(node, tag, count):
    """Waits until exactly `count` chart pods run, every one Ready on `tag`."""
    def ready():
        pods = chart_pods(node)
        return (len(pods) == count and
                all(img.endswith(":" + tag) and ok for img, ok in pods.values())) and pods
    try:
        return wait_until(f"{count} chart pods Ready on :{tag}", ready, READY, 0.5)
    except HarnessError as e:
        raise HarnessError(f"{e}\n{chart_pods(node)}\n{chart_pod_logs(node)}") from e


def rendered(node, values_path):
    out = helm(node, "template", "gpushare", CHART, "-n", NS, "-f", values_path).stdout
    return [o for o in yaml.safe_load_all(out) if o]


def left_behind(node, objects):
    """The objects of `objects` the API server still has."""
    left = []
    for o in objects:
        kind, name = o["kind"], o["metadata"]["name"]
        group, _, version = o["apiVersion"].rpartition("/")
        plural = kind.lower() + ("es" if kind.endswith("s") else "s")
        if kind == "NetworkPolicy":
            plural = "networkpolicies"
        base = f"/apis/{group}/{version}" if group else f"/api/{version}"
        ns = o["metadata"].get("namespace")
        path = f"{base}/namespaces/{ns}/{plural}/{name}" if ns else f"{base}/{plural}/{name}"
        try:
            node.api.get(path)
            left.append(f"{kind}/{name}")
        except Exception as e:  # noqa: BLE001
            if getattr(e, "status", None) != 404:
                raise
    return left


def uninstall_and_check(node, values_path):
    objects = rendered(node, values_path)
    helm(node, "uninstall", "gpushare", "-n", NS, "--wait", "--timeout", "120s")
    wait_until("the chart's pods gone", lambda: not chart_pods(node), 60, 0.5)
    # The API server's admission follows the policies' deletion a moment
    # later (docs/helm.md#uninstall).
    node.cp.wait_admission_policies_gone()
    assert not left_behind(node, objects), left_behind(node, objects)
    releases = node.api.get(f"/api/v1/namespaces/{NS}/secrets?labelSelector=owner%3Dhelm")
    assert not releases["items"], [s["metadata"]["name"] for s in releases["items"]]


@pytest.fixture
def node(cluster, request):
    cluster.delete_all_pods()
    yield cluster
    if getattr(request.node, "gpushare_failed", False):
        print("\n" + chart_pod_logs(cluster) + "\n" + cluster.log_tails(), file=sys.stderr)
    cluster.cp.stop_scheduler()
    helm(cluster, "uninstall", "gpushare", "-n", NS, "--wait", "--timeout", "60s", check=False)
    cluster.cp.wait_admission_policies_gone()
    cluster.delete_all_pods()


def test_extender_mode_places_a_gpu_pod_and_an_upgrade_keeps_its_gpus(node):
    first = write_values(node, "e2e", "extender")
    # The cluster's own kube-scheduler places the chart's pods (they ask no GPU).
    node.cp.start_scheduler(with_extender=False)
    helm(node, "install", "gpushare", CHART, "-n", NS, "-f", first, "--wait", "--timeout",
         f"{READY}s")
    wait_chart_pods(node, "e2e", 2)  # The extender and the device plugin.
    wait_capacity(node)

    # kube-scheduler as an administrator sets it up (NOTES.txt): the chart's
    # KubeSchedulerConfiguration, with its client certificate and CA from
    # the chart's Secret. It runs on the host network, where the Service's
    # name does not resolve: the extender's address, the certificate's name.
    cm = node.api.get(f"/api/v1/namespaces/{NS}/configmaps/gpushare-scheduler-config")
    config = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    secret = node.api.get(f"/api/v1/namespaces/{NS}/secrets/gpushare-extender-tls-scheduler")
    tls_dir = os.path.join(node.cp.workdir, "gpushare-scheduler-tls")
    os.makedirs(tls_dir, exist_ok=True)
    (ext,) = config["extenders"]
    for key, field in (("ca.crt", "caFile"), ("tls.crt", "certFile"), ("tls.key", "keyFile")):
        path = os.path.join(tls_dir, key)
        with open(path, "wb") as f:
            f.write(base64.b64decode(secret["data"][key]))
        ext["tlsConfig"][field] = path
    assert ext["urlPrefix"] == "https://gpushare-extender.kube-system.svc:32766/gpushare-scheduler"
    assert ext["tlsConfig"]["serverName"] == "gpushare-extender.kube-system.svc"
    ext["urlPrefix"] = "https://127.0.0.1:32766/gpushare-scheduler"
    path = os.path.join(node.cp.workdir, "chart-scheduler-config.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    node.cp.stop_scheduler()
    node.cp.start_scheduler(with_extender=False, plugin_config=path)

    pod = gpu_pod(node, "notebook", 10)
    placed = pod["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"]
    env = container_env(node, "notebook")
    assert env["ALIYUN_COM_GPU_MEM_IDX"] == placed and env["ALIYUN_COM_GPU_MEM_POD"] == "10", env
    uid = pod["metadata"]["uid"]

    # Prometheus scrapes the installed extender as the chart sets it up: its
    # service account's token (bound to gpushare-metrics-reader by the
    # chart), the CA of the chart's Secret, the Service's name.
    node.api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": "monitoring"}}, ok=(201, 409))
    prometheus = node.cp.service_account_token("prometheus-k8s", namespace="monitoring")
    other = node.cp.service_account_token("someone", namespace="monitoring")
    ca = os.path.join(tls_dir, "ca.crt")
    status, text = scrape(ca, prometheus)
    assert status == 200 and "gpushare_node_gpu_memory_total_units{" in text, (status, text[:300])
    assert scrape(ca, other)[0] == 403
    assert scrape(ca, None)[0] == 403             # No certificate, no token.
    assert scrape(ca, prometheus[:-4] + "AAAA")[0] == 401  # A token the API server refuses.

    # A new release: new images (the same programs under a new tag) rolled
    # out by helm upgrade; the running pod keeps its container and its GPUs.
    tag_images(node, "e2e", "e2e-next")
    second = write_values(node, "e2e-next", "extender")
    helm(node, "upgrade", "gpushare", CHART, "-n", NS, "-f", second, "--wait", "--timeout",
         f"{READY}s")
    wait_chart_pods(node, "e2e-next", 2)
    wait_capacity(node)
    after = node.api.pod("notebook")
    assert after["metadata"]["uid"] == uid and after["status"]["phase"] == "Running"
    assert after["status"]["containerStatuses"][0]["restartCount"] == 0
    assert after["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"] == placed
    # The new extender rebuilt its state from the annotations: binpack puts
    # the next pod on the same GPU, which has room, and never beyond it.
    nxt = gpu_pod(node, "notebook-2", 10)
    assert nxt["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"] == placed
    assert 10 + 10 <= fixture_gpus(TWO_A100)[int(placed)][1]

    # Uninstall in the documented order: kube-scheduler first.
    node.cp.stop_scheduler()
    uninstall_and_check(node, second)
    # Running pods keep their GPUs and annotations; nothing deleted them.
    assert node.api.pod("notebook")["status"]["phase"] == "Running"
    assert node.api.pod("notebook")["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"] == placed


def test_scheduler_mode_places_a_gpu_pod_by_its_scheduler_name(node):
    path = write_values(node, "e2e", "scheduler")
    # The cluster's default-scheduler places the chart's pods; GPU pods name
    # the chart's scheduler.
    node.cp.start_scheduler(with_extender=False)
    helm(node, "install", "gpushare", CHART, "-n", NS, "-f", path, "--wait", "--timeout",
         f"{READY}s")
    pods = wait_chart_pods(node, "e2e", 2)  # kube-scheduler with GpuShare, the device plugin.
    assert any(n.startswith("gpushare-scheduler-") for n in pods), pods
    wait_capacity(node)
    lease = wait_until("the scheduler's Lease", lambda: node.api.get(
        f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/gpushare-scheduler"
    )["spec"].get("holderIdentity"), READY, 0.5)
    assert lease

    # Two pods over both GPUs of the node: 30 units do not fit beside 30 on
    # one 40 GiB A100, so GpuShare puts them on different GPUs.
    a = gpu_pod(node, "trainer-a", 30, scheduler="gpushare-scheduler")
    b = gpu_pod(node, "trainer-b", 30, scheduler="gpushare-scheduler")
    ga = a["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"]
    gb = b["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"]
    assert {ga, gb} == {"0", "1"}, (ga, gb)
    assert container_env(node, "trainer-b")["ALIYUN_COM_GPU_MEM_IDX"] == gb

    uninstall_and_check(node, path)


def refuses_other_nodes_slices(node):
    """The driver's own credentials (its service account's token bound to
    its pod, as the kubelet mounts it) cannot write another node's
    ResourceSlice, nor one of another driver: the chart's admission policy
    gpushare-dra-driver-slices, each refusal naming its rule."""
    (pod,) = [p for p in node.api.get(f"/api/v1/namespaces/{NS}/pods")["items"]
              if (p["metadata"].get("labels") or {}).get("app.kubernetes.io/name")
              == "gpushare-dra-driver"]
    r = node.api.request("POST", f"/api/v1/namespaces/{NS}/serviceaccounts/gpushare-dra-driver/token",
                         {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                          "spec": {"expirationSeconds": 600, "boundObjectRef": {
                              "apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                              "uid": pod["metadata"]["uid"]}}})
    host, port = node.cp.server.rsplit("//", 1)[1].rsplit(":", 1)
    as_driver = harness.Api(host, int(port), node.cp.pki.ca_crt, token=r["status"]["token"])

    def slice_of(name, node_name, driver):
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": name},
                "spec": {"driver": driver, "nodeName": node_name,
                         "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                         "devices": [{"name": "gpu-0"}]}}
    for name, node_name, driver, rule in (
            ("forged-elsewhere", "elsewhere", "gpu.gpushare.dev", "gpushare-dra-driver-slices/own-node"),
            ("forged-driver", NODE_NAME, "other.example.com", "gpushare-dra-driver-slices/own-driver")):
        def refused():
            try:
                as_driver.request("POST", "/apis/resource.k8s.io/v1/resourceslices",
                                  slice_of(name, node_name, driver))
            except ApiError as e:
                assert e.status == 403 and rule in e.body, e.body
                return True
            # Created before the policy was in force: remove it, try again.
            node.api.request("DELETE", f"/apis/resource.k8s.io/v1/resourceslices/{name}",
                             ok=(200, 202, 404))
            return False
        wait_until(f"{rule} enforced", refused, 30, 0.5)


def label_node(node, value):
    node.api.request("PATCH", f"/api/v1/nodes/{NODE_NAME}",
                     {"metadata": {"labels": {"gpushare.io/device-plugin": value}}},
                     content_type="application/merge-patch+json")


def test_dra_mode_runs_the_driver_daemonset_and_prepares_a_claim(node):
    """dra.enabled on a node labelled gpushare.io/device-plugin=dra: the
    chart's gpushare-dra-driver pod (the device plugin's image, its service
    account and ClusterRole, the kubelet's folders by hostPath) publishes
    the node's GPUs, the device plugin's DaemonSet stays off the node, and a
    pod with a claim of the chart's class, placed by the chart's
    kube-scheduler with GpuShare, runs with its claim prepared: the CDI
    spec the driver wrote in the host's CDI folder carries the claim's
    variables. (This node's containerd is Debian's 1.6, which does not
    inject CDI devices: tests/dra-node checks the containers' side with
    containerd 2.)"""
    minor = int("".join(ch for ch in node.api.get("/version")["minor"] if ch.isdigit()))
    if minor < 36:
        pytest.skip(f"Kubernetes 1.{minor}: DRA's consumable capacity is off by default before 1.36")
    path = write_values(node, "e2e", "scheduler", dra=True)
    label_node(node, "dra")
    try:
        node.cp.start_scheduler(with_extender=False)
        helm(node, "install", "gpushare", CHART, "-n", NS, "-f", path, "--wait", "--timeout",
             f"{READY}s")
        pods = wait_chart_pods(node, "e2e", 2)  # kube-scheduler with GpuShare, the driver.
        assert any(n.startswith("gpushare-dra-driver-") for n in pods), pods
        assert not any(n.startswith("gpushare-device-plugin") for n in pods), pods

        def published():
            slices = node.api.get("/apis/resource.k8s.io/v1/resourceslices")["items"]
            devs = [d["name"] for s in slices if s["spec"]["driver"] == "gpu.gpushare.dev"
                    and s["spec"].get("nodeName") == NODE_NAME for d in s["spec"]["devices"]]
            return sorted(devs) == ["gpu-0", "gpu-1"]
        wait_until("the chart's driver publishing the node's two GPUs", published, READY, 0.5)
        refuses_other_nodes_slices(node)

        node.api.request("POST", f"/apis/resource.k8s.io/v1/namespaces/{POD_NS}/resourceclaims", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "notebook-gpu"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpushare.dev",
                "capacity": {"requests": {"memory": "8Gi"}}}}]}}})
        node.api.request("POST", f"/api/v1/namespaces/{POD_NS}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dra-notebook"},
            "spec": {"hostNetwork": True, "automountServiceAccountToken": False,
                     "enableServiceLinks": False, "restartPolicy": "Never",
                     "terminationGracePeriodSeconds": 0, "schedulerName": "gpushare-scheduler",
                     "resourceClaims": [{"name": "gpu", "resourceClaimName": "notebook-gpu"}],
                     "containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "Never",
                                     "command": ["/bin/sh", "-c", SCRIPT],
                                     "resources": {"claims": [{"name": "gpu"}]}}]}})

        def running():
            pod = node.api.pod("dra-notebook")
            if pod["status"].get("phase") == "Failed":
                raise HarnessError(f"pod dra-notebook failed: {pod['status']}")
            return pod["status"].get("phase") == "Running" and pod
        try:
            wait_until("pod dra-notebook Running", running, READY, 0.5)
        except HarnessError as e:
            raise HarnessError(f"{e}\n{json.dumps(node.api.pod('dra-notebook')['status'])}\n"
                               + chart_pod_logs(node)) from e
        claim = node.api.get(f"/apis/resource.k8s.io/v1/namespaces/{POD_NS}/resourceclaims/"
                             "notebook-gpu")
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert (result["device"], result["consumedCapacity"]["memory"]) == ("gpu-0", "8Gi"), result
        spec_path = os.path.join(node.cdi_dir,
                                 f"gpu.gpushare.dev-claim_{claim['metadata']['uid']}.json")
        with open(spec_path) as f:
            spec = json.load(f)
        env = dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
        assert env["ALIYUN_COM_GPU_MEM_IDX"] == "0" and env["ALIYUN_COM_GPU_MEM_POD"] == "8", env
        assert env["NVIDIA_VISIBLE_DEVICES"] == fixture_gpus(TWO_A100)[0][0], env
        node.api.delete_pod("dra-notebook", namespace=POD_NS)
        wait_until("the claim unprepared", lambda: not os.path.exists(spec_path), 60, 0.5)
        node.api.request("DELETE", f"/apis/resource.k8s.io/v1/namespaces/{POD_NS}/resourceclaims/"
                         "notebook-gpu", ok=(200, 202, 404))
        uninstall_and_check(node, path)
    finally:
        label_node(node, None)
