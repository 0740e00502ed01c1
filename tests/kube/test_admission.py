"""deploy/admission/ against the real kube-apiserver: who may write gpushare's
annotations, tried as an attacker would.

The policies and their bindings are applied as shipped; only the users
trusted as schedulers (the variable `schedulers` of each policy in
deploy/admission/policy.yaml) are this cluster's: the extender's and
kube-scheduler's client certificates. The device plugin is the shipped one,
its service account, whose pod-bound token carries its node's name. Every refusal
must name its rule. At the end, gpushare schedules a pod under the policies
(the extender and the plugin bind with the annotations on the Binding), so
the policies refuse nothing the scheduler needs.
"""

import base64
import json
import os

import pytest
import yaml

import harness
from harness import ApiError, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADMISSION = os.path.join(ROOT, "deploy", "admission")
DEVICE_PLUGIN = os.path.join(ROOT, "deploy", "device-plugin")
VAP = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
VAP_BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
PLUGIN_SA = "gpushare-devices"
MERGE = "application/merge-patch+json"
IDX = "ALIYUN_COM_GPU_MEM_IDX"


def load(folder, name):
    with open(os.path.join(folder, name)) as f:
        return [o for o in yaml.safe_load_all(f) if o]


def refused(call, rule):
    """Runs `call`; asserts the API server refused it naming `rule`."""
    with pytest.raises(ApiError) as e:
        call()
    assert e.value.status == 403, e.value.body
    assert rule in json.loads(e.value.body)["message"], e.value.body


def wait_refused(call, rule, timeout=30):
    """refused(call, rule), retried until the policy naming `rule` is in
    force (a call made before that succeeds, and is made again)."""
    def enforced():
        try:
            call()
        except ApiError as e:
            assert e.status == 403, e.body
            assert rule in json.loads(e.body)["message"], e.body
            return True
        return False
    wait_until(f"{rule} enforced", enforced, timeout, 0.5)


def pod_body(name, gpu_mem=None, node=None, annotations=None, namespace="default",
             service_account=None):
    limits = {"aliyun.com/gpu-mem": str(gpu_mem)} if gpu_mem else {}
    spec = {"containers": [{"name": "main", "image": "registry.invalid/e2e:never-pulled",
                            "resources": {"limits": limits}}],
            "terminationGracePeriodSeconds": 0}
    if node:
        spec["nodeName"] = node
    if service_account:
        spec["serviceAccountName"] = service_account
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": annotations or {}},
            "spec": spec}


def create(api, body):
    ns = body["metadata"].get("namespace", "default")
    return api.request("POST", f"/api/v1/namespaces/{ns}/pods", body)


def patch_pod(api, name, patch, namespace="default"):
    return api.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}", patch,
                       content_type=MERGE)


def bind(api, name, node, annotations):
    body = {"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "annotations": annotations},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
    return api.request("POST", f"/api/v1/namespaces/default/pods/{name}/binding", body)


def cel_variable(policy, name):
    """The variable `name` of a ValidatingAdmissionPolicy (its dict), or None."""
    return next((v for v in policy["spec"].get("variables", []) if v["name"] == name), None)


# The users trusted as schedulers by deploy/admission/policy.yaml as shipped,
# and here (harness.Pki's client certificates of the extender and of
# kube-scheduler).
SHIPPED_SCHEDULERS = ("['system:serviceaccount:kube-system:gpushare-extender', "
                      "'system:kube-scheduler', "
                      "'system:serviceaccount:kube-system:gpushare-scheduler']")
CLUSTER_SCHEDULERS = "['gpushare-extender', 'system:kube-scheduler']"
SHIPPED_DEVICE_PLUGINS = f"['system:serviceaccount:kube-system:{PLUGIN_SA}']"


def trust_this_clusters_schedulers(policy):
    """Checks the identities `policy` trusts as shipped, and puts this
    cluster's schedulers in place of the shipped ones."""
    plugins = cel_variable(policy, "devicePlugins")
    assert plugins is not None and plugins["expression"] == SHIPPED_DEVICE_PLUGINS, policy
    schedulers = cel_variable(policy, "schedulers")
    if schedulers is not None:
        assert schedulers["expression"] == SHIPPED_SCHEDULERS, schedulers
        schedulers["expression"] = CLUSTER_SCHEDULERS


class Admission:
    """The shipped policies with this cluster's identities; removed by close()."""

    def __init__(self, cp):
        self.cp = cp
        self.api = cp.api
        self.made = []  # (path) of every object to delete at the end.

    def post(self, path, obj):
        made = f"{path}/{obj['metadata']['name']}"
        self.api.request("DELETE", made, ok=(200, 202, 404))  # A run that did not finish.
        self.api.request("POST", path, obj)
        self.made.append(made)

    def install(self):
        for obj in load(DEVICE_PLUGIN, "serviceaccount.yaml"):
            self.post("/api/v1/namespaces/kube-system/serviceaccounts", obj)
        for obj in load(DEVICE_PLUGIN, "rbac.yaml"):
            self.post(f"/apis/rbac.authorization.k8s.io/v1/{obj['kind'].lower()}s", obj)
        for obj in load(ADMISSION, "policy.yaml"):
            if obj["kind"] == "ValidatingAdmissionPolicy":
                trust_this_clusters_schedulers(obj)
                self.post(VAP, obj)
            else:
                self.post(VAP_BINDINGS, obj)

    def close(self):
        # The policies first, and the device plugin's account once the API
        # server no longer enforces them.
        policies = [p for p in self.made if "admissionregistration" in p]
        for path in reversed(policies):
            self.api.request("DELETE", path, ok=(200, 202, 404))
        self.cp.wait_admission_policies_gone()
        for path in reversed([p for p in self.made if p not in policies]):
            self.api.request("DELETE", path, ok=(200, 202, 404))


def wait_enforced(api, author, forged):
    """Waits until `author` creating `forged` (a pod with a gpushare
    annotation) is refused by gpushare-annotations/create: the policies take
    effect within seconds of their creation. A pod created meanwhile is
    deleted (through `api`)."""
    def enforced():
        try:
            create(author, forged)
        except ApiError as e:
            return e.status == 403 and "gpushare-annotations/create" in e.body
        api.delete_pod(forged["metadata"]["name"])
        return False
    wait_until("the admission policies enforced", enforced, 30, 0.5)


def user_api(cp, name, rules):
    """An Api of a client certificate user `name` granted `rules` cluster-wide."""
    cert, key = cp.pki.issue(name, f"/CN={name}", client=True)
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": f"e2e-{name}"}, "rules": rules}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": f"e2e-{name}"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": f"e2e-{name}"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                             "name": name}]}
    for path in ("/apis/rbac.authorization.k8s.io/v1/clusterroles/e2e-" + name,
                 "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/e2e-" + name):
        cp.api.request("DELETE", path, ok=(200, 202, 404))
    cp.create_rbac([role, binding])
    return api_as(cp, cert, key)


def api_as(cp, cert=None, key=None, token=None):
    """An Api of the control plane's API server with other credentials."""
    host, port = cp.server.rsplit("//", 1)[1].rsplit(":", 1)
    return harness.Api(host, int(port), cp.pki.ca_crt, cert, key, token)


def plugin_token(cp, pod):
    """A token of the device plugin's service account bound to `pod`, as
    the kubelet mounts it into the DaemonSet's pod."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"expirationSeconds": 600,
                        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                                           "name": pod["metadata"]["name"],
                                           "uid": pod["metadata"]["uid"]}}}
    r = cp.api.request("POST", f"/api/v1/namespaces/kube-system/serviceaccounts/{PLUGIN_SA}/token",
                       request)
    token = r["status"]["token"]
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["kubernetes.io"]["node"]["name"] == pod["spec"]["nodeName"], claims
    return token


def test_only_the_scheduler_writes_gpushare_annotations(cluster):
    cp = cluster
    api = cp.api
    admission = Admission(cp)
    plugin_pods = []
    try:
        admission.install()
        for n in ("gpu-a", "gpu-b"):
            api.create_node(n, gpus=2, gpu_memory=32)
        mallory = user_api(cp, "mallory", [
            {"apiGroups": [""], "resources": ["pods", "pods/binding"],
             "verbs": ["create", "patch", "get", "list"]}])

        # Nobody creates a pod carrying gpushare annotations. The policies
        # take effect within seconds of their creation.
        wait_enforced(api, mallory, pod_body("forged", 4, annotations={
            IDX: "0", "ALIYUN_COM_GPU_MEM_ASSIGNED": "false"}))
        refused(lambda: create(api, pod_body("forged-admin", 4, annotations={IDX: "1"})),
                "gpushare-annotations/create")
        # Nor binds a GPU pod to a node by hand.
        refused(lambda: create(mallory, pod_body("hand-bound", 40, node="gpu-a")),
                "gpushare-annotations/hand-bound")
        create(mallory, pod_body("cpu-hand-bound", node="gpu-a"))  # No GPU: not ours to judge.

        # A pod waiting for the scheduler: only the scheduler annotates and binds it.
        create(mallory, pod_body("victim", 4))
        refused(lambda: patch_pod(mallory, "victim", {"metadata": {"annotations": {IDX: "1"}}}),
                "gpushare-annotations/update")
        refused(lambda: bind(mallory, "victim", "gpu-a", {IDX: "1"}), "gpushare-annotations/bind")
        extender = api_as(cp, *cp.extender_client)
        patch_pod(extender, "victim", {"metadata": {"annotations": {
            IDX: "0", "ALIYUN_COM_GPU_MEM_POD": "4", "ALIYUN_COM_GPU_MEM_ASSIGNED": "false"}}})
        bind(extender, "victim", "gpu-a", {})
        create(mallory, pod_body("elsewhere", 4))
        scheduler = api_as(cp, *cp.scheduler_client)
        bind(scheduler, "elsewhere", "gpu-b", {IDX: "1", "ALIYUN_COM_GPU_MEM_POD": "4"})
        assert api.pod("elsewhere")["metadata"]["annotations"][IDX] == "1"
        # Once bound, the pod author still cannot rewrite them.
        refused(lambda: patch_pod(mallory, "victim", {"metadata": {"annotations": {IDX: "1"}}}),
                "gpushare-annotations/update")
        refused(lambda: patch_pod(mallory, "victim", {"metadata": {"annotations": {IDX: None}}}),
                "gpushare-annotations/update")
        patch_pod(mallory, "victim", {"metadata": {"annotations": {"team": "ml"}}})  # Not ours.

        # The device plugin of gpu-a: a pod of the DaemonSet, bound to gpu-a.
        agent = create(api, pod_body("agent-a", node="gpu-a", namespace="kube-system",
                                     service_account=PLUGIN_SA))
        plugin_pods.append("agent-a")
        other = create(api, pod_body("system-b", node="gpu-b", namespace="kube-system"))
        plugin_pods.append("system-b")
        plugin = api_as(cp, token=plugin_token(cp, agent))
        # RBAC lets it list its node's pods.
        listed = plugin.get("/api/v1/pods", fieldSelector="spec.nodeName=gpu-a")["items"]
        assert {p["metadata"]["name"] for p in listed} >= {"victim", "agent-a"}
        # It marks and corrects pods of its own node ...
        patch_pod(plugin, "victim", {"metadata": {"annotations": {
            "ALIYUN_COM_GPU_MEM_ASSIGNED": "true", "ALIYUN_COM_GPU_MEM_ASSIGN_TIME": "1",
            IDX: "1"}}})
        assert api.pod("victim")["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_ASSIGNED"] == "true"
        # ... and nothing else: not another node's pods, ...
        refused(lambda: patch_pod(plugin, "elsewhere", {"metadata": {"annotations": {
            "ALIYUN_COM_GPU_MEM_ASSIGNED": "true"}}}), "gpushare-annotations/plugin-node")
        refused(lambda: patch_pod(plugin, "system-b", {"spec": {"containers": [
            {"name": "main", "image": "registry.invalid/evil:1"}]}}, namespace="kube-system"),
            "gpushare-annotations/plugin-node")
        # ... not the spec, labels or other annotations of its own node's pods.
        refused(lambda: patch_pod(plugin, "agent-a", {"spec": {"containers": [
            {"name": "main", "image": "registry.invalid/evil:1"}]}}, namespace="kube-system"),
            "gpushare-annotations/plugin-scope")
        refused(lambda: patch_pod(plugin, "victim", {"metadata": {"labels": {"x": "y"}}}),
                "gpushare-annotations/plugin-scope")
        refused(lambda: patch_pod(plugin, "victim", {"metadata": {"annotations": {
            "ALIYUN_COM_GPU_MEM_POD": "40"}}}), "gpushare-annotations/plugin-scope")
        # Nodes: its own, gpushare.io/ annotations only.
        api_node = "/api/v1/nodes/"
        plugin.request("PATCH", api_node + "gpu-a", {"metadata": {"annotations": {
            "gpushare.io/gpu-memory": "32,32"}}}, content_type=MERGE)
        # Each policy takes effect on its own, seconds after its creation:
        # the node policy may lag the pod policy waited for above.
        wait_refused(lambda: plugin.request("PATCH", api_node + "gpu-b", {"metadata": {
            "annotations": {"gpushare.io/gpu-memory": "32,32"}}}, content_type=MERGE),
            "gpushare-device-plugin-node/own-node")
        refused(lambda: plugin.request("PATCH", api_node + "gpu-a", {"metadata": {"labels": {
            "gpushare": "false"}}}, content_type=MERGE),
            "gpushare-device-plugin-node/annotations-only")
        refused(lambda: plugin.request("PATCH", api_node + "gpu-a", {"spec": {"unschedulable": True}},
                                       content_type=MERGE),
                "gpushare-device-plugin-node/annotations-only")
        # A token not bound to a pod has no node: nothing to patch.
        r = api.request("POST", f"/api/v1/namespaces/kube-system/serviceaccounts/{PLUGIN_SA}/token",
                        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                         "spec": {"expirationSeconds": 600}})
        unbound = api_as(cp, token=r["status"]["token"])
        refused(lambda: patch_pod(unbound, "victim", {"metadata": {"annotations": {
            "ALIYUN_COM_GPU_MEM_ASSIGNED": "false"}}}), "gpushare-annotations/plugin-node")

        # gpushare itself schedules under the policies.
        cp.start_gpushare()
        api.create_pod("scheduled", gpu_memory=4)
        api.wait_bound("scheduled", timeout=60)
        assert IDX in api.pod("scheduled")["metadata"]["annotations"]
    finally:
        for name in plugin_pods:
            api.delete_pod(name, namespace="kube-system")
        admission.close()
