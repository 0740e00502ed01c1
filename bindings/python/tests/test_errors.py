"""The one mapping from status codes to Python exceptions, one case per code."""

from __future__ import annotations

import gpushare as gs
import pytest
from gpushare._core import _raise_status


def test_the_family_tree() -> None:
    assert issubclass(gs.InvalidArgumentError, gs.Error)
    assert issubclass(gs.InvalidArgumentError, ValueError)
    assert issubclass(gs.NotFoundError, gs.Error)
    assert issubclass(gs.NotFoundError, KeyError)
    assert issubclass(gs.AlreadyExistsError, gs.ConflictError)
    assert issubclass(gs.ConflictError, gs.Error)
    assert issubclass(gs.InsufficientCapacityError, gs.Error)
    assert not issubclass(gs.InsufficientCapacityError, ValueError)
    assert issubclass(gs.Error, Exception)


def test_invalid_argument_is_a_value_error(s1: gs.Cluster) -> None:
    with pytest.raises(ValueError) as info:
        s1.place(gs.Request("bad", gpu_memory=8, gpu_count=3))
    assert isinstance(info.value, gs.InvalidArgumentError)
    assert info.value.code == "INVALID_ARGUMENT"
    assert "gpu memory 8 is not divisible by gpu count 3" in str(info.value)
    with pytest.raises(ValueError, match="memory unit 'KiB'"):
        gs.Cluster(memory_unit="KiB")
    with pytest.raises(ValueError, match="unknown policy 'best'"):
        s1.place(gs.Request("x", gpu_memory=1), policy="best")


def test_not_found_is_a_key_error_with_a_plain_message(s1: gs.Cluster) -> None:
    with pytest.raises(KeyError) as info:
        s1.release("ghost")
    assert isinstance(info.value, gs.NotFoundError)
    assert info.value.code == "NOT_FOUND"
    assert str(info.value) == "unknown request 'ghost'"
    with pytest.raises(KeyError, match="nowhere"):
        s1.get_node("nowhere")


def test_already_exists_is_a_conflict(s1: gs.Cluster) -> None:
    with pytest.raises(gs.AlreadyExistsError) as info:
        s1.add_node("sd-cluster-04", gpus=[14])
    assert isinstance(info.value, gs.ConflictError)
    assert info.value.code == "ALREADY_EXISTS"
    s1.place(gs.Request("a", gpu_memory=1))
    with pytest.raises(gs.AlreadyExistsError, match="'a' is already placed"):
        s1.place(gs.Request("a", gpu_memory=1))


def test_failed_precondition_is_a_conflict_stale_plan_and_double_release(s1: gs.Cluster) -> None:
    plan = s1.plan(gs.Request("late", gpu_memory=10))
    s1.commit(gs.Placement(request_id="early", node=plan.node, gpus=plan.gpus,
                           memory_per_gpu=10))
    with pytest.raises(gs.ConflictError) as info:
        s1.commit(plan)
    assert info.value.code == "FAILED_PRECONDITION"
    assert not isinstance(info.value, gs.AlreadyExistsError)
    s1.release("early")
    with pytest.raises(gs.ConflictError, match="already released"):
        s1.release("early")


def test_resource_exhausted_is_insufficient_capacity(s1: gs.Cluster) -> None:
    with pytest.raises(gs.InsufficientCapacityError) as info:
        s1.place(gs.Request("huge", gpu_memory=15))
    assert info.value.code == "RESOURCE_EXHAUSTED"
    assert "need 15" in str(info.value)
    assert s1.num_placements == 0


def test_device_view_of_a_placement_made_by_hand(s1: gs.Cluster) -> None:
    p = gs.Placement(request_id="hand", node="sd-cluster-04", gpus=[0], memory_per_gpu=2)
    with pytest.raises(ValueError, match="not made by a cluster"):
        _ = p.env
    view = s1.device_view(p, assume_time_ns=123)
    assert view.annotations["ALIYUN_COM_GPU_MEM_ASSUME_TIME"] == "123"
    assert view.env["ALIYUN_COM_GPU_MEM_CONTAINER"] == "2"
    with pytest.raises(KeyError):
        s1.device_view(gs.Placement(request_id="x", node="elsewhere", gpus=[0]))


def test_placement_outliving_its_cluster() -> None:
    c = gs.Cluster()
    c.add_node("n", gpus=[8], labels={"gpushare": "true"})
    p = c.place(gs.Request("a", gpu_memory=1))
    del c
    with pytest.raises(gs.ConflictError, match="no longer exists"):
        _ = p.env
    assert p.node == "n"


def test_wrong_types_are_type_errors(s1: gs.Cluster) -> None:
    with pytest.raises(TypeError):
        s1.place("not a request")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="policy must be"):
        s1.place(gs.Request("a", gpu_memory=1), policy=3)  # type: ignore[arg-type]


# Every absl status code and what a failing call with it raises: the whole
# table of ThrowIfError(), checked through the module's own mapping.
EXPECTED = {
    "CANCELLED": gs.Error,
    "UNKNOWN": gs.Error,
    "INVALID_ARGUMENT": gs.InvalidArgumentError,
    "DEADLINE_EXCEEDED": gs.Error,
    "NOT_FOUND": gs.NotFoundError,
    "ALREADY_EXISTS": gs.AlreadyExistsError,
    "PERMISSION_DENIED": gs.Error,
    "RESOURCE_EXHAUSTED": gs.InsufficientCapacityError,
    "FAILED_PRECONDITION": gs.ConflictError,
    "ABORTED": gs.ConflictError,
    "OUT_OF_RANGE": gs.InvalidArgumentError,
    "UNIMPLEMENTED": gs.Error,
    "INTERNAL": gs.Error,
    "UNAVAILABLE": gs.Error,
    "DATA_LOSS": gs.Error,
    "UNAUTHENTICATED": gs.Error,
}


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_each_status_code_maps_to_one_exception_class(code: str) -> None:
    with pytest.raises(gs.Error) as info:
        _raise_status(code, f"message of {code}")
    assert type(info.value) is EXPECTED[code]
    assert info.value.code == code
    assert str(info.value) == f"message of {code}"
    assert isinstance(info.value, ValueError) == (EXPECTED[code] is gs.InvalidArgumentError)
    assert isinstance(info.value, KeyError) == (EXPECTED[code] is gs.NotFoundError)


def test_ok_raises_nothing_and_the_table_covers_every_code() -> None:
    assert _raise_status("OK") is None
    assert len(EXPECTED) == 16  # absl's canonical codes besides OK.
    with pytest.raises(ValueError, match="unknown status code 'SOMETIMES'"):
        _raise_status("SOMETIMES")


def test_internal_from_a_policy_that_breaks_its_contract_is_a_plain_error(s1: gs.Cluster) -> None:
    class OutOfRange(gs.Policy):
        def evaluate(self, demand, node, fitting):
            return 0, [7]  # Not a fitting GPU.

    with pytest.raises(gs.Error) as info:
        s1.place(gs.Request("x", gpu_memory=1), policy=OutOfRange())
    assert type(info.value) is gs.Error and info.value.code == "INTERNAL"
    assert "not 1 distinct fitting GPUs" in str(info.value)
    assert s1.num_placements == 0


def test_json_with_a_number_beyond_double_is_invalid_argument_not_a_crash() -> None:
    for text in ('{"a":1e3001}', "[1e400]", '{"format": -1e999}'):
        with pytest.raises(gs.InvalidArgumentError, match="malformed cluster JSON"):
            gs.Cluster.from_json(text)


def test_more_gpus_than_any_node_or_no_nodes_is_insufficient_capacity(s1: gs.Cluster) -> None:
    # Depends on the cluster's state, so not a ValueError.
    with pytest.raises(gs.InsufficientCapacityError, match="largest node has 1"):
        s1.place(gs.Request("wide", gpu_memory=4, gpu_count=2))
    assert s1.capacity(gs.Request("wide", gpu_memory=4, gpu_count=2)) == 0
    with pytest.raises(gs.InsufficientCapacityError, match="0 nodes"):
        gs.Cluster().place(gs.Request("r", gpu_memory=1))


def test_gpu_uuids_are_unique() -> None:
    c = gs.Cluster()
    with pytest.raises(ValueError, match="same UUID 'GPU-SAME'"):
        c.add_node("a", gpus=[gs.Gpu(memory=16, uuid="GPU-SAME"), gs.Gpu(memory=16, uuid="GPU-SAME")])
    c.add_node("a", gpus=[gs.Gpu(memory=16, uuid="GPU-SAME")])
    with pytest.raises(gs.AlreadyExistsError, match="already belongs to node 'a'"):
        c.add_node("b", gpus=[gs.Gpu(memory=16, uuid="GPU-SAME")])


def test_negative_remembered_releases_is_rejected() -> None:
    with pytest.raises(ValueError, match="remembered_releases -1 is negative"):
        gs.Cluster(remembered_releases=-1)
    assert gs.Cluster(remembered_releases=0).remembered_releases == 0


# ---- Integer arguments ---------------------------------------------------------
# Every binding that takes an integer reads it the same way: a bool is a
# TypeError (True is no size of 1), a value the C++ parameter cannot hold an
# InvalidArgumentError naming the argument, the value and the range.

RANGES = {
    "int": (-2**31, 2**31 - 1),
    "int64": (-2**63, 2**63 - 1),
    "uint64": (0, 2**64 - 1),
    "gpu": (-2**63, 2**63 - 1),  # A memory size standing for a Gpu.
    "seeds": (0, 2**64 - 1),     # One seed or several.
}
# What the TypeError says the argument must be.
EXPECTED_TYPE = {"gpu": "a gpushare.Gpu or an int", "seeds": "an int or an iterable of ints"}


def a_cluster() -> gs.Cluster:
    c = gs.Cluster()
    c.add_node("n", gpus=[gs.Gpu(memory=8, model="T4")], cpu=4000, host_memory=1024,
               gpu_sharing=True)
    return c


def setter(make, attribute: str):
    def call(v):
        obj = make()
        setattr(obj, attribute, v)
        return obj
    return call


def simulation_nodes() -> list[gs.Node]:
    return [gs.Node("n", gpus=[gs.Gpu(memory=1, model="T4")], cpu=8000, host_memory=1024)]


def simulation_tasks() -> list[gs.Request]:
    return [gs.Request("t", compute=500, cpu=100)]


def replay_with_times(start, end):
    return gs.replay(simulation_nodes(), [(gs.Request("t", compute=500, cpu=100), start, end)])


# (argument name as the message shows it, C++ type, call with the value, a
# value the call accepts).
INT_ARGUMENTS = [
    ("memory", "int64", lambda v: gs.Gpu(memory=v), 8),
    ("memory", "int64", setter(lambda: gs.Gpu(8), "memory"), 8),
    ("an item of gpus", "gpu", lambda v: gs.Node("n", gpus=[v]), 8),
    ("an item of gpus", "gpu", lambda v: a_cluster().add_node("m", gpus=[4, v]), 8),
    ("cpu", "int64", lambda v: gs.Node("n", cpu=v), 1000),
    ("host_memory", "int64", lambda v: gs.Node("n", host_memory=v), 1000),
    ("cpu", "int64", setter(lambda: gs.Node("n"), "cpu"), 1000),
    ("host_memory", "int64", setter(lambda: gs.Node("n"), "host_memory"), 1000),
    ("gpu_memory", "int64", lambda v: gs.Request("r", gpu_memory=v), 2),
    ("gpu_count", "int64", lambda v: gs.Request("r", gpu_count=v), 2),
    ("compute", "int64", lambda v: gs.Request("r", compute=v), 500),
    ("whole_gpus", "int64", lambda v: gs.Request("r", whole_gpus=v), 1),
    ("cpu", "int64", lambda v: gs.Request("r", cpu=v), 100),
    ("host_memory", "int64", lambda v: gs.Request("r", host_memory=v), 100),
    *[(field, "int64", setter(lambda: gs.Request("r"), field), 1)
      for field in ("gpu_memory", "gpu_count", "compute", "whole_gpus", "cpu", "host_memory")],
    ("an item of gpus", "int", lambda v: gs.Placement("r", "n", gpus=[0, v]), 1),
    ("an item of gpus", "int", setter(lambda: gs.Placement("r", "n"), "gpus"), [0]),
    *[(field, "int64", lambda v, field=field: gs.Placement("r", "n", **{field: v}), 1)
      for field in ("memory_per_gpu", "compute_per_gpu", "cpu", "host_memory")],
    *[(field, "int64", setter(lambda: gs.Placement("r", "n"), field), 1)
      for field in ("memory_per_gpu", "compute_per_gpu", "cpu", "host_memory")],
    *[(field, kind, lambda v, field=field: gs.GpuStatus(**{field: v}), 1)
      for field, kind in (("index", "int"), ("memory", "int64"), ("memory_used", "int64"),
                          ("compute_used", "int64"), ("holders", "int"))],
    *[(field, kind, lambda v, field=field: gs.NodeStatus("n", **{field: v}), 1)
      for field, kind in (("cpu", "int64"), ("cpu_used", "int64"), ("host_memory", "int64"),
                          ("host_memory_used", "int64"), ("version", "uint64"))],
    *[(field, "int64", lambda v, field=field: gs.Usage(**{field: v}), 1)
      for field in ("gpu_memory", "gpu_memory_used", "gpus", "idle_gpus", "compute_used",
                    "cpu", "cpu_used", "host_memory", "host_memory_used", "placements")],
    *[(field, kind, lambda v, field=field: gs.Demand(kind="shared", **{field: v}), 1)
      for field, kind in (("gpu_count", "int"), ("memory_per_gpu", "int64"),
                          ("compute_per_gpu", "int64"), ("cpu", "int64"),
                          ("host_memory", "int64"))],
    ("tie_break_seed", "uint64", lambda v: gs.Cluster(tie_break_seed=v), 7),
    ("remembered_releases", "int", lambda v: gs.Cluster(remembered_releases=v), 10),
    ("cpu", "int64", lambda v: a_cluster().add_node("m", gpus=[4], cpu=v), 1000),
    ("host_memory", "int64", lambda v: a_cluster().add_node("m", gpus=[4], host_memory=v), 10),
    ("gpu", "int", lambda v: a_cluster().set_gpu_healthy("n", v, False), 0),
    ("count", "int", lambda v: a_cluster().place_replicas(gs.Request("r", gpu_memory=1), v), 2),
    ("limit", "int64", lambda v: a_cluster().capacity(gs.Request("r", gpu_memory=1), limit=v), 3),
    ("count", "int64",
     lambda v: a_cluster().nodes_needed(gs.Request("r", gpu_memory=1), v, gs.Node("s", [8])), 3),
    ("indent", "int", lambda v: a_cluster().to_json(indent=v), 2),
    ("assume_time_ns", "int64",
     lambda v: a_cluster().device_view(gs.Placement("r", "n", [0], memory_per_gpu=1), v), 5),
    ("seed", "uint64", lambda v: gs.make_policy("random", seed=v), 3),
    ("seed", "seeds", lambda v: gs.simulate(simulation_nodes(), simulation_tasks(), seed=v), 3),
    ("an item of seed", "uint64",
     lambda v: gs.simulate(simulation_nodes(), simulation_tasks(), seed=[1, v]), 3),
    ("threads", "int",
     lambda v: gs.simulate(simulation_nodes(), simulation_tasks(), seed=[1, 2], threads=v), 1),
    ("seed", "uint64", lambda v: gs.replay(simulation_nodes(), [(gs.Request("t", compute=500, cpu=100), 0, 5)],
                       seed=v), 3),
    ("start_s", "int64", lambda v: replay_with_times(v, 10), 1),
    ("end_s", "int64", lambda v: replay_with_times(0, v), 10),
    ("target cpu", "int64",
     lambda v: gs.fragmentation(a_cluster(), [{"cpu": v, "gpu_share": 500, "gpu_count": 1,
                                               "weight": 1.0}]), 100),
    ("target gpu_share", "int64",
     lambda v: gs.fragmentation(a_cluster(), [{"gpu_share": v, "gpu_count": 1,
                                               "weight": 1.0}]), 500),
    ("target gpu_count", "int",
     lambda v: gs.fragmentation(a_cluster(), [{"gpu_share": 500, "gpu_count": v,
                                               "weight": 1.0}]), 1),
]
INT_IDS = [f"{i}-{name}" for i, (name, *_) in enumerate(INT_ARGUMENTS)]


def wrap(value, example):
    """`value` in the shape of `example` (a list for list-valued attributes)."""
    return [value] if isinstance(example, list) else value


@pytest.mark.parametrize("name,kind,call,good", INT_ARGUMENTS, ids=INT_IDS)
def test_integer_arguments_accept_ints(name, kind, call, good) -> None:
    call(good)


@pytest.mark.parametrize("name,kind,call,good", INT_ARGUMENTS, ids=INT_IDS)
def test_integer_arguments_reject_bools_by_name(name, kind, call, good) -> None:
    expected = EXPECTED_TYPE.get(kind, "an int")
    for flag in (True, False):
        with pytest.raises(TypeError) as info:
            call(wrap(flag, good))
        assert str(info.value) == f"{name} must be {expected}, not bool"
    with pytest.raises(TypeError) as info:
        call(wrap(1.0, good))
    assert str(info.value) == f"{name} must be {expected}, not float"


@pytest.mark.parametrize("name,kind,call,good", INT_ARGUMENTS, ids=INT_IDS)
def test_integer_arguments_out_of_range_name_the_value_and_range(name, kind, call, good) -> None:
    lo, hi = RANGES[kind]
    for bad in {2**63, -2**63 - 1, hi + 1, lo - 1}:
        if lo <= bad <= hi:
            continue  # 2**63 fits in a uint64.
        with pytest.raises(gs.InvalidArgumentError) as info:
            call(wrap(bad, good))
        assert info.value.code == "INVALID_ARGUMENT"
        assert str(info.value) == f"{name} {bad} is out of range [{lo}, {hi}]"
    with pytest.raises(ValueError, match=rf"^{name} \(an integer of 3322 bits\) is out of range"):
        call(wrap(10**1000, good))


class Index:
    """Not an int, but has __index__ (as numpy integers do)."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


@pytest.mark.parametrize("name,kind,call,good", INT_ARGUMENTS, ids=INT_IDS)
def test_integer_arguments_take_what_operator_index_takes(name, kind, call, good) -> None:
    value = good[0] if isinstance(good, list) else good
    call(wrap(Index(value), good))

    class Sub(int):
        pass

    call(wrap(Sub(value), good))
    with pytest.raises(gs.InvalidArgumentError, match=f"^{name} "):
        call(wrap(Index(2**64), good))

    class Broken:
        def __index__(self) -> int:
            raise ZeroDivisionError("a bug in __index__")

    with pytest.raises(ZeroDivisionError, match="a bug in __index__"):
        call(wrap(Broken(), good))


@pytest.mark.parametrize("name,kind,call,good", INT_ARGUMENTS, ids=INT_IDS)
def test_integer_arguments_take_numpy_integers(name, kind, call, good) -> None:
    np = pytest.importorskip("numpy")
    value = good[0] if isinstance(good, list) else good
    for t in (np.int64, np.int32, np.uint64):
        call(wrap(t(value), good))
    expected = EXPECTED_TYPE.get(kind, "an int")
    with pytest.raises(TypeError, match=f"^{name} must be {expected}, not bool"):
        call(wrap(np.bool_(True), good))


def test_integer_values_arrive_unchanged() -> None:
    np = pytest.importorskip("numpy")
    r = gs.Request("r", gpu_memory=np.int64(2**32), cpu=Index(-5), compute=2**63 - 1)
    assert (r.gpu_memory, r.cpu, r.compute) == (2**32, -5, 2**63 - 1)
    r.host_memory = np.uint32(7)
    assert r.host_memory == 7 and type(r.host_memory) is int
    assert gs.Cluster(tie_break_seed=2**64 - 1).tie_break_seed == 2**64 - 1
    assert gs.NodeStatus("n", version=np.uint64(2**64 - 1)).version == 2**64 - 1
    assert gs.Node("n", gpus=[np.int64(8), gs.Gpu(4)]).gpus == [gs.Gpu(8), gs.Gpu(4)]
    assert gs.Placement("r", "n", gpus=[np.int8(3), 1]).gpus == [3, 1]


def test_simulate_takes_at_most_10000_distinct_seeds() -> None:
    nodes, tasks = simulation_nodes(), simulation_tasks()
    # A huge range fails at once: only 10,001 seeds are read.
    with pytest.raises(gs.InvalidArgumentError, match="^seed gives more than 10000 seeds$"):
        gs.simulate(nodes, tasks, seed=range(10**18))
    with pytest.raises(gs.InvalidArgumentError, match="^seed gives more than 10000 seeds$"):
        gs.simulate(nodes, tasks, seed=list(range(10001)))
    with pytest.raises(gs.InvalidArgumentError, match="^seed lists seed 3 twice$"):
        gs.simulate(nodes, tasks, seed=[3, 4, 3])
    with pytest.raises(TypeError, match="^seed must be an int or an iterable of ints, not float$"):
        gs.simulate(nodes, tasks, seed=1.5)
    with pytest.raises(TypeError, match="^an item of seed must be an int, not str$"):
        gs.simulate(nodes, tasks, seed="12")
    runs = gs.simulate(nodes, tasks, seed=(s for s in range(5, 8)))
    assert [r.seed for r in runs] == [5, 6, 7]
    assert [r.seed for r in gs.simulate(nodes, tasks, seed=range(9990, 10000))] == list(
        range(9990, 10000))
