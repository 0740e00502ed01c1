"""Batch placement and the defragmentation planner from Python."""

from __future__ import annotations

import gpushare as gs
import pytest


def two_gpus() -> gs.Cluster:
    c = gs.Cluster()
    c.add_node("n", gpus=[16, 16], labels={"gpushare": "true"})
    return c


def pods(sizes: list[int]) -> list[gs.Request]:
    return [gs.Request(f"p{i}", gpu_memory=s) for i, s in enumerate(sizes)]


def test_place_batch_beats_one_by_one_binpack() -> None:
    one_by_one = two_gpus()
    placed = one_by_one.place_many(pods([5, 5, 5, 5, 6, 6]))
    assert sum(p is not None for p in placed) == 5

    c = two_gpus()
    r = c.place_batch(pods([5, 5, 5, 5, 6, 6]), policy="binpack")
    assert isinstance(r, gs.BatchResult)
    assert r.placed == 6 and r.proven_optimal and r.method == "search"
    assert [p.request_id for p in r.placements] == [f"p{i}" for i in range(6)]
    for p in r.placements:
        assert c.get_placement(p.request_id) == p
        assert p.env  # Bound to the cluster: the device-plugin view works.
    assert c.usage().gpu_memory_used == 32
    c.check_invariants()


def test_all_or_nothing_failure_changes_nothing() -> None:
    c = two_gpus()
    c.place(gs.Request("old", gpu_memory=3))
    before = c.to_json()
    with pytest.raises(gs.InsufficientCapacityError, match="at most 5"):
        c.place_batch(pods([5, 5, 5, 5, 6, 6]), all_or_nothing=True)
    assert c.to_json() == before
    with pytest.raises(gs.InvalidArgumentError, match="appears twice"):
        c.place_batch(pods([1]) + pods([1]))
    with pytest.raises(TypeError, match=r"requests\[0\]"):
        c.place_batch(["p"])  # type: ignore[list-item]
    assert c.to_json() == before

    r = c.place_batch(pods([5, 5, 5, 5, 6, 6, 20]))
    assert r.placed == 5 and r.placements[6] is None and r.proven_optimal


def test_gang_members_do_not_share_a_gpu() -> None:
    c = two_gpus()
    r = c.place_batch(pods([2, 2]), gang=True, all_or_nothing=True)
    assert {tuple(p.gpus) for p in r.placements} == {(0,), (1,)}
    with pytest.raises(gs.InsufficientCapacityError):
        c.place_batch([gs.Request(f"w{i}", gpu_memory=1) for i in range(3)], gang=True,
                      all_or_nothing=True)


def test_plan_and_apply_defragmentation() -> None:
    c = gs.Cluster()
    c.add_node("a", gpus=[8], labels={"gpushare": "true"})
    c.add_node("b", gpus=[8], labels={"gpushare": "true"})
    c.commit(gs.Placement("x", "a", [0], memory_per_gpu=4))
    c.commit(gs.Placement("y", "b", [0], memory_per_gpu=2))
    big = gs.Request("big", gpu_memory=7)
    before = c.to_json()

    plan = c.plan_defragmentation(big, max_moves=2, movable=[gs.Request("y", gpu_memory=2)])
    assert c.to_json() == before
    assert plan.found and plan.proven and len(plan.moves) == 1
    move = plan.moves[0]
    assert (move.pod.id, move.source.node, move.target.node) == ("y", "b", "a")
    assert plan.then is not None and plan.then.node == "b"

    none = c.plan_defragmentation(gs.Request("huge", gpu_memory=9), max_moves=2)
    assert not none.found and none.proven and "no plan of at most 2 moves" in none.reason

    c.apply_migrations(plan)
    assert c.get_placement("y").node == "a"
    assert c.place(big).node == "b"


def test_a_stale_plan_is_refused() -> None:
    c = gs.Cluster()
    c.add_node("a", gpus=[8], labels={"gpushare": "true"})
    c.add_node("b", gpus=[8], labels={"gpushare": "true"})
    c.commit(gs.Placement("x", "a", [0], memory_per_gpu=4))
    c.commit(gs.Placement("y", "b", [0], memory_per_gpu=2))
    plan = c.plan_defragmentation(gs.Request("big", gpu_memory=7))
    assert plan.found and len(plan.moves) == 1
    c.place(gs.Request("z", gpu_memory=5))  # Takes the room the move needs.
    before = c.to_json()
    with pytest.raises(gs.ConflictError, match="no longer holds"):
        c.apply_migrations(plan)
    assert c.to_json() == before
    with pytest.raises(gs.InvalidArgumentError, match="max_moves 17"):
        c.plan_defragmentation(gs.Request("big", gpu_memory=7), max_moves=17)


def test_plan_free_gpus() -> None:
    c = gs.Cluster()
    c.add_node("a", gpus=[8, 8], labels={"gpushare": "true"})
    c.add_node("b", gpus=[8], labels={"gpushare": "true"})
    c.commit(gs.Placement("x", "a", [0], memory_per_gpu=2))
    c.commit(gs.Placement("y", "a", [1], memory_per_gpu=2))
    c.commit(gs.Placement("z", "b", [0], memory_per_gpu=3))
    plan = c.plan_free_gpus(2, max_moves=3)
    assert plan.found and plan.proven and len(plan.moves) == 2 and plan.free_gpus_goal == 2
    assert not c.plan_free_gpus(3, max_moves=3).found
    c.apply_migrations(plan)
    assert c.usage().idle_gpus == 2


def test_plan_lower_fragmentation() -> None:
    c = gs.Cluster()
    c.add_node("a", gpus=[8], labels={"gpushare": "true"})
    c.add_node("b", gpus=[8], labels={"gpushare": "true"})
    c.commit(gs.Placement("x", "a", [0], memory_per_gpu=3))
    c.commit(gs.Placement("y", "b", [0], memory_per_gpu=3))
    target = [{"gpu_share": 6, "gpu_count": 1, "weight": 1.0}]
    before = c.to_json()
    plan = c.plan_lower_fragmentation(target, max_moves=2, resource="memory")
    assert plan.found and plan.proven and len(plan.moves) == 1
    assert plan.fragmentation_before == gs.fragmentation(c, target, resource="memory")["amount"]
    assert plan.fragmentation_before == 10 and plan.fragmentation_after == 2
    assert c.to_json() == before  # A plan changes nothing.
    c.apply_migrations(plan)
    assert gs.fragmentation(c, target, resource="memory")["amount"] == plan.fragmentation_after
    again = c.plan_lower_fragmentation(target, max_moves=2, resource="memory")
    assert not again.found and "lowers the fragmentation measure" in again.reason
    with pytest.raises(gs.InvalidArgumentError, match="resource 'disk'"):
        c.plan_lower_fragmentation(target, resource="disk")
    with pytest.raises(gs.InvalidArgumentError, match="max_moves"):
        c.plan_lower_fragmentation(target, max_moves=17, resource="memory")
