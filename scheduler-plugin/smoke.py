#!/usr/bin/env python3
"""End-to-end smoke test of kube-scheduler with the GpuShare plugin, on a real
etcd + kube-apiserver (tests/kube/harness.py's ControlPlane, used as a
library; no kubelet: the nodes are hand-made, as in tests/kube/).

    BUILD=build scheduler-plugin/smoke.py

Needs etcd and openssl, kube-apiserver from tests/kube/build-kube.sh (or
GPUSHARE_KUBE_BIN) and the plugin's kube-scheduler from
scheduler-plugin/build.sh (or GPUSHARE_PLUGIN_SCHEDULER). Checks: GPU pods
are bound with the extender's annotations, binpacked, never over a GPU's
units; a pod that does not fit waits and is bound once a GPU pod is
deleted; pods without GPUs are scheduled too; after a restart of the
scheduler the bound pods' GPUs are restored from their annotations.
GPUSHARE_KUBE_KEEP=1 keeps the work folder (logs).
"""

import http.client
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "kube"))

import harness  # noqa: E402

SCHEDULER_NAME = "gpushare-scheduler"
# deploy/scheduler-plugin/rbac.yaml's ClusterRole: kube-scheduler's identity
# may patch pods (PreBind's annotations).
RBAC = [
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
     "metadata": {"name": "gpushare-scheduler-plugin"},
     "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
     "metadata": {"name": "gpushare-scheduler-plugin"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                 "name": "gpushare-scheduler-plugin"},
     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                   "name": "system:kube-scheduler"}]},
]


def run_script(path, env=None):
    r = subprocess.run([path], stdout=subprocess.PIPE, text=True, check=True, env=env,
                       timeout=3600)
    return r.stdout.strip().splitlines()[-1]


def start_scheduler(cp, binary):
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": cp.scheduler_kubeconfig, "qps": 200, "burst": 400},
        "leaderElection": {"leaderElect": False},
        "profiles": [{
            "schedulerName": SCHEDULER_NAME,
            "plugins": {"multiPoint": {"enabled": [{"name": "GpuShare", "weight": 10}]}},
            "pluginConfig": [{"name": "GpuShare",
                              "args": {"policy": "binpack", "reservationTTLSeconds": 60}}],
        }],
    }
    path = os.path.join(cp.workdir, "plugin-scheduler-config.json")
    with open(path, "w") as f:
        json.dump(config, f, indent=1)
    port = harness.free_port()
    kc = cp.scheduler_kubeconfig
    p = cp._start("kube-scheduler", [
        binary, f"--config={path}", "--bind-address=127.0.0.1", f"--secure-port={port}",
        f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
        f"--client-ca-file={cp.pki.ca_crt}",
        f"--tls-cert-file={cp.scheduler_serving[0]}",
        f"--tls-private-key-file={cp.scheduler_serving[1]}", "--v=4"])
    ctx = ssl.create_default_context(cafile=cp.pki.ca_crt)

    def healthy():
        p.check_alive()
        c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5)
        try:
            c.request("GET", "/readyz")
            return c.getresponse().status == 200
        finally:
            c.close()
    harness.wait_until("kube-scheduler ready", healthy, harness.START_TIMEOUT, 0.2)


def create_pod(api, name, gpu_memory=None):
    limits = {"cpu": "100m"}
    if gpu_memory is not None:
        limits[harness.GPU_MEM] = str(gpu_memory)
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "gpushare-plugin-smoke"}},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "containers": [{"name": "main", "image": "registry.invalid/e2e:never-pulled",
                            "resources": {"limits": limits}}],
            "terminationGracePeriodSeconds": 0,
        },
    }
    return api.request("POST", f"/api/v1/namespaces/{harness.NAMESPACE}/pods", pod)


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print(f"ok: {what}")


def check_no_overcommit(api, per_gpu):
    used = harness.used_per_gpu(api)
    for node, gpus in used.items():
        for g, units in gpus.items():
            if units > per_gpu[node]:
                raise AssertionError(f"{node} GPU {g}: {units} units > {per_gpu[node]}")
    return used


def scenario(cp, binary):
    api = cp.api
    for obj in RBAC:
        kind = obj["kind"].lower() + "s"
        api.request("POST", f"/apis/rbac.authorization.k8s.io/v1/{kind}", obj)
    api.create_node("gpu-a", gpus=2, gpu_memory=16)
    api.create_node("gpu-b", gpus=1, gpu_memory=16)
    per_gpu = {"gpu-a": 16, "gpu-b": 16}
    start_scheduler(cp, binary)

    # 48 units in all: six pods of 8 fill the three GPUs, two by two.
    for i in range(6):
        create_pod(api, f"p{i}", gpu_memory=8)
    create_pod(api, "web")  # No GPU: skipped by the plugin, bound anyway.
    names = [f"p{i}" for i in range(6)] + ["web"]
    bound = {n: wait_bound(api, n) for n in names}
    check(True, f"7 pods bound ({', '.join(f'{n}: {p[0]}' for n, p in bound.items())})")
    for name in names[:-1]:
        ann = bound[name][1]
        check(ann.get("ALIYUN_COM_GPU_MEM_POD") == "8" and "ALIYUN_COM_GPU_MEM_IDX" in ann
              and "scheduler.framework.gpushare.allocation" in ann,
              f"{name} on {bound[name][0]} GPU {ann.get('ALIYUN_COM_GPU_MEM_IDX')} "
              "carries the bind annotations")
    used = check_no_overcommit(api, per_gpu)
    check(all(u == 16 for gpus in used.values() for u in gpus.values()),
          f"binpacked: every GPU full {used}")

    # Fragmentation: one pod leaves each GPU of gpu-a, which then has 16
    # units free in all (kube-scheduler's totals fit 12) but 8 on each GPU.
    on_a = {g: sorted(n for n in names[:-1] if bound[n][0] == "gpu-a"
                      and bound[n][1]["ALIYUN_COM_GPU_MEM_IDX"] == str(g)) for g in (0, 1)}
    api.delete_pod(on_a[0][0])
    api.delete_pod(on_a[1][0])
    create_pod(api, "big", gpu_memory=12)
    time.sleep(4)
    check(not api.pod("big")["spec"].get("nodeName"),
          "a 12-unit pod waits while gpu-a has 16 units free, 8 per GPU")
    messages = " | ".join(e.get("message", "") for e in api.events_for("big"))
    check("GPU" in messages,
          f"its event gives gpushare's reason: {messages[:300]}")

    # A second pod leaves GPU 0: the waiting pod is bound there (the
    # pod-deleted hint applies the deletion before the retry).
    api.delete_pod(on_a[0][1])
    t0 = time.time()
    node, ann = wait_bound(api, "big")
    check(node == "gpu-a" and ann["ALIYUN_COM_GPU_MEM_IDX"] == "0",
          f"big bound on {node} GPU {ann['ALIYUN_COM_GPU_MEM_IDX']} "
          f"{time.time() - t0:.1f} s after the deletion")
    check_no_overcommit(api, per_gpu)

    # Restart: the GPUs of bound pods are restored from their annotations:
    # one 8-unit slot is left (gpu-a GPU 1), a second pod finds none.
    cp.stop_scheduler()
    start_scheduler(cp, binary)
    create_pod(api, "late", gpu_memory=8)
    node, ann = wait_bound(api, "late")
    check(node == "gpu-a" and ann["ALIYUN_COM_GPU_MEM_IDX"] == "1",
          f"after a restart, late takes the one free slot ({node} GPU {ann['ALIYUN_COM_GPU_MEM_IDX']})")
    create_pod(api, "late2", gpu_memory=8)
    time.sleep(4)
    check(not api.pod("late2")["spec"].get("nodeName"), "and late2 finds the GPUs held")
    check_no_overcommit(api, per_gpu)


def wait_bound(api, name, timeout=30):
    """(node, annotations) once the pod is bound."""
    node = api.wait_bound(name, timeout=timeout)
    pod = api.pod(name)
    return node, pod["metadata"].get("annotations") or {}


def main():
    if shutil.which("etcd") is None or shutil.which("openssl") is None:
        print("smoke: etcd and openssl are needed", file=sys.stderr)
        return 2
    kube_bin = os.environ.get("GPUSHARE_KUBE_BIN") or run_script(
        os.path.join(ROOT, "tests", "kube", "build-kube.sh"))
    binary = os.environ.get("GPUSHARE_PLUGIN_SCHEDULER") or run_script(
        os.path.join(HERE, "build.sh"))
    workdir = tempfile.mkdtemp(prefix="gpushare-plugin-smoke-")
    cp = harness.ControlPlane(kube_bin, None, workdir)
    ok = False
    try:
        cp.start()
        scenario(cp, binary)
        ok = True
    finally:
        if not ok:
            print(cp.log_tails(), file=sys.stderr)
        cp.stop()
        if ok and not os.environ.get("GPUSHARE_KUBE_KEEP"):
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"smoke: work folder kept: {workdir}", file=sys.stderr)
    print("smoke: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
