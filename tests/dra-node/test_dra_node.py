"""gpushare-dra-driver on a real node: kubelet 1.37 (DRA's consumable
capacity and device taints on by default), containerd 2 injecting the CDI
devices the driver hands the kubelet, runc, kube-scheduler's own DRA
allocator (with the GpuShare plugin when the stage provides it), and
kube-controller-manager's resource claim controller making claims from
templates and releasing them when pods end. The GPUs are the NVML
stand-in's (tests/nvml_stub) two 40 GiB A100s.

What is checked: claims of each kind (a share of one GPU, N units over two
GPUs, a whole GPU) reach their containers as the variables the device
plugin sets; a claim that does not fit waits and is placed when a pod ends
and its claim is released; a burst never puts more on a GPU than it has,
in the allocations or in the containers; an unhealthy GPU is tainted and
new claims avoid it; and the node itself refuses a forged allocation that
would overcommit a GPU.
"""

import signal
import time

import pytest

from harness import ApiError, HarnessError, wait_until
from node_harness import IMAGE, NODE_NAME, TWO_A100, fixture_gpus
from dra_harness import CLASS, RESOURCE, WHOLE_GPU_RESOURCE

NS = "default"
SCRIPT = ("env | grep -E '^(NVIDIA_VISIBLE_DEVICES|ALIYUN_COM_GPU_MEM_[A-Z]+)=' | sort; "
          "echo END-OF-ENV; exec sleep 3600")
POD_RUNNING = 90
GPUS = fixture_gpus(TWO_A100)  # [(uuid, units)]


# ---------------------------------------------------------------- helpers

def template(api, name, memory=None, count=1):
    """A ResourceClaimTemplate of one request: `count` gpushare GPUs with
    `memory` each (None: no amount, the whole GPU by the request policy)."""
    exactly = {"deviceClassName": CLASS, "count": count}
    if memory is not None:
        exactly["capacity"] = {"requests": {"memory": memory}}
    api.request("POST", f"{RESOURCE}/namespaces/{NS}/resourceclaimtemplates", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}},
        ok=(201, 409))


def create_pod(api, name, template_name=None, claim_name=None, node_name=None, limits=None):
    """A pod whose container prints its GPU variables, with one claim: from
    template `template_name`, or the existing claim `claim_name`; or, with
    `limits`, none but those extended resources in its container."""
    claim = {"name": "gpu"}
    if template_name:
        claim["resourceClaimTemplateName"] = template_name
    else:
        claim["resourceClaimName"] = claim_name
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "gpushare-dra-e2e"}},
        "spec": {
            "hostNetwork": True, "automountServiceAccountToken": False,
            "enableServiceLinks": False, "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [claim],
            "containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "Never",
                            "command": ["/bin/sh", "-c", SCRIPT],
                            "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }
    if limits:
        del pod["spec"]["resourceClaims"]
        pod["spec"]["containers"][0]["resources"] = {"limits": limits}
    if node_name:
        pod["spec"]["nodeName"] = node_name
    return api.request("POST", f"/api/v1/namespaces/{NS}/pods", pod)


def wait_running(api, name, timeout=POD_RUNNING):
    def running():
        pod = api.pod(name)
        if pod["status"].get("phase") == "Failed":
            raise HarnessError(f"pod {name} failed: {pod['status']}")
        return pod if pod["status"].get("phase") == "Running" else None
    return wait_until(f"pod {name} Running", running, timeout, 0.2)


def container_env(api, name):
    path = f"/api/v1/namespaces/{NS}/pods/{name}/log?container=main"

    def printed():
        text = api.request("GET", path)
        return text if isinstance(text, str) and "END-OF-ENV" in text else None
    text = wait_until(f"the log of {name}", printed, 30, 0.2)
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def pod_claim(node, pod_name):
    """The ResourceClaim of pod `pod_name` (made from its template)."""
    pod = node.api.pod(pod_name)
    statuses = pod["status"].get("resourceClaimStatuses") or []
    name = statuses[0]["resourceClaimName"] if statuses else None
    for c in node.claims():
        if c["metadata"]["name"] == name:
            return c
    raise AssertionError(f"no claim of pod {pod_name}: {statuses}")


def allocated(claim):
    """[(device, GiB)] of a claim's allocation."""
    out = []
    for r in claim["status"]["allocation"]["devices"]["results"]:
        mem = (r.get("consumedCapacity") or {}).get("memory", "")
        out.append((r["device"], int(mem[:-2]) if mem.endswith("Gi") else None))
    return out


def expect_env(env, gpus, per_gpu, pod_total):
    """The device plugin's variables for GPUs `gpus` (indices)."""
    want = {
        "NVIDIA_VISIBLE_DEVICES": ",".join(GPUS[g][0] for g in gpus),
        "ALIYUN_COM_GPU_MEM_IDX": "-".join(str(g) for g in gpus),
        "ALIYUN_COM_GPU_MEM_CONTAINER": str(per_gpu),
        "ALIYUN_COM_GPU_MEM_DEV": str(GPUS[gpus[0]][1]),
        "ALIYUN_COM_GPU_MEM_POD": str(pod_total),
    }
    assert env == want, f"container environment {env}, want {want}"


def put_claim_status(api, name, status):
    """Writes claim `name`'s status as given (retrying while controllers
    change the claim underneath)."""
    path = f"{RESOURCE}/namespaces/{NS}/resourceclaims/{name}"
    for _ in range(20):
        claim = api.get(path)
        claim["status"] = status
        try:
            return api.request("PUT", path + "/status", claim)
        except ApiError as e:
            if e.status != 409:
                raise
            time.sleep(0.1)
    raise HarnessError(f"claim {name}'s status kept changing")


def pending_reason(api, name):
    pod = api.pod(name)
    cond = [c for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled"]
    return (pod["spec"].get("nodeName"), cond[0].get("message", "") if cond else "")


# ---------------------------------------------------------------- tests

def test_claims_of_each_kind_reach_their_containers_and_are_released(dra_node):
    node, api = dra_node, dra_node.api
    node.use_fixture(TWO_A100)
    template(api, "whole")
    template(api, "share-8", "8Gi")
    template(api, "two-by-16", "16Gi", count=2)

    # A whole GPU: the first, gpu-0, all 40 units.
    create_pod(api, "whole", "whole")
    wait_running(api, "whole")
    assert allocated(pod_claim(node, "whole")) == [("gpu-0", 40)]
    expect_env(container_env(api, "whole"), [0], 40, 40)

    # 8 units: gpu-0 is full, so gpu-1.
    create_pod(api, "share", "share-8")
    wait_running(api, "share")
    assert allocated(pod_claim(node, "share")) == [("gpu-1", 8)]
    expect_env(container_env(api, "share"), [1], 8, 8)
    assert len(node.prepared_files()) == 2  # One CDI spec per prepared claim.

    # 16 units on each of two GPUs: gpu-0 has none left, so it waits.
    create_pod(api, "pair", "two-by-16")
    wait_until("pod pair unschedulable",
               lambda: "cannot allocate all claims" in pending_reason(api, "pair")[1]
               or "resourceclaim" in pending_reason(api, "pair")[1].lower(), 30, 0.2)
    assert pending_reason(api, "pair")[0] is None

    # The whole GPU's pod ends: its claim is released and deleted, its
    # CDI spec removed, and the pair is placed on gpu-0 and gpu-1.
    whole_claim = pod_claim(node, "whole")["metadata"]["name"]
    api.delete_pod("whole")
    wait_running(api, "pair")
    assert sorted(allocated(pod_claim(node, "pair"))) == [("gpu-0", 16), ("gpu-1", 16)]
    expect_env(container_env(api, "pair"), [0, 1], 16, 32)
    wait_until("the whole GPU's claim deleted",
               lambda: whole_claim not in [c["metadata"]["name"] for c in node.claims()], 30, 0.2)
    wait_until("two CDI specs left", lambda: len(node.prepared_files()) == 2, 30, 0.2)


def test_a_pod_asking_nvidia_com_gpu_gets_a_whole_gpu_through_dra(dra_node):
    """Existing pod specs keep working: the chart's class gpushare.dev-whole
    serves the extended resource nvidia.com/gpu (no device plugin offers it
    here), kube-scheduler writes the claim, one whole GPU per unit."""
    node, api = dra_node, dra_node.api
    node.use_fixture(TWO_A100)
    template(api, "share-8", "8Gi")
    create_pod(api, "share", "share-8")
    wait_running(api, "share")  # gpu-0 holds 8 units: no whole GPU there.
    create_pod(api, "legacy", limits={WHOLE_GPU_RESOURCE: "1"})
    pod = wait_running(api, "legacy")
    status = pod["status"].get("extendedResourceClaimStatus") or {}
    claim = api.get(f"{RESOURCE}/namespaces/{NS}/resourceclaims/{status['resourceClaimName']}")
    assert allocated(claim) == [("gpu-1", 40)], claim["status"]
    expect_env(container_env(api, "legacy"), [1], 40, 40)


def test_a_burst_never_puts_more_on_a_gpu_than_it_has(dra_node):
    node, api = dra_node, dra_node.api
    node.use_fixture(TWO_A100)
    template(api, "share-9", "9Gi")
    names = [f"burst-{i}" for i in range(12)]
    for n in names:
        create_pod(api, n, "share-9")
    # Four 9 GiB claims fit a 40 GiB GPU: eight run, four wait.
    wait_until("eight pods running", lambda: sum(
        api.pod(n)["status"].get("phase") == "Running" for n in names) >= 8, POD_RUNNING, 0.5)
    time.sleep(3)  # Nothing more is placed.
    running = [n for n in names if api.pod(n)["status"].get("phase") == "Running"]
    assert len(running) == 8, running
    held = {0: 0, 1: 0}
    for n in running:
        env = container_env(api, n)
        assert env["ALIYUN_COM_GPU_MEM_CONTAINER"] == "9", env
        held[int(env["ALIYUN_COM_GPU_MEM_IDX"])] += 9
    assert held == {0: 36, 1: 36}, held
    per_device = {}
    for c in node.claims():
        if c["status"].get("allocation"):
            for dev, gib in allocated(c):
                per_device[dev] = per_device.get(dev, 0) + gib
    assert per_device == {"gpu-0": 36, "gpu-1": 36}, per_device
    # When they end, every claim goes and the node prepares none.
    for n in names:
        api.delete_pod(n)
    wait_until("every claim deleted", lambda: not node.claims(), 60, 0.5)
    wait_until("no CDI spec left", lambda: not node.prepared_files(), 30, 0.2)


def test_the_driver_killed_during_a_burst_still_overcommits_nothing(dra_node):
    """SIGKILL of the driver while the kubelet prepares a burst of claims,
    then a restart and a second burst: every pod that runs has its
    variables, no GPU holds more than it has, one CDI spec per running
    claim, and the restarted driver unprepares what the killed one
    prepared."""
    node, api = dra_node, dra_node.api
    node.use_fixture(TWO_A100)
    template(api, "share-9", "9Gi")
    first = [f"kill-a{i}" for i in range(6)]
    for n in first:
        create_pod(api, n, "share-9")
    wait_until("a claim prepared", lambda: node.prepared_files(), 60, 0.05)
    node.stop_driver(signal.SIGKILL)
    time.sleep(1)
    node.start_driver(TWO_A100)
    second = [f"kill-b{i}" for i in range(6)]
    for n in second:
        create_pod(api, n, "share-9")
    names = first + second
    wait_until("eight pods running", lambda: sum(
        api.pod(n)["status"].get("phase") == "Running" for n in names) >= 8, POD_RUNNING, 0.5)
    time.sleep(3)
    running = [n for n in names if api.pod(n)["status"].get("phase") == "Running"]
    assert len(running) == 8, running
    held = {0: 0, 1: 0}
    for n in running:
        env = container_env(api, n)
        held[int(env["ALIYUN_COM_GPU_MEM_IDX"])] += int(env["ALIYUN_COM_GPU_MEM_CONTAINER"])
    assert held == {0: 36, 1: 36}, held
    assert len(node.prepared_files()) == 8, node.prepared_files()
    for n in names:
        api.delete_pod(n)
    wait_until("no CDI spec left", lambda: not node.prepared_files(), 60, 0.2)


def test_an_unhealthy_gpu_is_tainted_and_new_claims_avoid_it(dra_node):
    node, api = dra_node, dra_node.api
    node.use_fixture(TWO_A100)
    node.write_faults({"events": [{"gpu": 0, "xid": 79}]})

    def tainted():
        devs = {d["name"]: d.get("taints") or [] for d in node.devices()}
        return devs if devs.get("gpu-0") and not devs.get("gpu-1") else None
    devs = wait_until("gpu-0 tainted in the ResourceSlice", tainted, 20, 0.2)
    (taint,) = devs["gpu-0"]
    assert (taint["key"], taint["value"], taint["effect"]) == (
        "gpu.gpushare.dev/unhealthy", "XID-79", "NoSchedule"), taint
    template(api, "share-8", "8Gi")
    create_pod(api, "after-xid", "share-8")
    wait_running(api, "after-xid")
    # First fit would take gpu-0; the taint sends the claim to gpu-1.
    assert allocated(pod_claim(node, "after-xid")) == [("gpu-1", 8)]
    expect_env(container_env(api, "after-xid"), [1], 8, 8)
    api.delete_pod("after-xid")


def test_the_node_refuses_a_forged_allocation_that_overcommits_a_gpu(dra_node):
    """Whoever can write a claim's status (not a pod author, but a
    compromised controller) could allocate a GPU twice over; the driver
    counts what it prepared, also across its own restart (a SIGKILL
    here), and refuses, naming the GPU."""
    node, api = dra_node, dra_node.api
    node.use_fixture(TWO_A100)
    template(api, "share-30", "30Gi")
    create_pod(api, "holder", "share-30")
    wait_running(api, "holder")
    assert allocated(pod_claim(node, "holder")) == [("gpu-0", 30)]
    node.stop_driver(signal.SIGKILL)
    node.start_driver(TWO_A100)  # It knows the holder's 30 units only from its CDI spec.

    api.request("POST", f"{RESOURCE}/namespaces/{NS}/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "forged"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": CLASS, "capacity": {"requests": {"memory": "30Gi"}}}}]}}})
    pod = create_pod(api, "forger", claim_name="forged", node_name=NODE_NAME)
    put_claim_status(api, "forged", {
        "allocation": {"devices": {"results": [{
            "request": "gpu", "driver": "gpu.gpushare.dev", "pool": NODE_NAME,
            "device": "gpu-0", "shareID": "0b5e8a4c-6a55-4f0e-9a1e-7c1f3a0d2b11",
            "consumedCapacity": {"memory": "30Gi"}}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{
                "key": "metadata.name", "operator": "In", "values": [NODE_NAME]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "forger", "uid": pod["metadata"]["uid"]}],
    })

    def refused():
        events = api.get(f"/api/v1/namespaces/{NS}/events")["items"]
        return [e["message"] for e in events
                if e["involvedObject"].get("name") == "forger"
                and "GPU 0 would hold 60 units" in e.get("message", "")]
    messages = wait_until("the driver refusing the forged claim", refused, 60, 0.5)
    assert "it has 40" in messages[0], messages
    assert api.pod("forger")["status"].get("phase") == "Pending"
    assert len(node.prepared_files()) == 1  # Only the holder's.
    api.delete_pod("forger")
    # Release the forged claim as the controller would (nothing was prepared).
    put_claim_status(api, "forged", {})
