"""gs.simulate(migration_budget=...): moves that rescue tasks that found no node."""

from __future__ import annotations

import gpushare as gs
import pytest


def two_one_gpu_nodes() -> list[gs.Node]:
    return [gs.Node(name, gpus=[gs.Gpu(memory=16, model="T4")], cpu=8000, host_memory=32768,
                    gpu_sharing=True) for name in ("a", "b")]


def halves_then_whole() -> list[gs.Request]:
    return [gs.Request("half-1", compute=500, cpu=1000), gs.Request("half-2", compute=500, cpu=1000),
            gs.Request("whole", whole_gpus=1, cpu=1000)]


def run(**kwargs: object) -> gs.SimulationResult:
    r = gs.simulate(two_one_gpu_nodes(), halves_then_whole(), policy="spread", seed=1,
                    inflate=0.0, shuffle=False, **kwargs)
    assert isinstance(r, gs.SimulationResult)
    return r


def test_a_move_rescues_the_whole_gpu_task() -> None:
    alone = run()
    # "spread" puts the halves on different GPUs: the whole GPU finds none idle.
    assert alone.node_of_request[2] == -1 and alone.placed == 2
    assert alone.migrations == 0 and alone.rescued == 0
    moved = run(migration_budget=100, max_moves=1)
    assert moved.placed == 3 and moved.failed["total"] == 0
    assert moved.migrations == 1 and moved.rescued == 1
    assert moved.summary["migrations"] == 1 and moved.summary["rescued"] == 1
    nodes = moved.node_of_request
    assert nodes[0] == nodes[1] != nodes[2]
    # 3 tasks earn floor(3 * 33 / 100) = 0 moves.
    assert run(migration_budget=33).placed == 2


def test_budget_zero_is_the_plain_run() -> None:
    a = run()
    b = run(migration_budget=0, max_moves=3)
    assert a.node_of_request == b.node_of_request
    assert a.curve == b.curve


def test_seed_lists_migrate_too() -> None:
    runs = gs.simulate(two_one_gpu_nodes(), halves_then_whole(), policy="spread", seed=[1, 2],
                       inflate=0.0, shuffle=False, migration_budget=100)
    assert isinstance(runs, list)
    assert [r.rescued for r in runs] == [1, 1]


@pytest.mark.parametrize("kwargs, message", [
    ({"migration_budget": -1}, "migration budget -1"),
    ({"migration_budget": 10001}, "migration budget 10001"),
    ({"max_moves": 0}, "max moves per request 0"),
])
def test_bad_values_are_named(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        run(**kwargs)


def test_a_bool_is_not_a_budget() -> None:
    with pytest.raises(TypeError, match="migration_budget"):
        run(migration_budget=True)
