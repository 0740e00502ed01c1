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
