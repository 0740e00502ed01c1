"""gpushare-dra-driver's devices through the real kube-apiserver and
kube-scheduler of the pinned release (1.37, where DRA's consumable capacity
is on by default): the ResourceSlice the driver writes for a node of two
40 GiB GPUs passes the API server's validation, and kube-scheduler's own DRA
allocator shares each GPU's memory between claims, first fit in device
order, rounds a request up to whole GiB, never gives a GPU more than its
memory under a burst, and gives a claim without an amount a whole GPU.
This is the device choice the simulator's "dra" policies reproduce
(src/policies/dra_policy.h). No kubelet: pods are only bound.

The inventory is tests/data/dra/two-a100-gib.json, in the form
gpushare-device-plugin --discover prints.
"""

import json
import os
import subprocess
import time

import pytest

from harness import wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INVENTORY = os.path.join(ROOT, "tests", "data", "dra", "two-a100-gib.json")
RESOURCE = "/apis/resource.k8s.io/v1"
NS = "default"
NODE = "dra-node"
CLASS = "gpushare.dev"


@pytest.fixture(scope="module")
def driver_bin():
    path = os.environ.get("GPUSHARE_DRA_DRIVER")
    if not path:
        pytest.skip("GPUSHARE_DRA_DRIVER is not set (scripts/test.d/50-kube.sh builds it)")
    return path


@pytest.fixture
def dra(scheduler_alone, driver_bin):
    """A node with the driver's ResourceSlice and gpushare's DeviceClass,
    kube-scheduler without the extender; everything made is deleted."""
    api = scheduler_alone.api
    minor = int("".join(ch for ch in api.get("/version")["minor"] if ch.isdigit()))
    if minor < 36:
        pytest.skip(f"Kubernetes 1.{minor}: DRA's consumable capacity is off by default before 1.36")
    out = subprocess.run([driver_bin, "slice", "--node-name", NODE, "--inventory", INVENTORY],
                         check=True, capture_output=True, text=True).stdout
    slice_ = json.loads(out)
    api.create_node(NODE, 2, 40)
    api.request("POST", f"{RESOURCE}/resourceslices", slice_)
    api.request("POST", f"{RESOURCE}/deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": CLASS},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.gpushare.dev"'}}]}})
    try:
        yield scheduler_alone
    finally:
        for p in api.pods():
            api.delete_pod(p["metadata"]["name"])
        for c in api.get(f"{RESOURCE}/namespaces/{NS}/resourceclaims")["items"]:
            release(api, c["metadata"]["name"])
        api.request("DELETE", f"{RESOURCE}/resourceslices/{slice_['metadata']['name']}",
                    ok=(200, 202, 404))
        api.request("DELETE", f"{RESOURCE}/deviceclasses/{CLASS}", ok=(200, 202, 404))


def claim_and_pod(api, name, memory=None):
    """A ResourceClaim for one gpushare GPU (`memory` of it, or, when None,
    what the device's request policy gives by default) and a pod using it."""
    exactly = {"deviceClassName": CLASS}
    if memory is not None:
        exactly["capacity"] = {"requests": {"memory": memory}}
    api.request("POST", f"{RESOURCE}/namespaces/{NS}/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}})
    api.request("POST", f"/api/v1/namespaces/{NS}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 0,
                 "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                 "containers": [{"name": "main", "image": "registry.invalid/e2e:never-pulled",
                                 "resources": {"claims": [{"name": "gpu"}]}}]}})


def release(api, name):
    """Deletes pod and claim `name` and frees what the claim holds, as the
    resource claim controller of kube-controller-manager (not run here) does
    once the pod is gone: the reservation and the allocation cleared, then
    its finalizer removed."""
    api.delete_pod(name)
    path = f"{RESOURCE}/namespaces/{NS}/resourceclaims/{name}"
    merge = "application/merge-patch+json"
    api.request("PATCH", f"{path}/status", {"status": {"reservedFor": None, "allocation": None}},
                content_type=merge, ok=(200, 404))
    api.request("PATCH", path, {"metadata": {"finalizers": None}}, content_type=merge,
                ok=(200, 404))
    api.request("DELETE", path, ok=(200, 202, 404))


def allocation(api, name):
    """(device, consumed memory in GiB) of claim `name`, or None."""
    claim = api.get(f"{RESOURCE}/namespaces/{NS}/resourceclaims/{name}")
    alloc = claim.get("status", {}).get("allocation")
    if not alloc:
        return None
    (result,) = alloc["devices"]["results"]
    assert result["driver"] == "gpu.gpushare.dev" and result["pool"] == NODE, result
    return result["device"], gib(result["consumedCapacity"]["memory"])


def gib(quantity):
    units = {"Gi": 1, "Mi": 1 / 1024}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return float(quantity[:-len(suffix)]) * factor
    raise AssertionError(f"unexpected quantity {quantity}")


def placed(api, name, timeout=30):
    api.wait_bound(name, timeout)
    return wait_until(f"claim {name} allocated", lambda: allocation(api, name), timeout, 0.2)


def test_the_driver_slice_is_valid_and_claims_share_gpus_first_fit(dra):
    api = dra.api
    (stored,) = [s for s in api.get(f"{RESOURCE}/resourceslices")["items"]
                 if s["spec"]["driver"] == "gpu.gpushare.dev"]
    devices = {d["name"]: d for d in stored["spec"]["devices"]}
    assert set(devices) == {"gpu-0", "gpu-1"}
    assert devices["gpu-1"]["capacity"]["memory"]["value"] == "40Gi"
    assert devices["gpu-1"]["allowMultipleAllocations"] is True
    assert devices["gpu-1"]["attributes"]["uuid"]["string"] == \
        "GPU-1b1b1b1b-0000-0000-0000-000000000000"

    # First fit, in device order: the first GPU with room, not the fullest.
    expect = [("a", "30Gi", "gpu-0", 30), ("b", "30Gi", "gpu-1", 30),
              ("c", "8Gi", "gpu-0", 8),
              ("d", "1536Mi", "gpu-0", 2),  # Rounded up to 2 GiB: GPU 0's last 2.
              ("e", "9Gi", "gpu-1", 9)]
    for name, memory, device, consumed in expect:
        claim_and_pod(api, name, memory)
        assert placed(api, name) == (device, consumed), name
    # 0 and 1 GiB left: 2 GiB fits nowhere, and no claim is given more.
    claim_and_pod(api, "f", "2Gi")
    # A claim naming no amount takes the request policy's default: a whole GPU.
    claim_and_pod(api, "whole", None)
    wait_until("f and whole reported unschedulable", lambda: all(
        any(c.get("reason") == "Unschedulable" for c in
            api.pod(n).get("status", {}).get("conditions", [])) for n in ("f", "whole")), 30, 0.5)
    assert allocation(api, "f") is None and allocation(api, "whole") is None
    # Once GPU 1 is free (b and e released), the waiting f has the first of
    # it that fits.
    for name in ("b", "e", "whole"):
        release(api, name)
    assert placed(api, "f") == ("gpu-1", 2)
    # With f released too, a claim of no amount has the whole GPU.
    release(api, "f")
    claims = f"{RESOURCE}/namespaces/{NS}/resourceclaims"
    wait_until("f deleted", lambda: "f" not in {
        c["metadata"]["name"] for c in api.get(claims)["items"]}, 30, 0.2)
    time.sleep(1)  # kube-scheduler's informers follow a moment later.
    claim_and_pod(api, "whole-again", None)
    assert placed(api, "whole-again") == ("gpu-1", 40)


def test_a_burst_of_claims_never_overcommits_a_gpu(dra):
    api = dra.api
    names = [f"burst-{i}" for i in range(10)]
    for name in names:  # 10 x 9 GiB against 2 x 40 GiB: four fit on each.
        claim_and_pod(api, name, "9Gi")

    seen = {}

    def settled():
        seen.update({n: allocation(api, n) for n in names})
        return dict(seen) if sum(1 for a in seen.values() if a) == 8 else None
    try:
        got = wait_until("eight of ten claims allocated", settled, 60, 0.5)
    except Exception:
        print(f"\nallocations: {seen}")
        raise
    per_device = {}
    for a in got.values():
        if a:
            per_device[a[0]] = per_device.get(a[0], 0) + a[1]
    assert per_device == {"gpu-0": 36, "gpu-1": 36}, per_device
    bound = [n for n in names if api.pod(n)["spec"].get("nodeName")]
    assert sorted(bound) == sorted(n for n, a in got.items() if a)
