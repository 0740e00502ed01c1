"""Value types: keyword construction, reprs that are constructor calls, equality."""

from __future__ import annotations

import re

import gpushare as gs
import pytest


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


def prose(doc: str | None) -> str:
    """A docstring without the signature lines pybind11 writes itself."""
    lines = []
    for line in (doc or "").splitlines():
        line = line.strip()
        if re.match(r"^(\d+\. )?\w+\(.*\)( -> .*)?$", line) or line == "Overloaded function.":
            continue
        lines.append(line)
    return " ".join(lines).strip()


# Members that pybind11 or pickling add to every class; not the package's own.
NOT_OURS = {"_pybind11_conduit_v1_", "__getstate__", "__setstate__", "__init_subclass__",
            "__subclasshook__", "__hash__"}


def test_every_public_name_and_member_has_a_docstring() -> None:
    assert prose("place(self: Cluster, request: Request) -> Placement\n") == ""
    missing = []
    for name in gs.__all__:
        obj = getattr(gs, name)
        if isinstance(obj, int):
            continue
        if not prose(obj.__doc__):
            missing.append(name)
        if not isinstance(obj, type) or issubclass(obj, BaseException):
            continue
        for attr, member in vars(obj).items():
            if attr in NOT_OURS or attr in ("__doc__", "__module__", "__dict__", "__weakref__"):
                continue
            if attr == "__init__" and (member.__doc__ or "").startswith("Initialize self."):
                continue  # Not constructible from Python.
            if not prose(getattr(member, "__doc__", None)):
                missing.append(f"{name}.{attr}")
    assert missing == []


def test_snapshot_reprs_are_constructor_calls_of_equal_values(s1: gs.Cluster) -> None:
    s1.place(gs.Request("a", gpu_memory=3, cpu=0))
    s1.add_node("big", gpus=[gs.Gpu(memory=16, uuid="GPU-x")], cpu=8000,
                labels={"gpushare": "true"})
    s1.set_gpu_healthy("big", 0, healthy=False)
    p = s1.get_placement("a")
    values = [
        *s1.nodes(),
        *[g for n in s1.nodes() for g in n.gpus],
        s1.usage(),
        s1.validate(gs.Request("v", gpu_memory=8, gpu_count=1, compute=100, cpu=5)),
        s1.validate(gs.Request("w", whole_gpus=1)),
        s1.device_view(p, assume_time_ns=7),
        *s1.fit(gs.Request("f", gpu_memory=5)),
        gs.Node("n", gpus=[1, 2], cpu=3, host_memory=4, schedulable=False, gpu_sharing=True),
    ]
    for v in values:
        again = eval(repr(v), vars(gs))
        assert again == v and repr(again) == repr(v), repr(v)
    # Equality looks at every field.
    assert s1.get_node("big") != s1.get_node("sd-cluster-04")
    assert gs.Demand(kind="shared", gpu_count=1) != gs.Demand(kind="exclusive", gpu_count=1)
    with pytest.raises(ValueError, match="unknown demand kind 'half'"):
        gs.Demand(kind="half")


def test_policy_reprs() -> None:
    assert repr(gs.make_policy("spread")) == "make_policy('spread')"

    class Mine(gs.Policy):
        def evaluate(self, demand, node, fitting):
            return 0, fitting[: demand.gpu_count]

    assert repr(Mine()) == "Mine()"


def test_a_python_policy_can_be_tested_on_snapshots_made_by_hand() -> None:
    class MostFree(gs.Policy):
        def evaluate(self, demand, node, fitting):
            best = sorted(fitting, key=lambda g: -node.gpus[g].memory_free)
            return sum(node.gpus[g].memory_free for g in best), sorted(best[: demand.gpu_count])

    node = gs.NodeStatus("n", [gs.GpuStatus(index=0, memory=16, memory_used=10),
                               gs.GpuStatus(index=1, memory=16, memory_used=2)],
                         gpu_sharing=True)
    demand = gs.Demand(kind="shared", gpu_count=1, memory_per_gpu=4)
    assert MostFree().evaluate(demand, node, [0, 1]) == (20, [1])
