"""GpuShare scores the nodes for a pod whose ResourceClaim asks for
gpushare-dra-driver's GPUs (plugin mode only, Kubernetes 1.36 and later):
the real kube-apiserver and kube-scheduler, two nodes of two 40 GiB GPUs
each with the driver's ResourceSlice, one node already holding a claim.
kube-scheduler's DRA allocator chooses the GPUs inside the node (first fit)
and binds; GpuShare only ranks the nodes, with its DRA policy (dra+fgdpack
against one whole GPU of memory: the node where the claim strands the
fewest GPUs; dra+binpack, the former default, ranks the same). A new 8 GiB claim
then lands on the node that holds the claim, where the stock kube-scheduler,
whose default scores count no DRA device (LeastAllocated on CPU), puts it on
the emptier node: the same pod is scheduled by both. No kubelet: pods are
only bound. See docs/scheduler-plugin.md, "Pods with DRA claims".

A pod asking `nvidia.com/gpu: 1` with no claim, where a DeviceClass maps
nvidia.com/gpu (extendedResourceName, as the chart's gpushare.dev-whole): on
a node of the driver with no nvidia.com/gpu in its allocatable, DRA serves it,
and GpuShare steps aside there (docs/scheduler-plugin.md, "Pods whose
nvidia.com/gpu DRA serves").

The slices are what `gpushare-dra-driver slice` prints for
tests/data/dra/two-a100-gib.json: the driver itself when GPUSHARE_DRA_DRIVER
is set, else the same object written here.
"""

import json
import os
import subprocess
import time

import pytest

from harness import wait_until
from test_dra import CLASS, INVENTORY, NS, RESOURCE, release

DRIVER = "gpu.gpushare.dev"
FULL, EMPTY = "dra-full", "dra-empty"

pytestmark = pytest.mark.skipif(os.environ.get("GPUSHARE_KUBE_SCHEDULER") != "plugin",
                                reason="GpuShare's scoring of DRA claims: GPUSHARE_KUBE_SCHEDULER=plugin only")


def gpu_slice(node):
    """The driver's ResourceSlice for `node`: two 40 GiB GPUs whose memory is
    consumable capacity (request policy: whole GiB, default the whole GPU)."""
    driver = os.environ.get("GPUSHARE_DRA_DRIVER")
    if driver:
        out = subprocess.run([driver, "slice", "--node-name", node, "--inventory", INVENTORY],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out)
    with open(INVENTORY) as f:
        gpus = json.load(f)["gpus"]
    devices = []
    for g in gpus:
        total = f"{g['units']}Gi"
        devices.append({
            "name": f"gpu-{g['index']}",
            "allowMultipleAllocations": True,
            "attributes": {"uuid": {"string": g["uuid"]}, "productName": {"string": g["name"]},
                           "index": {"int": g["index"]}},
            "capacity": {"memory": {"value": total, "requestPolicy": {
                "default": total, "validRange": {"min": "1Gi", "step": "1Gi"}}}},
        })
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRIVER.replace('.', '-')}"},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}}


def claim_and_pod(api, name, memory, cpu, node=None):
    """A ResourceClaim for `memory` of one gpushare GPU and a pod using it,
    asking `cpu`; pinned to `node` by its hostname label when given."""
    api.request("POST", f"{RESOURCE}/namespaces/{NS}/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": CLASS, "capacity": {"requests": {"memory": memory}}}}]}}})
    spec = {"terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
            "containers": [{"name": "main", "image": "registry.invalid/e2e:never-pulled",
                            "resources": {"requests": {"cpu": cpu}, "claims": [{"name": "gpu"}]}}]}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    api.request("POST", f"/api/v1/namespaces/{NS}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})


def allocation(api, name):
    """(node, device, consumed memory) of claim `name`, or None."""
    claim = api.get(f"{RESOURCE}/namespaces/{NS}/resourceclaims/{name}")
    alloc = claim.get("status", {}).get("allocation")
    if not alloc:
        return None
    (result,) = alloc["devices"]["results"]
    assert result["driver"] == DRIVER, result
    return result["pool"], result["device"], result["consumedCapacity"]["memory"]


def placed(api, name, timeout=30):
    """Where pod and claim `name` went: (node the pod is bound to, the
    claim's allocation)."""
    node = api.wait_bound(name, timeout)
    return node, wait_until(f"claim {name} allocated", lambda: allocation(api, name), timeout, 0.2)


@pytest.fixture
def two_dra_nodes(cluster):
    """Two nodes of 8 CPUs with the driver's slices, gpushare's DeviceClass;
    no scheduler yet. Everything made is deleted."""
    api = cluster.api
    minor = int("".join(ch for ch in api.get("/version")["minor"] if ch.isdigit()))
    if minor < 36:
        pytest.skip(f"Kubernetes 1.{minor}: DRA's consumable capacity is off by default before 1.36")
    slices = [gpu_slice(FULL), gpu_slice(EMPTY)]
    for node in (FULL, EMPTY):
        api.create_node(node, 2, 40, cpu="8", memory="64Gi")
    for s in slices:
        api.request("POST", f"{RESOURCE}/resourceslices", s)
    api.request("POST", f"{RESOURCE}/deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": CLASS},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}},
        ok=(201, 409))
    try:
        yield cluster
    finally:
        for c in api.get(f"{RESOURCE}/namespaces/{NS}/resourceclaims")["items"]:
            release(api, c["metadata"]["name"])
        for s in slices:
            api.request("DELETE", f"{RESOURCE}/resourceslices/{s['metadata']['name']}",
                        ok=(200, 202, 404))
        api.request("DELETE", f"{RESOURCE}/deviceclasses/{CLASS}", ok=(200, 202, 404))


def test_gpushare_sends_a_dra_claim_to_the_fuller_node_stock_scoring_to_the_emptier(two_dra_nodes):
    cluster = two_dra_nodes
    api = cluster.api
    cluster.start_gpushare()
    # The held claim: 30 GiB of the full node's first GPU, its pod 2 of the
    # node's 8 CPUs (so LeastAllocated prefers the other node).
    claim_and_pod(api, "held", "30Gi", "2", node=FULL)
    assert placed(api, "held") == (FULL, (FULL, "gpu-0", "30Gi"))

    # GpuShare ranks the full node first (dra+fgdpack: first fit takes GPU 0
    # on either node; on the full one it was partly used already, its lost
    # memory drops from 10 GiB to 2, where the empty node's idle GPU would
    # lose 32 GiB; dra+binpack agrees: 2 GiB left against 32); DRA's
    # allocator takes the GPU.
    claim_and_pod(api, "probe", "8Gi", "1")
    assert placed(api, "probe") == (FULL, (FULL, "gpu-0", "8Gi"))
    # GpuShare filtered, reserved and bound nothing: no GPU annotations.
    assert not any(k.startswith("ALIYUN_COM_GPU_MEM")
                   for k in api.pod("probe")["metadata"].get("annotations", {}))

    # The stock kube-scheduler, the same pod: LeastAllocated on CPU sends
    # it to the empty node.
    cluster.stop_scheduler()
    release(api, "probe")
    wait_until("probe's claim deleted", lambda: "probe" not in {
        c["metadata"]["name"] for c in api.get(f"{RESOURCE}/namespaces/{NS}/resourceclaims")["items"]},
        30, 0.2)
    cluster.start_scheduler(with_extender=False)
    claim_and_pod(api, "probe-stock", "8Gi", "1")
    assert placed(api, "probe-stock") == (EMPTY, (EMPTY, "gpu-0", "8Gi"))


WHOLE_CLASS, DRA_ONLY = "gpushare.dev-whole", "dra-only"
GPUSHARE_ANNOTATIONS = ("ALIYUN_COM_GPU_MEM", "scheduler.framework.gpushare.")


def dra_only_node(api, name):
    """A node of gpushare-dra-driver alone: no device plugin, so no GPU
    resource in its capacity or allocatable."""
    capacity = {"cpu": "8", "memory": "64Gi", "pods": "110"}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    api.request("POST", "/api/v1/nodes", {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"capacity": capacity, "allocatable": dict(capacity),
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                   "message": "hand-made node of the e2e tests",
                                   "lastHeartbeatTime": now, "lastTransitionTime": now}],
                   "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}})


@pytest.fixture
def whole_gpu_class(cluster):
    """A node of the driver (two 40 GiB GPUs) without nvidia.com/gpu, and
    the DeviceClass that maps nvidia.com/gpu to the driver's devices; no
    scheduler yet. Everything made is deleted."""
    api = cluster.api
    minor = int("".join(ch for ch in api.get("/version")["minor"] if ch.isdigit()))
    if minor < 36:
        pytest.skip(f"Kubernetes 1.{minor}: DRA's extended resources are off by default before 1.36")
    dra_only_node(api, DRA_ONLY)
    slice_ = gpu_slice(DRA_ONLY)
    api.request("POST", f"{RESOURCE}/resourceslices", slice_)
    api.request("POST", f"{RESOURCE}/deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": WHOLE_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}],
                 "extendedResourceName": "nvidia.com/gpu"}},
        ok=(201, 409))
    try:
        yield cluster
    finally:
        for p in api.pods():
            api.delete_pod(p["metadata"]["name"])
        for c in api.get(f"{RESOURCE}/namespaces/{NS}/resourceclaims")["items"]:
            release(api, c["metadata"]["name"])
        api.request("DELETE", f"{RESOURCE}/resourceslices/{slice_['metadata']['name']}",
                    ok=(200, 202, 404))
        api.request("DELETE", f"{RESOURCE}/deviceclasses/{WHOLE_CLASS}", ok=(200, 202, 404))


def test_a_pod_asking_nvidia_gpu_gets_a_whole_gpu_through_dra_where_no_device_plugin_offers_it(
        whole_gpu_class):
    cluster = whole_gpu_class
    api = cluster.api
    cluster.start_gpushare()
    # As for a device plugin: limits nvidia.com/gpu, no claim. GpuShare used
    # to refuse the node ("1 node has no GPUs").
    api.create_pod("whole", whole_gpus=1)
    assert api.wait_bound("whole") == DRA_ONLY

    # DRA's allocator made the pod's claim and gave it one whole device of
    # the slice.
    status = wait_until("the pod's extendedResourceClaimStatus",
                        lambda: api.pod("whole")["status"].get("extendedResourceClaimStatus"), 30, 0.2)
    claim = api.get(f"{RESOURCE}/namespaces/{NS}/resourceclaims/{status['resourceClaimName']}")
    (request,) = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == WHOLE_CLASS, claim["spec"]
    assert "capacity" not in request["exactly"], claim["spec"]   # no amount: the whole GPU
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"]) == (DRIVER, DRA_ONLY), result
    assert result["device"] in {d["name"] for d in gpu_slice(DRA_ONLY)["spec"]["devices"]}, result
    assert result.get("consumedCapacity", {}).get("memory", "40Gi") == "40Gi", result
    # GpuShare reserved, annotated and bound nothing: DefaultBinder bound it.
    annotations = api.pod("whole")["metadata"].get("annotations", {})
    assert not [k for k in annotations if k.startswith(GPUSHARE_ANNOTATIONS)], annotations

    # A pod sharing GPU memory is still GpuShare's, which has no GPUs there.
    api.create_pod("shared", gpu_memory=4)

    def unschedulable():
        conds = api.pod("shared")["status"].get("conditions", [])
        return next((c for c in conds if c["type"] == "PodScheduled" and c["status"] == "False"), None)
    cond = wait_until("the gpu-mem pod unschedulable", unschedulable, 30, 0.2)
    assert cond["reason"] == "Unschedulable", cond
    assert not api.pod("shared")["spec"].get("nodeName")
