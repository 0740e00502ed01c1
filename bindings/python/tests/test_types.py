"""Value types: keyword construction, reprs that are constructor calls, equality."""

from __future__ import annotations

import gpushare as gs


def test_request_takes_every_field_by_keyword() -> None:
    r = gs.Request("x", gpu_memory=8, gpu_count=4, compute=250, whole_gpus=0, cpu=4000,
                   host_memory=8192, gpu_models=["V100M16"],
                   node_selector={"inference": "tensorflow"})
    assert (r.id, r.gpu_memory, r.gpu_count, r.compute, r.cpu, r.host_memory) == (
        "x", 8, 4, 250, 4000, 8192)
    assert r.gpu_models == ["V100M16"] and r.node_selector == {"inference": "tensorflow"}
    assert repr(r) == ("Request(id='x', gpu_memory=8, gpu_count=4, compute=250, cpu=4000, "
                       "host_memory=8192, gpu_models=['V100M16'], "
                       "node_selector={'inference': 'tensorflow'})")


def test_reprs_evaluate_back_to_equal_values() -> None:
    values = [
        gs.Gpu(memory=14, model="T4"),
        gs.Gpu(memory=15, uuid="GPU-1", healthy=False),
        gs.Request("it's", gpu_memory=2),
        gs.Request("x", whole_gpus=2, node_selector={"a": "b"}),
        gs.Placement(request_id="binpack-1", node="sd-cluster-05", gpus=[0], memory_per_gpu=2),
        gs.Placement(request_id="e", node="n", gpus=[0, 1], exclusive=True, cpu=500),
        gs.Score(1.0, -2.5, 0.0),
    ]
    for v in values:
        assert eval(repr(v), vars(gs)) == v, repr(v)
    node = gs.Node("sd-cluster-04", gpus=[gs.Gpu(memory=14, model="T4")],
                   labels={"gpushare": "true"}, address="192.168.1.214")
    assert repr(node) == ("Node(name='sd-cluster-04', gpus=[Gpu(memory=14, model='T4')], "
                          "labels={'gpushare': 'true'}, address='192.168.1.214')")
    assert repr(eval(repr(node), vars(gs))) == repr(node)


def test_placement_repr_matches_the_documented_form(s1: gs.Cluster) -> None:
    p = s1.place(gs.Request("binpack-1", gpu_memory=2))
    assert repr(p) == ("Placement(request_id='binpack-1', node='sd-cluster-05', gpus=[0], "
                       "memory_per_gpu=2)")
    (fit, _) = s1.fit(gs.Request("big", gpu_memory=20))
    assert repr(fit).startswith("FitResult(node='sd-cluster-04', feasible=False, reason='")
    assert repr(s1).startswith("<gpushare.Cluster memory_unit='GiB' nodes=2")
    assert "memory_used=2" in repr(s1.get_node("sd-cluster-05").gpus[0])
    assert repr(s1.usage()).startswith("Usage(gpu_memory=28, gpu_memory_used=2,")
    assert repr(s1.validate(gs.Request("v", gpu_memory=4))) == (
        "Demand(kind='shared', gpu_count=1, memory_per_gpu=4, compute_per_gpu=0, cpu=0, "
        "host_memory=0)")


def test_plain_numbers_stand_for_gpus() -> None:
    node = gs.Node("n", gpus=[14, gs.Gpu(memory=16)])
    assert [g.memory for g in node.gpus] == [14, 16]
    assert node.takes_shared_gpu_work is False
    node.labels = {"gpushare": "true"}
    assert node.takes_shared_gpu_work is True


def test_every_public_name_has_a_docstring() -> None:
    for name in gs.__all__:
        obj = getattr(gs, name)
        if isinstance(obj, int):
            continue
        assert obj.__doc__, name
        if isinstance(obj, type):
            for attr, member in vars(obj).items():
                if attr.startswith("_") or not callable(member) and not isinstance(member, property):
                    continue
                assert getattr(member, "__doc__", None), f"{name}.{attr}"
