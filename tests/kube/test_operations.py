"""Operating gpushare-extender in a real cluster: two replicas with leader
election (the leader SIGKILLed during a burst), /metrics parsed with
prometheus_client's reference parser, the deploy/ manifests applied with
server-side validation and their RBAC checked with `kubectl auth can-i`, and
the kubectl plugin's table for scenario S1, the read-only planner
(POST /gpushare-scheduler/plan), and the deploy/fgdpack overlay: rendered by
kubectl, validated by the API server, and its target workload served by the
extender to a real kube-scheduler.

Every assertion on placements reads the API objects (spec.nodeName, the bind
annotations, events); the metrics are compared with them.
"""

import collections
import json
import os
import random
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from harness import (HarnessError, free_port, gpu_allocation, node_gpus, used_per_gpu,
                     wait_until)
from test_scenarios import (assert_bound_as_asked, assert_no_oversubscription,
                            failed_scheduling_messages, fits_somewhere)

HERE = os.path.dirname(os.path.abspath(__file__))
DEPLOY = os.path.join(os.path.dirname(os.path.dirname(HERE)), "deploy")
DEPLOY_FGDPACK = os.path.join(DEPLOY, "fgdpack")
LEASE_SECONDS = 15      # The extender's default lease duration.
RETRY_SECONDS = 2       # Its default retry period.


def parse_metrics(text):
    """{sample name: {frozenset(labels): value}} through the reference parser."""
    from prometheus_client.parser import text_string_to_metric_families
    samples = collections.defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[s.name][frozenset(s.labels.items())] = s.value
    return samples


def value(samples, name, **labels):
    return samples.get(name, {}).get(frozenset(labels.items()), 0.0)


def role(cluster, port):
    status, body = cluster.extender_get(port, "/readyz")
    return json.loads(body).get("role") if status == 200 else None


def scheduled_events(api):
    """{pod name: Scheduled events counted} (a repeated event is counted by its count)."""
    counts = collections.Counter()
    for e in api.get("/api/v1/namespaces/default/events")["items"]:
        if e.get("reason") == "Scheduled":
            counts[e["involvedObject"]["name"]] += e.get("count") or 1
    return counts


@pytest.mark.extender_only("two extender replicas, their leader election and /metrics; the "
                             "plugin runs inside kube-scheduler (whose leader election is off "
                             "here)")
def test_leader_killed_during_a_burst_the_follower_takes_over(cluster):
    api = cluster.api
    for i in range(8):
        api.create_node(f"gpu-{i:02d}", gpus=4, gpu_memory=16)   # 512 units
    ports = cluster.start_replicas(("replica-a", "replica-b"))
    leader = wait_until("a leader", lambda: (cluster.lease() or {}).get("spec", {})
                        .get("holderIdentity"), 30)
    (follower,) = set(ports) - {leader}
    wait_until("the leader synced", lambda: role(cluster, ports[leader]) == "leader", 30)
    assert role(cluster, ports[follower]) == f"follower (leader: {leader})"
    # Only clients with a certificate of the cluster's CA are served: a
    # stranger cannot filter, bind or release (kube-scheduler presents its own).
    # Without a certificate only the kubelet's probes are answered.
    for port in ports.values():
        assert cluster.extender_request(port, "GET", "/readyz", client_cert=False)[0] == 200
        for path in ("filter", "bind", "release"):
            status, _ = cluster.extender_request(port, "POST", "/gpushare-scheduler/" + path,
                                                 body={}, client_cert=False)
            assert status == 403, path
    cluster.start_scheduler(with_extender=True)

    rng = random.Random(20240602)
    pods = {}
    for i in range(160):
        pods[f"ha-{i:03d}"] = (8, 2) if rng.random() < 0.1 else (
            rng.choice([1, 2, 3, 4, 6, 8]), None)
    assert sum(u for u, _ in pods.values()) > 512   # some must stay pending

    def create(items):
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda kv: api.create_pod(kv[0], gpu_memory=kv[1][0],
                                                    gpu_count=kv[1][1]), items))

    def bound_count():
        return sum(1 for p in api.pods() if p["spec"].get("nodeName"))
    items = list(pods.items())
    create(items[:80])
    wait_until("25 pods bound", lambda: bound_count() >= 25, 120, 0.02)
    follower_before = parse_metrics(cluster.extender_get(ports[follower], "/metrics")[1])
    cluster.procs[leader].kill()          # SIGKILL in the middle of the burst
    killed = time.monotonic()
    time.sleep(0.5)                        # Requests it sent are done at the API server.
    bound_at_kill = bound_count()
    create(items[80:])
    wait_until("the follower leading", lambda: role(cluster, ports[follower]) == "leader",
               LEASE_SECONDS + 3 * RETRY_SECONDS + 10, 0.1)
    takeover = time.monotonic() - killed
    nodes = {n["metadata"]["name"]: node_gpus(n) for n in api.nodes()}

    def settled():
        assert_no_oversubscription(api)   # at every step
        used = used_per_gpu(api)
        return not [p for p in api.pods() if not p["spec"].get("nodeName")
                    and fits_somewhere(*pods[p["metadata"]["name"]], nodes, used)]
    wait_until("every pending pod to fit nowhere", settled, 180, 1)
    final = api.pods()
    bound = [p for p in final if p["spec"].get("nodeName")]
    print(f"leader {leader} killed with {bound_at_kill} pods bound; {follower} leading "
          f"{takeover:.1f} s later; {len(bound)} bound in the end, "
          f"{len(final) - len(bound)} pending that fit nowhere")
    # Within the lease duration (counted from the last renewal the follower
    # saw, at most one retry period before the kill), plus its resync.
    assert takeover <= LEASE_SECONDS + RETRY_SECONDS + 3, takeover
    assert len(bound) > bound_at_kill
    assert_bound_as_asked(bound, pods)
    assert_no_oversubscription(api)
    # No pod bound twice: kube-scheduler reports at most one successful
    # binding per pod (none for a pod whose bind reply was lost with the
    # killed leader although its Binding was written).
    names = {p["metadata"]["name"] for p in bound}
    time.sleep(2)   # Events are written asynchronously.
    events = scheduled_events(api)
    assert {n: c for n, c in events.items() if c > 1} == {}
    assert set(events) <= names
    unreported = names - set(events)
    assert len(unreported) <= 10, unreported   # Binds in flight at the kill.
    print(f"{len(unreported)} bound pods without a Scheduled event: {sorted(unreported)}")
    lease = cluster.lease()["spec"]
    assert lease["holderIdentity"] == follower
    assert lease["leaseTransitions"] == 1

    # The follower forwarded binds to the leader before the kill, bound none itself.
    assert value(follower_before, "gpushare_extender_leader", identity=follower) == 0
    assert value(follower_before, "gpushare_extender_binds_total", result="bound") == 0
    # The survivor's metrics tell the same story as the API objects.
    m = parse_metrics(cluster.extender_get(ports[follower], "/metrics")[1])
    assert value(m, "gpushare_extender_leader", identity=follower) == 1
    assert value(m, "gpushare_extender_leader_transitions") == 1
    bound_here = value(m, "gpushare_extender_binds_total", result="bound")
    assert bound_here == len(bound) - bound_at_kill, (bound_here, len(bound), bound_at_kill)
    assert value(m, "gpushare_extender_bind_api_results_total", code="OK") <= bound_here
    filters = sum(v for k, v in m["gpushare_extender_requests_total"].items()
                  if ("route", "filter") in k)
    assert filters > 0
    assert value(m, "gpushare_extender_request_duration_seconds_count", route="filter") == filters
    assert sum(m["gpushare_extender_api_requests_total"].values()) > 0
    used = used_per_gpu(api)
    for node in nodes:
        labels = {"node": node, "model": "unknown"}
        assert value(m, "gpushare_node_gpu_memory_total_units", **labels) == 64
        assert value(m, "gpushare_node_gpu_memory_allocated_units", **labels) == \
            sum(used.get(node, {}).values()), node
    assert value(m, "gpushare_model_gpu_memory_allocated_units", model="unknown") == \
        sum(sum(g.values()) for g in used.values())
    assert "gpushare_gpu_memory_fragmentation_units" in m
    with open(f"/proc/{cluster.procs[follower].proc.pid}/status") as f:
        rss = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    print(f"survivor metrics: {bound_here:.0f} bound, {filters:.0f} filter calls, "
          f"fragmentation {value(m, 'gpushare_gpu_memory_fragmentation_units'):.0f} units; "
          f"peak RSS {int(rss) // 1024} MiB; before the kill the follower forwarded "
          f"{value(follower_before, 'gpushare_extender_binds_total', result='forwarded'):.0f} "
          f"binds to the leader")


@pytest.mark.extender_only("the extender replicas' Lease; the plugin runs inside "
                             "kube-scheduler")
def test_a_stopped_leader_releases_the_lease_and_the_follower_takes_over_at_once(cluster):
    """SIGTERM (a rolling update): the leader releases the Lease, so the
    follower leads within a retry period or two, not the lease duration."""
    api = cluster.api
    api.create_node("t4-a", gpus=1, gpu_memory=14)
    ports = cluster.start_replicas(("replica-a", "replica-b"))
    leader = wait_until("a leader", lambda: (cluster.lease() or {}).get("spec", {})
                        .get("holderIdentity"), 30)
    (follower,) = set(ports) - {leader}
    wait_until("the leader synced", lambda: role(cluster, ports[leader]) == "leader", 30)
    cluster.start_scheduler(with_extender=True)
    api.create_pod("before", gpu_memory=6)
    api.wait_bound("before")
    stopping = time.monotonic()
    cluster.procs[leader].stop()                   # SIGTERM, waits for the exit
    stopped = time.monotonic() - stopping
    released = cluster.lease()["spec"]
    assert released.get("holderIdentity") in ("", None, follower), released
    wait_until("the follower leading", lambda: role(cluster, ports[follower]) == "leader",
               3 * RETRY_SECONDS + 5, 0.05)
    took = time.monotonic() - stopping
    print(f"{leader} stopped in {stopped:.2f} s; {follower} leading {took:.2f} s after the SIGTERM")
    assert took < 2 * RETRY_SECONDS + 3, took
    api.create_pod("after", gpu_memory=6)
    api.wait_bound("after")
    assert used_per_gpu(api) == {"t4-a": {0: 12}}
    assert cluster.lease()["spec"]["leaseTransitions"] == 1


# ---- deploy/ against the real API server ----------------------------------------

def kubectl(cluster, *args, check=True):
    env = {**os.environ, "KUBECONFIG": cluster.admin_kubeconfig}
    r = subprocess.run([os.path.join(cluster.kube_bin, "kubectl"), *args], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    if check and r.returncode != 0:
        raise HarnessError(f"kubectl {' '.join(args)}: {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


SA = "system:serviceaccount:kube-system:gpushare-extender"
# What the extender does (extender/api_client.cc, reflector.cc, requeue.cc, leader.cc).
ALLOWED = [
    ("list", "nodes"), ("watch", "nodes"),
    ("list", "pods"), ("watch", "pods"), ("get", "pods"), ("patch", "pods"),
    ("create", "pods", "--subresource=binding"),
    ("create", "leases.coordination.k8s.io", "-n", "kube-system"),
    ("get", "leases.coordination.k8s.io/gpushare-extender", "-n", "kube-system"),
    ("update", "leases.coordination.k8s.io/gpushare-extender", "-n", "kube-system"),
    ("create", "tokenreviews.authentication.k8s.io"),
    ("create", "subjectaccessreviews.authorization.k8s.io"),
]
DENIED = [
    ("delete", "pods"), ("create", "pods"), ("update", "pods"), ("get", "secrets"),
    ("list", "secrets", "-A"), ("get", "nodes"), ("patch", "nodes"), ("delete", "nodes"),
    ("create", "pods", "--subresource=eviction"), ("get", "configmaps", "-n", "kube-system"),
    ("update", "leases.coordination.k8s.io/kube-scheduler", "-n", "kube-system"),
    ("create", "leases.coordination.k8s.io", "-n", "default"),
    ("delete", "leases.coordination.k8s.io/gpushare-extender", "-n", "kube-system"),
]

DP_SA = "system:serviceaccount:kube-system:gpushare-devices"
# What the device plugin does (device-plugin/main.cc, kube.cc).
DP_ALLOWED = [("list", "pods"), ("watch", "pods"), ("patch", "pods"), ("patch", "nodes")]
DP_DENIED = [
    ("get", "pods"), ("delete", "pods"), ("create", "pods"),
    ("update", "pods"), ("get", "secrets"), ("list", "nodes"), ("update", "nodes"),
    ("delete", "nodes"), ("create", "pods", "--subresource=binding"),
]


def can_i_mismatches(cluster, sa, allowed, denied):
    """(what, verb, ...) for each answer of `kubectl auth can-i --as sa` that
    differs from the lists."""
    wrong = []
    for verb, *rest in allowed:
        r = kubectl(cluster, "auth", "can-i", verb, *rest, "--as", sa, check=False)
        if r.stdout.strip() != "yes":
            wrong.append(("denied", verb, *rest))
    for verb, *rest in denied:
        r = kubectl(cluster, "auth", "can-i", verb, *rest, "--as", sa, check=False)
        if r.stdout.strip() != "no":
            wrong.append(("allowed", verb, *rest))
    return wrong


@pytest.mark.extender_only("deploy/'s extender manifests and RBAC; plugin mode runs with "
                             "deploy/scheduler-plugin/rbac.yaml and scheduler-config.yaml")
def test_manifests_apply_and_grant_exactly_what_the_extender_needs(cluster):
    kubectl(cluster, "apply", "--server-side", "--dry-run=server", "-k", DEPLOY)
    try:
        kubectl(cluster, "apply", "--server-side", "-k", DEPLOY)
        dep = cluster.api.get("/apis/apps/v1/namespaces/kube-system/deployments/gpushare-extender")
        assert dep["spec"]["replicas"] == 2
        pod = dep["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        c = pod["containers"][0]
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert "--leader-elect" in c["args"]
        # HTTPS with client certificates; the kubelet's probes speak HTTPS.
        assert "--client-ca-file=/etc/gpushare-tls/ca.crt" in c["args"]
        assert any(a.startswith("https://") for a in c["args"])
        for probe in ("readinessProbe", "livenessProbe"):
            assert c[probe]["httpGet"]["scheme"] == "HTTPS"
        assert pod["subdomain"] == "gpushare-extender-peers"
        peers = cluster.api.get("/api/v1/namespaces/kube-system/services/gpushare-extender-peers")
        assert peers["spec"]["clusterIP"] == "None"
        policy = cluster.api.get(
            "/apis/networking.k8s.io/v1/namespaces/kube-system/networkpolicies/gpushare-extender")
        assert policy["spec"]["podSelector"]["matchLabels"] == {
            "app.kubernetes.io/name": "gpushare-extender"}
        cm = cluster.api.get("/api/v1/namespaces/kube-system/configmaps/gpushare-scheduler-config")
        config = cm["data"]["scheduler-config.yaml"]
        assert "https://gpushare-extender.kube-system.svc:32766" in config
        assert "certFile: /etc/kubernetes/gpushare/scheduler.crt" in config
        assert can_i_mismatches(cluster, SA, ALLOWED, DENIED) == []
        # The device plugin's DaemonSet: on GPU nodes labelled for sharing,
        # with the kubelet's folders, no capabilities, and its own RBAC.
        ds = cluster.api.get("/apis/apps/v1/namespaces/kube-system/daemonsets/gpushare-device-plugin")
        spec = ds["spec"]["template"]["spec"]
        assert spec["nodeSelector"] == {"gpushare": "true"}
        dc = spec["containers"][0]
        assert dc["image"].startswith("gpushare-device-plugin:")
        assert dc["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert dc["securityContext"]["readOnlyRootFilesystem"] is True
        env = {e["name"]: e for e in dc["env"]}
        assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
        mounts = {m["mountPath"] for m in dc["volumeMounts"]}
        assert mounts == {"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources"}
        assert can_i_mismatches(cluster, DP_SA, DP_ALLOWED, DP_DENIED) == []
        # The admission policies that let only the scheduler write the
        # annotations (tests/kube/test_admission.py tries them), trusting the
        # device plugin's service account.
        for name in ("gpushare-annotations", "gpushare-device-plugin-node"):
            vap = cluster.api.get(
                f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{name}")
            assert vap["spec"]["failurePolicy"] == "Fail"
            binding = cluster.api.get(
                f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{name}")
            assert binding["spec"]["validationActions"] == ["Deny"]
            assert "paramRef" not in binding["spec"], binding
            plugins = next(v for v in vap["spec"]["variables"] if v["name"] == "devicePlugins")
            assert plugins["expression"] == f"['{DP_SA}']", plugins
    finally:
        kubectl(cluster, "delete", "--wait=false", "--ignore-not-found", "-k", DEPLOY, check=False)
        cluster.wait_admission_policies_gone()


@pytest.mark.extender_only("deploy/'s device plugin overlay; the scheduler does not matter")
def test_the_volume_mounts_overlay_closes_the_envvar_hole(cluster):
    """deploy/device-plugin-volume-mounts: the plugin hands out volume mounts
    and reaches NVML through one itself, so nothing of it needs the NVIDIA
    toolkit to accept NVIDIA_VISIBLE_DEVICES from unprivileged pods."""
    overlay = os.path.join(DEPLOY, "device-plugin-volume-mounts")
    kubectl(cluster, "apply", "--server-side", "--dry-run=server", "-k", overlay)
    rendered = kubectl(cluster, "kustomize", overlay).stdout
    (ds,) = [o for o in yaml.safe_load_all(rendered) if o and o["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert "--device-list-strategy=volume-mounts" in c["args"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "/var/run/nvidia-container-devices"
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volume = mounts["/var/run/nvidia-container-devices/all"]
    (v,) = [v for v in spec["volumes"] if v["name"] == volume]
    assert v["hostPath"] == {"path": "/dev/null", "type": "CharDevice"}


@pytest.mark.extender_only("the deploy/fgdpack overlay configures the extender (its flags, "
                             "its ConfigMap)")
def test_fgdpack_overlay_serves_its_target_workload(cluster, tmp_path):
    """deploy/fgdpack: the API server's view of the rendered objects (server-side
    dry run), then the ConfigMap's target workload given to a real extender
    with the overlay's flags, which kube-scheduler then calls."""
    r = kubectl(cluster, "apply", "--server-side", "--dry-run=server", "-k", DEPLOY_FGDPACK,
                "-o", "json")
    objects = json.loads(r.stdout)
    objects = objects.get("items", [objects])
    by_kind = collections.defaultdict(list)
    for o in objects:
        by_kind[o["kind"]].append(o)
    (dep,) = by_kind["Deployment"]
    pod = dep["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert "--policy=fgdpack" in args and "--policy=binpack" not in args
    flag = "--target-workload=/etc/gpushare/target-workload.json"
    assert flag in args
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["target-workload"] == {"name": "target-workload",
                                         "mountPath": "/etc/gpushare", "readOnly": True}
    assert mounts["tls"]["mountPath"] == "/etc/gpushare-tls"  # The base's, kept.
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "gpushare-extender-tls"
    cm_name = volumes["target-workload"]["configMap"]["name"]
    assert cm_name.startswith("gpushare-target-workload-")  # The content hash.
    (cm,) = [c for c in by_kind["ConfigMap"] if c["metadata"]["name"] == cm_name]
    assert cm["metadata"]["namespace"] == "kube-system"
    target = cm["data"]["target-workload.json"]
    with open(os.path.join(DEPLOY_FGDPACK, "target-workload.json")) as f:
        assert json.loads(target) == json.load(f)
    # The base's other objects come along unchanged.
    assert {"ServiceAccount", "Service", "ClusterRole", "Role"} <= set(by_kind)

    # The extender with the Deployment's own arguments, as the kubelet would
    # run them (the pod's name and IP substituted, the ConfigMap's file
    # written, the Secret's files made by deploy/make-certs.sh), but on the
    # harness's address and port and with the harness's serving certificate
    # (given after these, so it wins), which kube-scheduler trusts.
    path = tmp_path / "target-workload.json"
    path.write_text(target)
    certs = tmp_path / "certs"
    subprocess.run([os.path.join(DEPLOY, "make-certs.sh"), str(certs)], check=True,
                   capture_output=True, timeout=120)
    env = {"$(POD_NAME)": "gpushare-extender-e2e", "$(POD_IP)": "127.0.0.1"}
    run_args = []
    for a in args:
        for k, v in env.items():
            a = a.replace(k, v)
        if a.startswith(("--address=", "--port=")):
            continue
        a = a.replace("/etc/gpushare-tls", str(certs))
        run_args.append(a.replace("/etc/gpushare/target-workload.json", str(path)))
    assert "--leader-forward-ca=%s/ca.crt" % certs in run_args
    assert "--target-workload=" + str(path) in run_args
    # First with an empty target: the flag is read, and the process refuses to start.
    bad = tmp_path / "empty-target.json"
    bad.write_text('{"resource": "memory", "tasks": []}')
    with pytest.raises(HarnessError, match="exited with 2"):
        cluster.start_extender(extra_args=[a.replace(str(path), str(bad)) for a in run_args])
    cluster.start_extender(extra_args=run_args)
    cluster.start_scheduler(with_extender=True)
    api = cluster.api
    api.create_node("t4-a", gpus=2, gpu_memory=16)
    api.create_node("t4-b", gpus=2, gpu_memory=16)
    sizes = [8, 4, 8, 2, 16, 4, 2, 8]
    for i, units in enumerate(sizes):
        api.create_pod(f"fgdpack-{i}", gpu_memory=units)
    for i in range(len(sizes)):
        api.wait_bound(f"fgdpack-{i}")
    used = used_per_gpu(api)
    assert sum(sum(g.values()) for g in used.values()) == sum(sizes)
    assert_no_oversubscription(api)


# ---- kubectl inspect gpushare ----------------------------------------------------

@pytest.mark.extender_only("kubectl inspect reads only the pods' annotations, which S1 "
                             "checks in plugin mode; its tables are tested once, here")
def test_kubectl_inspect_gpushare_prints_s1(cluster):
    """Scenario S1 (test_scenarios.test_s1_binpack_two_t4_nodes), then the
    plugin run by kubectl itself (`kubectl inspect gpushare` finds
    kubectl-inspect-gpushare on PATH)."""
    from test_scenarios import test_s1_binpack_two_t4_nodes
    cluster.start_extender()
    cluster.start_scheduler(with_extender=True)
    test_s1_binpack_two_t4_nodes(cluster)
    used = {n: sum(g.values()) for n, g in used_per_gpu(cluster.api).items()}
    a, b = used["sd-cluster-04"], used["sd-cluster-05"]
    assert sorted((a, b)) == [12, 13]
    plugin_dir = os.path.dirname(cluster.extender_bin)
    assert os.access(os.path.join(plugin_dir, "kubectl-inspect-gpushare"), os.X_OK)
    env = {**os.environ, "KUBECONFIG": cluster.admin_kubeconfig,
           "PATH": plugin_dir + os.pathsep + os.environ.get("PATH", "")}
    kubectl_bin = os.path.join(cluster.kube_bin, "kubectl")

    def run(*args, env=env):
        r = subprocess.run([kubectl_bin, "inspect", "gpushare", *args], env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout
    table = run()
    assert table == (
        "NAME           IPADDRESS  GPU0(Allocated/Total)  GPU Memory(GiB)\n"
        f"sd-cluster-04  127.0.0.1  {a}/14                  {a}/14\n"
        f"sd-cluster-05  127.0.0.1  {b}/14                  {b}/14\n"
        "----------------------------------------------------------\n"
        "Allocated/Total GPU Memory In Cluster:\n"
        "25/28 (89%)\n"), table
    details = run("-d")
    pods = {p["metadata"]["name"]: (p["spec"]["nodeName"], gpu_allocation(p)[0])
            for p in cluster.api.pods()}
    for node, total in (("sd-cluster-04", a), ("sd-cluster-05", b)):
        block = details.split("NAME:       " + node + "\n")[1].split("-----")[0]
        rows = {line.split()[0]: line.split()[1:] for line in block.splitlines()[3:]
                if line and not line.startswith(("Allocated", "Total"))}
        assert rows == {n: ["default", str(u)] for n, (on, u) in pods.items() if on == node}
        m = re.search(r"^Allocated :\s+(\d+) \((\d+)%\)$", block, re.M)
        assert m and m.groups() == (str(total), str(total * 100 // 14)), block
    assert details.endswith("Allocated/Total GPU Memory In Cluster:  25/28 (89%)\n")
    print(table + details)

    # The same through a credential plugin (a kubeconfig user with exec, the
    # way EKS, GKE, AKS and OIDC logins give tokens): here a script that
    # hands out a service account token, with the variables the kubeconfig
    # sets and the request in KUBERNETES_EXEC_INFO.
    cluster.api.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                         "metadata": {"name": "gpushare-e2e-inspector"},
                         "rules": [{"apiGroups": [""], "resources": ["nodes", "pods"],
                                    "verbs": ["get", "list"]}]}, ok=(201, 409))
    token = cluster.service_account_token("inspector", cluster_role="gpushare-e2e-inspector")
    plugin = os.path.join(cluster.workdir, "get-token.sh")
    runs = os.path.join(cluster.workdir, "get-token.runs")
    with open(plugin, "w") as f:
        f.write("#!/bin/sh\n"
                f"echo \"$*|$KUBERNETES_EXEC_INFO\" >> {runs}\n"
                "printf '{\"apiVersion\": \"client.authentication.k8s.io/v1\", "
                "\"kind\": \"ExecCredential\", \"status\": {\"token\": \"%s\"}}' \"$TOKEN\"\n")
    os.chmod(plugin, 0o755)
    with open(cluster.admin_kubeconfig) as f:
        admin = yaml.safe_load(f)
    exec_kubeconfig = os.path.join(cluster.workdir, "exec.kubeconfig")
    with open(exec_kubeconfig, "w") as f:
        yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "sso",
            "clusters": admin["clusters"],
            "contexts": [{"name": "sso", "context": {
                "cluster": admin["clusters"][0]["name"], "user": "sso"}}],
            "users": [{"name": "sso", "user": {"exec": {
                "apiVersion": "client.authentication.k8s.io/v1", "command": "./get-token.sh",
                "args": ["--cluster", "e2e"], "env": [{"name": "TOKEN", "value": token}],
                "interactiveMode": "Never", "provideClusterInfo": True}}}]}, f)
    assert run(env={**env, "KUBECONFIG": exec_kubeconfig}) == table
    with open(runs) as f:
        args, info = f.readline().rstrip("\n").split("|", 1)
    assert args == "--cluster e2e"
    info = json.loads(info)
    assert info["spec"]["interactive"] is False
    assert info["spec"]["cluster"]["server"] == cluster.server


# ---- Prometheus: /metrics with a service account token ---------------------------

MONITORING = os.path.join(DEPLOY, "monitoring")


@pytest.mark.extender_only("the extender's /metrics; the plugin's metrics are kube-scheduler's")
def test_metrics_are_scraped_with_a_service_account_token(cluster):
    """Prometheus' way in: no client certificate, its service account's
    token, which the extender has the API server review (TokenReview,
    SubjectAccessReview). deploy/monitoring's ClusterRole and binding are
    applied as shipped; a token of another account, a made-up token and a
    valid token on any other route are refused; the alert rules name only
    metrics the scrape has."""
    api = cluster.api
    cluster.start_extender(extra_args=("--leader-elect", "true"))  # As deployed: its gauges too.
    api.create_node("t4-a", gpus=1, gpu_memory=14)
    api.request("POST", "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "monitoring"}},
                ok=(201, 409))
    with open(os.path.join(MONITORING, "metrics-reader.yaml")) as f:
        objects = [o for o in yaml.safe_load_all(f) if o]
    for o in objects:
        kind = o["kind"].lower() + "s"
        api.request("POST", f"/apis/rbac.authorization.k8s.io/v1/{kind}", o, ok=(201, 409))
    (binding,) = [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    (subject,) = binding["subjects"]
    prometheus = cluster.service_account_token(subject["name"], namespace=subject["namespace"])
    stranger = cluster.service_account_token("stranger")
    port = cluster.extender_port

    def scrape(token, method="GET", path="/metrics", body=None):
        return cluster.extender_request(port, method, path, body=body, client_cert=False,
                                        token=token)

    status, text = scrape(prometheus)
    assert status == 200, text
    m = parse_metrics(text)
    assert value(m, "gpushare_node_gpu_memory_total_units", node="t4-a", model="unknown") == 14
    status, body = scrape(stranger)
    assert status == 403, body
    assert "system:serviceaccount:default:stranger" in json.loads(body)["Error"], body
    status, body = scrape("made-up-token")
    assert status == 401, body
    assert scrape(None)[0] == 403
    # The token opens /metrics only.
    for method, path, body in (("GET", "/gpushare-scheduler/inspect", None),
                               ("POST", "/gpushare-scheduler/filter", {}),
                               ("POST", "/gpushare-scheduler/bind", {})):
        status, reply = scrape(prometheus, method, path, body)
        assert status == 403, (method, path, reply)
        assert "client certificate" in json.loads(reply)["Error"]
    # Repeated scrapes are answered from the review cache.
    for _ in range(5):
        assert scrape(prometheus)[0] == 200
    text = cluster.extender_get(port, "/metrics")[1]
    m = parse_metrics(text)
    assert value(m, "gpushare_extender_requests_total", route="metrics", code="200") >= 6
    assert value(m, "gpushare_extender_requests_total", route="metrics", code="401") == 1
    # The alert rules' and the dashboard's metrics exist (a histogram's
    # _bucket series are its family's).
    with open(os.path.join(MONITORING, "alerts.yaml")) as f:
        rules = yaml.safe_load(f)["spec"]["groups"][0]["rules"]
    with open(os.path.join(DEPLOY, "chart", "files", "dashboard.json")) as f:
        panels = json.load(f)["panels"]
    declared = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    for exprs in ([r["expr"] for r in rules], [t["expr"] for p in panels for t in p["targets"]]):
        names = {re.sub(r"_bucket$", "", n) for e in exprs for n in re.findall(r"gpushare_[a-z_]+", e)
                 if not n.startswith("gpushare_device_plugin_")}  # The node stage checks those.
        assert names and names <= declared, names - declared
    # deploy/monitoring renders (kubectl's kustomize): the dashboard's
    # ConfigMap, labelled for Grafana's sidecar, holds the file.
    rendered = list(yaml.safe_load_all(kubectl(cluster, "kustomize", MONITORING).stdout))
    (board,) = [o for o in rendered if o["kind"] == "ConfigMap"]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(board["data"]["gpushare.json"])["panels"] == panels
    assert {o["kind"] for o in rendered} == {"ClusterRole", "ClusterRoleBinding", "ConfigMap",
                                             "ServiceMonitor", "PodMonitor", "PrometheusRule"}


# ---- The read-only planner ---------------------------------------------------------

T4 = 14


@pytest.mark.extender_only("POST /gpushare-scheduler/plan is the extender's endpoint; the "
                             "plugin has none")
def test_plan_endpoint_names_the_one_move_and_changes_nothing(cluster):
    """POST /gpushare-scheduler/plan for a pending pod: the extender answers
    from its own state; the cluster is left as it was, and deleting the pod
    the plan moves lets the pending one bind where the plan said."""
    cluster.start_extender()
    cluster.start_scheduler(with_extender=True)
    api = cluster.api
    api.create_node("t4-a", gpus=1, gpu_memory=T4)
    api.create_node("t4-b", gpus=1, gpu_memory=T4)
    api.create_pod("a", gpu_memory=7)
    first = api.wait_bound("a")
    api.create_pod("b", gpu_memory=7)
    assert api.wait_bound("b") == first  # binpack
    api.create_pod("c", gpu_memory=7)
    other = api.wait_bound("c")
    assert other != first
    api.delete_pod("b")
    wait_until("b's units freed", lambda: used_per_gpu(api) == {first: {0: 7}, other: {0: 7}},
               30, 0.25)

    def extender_released_b():
        status, body = cluster.extender_get(cluster.extender_port,
                                             "/gpushare-scheduler/inspect")
        return status == 200 and '"name":"b"' not in body.replace(" ", "")
    wait_until("the extender released b", extender_released_b, 30, 0.25)
    api.create_pod("ten", gpu_memory=10)  # 7 free on each GPU
    failed_scheduling_messages(api, "ten")
    before = used_per_gpu(api)

    status, body = plan_request(cluster, {"PodNamespace": "default", "PodName": "ten",
                                           "MaxMoves": 2})
    assert status == 200, body
    plan = json.loads(body)
    assert plan["Found"] and plan["Proven"], plan
    assert len(plan["Moves"]) == 1, plan
    move = plan["Moves"][0]
    moved, leaves = move["PodName"], move["From"]["Node"]
    assert moved in ("a", "c") and api.pod(moved)["spec"]["nodeName"] == leaves
    assert move["To"]["Node"] == ({first, other} - {leaves}).pop()
    assert plan["Then"] == {"Node": leaves, "GPUs": [0]}
    # With no move allowed there is no plan, and a bound pod is a conflict.
    status, body = plan_request(cluster, {"PodName": "ten", "MaxMoves": 0})
    assert status == 200 and not json.loads(body)["Found"], body
    status, body = plan_request(cluster, {"PodName": moved})
    assert status == 409, body
    status, body = plan_request(cluster, {"PodName": "ten", "MaxMoves": 99})
    assert status == 400 and "MaxMoves is 99" in json.loads(body)["Error"], body
    # Read-only: nothing was moved or bound.
    time.sleep(1)
    assert used_per_gpu(api) == before
    assert not api.pod("ten")["spec"].get("nodeName")

    api.delete_pod(moved)
    assert api.wait_bound("ten", timeout=60) == leaves
    assert_no_oversubscription(api)


def plan_request(control_plane, body):
    return control_plane.extender_request(control_plane.extender_port, "POST",
                                          "/gpushare-scheduler/plan", body)


# ---- deploy/scheduler: the standalone GpuShare kube-scheduler ------------------------

DEPLOY_SCHEDULER = os.path.join(DEPLOY, "scheduler")
SCHED_SA = "system:serviceaccount:kube-system:gpushare-scheduler"
SCHED_ALLOWED = [
    ("list", "pods"), ("watch", "nodes"), ("patch", "pods"),
    ("create", "pods", "--subresource=binding"),
    ("create", "leases.coordination.k8s.io", "-n", "kube-system"),
    ("get", "leases.coordination.k8s.io/gpushare-scheduler", "-n", "kube-system"),
    ("update", "leases.coordination.k8s.io/gpushare-scheduler", "-n", "kube-system"),
    ("get", "configmaps/extension-apiserver-authentication", "-n", "kube-system"),
    ("create", "tokenreviews.authentication.k8s.io"),
]
SCHED_DENIED = [
    ("get", "secrets", "-n", "kube-system"), ("create", "pods"), ("patch", "nodes"),
    ("update", "leases.coordination.k8s.io/gpushare-extender", "-n", "kube-system"),
    ("update", "configmaps", "-n", "kube-system"),
]


def token_kubeconfig(cluster, token, path):
    """A kubeconfig of the cluster with a bearer token (what a pod's service
    account gives kube-scheduler in-cluster)."""
    import base64
    with open(cluster.pki.ca_crt, "rb") as f:
        ca = base64.b64encode(f.read()).decode()
    with open(path, "w") as f:
        yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "sa",
            "clusters": [{"name": "e2e", "cluster": {"server": cluster.server,
                                                     "certificate-authority-data": ca}}],
            "contexts": [{"name": "sa", "context": {"cluster": "e2e", "user": "sa"}}],
            "users": [{"name": "sa", "user": {"token": token}}]}, f)
    return path


@pytest.mark.skipif(os.environ.get("GPUSHARE_KUBE_SCHEDULER") != "plugin",
                    reason="plugin mode: needs kube-scheduler with the GpuShare plugin")
def test_the_standalone_scheduler_runs_as_deployed(cluster):
    """deploy/scheduler/ through the real API server, then its kube-scheduler
    run with the ConfigMap's configuration and the Deployment's arguments,
    under its service account's token (as in its pod): it takes its own
    Lease and binds a pod that names it, with the GPU annotations."""
    from conftest import plugin_scheduler_bin
    api = cluster.api
    kubectl(cluster, "apply", "--server-side", "--dry-run=server", "-k", DEPLOY_SCHEDULER)
    try:
        kubectl(cluster, "apply", "--server-side", "-k", DEPLOY_SCHEDULER)
        assert can_i_mismatches(cluster, SCHED_SA, SCHED_ALLOWED, SCHED_DENIED) == []
        dep = api.get("/apis/apps/v1/namespaces/kube-system/deployments/gpushare-scheduler")
        pod = dep["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "gpushare-scheduler"
        assert pod["securityContext"]["runAsNonRoot"] is True
        (c,) = pod["containers"]
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        cm = api.get("/api/v1/namespaces/kube-system/configmaps/gpushare-scheduler-config")
        config = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
        with open(os.path.join(DEPLOY, "scheduler-plugin", "scheduler-config.yaml")) as f:
            assert config["profiles"] == yaml.safe_load(f)["profiles"]
        assert "clientConnection" not in config   # In-cluster: its service account.
        assert config["leaderElection"]["resourceName"] == "gpushare-scheduler"

        token = cluster.service_account_token("gpushare-scheduler", namespace="kube-system")
        kc = token_kubeconfig(cluster, token, os.path.join(cluster.workdir, "sa-scheduler.kubeconfig"))
        config["clientConnection"] = {"kubeconfig": kc}
        path = os.path.join(cluster.workdir, "standalone-scheduler.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(config, f)
        args = [a for a in c["args"] if not a.startswith("--config=")]
        port = free_port()
        p = cluster._start("gpushare-scheduler", [
            plugin_scheduler_bin(), f"--config={path}", *args,
            "--bind-address=127.0.0.1", f"--secure-port={port}",
            f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}"])
        lease = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/gpushare-scheduler"

        def holder():
            p.check_alive()
            try:
                return api.get(lease)["spec"].get("holderIdentity")
            except Exception:
                return None
        wait_until("the standalone scheduler leading", holder, 60, 0.2)
        api.create_node("t4-a", gpus=1, gpu_memory=14)
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "asks-gpushare"},
                "spec": {"schedulerName": "gpushare-scheduler", "containers": [
                    {"name": "main", "image": "registry.invalid/e2e:never-pulled",
                     "resources": {"limits": {"aliyun.com/gpu-mem": "5"}}}]}}
        api.request("POST", "/api/v1/namespaces/default/pods", body)
        assert api.wait_bound("asks-gpushare", timeout=60) == "t4-a"
        assert gpu_allocation(api.pod("asks-gpushare")) == {0: 5}
    finally:
        kubectl(cluster, "delete", "--wait=false", "--ignore-not-found", "-k", DEPLOY_SCHEDULER,
                check=False)
        cluster.api.request("DELETE", "/apis/coordination.k8s.io/v1/namespaces/kube-system/"
                            "leases/gpushare-scheduler", ok=(200, 202, 404))
