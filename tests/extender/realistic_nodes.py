"""Realistic v1.Node JSON for sizing the extender's request limits.

kube-scheduler, when an extender is not nodeCacheCapable, sends every
candidate node in full (ExtenderArgs.Nodes, a v1.NodeList) as its informer
cache holds it: metadata with the labels and annotations that kubelet, the
cloud provider, the CNI and NVIDIA's GPU feature discovery set; spec; and a
status with capacity, allocatable, conditions, addresses, daemon endpoints,
nodeInfo and the images list (kubelet reports at most 50 images, the
--node-status-max-images default). managedFields are left out: kube-scheduler
strips them from its informer cache.

  python3 tests/extender/realistic_nodes.py --nodes 10000 --out args.json
writes an ExtenderArgs body (one GPU-sharing pod, 10,000 nodes) and prints its
size. Standard library only; deterministic for a given --seed.
"""

import argparse
import json
import random
import sys

GPU_PRODUCTS = [("NVIDIA-A100-SXM4-80GB", 81920, "ampere", 8),
                ("Tesla-V100-SXM2-32GB", 32768, "volta", 8),
                ("NVIDIA-A10", 23028, "ampere", 4),
                ("Tesla-T4", 15360, "turing", 4)]

IMAGE_REPOS = [
    "nvcr.io/nvidia/pytorch", "nvcr.io/nvidia/tensorflow", "nvcr.io/nvidia/tritonserver",
    "nvcr.io/nvidia/k8s-device-plugin", "nvcr.io/nvidia/gpu-feature-discovery",
    "nvcr.io/nvidia/dcgm-exporter", "nvcr.io/nvidia/cuda", "registry.k8s.io/kube-proxy",
    "registry.k8s.io/pause", "registry.k8s.io/coredns/coredns", "docker.io/calico/node",
    "docker.io/calico/cni", "quay.io/prometheus/node-exporter", "docker.io/fluent/fluent-bit",
    "registry.cn-hangzhou.aliyuncs.com/acs/gpushare-device-plugin",
    "registry.example.com/ml/training-runtime", "registry.example.com/ml/inference-server",
    "registry.example.com/ml/feature-store-client", "registry.example.com/platform/sidecar",
    "docker.io/library/python", "docker.io/library/busybox", "docker.io/istio/proxyv2",
]


def _hex(rng, n):
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def make_node(i, rng):
    """One GPU node as kube-scheduler's informer holds it (a dict)."""
    product, mem_mib, family, gpus = GPU_PRODUCTS[i % len(GPU_PRODUCTS)]
    name = "gpu-node-%05d.cluster.example.com" % i
    zone = "zone-%s" % "abc"[i % 3]
    ip = "10.%d.%d.%d" % (i // 65536 % 256, i // 256 % 256, i % 256)
    labels = {
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "gn7-c12g1.24xlarge",
        "topology.kubernetes.io/region": "region-1", "topology.kubernetes.io/zone": zone,
        "failure-domain.beta.kubernetes.io/region": "region-1",
        "failure-domain.beta.kubernetes.io/zone": zone,
        "gpushare": "true", "aliyun.accelerator/nvidia_name": product,
        "nvidia.com/cuda.driver.major": "535", "nvidia.com/cuda.driver.minor": "129",
        "nvidia.com/cuda.driver.rev": "03", "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "2", "nvidia.com/gfd.timestamp": str(1709280000 + i),
        "nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.count": str(gpus), "nvidia.com/gpu.family": family,
        "nvidia.com/gpu.machine": "gn7", "nvidia.com/gpu.memory": str(mem_mib),
        "nvidia.com/gpu.product": product, "nvidia.com/gpu.replicas": "1",
        "nvidia.com/mig.capable": "false", "nvidia.com/mps.capable": "false",
        "node-role.kubernetes.io/gpu-worker": "",
    }
    annotations = {
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock",
        "projectcalico.org/IPv4Address": ip + "/16",
        "projectcalico.org/IPv4IPIPTunnelAddr": "192.168.%d.%d" % (i // 256 % 256, i % 256),
        "csi.volume.kubernetes.io/nodeid": json.dumps({"disk.csi.example.com": "i-" + _hex(rng, 17)}),
        "nfd.node.kubernetes.io/feature-labels": "cpu-cpuid.AVX,cpu-cpuid.AVX2,cpu-cpuid.AVX512F,"
                                                 "cpu-hardware_multithreading,kernel-version.major,"
                                                 "pci-10de.present,system-os_release.ID",
    }
    units = mem_mib // 1024 * gpus
    capacity = {"aliyun.com/gpu-count": str(gpus), "aliyun.com/gpu-mem": str(units),
                "cpu": "96", "ephemeral-storage": "205374420Ki", "hugepages-1Gi": "0",
                "hugepages-2Mi": "0", "memory": "791247036Ki", "nvidia.com/gpu": str(gpus),
                "pods": "110"}
    allocatable = dict(capacity, cpu="95500m", memory="780000956Ki",
                       **{"ephemeral-storage": "189274027310"})
    cond = []
    for ctype, status, reason, msg in [
            ("MemoryPressure", "False", "KubeletHasSufficientMemory",
             "kubelet has sufficient memory available"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            ("Ready", "True", "KubeletReady", "kubelet is posting ready status. AppArmor enabled"),
            ("NetworkUnavailable", "False", "CalicoIsUp", "Calico is running on this node")]:
        cond.append({"type": ctype, "status": status,
                     "lastHeartbeatTime": "2024-03-01T10:%02d:%02dZ" % (i % 60, rng.randrange(60)),
                     "lastTransitionTime": "2024-02-01T08:00:00Z", "reason": reason,
                     "message": msg})
    images = []
    for k in range(50):  # kubelet's --node-status-max-images default
        repo = IMAGE_REPOS[(i + k) % len(IMAGE_REPOS)]
        tag = "%d.%02d-py3" % (22 + k % 3, k % 12 + 1)
        images.append({"names": ["%s@sha256:%s" % (repo, _hex(rng, 64)), "%s:%s" % (repo, tag)],
                       "sizeBytes": rng.randrange(5_000_000, 15_000_000_000)})
    return {
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"name": name, "uid": "%s-%s-%s-%s-%s" % (_hex(rng, 8), _hex(rng, 4),
                                                              _hex(rng, 4), _hex(rng, 4),
                                                              _hex(rng, 12)),
                     "resourceVersion": str(1_000_000 + i), "creationTimestamp": "2024-01-15T09:30:00Z",
                     "labels": labels, "annotations": annotations},
        "spec": {"podCIDR": "192.168.%d.0/24" % (i % 256), "podCIDRs": ["192.168.%d.0/24" % (i % 256)],
                 "providerID": "cloud://region-1.i-" + _hex(rng, 17),
                 "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "capacity": capacity, "allocatable": allocatable, "conditions": cond,
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": _hex(rng, 32), "systemUUID": _hex(rng, 8).upper() + "-0000",
                         "bootID": _hex(rng, 8) + "-" + _hex(rng, 4) + "-" + _hex(rng, 12),
                         "kernelVersion": "5.15.0-101-generic", "osImage": "Ubuntu 22.04.4 LTS",
                         "containerRuntimeVersion": "containerd://1.7.13",
                         "kubeletVersion": "v1.29.2", "kubeProxyVersion": "v1.29.2",
                         "operatingSystem": "linux", "architecture": "amd64"},
            "images": images,
        },
    }


def make_pod(units=4):
    """The pending pod of the filter call."""
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "train-0", "namespace": "default", "uid": "uid-train-0",
                         "labels": {"app": "train"}},
            "spec": {"containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                                     "resources": {"limits": {"aliyun.com/gpu-mem": str(units)},
                                                   "requests": {"aliyun.com/gpu-mem": str(units)}}}]},
            "status": {"phase": "Pending"}}


def extender_args(nodes, seed=1):
    """An ExtenderArgs body (bytes) with `nodes` full nodes, as for nodeCacheCapable: false."""
    rng = random.Random(seed)
    items = [make_node(i, rng) for i in range(nodes)]
    body = {"Pod": make_pod(), "Nodes": {"kind": "NodeList", "apiVersion": "v1",
                                         "metadata": {"resourceVersion": "2000000"},
                                         "items": items}, "NodeNames": None}
    return json.dumps(body, separators=(",", ":")).encode()


def node_list(nodes, seed=1):
    """A `kubectl get nodes -o json` list (bytes) of the same nodes, for --nodes."""
    rng = random.Random(seed)
    return json.dumps({"kind": "List", "apiVersion": "v1",
                       "items": [make_node(i, rng) for i in range(nodes)]}).encode()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=10000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", required=True, help="ExtenderArgs body file")
    p.add_argument("--node-list", help="also write a `kubectl get nodes -o json` list here")
    a = p.parse_args()
    body = extender_args(a.nodes, a.seed)
    with open(a.out, "wb") as f:
        f.write(body)
    if a.node_list:
        with open(a.node_list, "wb") as f:
            f.write(node_list(a.nodes, a.seed))
    print("%d nodes: %d bytes (%.1f KiB per node)" % (a.nodes, len(body), len(body) / a.nodes / 1024))
    return 0


if __name__ == "__main__":
    sys.exit(main())
