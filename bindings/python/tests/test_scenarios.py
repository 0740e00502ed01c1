"""Scenarios S1-S3 of the GPU-sharing field reports, through the Python API."""

from __future__ import annotations

import gpushare as gs
import pytest


def table(*rows: str, total: str) -> str:
    return "\n".join([
        "NAME           IPADDRESS      GPU0(Allocated/Total)  GPU Memory(GiB)",
        *rows,
        "-" * 58,
        "Allocated/Total GPU Memory In Cluster:",
        total,
    ]) + "\n"


def test_s1_binpack_places_every_step_on_the_documented_node(s1: gs.Cluster) -> None:
    p = s1.place(gs.Request("binpack-1", gpu_memory=2), policy="binpack")
    assert (p.node, p.gpus, p.memory_per_gpu) == ("sd-cluster-05", [0], 2)
    assert s1.inspect() == table(
        "sd-cluster-04  192.168.1.214  0/14                   0/14",
        "sd-cluster-05  192.168.1.215  2/14                   2/14", total="2/28 (7%)")

    replicas = s1.place_replicas(gs.Request("binpack-2", gpu_memory=8), 2, policy="binpack",
                                 all_or_nothing=True)
    assert [r.node for r in replicas] == ["sd-cluster-05", "sd-cluster-04"]
    assert [r.request_id for r in replicas] == ["binpack-2-0", "binpack-2-1"]
    assert s1.inspect() == table(
        "sd-cluster-04  192.168.1.214  8/14                   8/14",
        "sd-cluster-05  192.168.1.215  10/14                  10/14", total="18/28 (64%)")

    assert s1.place(gs.Request("binpack-3", gpu_memory=2)).node == "sd-cluster-05"
    usage = s1.usage()
    assert usage.gpu_memory - usage.gpu_memory_used == 8
    # 8 GiB are free, but the largest request that fits is 6 GiB.
    assert s1.capacity(gs.Request("probe", gpu_memory=6), policy="binpack") == 1
    assert s1.capacity(gs.Request("probe", gpu_memory=7), policy="binpack") == 0
    assert not any(f.feasible for f in s1.fit(gs.Request("probe", gpu_memory=7)))

    assert s1.place(gs.Request("binpack-4", gpu_memory=5)).node == "sd-cluster-04"
    assert s1.inspect() == table(
        "sd-cluster-04  192.168.1.214  13/14                  13/14",
        "sd-cluster-05  192.168.1.215  12/14                  12/14", total="25/28 (89%)")
    for placement in s1.placements():
        assert placement.env["ALIYUN_COM_GPU_MEM_DEV"] == "14"
        assert placement.env["ALIYUN_COM_GPU_MEM_CONTAINER"] == str(placement.memory_per_gpu)
    s1.check_invariants()


def test_s2_three_notebooks_share_a_t4_and_a_fourth_waits() -> None:
    c = gs.Cluster()
    c.add_node("notebook-node", gpus=[gs.Gpu(memory=14, model="T4")],
               labels={"gpushare": "true"})
    for i in range(3):
        c.place(gs.Request(f"notebook-{i}", gpu_memory=4))
    assert c.inspect().endswith("12/14 (85%)\n")
    with pytest.raises(gs.InsufficientCapacityError):
        c.place(gs.Request("notebook-3", gpu_memory=4))
    assert c.num_placements == 3


def test_s2_without_sharing_the_second_whole_gpu_pod_waits() -> None:
    c = gs.Cluster()
    c.add_node("plain-node", gpus=[gs.Gpu(memory=14, model="T4")])
    assert c.place(gs.Request("pod-1", whole_gpus=1)).exclusive
    with pytest.raises(gs.InsufficientCapacityError):
        c.place(gs.Request("pod-2", whole_gpus=1))
    # Shared work does not go to a node that is not labelled for sharing.
    (fit,) = c.fit(gs.Request("shared", gpu_memory=1))
    assert not fit.feasible and fit.reason


def test_s3_multi_card_split_gets_two_units_on_each_of_four_gpus() -> None:
    c = gs.Cluster()
    uuids = [f"GPU-v100-{i}" for i in range(4)]
    c.add_node("v100-node", gpus=[gs.Gpu(memory=15, model="V100", uuid=u) for u in uuids],
               labels={"gpushare": "true"})
    p = c.place(gs.Request("default/statefulset-0", gpu_memory=8, gpu_count=4))
    assert p.gpus == [0, 1, 2, 3]
    assert p.memory_per_gpu == 2 and p.total_memory == 8
    assert p.env["ALIYUN_COM_GPU_MEM_CONTAINER"] == "2"
    assert p.env["ALIYUN_COM_GPU_MEM_DEV"] == "15"
    assert p.env["NVIDIA_VISIBLE_DEVICES"] == ",".join(uuids)
    assert p.annotations["ALIYUN_COM_GPU_MEM_IDX"] == "0-1-2-3"
    assert p.annotations["ALIYUN_COM_GPU_MEM_POD"] == "8"
    with pytest.raises(ValueError, match="not divisible"):
        c.place(gs.Request("odd", gpu_memory=8, gpu_count=3))
