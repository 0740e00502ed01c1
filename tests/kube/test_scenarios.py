"""gpushare-extender behind a real kube-scheduler and kube-apiserver, or
(GPUSHARE_KUBE_SCHEDULER=plugin, conftest.py) kube-scheduler with the GpuShare
plugin: the same scenarios and expectations in both modes.

Every assertion reads the API objects (spec.nodeName, the device plugin's
annotations, events), never gpushare's own view.
"""

import json
import os
import time

import pytest

from harness import (SlowBindWebhook, gpu_allocation, node_gpus, used_per_gpu, wait_until,
                     yaml_or_json)

T4 = 14
V100 = 15


def bound_node(api, name, timeout=30):
    return api.wait_bound(name, timeout)


def assert_pending(api, name, seconds=5):
    """The pod stays unbound for `seconds` (kube-scheduler had time to try)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert not api.pod(name)["spec"].get("nodeName"), f"{name} was bound"
        time.sleep(0.25)


def failed_scheduling_messages(api, name, timeout=30):
    def messages():
        return [e["message"] for e in api.events_for(name) if e["reason"] == "FailedScheduling"]
    return wait_until(f"a FailedScheduling event for {name}", messages, timeout, 0.25)


def assert_no_oversubscription(api):
    nodes = {n["metadata"]["name"]: node_gpus(n) for n in api.nodes()}
    for node, gpus in used_per_gpu(api).items():
        count, per_gpu = nodes[node]
        for g, units in gpus.items():
            assert 0 <= g < count, f"{node} has no GPU {g}"
            assert units <= per_gpu, f"{node} GPU {g}: {units} units promised of {per_gpu}"


def test_s1_binpack_two_t4_nodes(gpushare):
    api = gpushare.api
    api.create_node("sd-cluster-04", gpus=1, gpu_memory=T4)
    api.create_node("sd-cluster-05", gpus=1, gpu_memory=T4)

    api.create_pod("binpack-1", gpu_memory=2)
    first = bound_node(api, "binpack-1")
    other = ({"sd-cluster-04", "sd-cluster-05"} - {first}).pop()

    api.create_pod("binpack-2-0", gpu_memory=8)
    assert bound_node(api, "binpack-2-0") == first  # binpack: the used node
    api.create_pod("binpack-2-1", gpu_memory=8)
    assert bound_node(api, "binpack-2-1") == other  # 4 free left on the first

    api.create_pod("binpack-3", gpu_memory=2)
    assert bound_node(api, "binpack-3") == first    # 4 free there, 6 on the other
    api.create_pod("binpack-4", gpu_memory=5)
    assert bound_node(api, "binpack-4") == other

    used = used_per_gpu(api)
    assert used == {first: {0: 12}, other: {0: 13}}
    for pod in api.pods():
        ann = pod["metadata"]["annotations"]
        assert ann["ALIYUN_COM_GPU_MEM_IDX"] == "0"
        assert ann["ALIYUN_COM_GPU_MEM_DEV"] == str(T4)
        assert ann["ALIYUN_COM_GPU_MEM_POD"] == pod["spec"]["containers"][0]["resources"][
            "limits"]["aliyun.com/gpu-mem"]
        assert ann["ALIYUN_COM_GPU_MEM_ASSIGNED"] == "false"
    assert_no_oversubscription(api)


def test_multi_card_two_units_on_each_of_four_gpus(gpushare):
    api = gpushare.api
    api.create_node("v100x4", gpus=4, gpu_memory=V100)
    api.create_node("t4x2", gpus=2, gpu_memory=T4)
    api.create_pod("split", gpu_memory=8, gpu_count=4)
    assert bound_node(api, "split") == "v100x4"
    pod = api.pod("split")
    assert gpu_allocation(pod) == {0: 2, 1: 2, 2: 2, 3: 2}
    assert pod["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_DEV"] == str(V100)
    assert_no_oversubscription(api)


def test_exclusive_gpus_beside_shared_pods(gpushare):
    api = gpushare.api
    api.create_node("t4x2", gpus=2, gpu_memory=T4)
    api.create_pod("shared-a", gpu_memory=4)
    bound_node(api, "shared-a")
    (shared_gpu,) = gpu_allocation(api.pod("shared-a"))
    api.create_pod("whole-a", whole_gpus=1)
    bound_node(api, "whole-a")
    # The exclusive pod takes the idle GPU, all of it.
    assert gpu_allocation(api.pod("whole-a")) == {1 - shared_gpu: T4}
    # No idle GPU is left, though the node has 2 nvidia.com/gpu and one is "free".
    api.create_pod("whole-b", whole_gpus=1)
    assert "idle GPU" in " ".join(failed_scheduling_messages(api, "whole-b"))
    assert_pending(api, "whole-b", 2)
    # Shared work goes beside the other shared pod, never onto the exclusive GPU.
    api.create_pod("shared-b", gpu_memory=4)
    bound_node(api, "shared-b")
    assert gpu_allocation(api.pod("shared-b")) == {shared_gpu: 4}
    assert_no_oversubscription(api)


def fill_two_gpus_ten_each(api):
    """One node with two 14-unit GPUs, 10 units used on each: 8 free by node total."""
    api.create_node("t4x2", gpus=2, gpu_memory=T4)
    for name in ("ten-a", "ten-b"):
        api.create_pod(name, gpu_memory=10)
        bound_node(api, name)


def test_fits_by_node_total_but_on_no_gpu_stays_pending(gpushare):
    api = gpushare.api
    fill_two_gpus_ten_each(api)
    assert used_per_gpu(api) == {"t4x2": {0: 10, 1: 10}}
    api.create_pod("seven", gpu_memory=7)  # 8 free on the node, 4 on each GPU
    messages = failed_scheduling_messages(api, "seven")
    assert any("single GPU" in m for m in messages), messages
    assert_pending(api, "seven", 3)
    assert_no_oversubscription(api)


def test_a_gpu_pod_bound_past_the_scheduler_holds_its_node(gpushare):
    """A pod created with spec.nodeName (as another scheduler would bind it)
    carries no bind annotations, so gpushare cannot tell which GPU it uses:
    8 units on one of two 14-unit GPUs. A 12-unit pod fits the node's total
    (20 free) and, by gpushare's count without that pod, either GPU; placed
    there, it could share a GPU with the 8 units. So the node takes no GPU
    pod until that pod is gone, and the event says why."""
    api = gpushare.api
    api.create_node("t4x2", gpus=2, gpu_memory=T4)
    api.create_pod("by-hand", gpu_memory=8, node_name="t4x2")
    time.sleep(1)  # The scheduler's watch sees it (milliseconds, usually).
    api.create_pod("twelve", gpu_memory=12)
    messages = failed_scheduling_messages(api, "twelve")
    assert any("did not place" in m and "by-hand" in m for m in messages), messages
    assert_pending(api, "twelve", 3)
    api.delete_pod("by-hand")
    assert bound_node(api, "twelve", timeout=30) == "t4x2"
    assert_no_oversubscription(api)


def test_pods_without_gpus_are_scheduled_too(gpushare):
    """gpushare leaves pods that ask for no GPU to kube-scheduler's own
    plugins (the extender is not called for them, the plugin skips them at
    PreFilter): bound, with no GPU annotations, beside a GPU pod."""
    api = gpushare.api
    api.create_node("t4-a", gpus=1, gpu_memory=T4)
    api.create_pod("web")
    api.create_pod("eight", gpu_memory=8)
    assert bound_node(api, "web") == "t4-a"
    assert bound_node(api, "eight") == "t4-a"
    assert gpu_allocation(api.pod("web")) is None
    assert used_per_gpu(api) == {"t4-a": {0: 8}}


def test_delete_frees_units(gpushare):
    api = gpushare.api
    api.create_node("t4-a", gpus=1, gpu_memory=T4)
    for name, units in (("eight", 8), ("six", 6)):
        api.create_pod(name, gpu_memory=units)
        bound_node(api, name)
    api.create_pod("five", gpu_memory=5)
    failed_scheduling_messages(api, "five")
    api.delete_pod("six")
    assert bound_node(api, "five", timeout=30) == "t4-a"
    assert used_per_gpu(api) == {"t4-a": {0: 13}}
    assert_no_oversubscription(api)


def test_a_node_added_later_is_used(gpushare):
    api = gpushare.api
    api.create_node("t4-a", gpus=1, gpu_memory=T4)
    api.create_pod("eight", gpu_memory=8)
    bound_node(api, "eight")
    api.create_pod("twelve", gpu_memory=12)
    failed_scheduling_messages(api, "twelve")
    api.create_node("t4-b", gpus=1, gpu_memory=T4)
    assert bound_node(api, "twelve", timeout=60) == "t4-b"
    assert used_per_gpu(api) == {"t4-a": {0: 8}, "t4-b": {0: 12}}
    assert_no_oversubscription(api)


def test_pending_pods_bound_within_seconds_after_a_delete(gpushare):
    """kube-scheduler re-queues pending pods at once on a pod delete; an
    extender that has not yet seen the delete rejects them again, and with no
    further event they wait for the 5-minute flush of the unschedulable pool."""
    api = gpushare.api
    api.create_node("t4-a", gpus=1, gpu_memory=T4)
    api.create_pod("big", gpu_memory=12)
    bound_node(api, "big")
    for name in ("w1", "w2"):
        api.create_pod(name, gpu_memory=6)
        failed_scheduling_messages(api, name)
    time.sleep(2)  # Let both settle in the unschedulable pool.
    api.delete_pod("big")
    start = time.monotonic()
    for name in ("w1", "w2"):
        bound_node(api, name, timeout=15)
    took = time.monotonic() - start
    print(f"pending pods bound {took:.2f} s after the delete")
    assert took < 5, f"pending pods waited {took:.1f} s after the delete"
    assert used_per_gpu(api) == {"t4-a": {0: 12}}


# ---- The extender killed in the middle of a burst ---------------------------

def fits_somewhere(request_units, gpu_count, nodes, used):
    """Whether a pending pod would fit on some node given the bound pods."""
    for name, (count, per_gpu) in nodes.items():
        free = [per_gpu - used.get(name, {}).get(g, 0) for g in range(count)]
        if gpu_count is None and max(free, default=0) >= request_units:
            return True
        if gpu_count and sum(1 for f in free if f >= request_units // gpu_count) >= gpu_count:
            return True
    return False


def assert_settles(api, pods, timeout):
    """Waits until every pending pod of `pods` ({name: (units, gpu_count)})
    fits nowhere, checking capacity at every step; then every bound pod has
    bind annotations giving exactly its units over its GPU count. Returns the
    final pods."""
    nodes = {n["metadata"]["name"]: node_gpus(n) for n in api.nodes()}

    def settled():
        assert_no_oversubscription(api)   # at every step, not only at the end
        used = used_per_gpu(api)
        return not [p["metadata"]["name"] for p in api.pods() if not p["spec"].get("nodeName")
                    and fits_somewhere(*pods[p["metadata"]["name"]], nodes, used)]
    wait_until("every pending pod to fit nowhere", settled, timeout, 1)
    final = api.pods()
    assert_bound_as_asked([p for p in final if p["spec"].get("nodeName")], pods)
    assert_no_oversubscription(api)
    return final


def assert_bound_as_asked(bound, pods):
    """Every pod of `bound` has bind annotations giving exactly the units
    over the GPU count it asked for (`pods`: {name: (units, gpu_count)})."""
    for p in bound:
        units, count = pods[p["metadata"]["name"]]
        alloc = gpu_allocation(p)
        assert alloc is not None, f"{p['metadata']['name']} bound without annotations"
        assert sum(alloc.values()) == units
        assert len(alloc) == (count or 1)


def test_a_bind_slower_than_a_reservation_ttl_promises_no_gpu_twice(cluster):
    """Binds take 6 s (a slow admission webhook on pods/binding) and the
    configuration still says reservationTTLSeconds: 2, which GpuShare used
    to honour: its reservation of the first pod's GPU ran out while the pod
    was binding, and two pods asking a whole GPU each were given both GPUs,
    one of them the first pod's (24 of 14 units). Reservations now hold until
    the bind settles: one whole-GPU pod gets the idle GPU, the other waits."""
    if not cluster.plugin:
        pytest.skip("the extender binds within its own client timeout, below its "
                    "reservation TTL; slow binds are the plugin's case")
    binary, config_path = cluster.plugin
    with open(config_path) as f:
        config = yaml_or_json(f.read())
    for profile in config["profiles"]:
        for entry in profile.get("pluginConfig", []):
            if entry["name"] == "GpuShare":
                entry.setdefault("args", {})["reservationTTLSeconds"] = 2
    path = os.path.join(cluster.workdir, "slow-bind-config.json")
    with open(path, "w") as f:
        json.dump(config, f)
    api = cluster.api
    api.create_node("t4x2", gpus=2, gpu_memory=T4)
    cluster.start_scheduler(with_extender=False, binary=binary, plugin_config=path)
    hook = SlowBindWebhook(cluster, "slow-", 6)
    try:
        hook.wait_active(api)
        api.create_pod("slow-shared", gpu_memory=10)
        wait_until("slow-shared's bind to start", lambda: "slow-shared" in hook.seen, 30, 0.1)
        time.sleep(3)  # Past the 2 s the configuration asks.
        api.create_pod("slow-whole-a", whole_gpus=1)
        api.create_pod("slow-whole-b", whole_gpus=1)
        names = ("slow-shared", "slow-whole-a", "slow-whole-b")

        def bound():
            return [n for n in names if api.pod(n)["spec"].get("nodeName")]
        wait_until("two of the three pods bound", lambda: len(bound()) >= 2, 45, 0.25)
        time.sleep(8)  # Any third bind in flight ends meanwhile.
        assert_no_oversubscription(api)
        assert "slow-shared" in bound()
        assert len(bound()) == 2, bound()
        (waiting,) = set(names) - set(bound())
        assert "idle GPU" in " ".join(failed_scheduling_messages(api, waiting))
    finally:
        hook.close()


def test_a_high_priority_gpu_pod_preempts_the_fewest_victims_on_one_gpu(gpushare):
    """Three 14-unit GPUs hold 8 units each (6 free on each): a pod asking
    10 fits the node by its total of aliyun.com/gpu-mem, on no GPU. It
    preempts one pod, the one whose GPU it then takes, and the lowest in
    priority; the others stay. While that victim terminates (it has a grace
    period, and no kubelet here confirms it), a pod of lower priority asking
    6 units, which fits a GPU now and the node's total even with the
    nominated pod counted, is kept off the node: placed on the victim's GPU
    it would leave the preemptor nowhere once the victim is gone. Then the
    victim is gone: the preemptor binds on its GPU, and the other pod beside."""
    if not gpushare.plugin:
        pytest.skip("kube-scheduler chooses victims with its own plugins, which see the node's "
                    "totals: an extender's preempt verb can only drop candidates, so a pod that "
                    "fits the total but no GPU never preempts through it (the plugin's case)")
    api = gpushare.api
    for name, value in (("gpushare-e2e-top", 1000), ("gpushare-e2e-mid", 100),
                        ("gpushare-e2e-low", 50)):
        api.create_priority_class(name, value)
    api.create_node("t4x3", gpus=3, gpu_memory=T4)
    # One by one, so that binpack puts each on its own GPU, in this order.
    for name, priority in (("victim", "gpushare-e2e-low"), ("keep-1", "gpushare-e2e-mid"),
                           ("keep-2", "gpushare-e2e-mid")):
        api.create_pod(name, gpu_memory=8, priority_class=priority, grace_seconds=30)
        bound_node(api, name)
    assert used_per_gpu(api) == {"t4x3": {0: 8, 1: 8, 2: 8}}
    assert gpu_allocation(api.pod("victim")) == {0: 8}

    api.create_pod("urgent", gpu_memory=10, priority_class="gpushare-e2e-top")
    wait_until("urgent nominated to t4x3",
               lambda: api.pod("urgent").get("status", {}).get("nominatedNodeName") == "t4x3",
               30, 0.25)
    wait_until("the victim terminating",
               lambda: api.pod("victim")["metadata"].get("deletionTimestamp"), 30, 0.25)
    time.sleep(2)  # Room for a wrong second victim.
    for name in ("keep-1", "keep-2"):
        assert not api.pod(name)["metadata"].get("deletionTimestamp"), f"{name} was preempted"
    assert not api.pod("urgent")["spec"].get("nodeName"), "bound while the victim still holds its GPU"

    api.create_pod("later", gpu_memory=6, priority_class="gpushare-e2e-low")
    messages = failed_scheduling_messages(api, "later")
    assert any("nominated" in m for m in messages), messages
    assert_pending(api, "later", 4)
    assert_no_oversubscription(api)

    api.delete_pod("victim")  # What its kubelet confirms once the container stopped.
    assert bound_node(api, "urgent", timeout=30) == "t4x3"
    assert gpu_allocation(api.pod("urgent")) == {0: 10}
    assert bound_node(api, "later", timeout=30) == "t4x3"
    assert gpu_allocation(api.pod("later")) in ({1: 6}, {2: 6})
    assert_no_oversubscription(api)


def test_extender_killed_and_restarted_during_a_burst_of_200_pods(gpushare):
    """In plugin mode kube-scheduler itself is killed and restarted: the
    restart lists the cluster again, as the extender's does."""
    import random
    from concurrent.futures import ThreadPoolExecutor
    api = gpushare.api
    for i in range(10):
        api.create_node(f"gpu-{i:02d}", gpus=4, gpu_memory=16)   # 640 units
    rng = random.Random(20240601)
    pods = {}
    for i in range(200):
        if rng.random() < 0.1:
            pods[f"burst-{i:03d}"] = (8, 2)                      # 4 units on 2 GPUs
        else:
            pods[f"burst-{i:03d}"] = (rng.choice([1, 2, 3, 4, 6, 8]), None)
    assert sum(u for u, _ in pods.values()) > 640  # some must stay pending

    def create(items):
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda kv: api.create_pod(kv[0], gpu_memory=kv[1][0],
                                                    gpu_count=kv[1][1]), items))

    def bound_count():
        return sum(1 for p in api.pods() if p["spec"].get("nodeName"))
    items = list(pods.items())
    create(items[:100])
    wait_until("30 pods bound", lambda: bound_count() >= 30, 120, 0.02)
    gpushare.kill_gpushare()        # SIGKILL, in the middle of the first half
    killed_at = bound_count()
    create(items[100:])             # kube-scheduler's calls now fail (or it is down)
    time.sleep(2)
    gpushare.restart_gpushare()     # the extender on the same port (kube-scheduler's
                                    # config still holds), or kube-scheduler
    final = assert_settles(api, pods, 180)
    bound = [p for p in final if p["spec"].get("nodeName")]
    assert len(final) == 200
    print(f"burst: {killed_at} bound at the kill, {len(bound)} bound in the end, "
          f"{len(final) - len(bound)} pending that fit nowhere")
    # The restarted extender (or scheduler) went on binding (the second half
    # came after the kill).
    assert len(bound) > killed_at, (killed_at, len(bound))


def test_churn_at_the_default_client_rate_promises_no_gpu_twice(cluster):
    """kube-scheduler at its own client rate (50/s, burst 100), which the
    shipped configurations keep, so binds queue behind the rate limit: a
    burst of 150 GPU pods asks more than eight nodes of two 14-unit GPUs
    have, then bound GPU pods are deleted and new ones created, 20 a second,
    while binds are still in flight. No GPU is promised more than it has at
    any step, and every pod left pending fits nowhere."""
    import random
    from concurrent.futures import ThreadPoolExecutor
    api = cluster.api
    for i in range(8):
        api.create_node(f"churn-{i}", gpus=2, gpu_memory=T4)    # 224 units
    cluster.start_gpushare(qps=50, burst=100)
    rng = random.Random(20261202)
    pods = {}

    def new_pod(name):
        pods[name] = (4, 2) if rng.random() < 0.1 else (rng.choice([1, 2, 2, 3, 4, 6]), None)
        return name
    burst = [new_pod(f"burst-{i:03d}") for i in range(150)]
    assert sum(pods[n][0] for n in burst) > 224  # some must stay pending
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: api.create_pod(n, gpu_memory=pods[n][0], gpu_count=pods[n][1]),
                      burst))

    def bound_names():
        return [p["metadata"]["name"] for p in api.pods() if p["spec"].get("nodeName")]
    wait_until("40 pods bound", lambda: len(bound_names()) >= 40, 60, 0.1)
    victims = bound_names()
    rng.shuffle(victims)
    for i in range(60):
        if not victims:
            victims = bound_names()
            rng.shuffle(victims)
        api.delete_pod(victims.pop())
        name = new_pod(f"churn-{i:03d}")
        api.create_pod(name, gpu_memory=pods[name][0], gpu_count=pods[name][1])
        if i % 10 == 0:
            assert_no_oversubscription(api)
        time.sleep(0.05)
    final = assert_settles(api, pods, 120)
    bound = [p for p in final if p["spec"].get("nodeName")]
    assert len(final) == 150
    print(f"churn: {len(bound)} bound, {len(final) - len(bound)} pending that fit nowhere")


# ---- The same scenarios with kube-scheduler alone -------------------------------

COMPARISON = {}


def record(case, mode, outcome):
    COMPARISON.setdefault(case, {})[mode] = outcome


@pytest.fixture(params=["gpushare", "alone"])
def mode(request, cluster):
    if request.param == "gpushare":
        cluster.start_gpushare()
    elif cluster.plugin:
        pytest.skip("kube-scheduler alone is the same program and test in extender mode")
    else:
        cluster.start_scheduler(with_extender=False)
    return request.param


def test_compare_seven_units_beside_ten_and_ten(cluster, mode):
    """Two T4s with 10 units used on each: 8 free by node total, 4 per GPU."""
    api = cluster.api
    fill_two_gpus_ten_each(api)
    api.create_pod("seven", gpu_memory=7)
    if mode == "gpushare":
        failed_scheduling_messages(api, "seven")
        assert_pending(api, "seven", 2)
        record("7 units beside 10+10 on two 14-unit GPUs", mode, "Pending (no GPU has 7 free)")
    else:
        bound_node(api, "seven")
        # Bound by node total: whichever GPU it gets is promised 17 of 14 units.
        record("7 units beside 10+10 on two 14-unit GPUs", mode,
               "bound: a GPU promised 17/14 units")


def test_compare_multi_card_on_a_two_gpu_node(cluster, mode):
    api = cluster.api
    api.create_node("t4x2", gpus=2, gpu_memory=T4)
    api.create_pod("split", gpu_memory=8, gpu_count=4)
    case = "8 units over 4 GPUs, only a 2-GPU node"
    if mode == "gpushare":
        assert "GPUs" in " ".join(failed_scheduling_messages(api, "split"))
        assert_pending(api, "split", 2)
        record(case, mode, "Pending (needs 4 GPUs)")
    else:
        bound_node(api, "split")
        assert gpu_allocation(api.pod("split")) is None
        record(case, mode, "bound with no GPU assignment")


def test_compare_exclusive_gpus_beside_shared_pods(cluster, mode):
    api = cluster.api
    api.create_node("t4x2", gpus=2, gpu_memory=T4)
    for name in ("shared-a", "shared-b"):
        api.create_pod(name, gpu_memory=4)
        bound_node(api, name)
    for name in ("whole-a", "whole-b"):
        api.create_pod(name, whole_gpus=1)
    case = "2 whole-GPU pods beside 2 shared pods on 2 GPUs"
    if mode == "gpushare":
        # binpack put both shared pods on one GPU: one whole GPU is left.
        first = wait_until("one whole-GPU pod bound", lambda: [
            n for n in ("whole-a", "whole-b") if api.pod(n)["spec"].get("nodeName")], 30)
        assert len(first) == 1
        (pending,) = {"whole-a", "whole-b"} - set(first)
        assert "idle GPU" in " ".join(failed_scheduling_messages(api, pending))
        assert_pending(api, pending, 2)
        assert_no_oversubscription(api)
        record(case, mode, "1 bound, 1 Pending (no idle GPU)")
    else:
        bound_node(api, "whole-a")
        bound_node(api, "whole-b")
        record(case, mode, "both bound: a GPU both shared and exclusive")


def comparison_table(gpushare="gpushare-extender"):
    lines = [f"| scenario | {gpushare} | kube-scheduler alone |", "|---|---|---|"]
    for case, modes in COMPARISON.items():
        lines.append(f"| {case} | {modes.get('gpushare', '-')} | {modes.get('alone', '-')} |")
    return "\n".join(lines)
