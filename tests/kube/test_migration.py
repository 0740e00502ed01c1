"""Moving a cluster from the Go original (gpushare-scheduler-extender and
gpushare-device-plugin) to gpushare, as docs/migration.md tells it.

- Pods placed and annotated as the Go extender does keep their GPUs when
  gpushare takes over scheduling (either mode): nothing new lands on their
  units, and their annotations are left as they were.
- What gpushare writes for a one-GPU pod is what the Go original reads back
  (a single GPU index and the pod's units), so a rollback keeps the pods
  gpushare placed.
- deploy/ applied beside the Go original's RBAC objects changes none of its
  rights, and deleting deploy/ leaves them; the DaemonSet stays off nodes
  labelled for the original's device plugin.

The Go original itself is not run here (its code is not part of this
project); its objects and annotations are written as its manifests and its
extender write them.
"""

import time

import pytest

from harness import gpu_allocation, used_per_gpu
from test_operations import DEPLOY, can_i_mismatches, kubectl
from test_scenarios import assert_no_oversubscription

T4 = 14


def go_original_pod(api, name, node, units, gpu):
    """A running pod as the Go extender leaves it: bound, with its
    annotations (one GPU index, the pod's units, the GPU's size, the assume
    time) and ALIYUN_COM_GPU_MEM_ASSIGNED=true from its device plugin."""
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {
            "ALIYUN_COM_GPU_MEM_IDX": str(gpu),
            "ALIYUN_COM_GPU_MEM_POD": str(units),
            "ALIYUN_COM_GPU_MEM_DEV": str(T4),
            "ALIYUN_COM_GPU_MEM_ASSIGNED": "true",
            "ALIYUN_COM_GPU_MEM_ASSUME_TIME": str(time.time_ns()),
        }},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "registry.invalid/e2e:never-pulled",
                            "resources": {"limits": {"aliyun.com/gpu-mem": str(units)}}}],
        },
    }
    return api.request("POST", "/api/v1/namespaces/default/pods", pod)


def test_pods_of_the_go_original_keep_their_gpus_and_a_rollback_reads_ours(cluster):
    api = cluster.api
    for n in ("gpu-a", "gpu-b"):
        api.create_node(n, gpus=2, gpu_memory=T4)
    # Placed by the Go original before the swap: 10 units on gpu-a's GPU 0,
    # 8 on its GPU 1, 12 on gpu-b's GPU 1.
    old = {"old-1": ("gpu-a", 10, 0), "old-2": ("gpu-a", 8, 1), "old-3": ("gpu-b", 12, 1)}
    for name, (node, units, gpu) in old.items():
        go_original_pod(api, name, node, units, gpu)
    before = {name: api.pod(name)["metadata"]["annotations"] for name in old}

    cluster.start_gpushare()
    # What is left is 4, 6, 14 and 2 units on the four GPUs: one at a time,
    # largest first, each of these fits on exactly one GPU, and only if the
    # old pods' units are counted.
    sizes = [14, 6, 4, 2]
    for i, units in enumerate(sizes):
        api.create_pod(f"new-{i}", gpu_memory=units)
        api.wait_bound(f"new-{i}", timeout=60)
    assert_no_oversubscription(api)
    used = used_per_gpu(api)
    assert sum(sum(g.values()) for g in used.values()) == 30 + sum(sizes)
    assert used == {"gpu-a": {0: T4, 1: T4}, "gpu-b": {0: T4, 1: T4}}, used
    for name in old:
        assert api.pod(name)["metadata"]["annotations"] == before[name], name
    # One more does not fit anywhere: it waits, it is not squeezed in.
    api.create_pod("too-many", gpu_memory=1)
    time.sleep(3)
    assert not api.pod("too-many")["spec"].get("nodeName")

    # Rollback: the Go original reads a pod's GPU as the integer
    # ALIYUN_COM_GPU_MEM_IDX and its units as ALIYUN_COM_GPU_MEM_POD.
    for i, units in enumerate(sizes):
        ann = api.pod(f"new-{i}")["metadata"]["annotations"]
        gpu = int(ann["ALIYUN_COM_GPU_MEM_IDX"])      # A plain index, as it parses.
        assert int(ann["ALIYUN_COM_GPU_MEM_POD"]) == units
        assert int(ann["ALIYUN_COM_GPU_MEM_DEV"]) == T4
        assert int(ann["ALIYUN_COM_GPU_MEM_ASSUME_TIME"]) > 0
        assert gpu_allocation(api.pod(f"new-{i}")) == {gpu: units}


# The Go original's RBAC objects, under the names its manifests use, with the
# rights its programs need (what matters here is that ours leaves them be).
GO_ORIGINAL_RBAC = [
    ("ServiceAccount", "gpushare-device-plugin", [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "update"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "update",
                                                            "patch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch", "update"]}]),
    ("ServiceAccount", "gpushare-schd-extender", [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["update", "patch", "get", "list",
                                                            "watch"]},
        {"apiGroups": [""], "resources": ["bindings", "pods/binding"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]),
]
GO_ALLOWED = {
    "gpushare-device-plugin": [("update", "nodes"), ("update", "pods"), ("get", "pods"),
                               ("patch", "nodes", "--subresource=status")],
    "gpushare-schd-extender": [("update", "pods"), ("list", "configmaps", "-A"),
                               ("create", "pods", "--subresource=binding")],
}


@pytest.mark.extender_only("deploy/'s manifests; the scheduler does not matter")
def test_deploy_beside_the_go_original_changes_none_of_its_rights(cluster):
    api = cluster.api
    for _, name, rules in GO_ORIGINAL_RBAC:
        api.request("POST", "/api/v1/namespaces/kube-system/serviceaccounts",
                    {"apiVersion": "v1", "kind": "ServiceAccount",
                     "metadata": {"name": name, "namespace": "kube-system"}}, ok=(201, 409))
        api.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                     "metadata": {"name": name}, "rules": rules}, ok=(201, 409))
        api.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                     "metadata": {"name": name},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                 "name": name},
                     "subjects": [{"kind": "ServiceAccount", "name": name,
                                   "namespace": "kube-system"}]}, ok=(201, 409))

    def go_rights_intact():
        return {name: can_i_mismatches(cluster, f"system:serviceaccount:kube-system:{name}",
                                       allowed, [])
                for name, allowed in GO_ALLOWED.items()}

    assert go_rights_intact() == {n: [] for n in GO_ALLOWED}
    roles = {name: api.get(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}")["rules"]
             for _, name, _ in GO_ORIGINAL_RBAC}
    try:
        # A plain apply, as a user would run it: any object of the same name
        # would be replaced (or, server-side, refused as a conflict).
        kubectl(cluster, "apply", "--server-side", "-k", DEPLOY)
        assert go_rights_intact() == {n: [] for n in GO_ALLOWED}
        for _, name, _ in GO_ORIGINAL_RBAC:
            assert api.get(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}")["rules"] \
                == roles[name], name
        ds = api.get("/apis/apps/v1/namespaces/kube-system/daemonsets/gpushare-device-plugin")
        spec = ds["spec"]["template"]["spec"]
        assert spec["serviceAccountName"] not in GO_ALLOWED
        (term,) = spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert term["matchExpressions"] == [{"key": "gpushare.io/device-plugin",
                                             "operator": "NotIn", "values": ["aliyun"]}]
    finally:
        kubectl(cluster, "delete", "--wait=false", "--ignore-not-found", "-k", DEPLOY, check=False)
        cluster.wait_admission_policies_gone()
    # Uninstalling gpushare leaves the original's objects and rights.
    assert go_rights_intact() == {n: [] for n in GO_ALLOWED}
    for _, name, _ in GO_ORIGINAL_RBAC:
        api.get(f"/api/v1/namespaces/kube-system/serviceaccounts/{name}")
        api.get(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}")
