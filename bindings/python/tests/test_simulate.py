"""gs.simulate(), gs.replay() and the openb loaders."""

from __future__ import annotations

import math
import os
import pathlib

import gpushare as gs
import pytest

# Where the C++ tests look (tests/testing/sim_fixtures.h): $GPUSHARE_SHARED_DIR,
# else ../shared beside the source tree.
SHARED = pathlib.Path(os.environ.get("GPUSHARE_SHARED_DIR")
                      or pathlib.Path(__file__).resolve().parents[3] / ".." / "shared")
OPENB = SHARED / "traces" / "openb"
NODES = OPENB / "openb_node_list_gpu_node.csv"
TASKS = OPENB / "openb_pod_list_default.csv"


def small_cluster() -> list[gs.Node]:
    nodes = []
    for i in range(6):
        nodes.append(gs.Node(f"n{i}", gpus=[gs.Gpu(memory=16, model="T4")] * (2 if i % 2 else 4),
                             cpu=64000, host_memory=262144, gpu_sharing=True))
    return nodes


def small_workload() -> list[gs.Request]:
    shares = [200, 300, 500, 810]
    reqs = []
    for i in range(60):
        if i % 5 == 0:
            reqs.append(gs.Request(f"w{i}", whole_gpus=1, cpu=4000))
        else:
            reqs.append(gs.Request(f"s{i}", compute=shares[i % 4], cpu=2000))
    return reqs


def test_simulate_returns_curve_columns_and_summary() -> None:
    r = gs.simulate(nodes=small_cluster(), tasks=small_workload(), policy="fgd", seed=42,
                    inflate=1.3)
    assert isinstance(r, gs.SimulationResult)
    assert r.policy == "fgd" and r.seed == 42
    assert r.gpu_capacity == 18 * 1000
    curve = r.curve
    assert set(curve) == {"arrived_pct", "unallocated_pct", "frag_amount", "frag_rate"}
    assert curve["arrived_pct"][:3] == [0, 1, 2]
    # This workload already asks for more than 130% of capacity: no inflation.
    total = sum(1000 * q.whole_gpus + q.compute for q in small_workload())
    assert total > 1.3 * r.gpu_capacity
    assert len(curve["unallocated_pct"]) == len(curve["arrived_pct"])
    assert len(curve["arrived_pct"]) == 100 * total // r.gpu_capacity + 1
    assert curve["unallocated_pct"][0] == 100.0
    assert r.unallocated_at(50) == curve["unallocated_pct"][50]
    assert r.placed + r.failed["total"] == r.requests
    assert r.failed["total"] > 0
    s = r.summary
    assert s["unallocated_at_100"] == r.unallocated_at(100)
    assert 0.0 <= s["frag_rate_at_100"] <= 1.0
    assert "fgd" in repr(r)
    rec = r.records
    assert set(rec) == {"node", "arrived", "allocated", "frag_amount", "frag_rate"}
    assert all(len(col) == r.requests for col in rec.values())
    assert rec["node"] == r.node_of_request
    assert rec["arrived"][-1] == total
    assert rec["allocated"] == sorted(rec["allocated"])
    # Bin 50 holds the record of the last task with arrived <= 50% of capacity.
    last = max(k for k, a in enumerate(rec["arrived"]) if 100 * a <= 50 * r.gpu_capacity)
    assert curve["unallocated_pct"][50] == 100 - 100 * rec["allocated"][last] / r.gpu_capacity


def test_simulate_breaks_down_the_unallocated_gpus_by_cause() -> None:
    for policy in ("fgd", "fgdcpu", "fgdpack"):
        r = gs.simulate(small_cluster(), small_workload(), policy=policy, seed=42)
        assert r.policy == policy
        u = r.unallocated
        assert set(u) == {"gpu_model", "cpu", "host_memory", "gpu_shape", "placeable", "total"}
        parts = [u[k] for k in ("gpu_model", "cpu", "host_memory", "gpu_shape", "placeable")]
        assert all(p >= 0 for p in parts)
        assert sum(parts) == u["total"] == r.gpu_capacity - r.records["allocated"][-1]
    # CPU runs out first: 2 cores for a 4-GPU node, one task takes both.
    node = gs.Node("n", gpus=[gs.Gpu(memory=16, model="T4")] * 4, cpu=2000,
                   host_memory=262144, gpu_sharing=True)
    tasks = [gs.Request("a", compute=500, cpu=2000), gs.Request("b", compute=500, cpu=1000)]
    r = gs.simulate([node], tasks, policy="fgdcpu", shuffle=False, inflate=0)
    assert r.unallocated["cpu"] == r.unallocated["total"] == 3500


def test_simulate_many_seeds_matches_single_runs() -> None:
    runs = gs.simulate(small_cluster(), small_workload(), policy="bestfit", seed=[43, 42])
    assert [r.seed for r in runs] == [43, 42]
    one = gs.simulate(small_cluster(), small_workload(), policy="bestfit", seed=42)
    assert runs[1].curve == one.curve
    assert runs[1].node_of_request == one.node_of_request


def test_simulate_errors_map_to_python_exceptions() -> None:
    with pytest.raises(gs.InvalidArgumentError, match="unknown policy 'nope'"):
        gs.simulate(small_cluster(), small_workload(), policy="nope")
    with pytest.raises(ValueError, match="at least one request"):
        gs.simulate(small_cluster(), [])
    with pytest.raises(gs.NotFoundError):
        gs.simulate("/nonexistent/nodes.csv", small_workload())


def test_replay_lets_tasks_leave() -> None:
    timed = [(r, 10 * i, 10 * i + 100) for i, r in enumerate(small_workload())]
    out = gs.replay(small_cluster(), timed, policy="fgd")
    assert out["requests"] == 60
    assert len(out["time"]) == 60
    assert out["time"] == sorted(out["time"])
    assert max(out["allocated_pct"]) == out["peak_allocated_pct"] > 0
    assert all(a <= q + 1e-9 for a, q in zip(out["allocated_pct"], out["requested_pct"]))


def test_typical_tasks_and_fragmentation() -> None:
    reqs = [gs.Request(f"a{i}", compute=500, cpu=1000) for i in range(6)]
    reqs += [gs.Request(f"w{i}", whole_gpus=2, cpu=2000) for i in range(3)]
    reqs += [gs.Request("c", cpu=4000)]
    target = gs.typical_tasks(reqs, coverage=0.9)
    assert [(t["gpu_share"], t["gpu_count"]) for t in target] == [(500, 1), (1000, 2)]
    assert math.isclose(sum(t["weight"] for t in target), 1.0)
    c = gs.Cluster()
    c.add_node("n", gpus=[gs.Gpu(memory=16), gs.Gpu(memory=16)], gpu_sharing=True)
    c.place(gs.Request("p", compute=700))
    # A 500-share task fits on the idle GPU, not on the 300 left next to the
    # 700; a 2-GPU task fits nowhere: everything idle is fragment for it.
    f = gs.fragmentation(c, [{"gpu_share": 500, "gpu_count": 1, "weight": 0.5},
                             {"gpu_share": 1000, "gpu_count": 2, "weight": 0.5}])
    assert f == {"amount": 0.5 * 300 + 0.5 * 1300, "idle": 1300.0, "rate": 800 / 1300}
    # The workload itself: its typical tasks are the two shapes, weighted 6:3.
    g = gs.fragmentation(c, reqs, coverage=0.9)
    assert math.isclose(g["amount"], 6 / 9 * 300 + 3 / 9 * 1300)
    assert math.isclose(g["rate"], g["amount"] / 1300)
    # On memory: 16 units per GPU, none used by the compute-only task.
    on_memory = gs.fragmentation(c, [{"gpu_share": 8, "gpu_count": 1, "weight": 1.0}],
                                 resource="memory")
    assert on_memory == {"amount": 0.0, "idle": 32.0, "rate": 0.0}
    with pytest.raises(ValueError, match="resource 'disk'"):
        gs.fragmentation(c, reqs, resource="disk")


@pytest.mark.skipif(not NODES.exists(), reason=f"openb traces not found under {SHARED}")
def test_default_trace_fgd_beats_bestfit() -> None:
    nodes = gs.load_openb_nodes(NODES)
    assert len(nodes) == 1213
    tasks = gs.load_openb_tasks(str(TASKS))
    assert len(tasks) == 8152
    fgd = gs.simulate(nodes=NODES, tasks=TASKS, policy="fgd", seed=42, inflate=1.3)
    bestfit = gs.simulate(nodes=nodes, tasks=tasks, policy="bestfit", seed=42, inflate=1.3)
    assert fgd.unallocated_at(100) < bestfit.unallocated_at(100) - 1.0
    assert math.isclose(fgd.unallocated_at(80), 20.0, abs_tol=0.5)
    assert fgd.seconds < 5.0


@pytest.mark.skipif(not NODES.exists(), reason=f"openb traces not found under {SHARED}")
def test_fgd_policies_example_draws_the_curves(tmp_path: pathlib.Path) -> None:
    import subprocess
    import sys
    script = pathlib.Path(__file__).resolve().parents[3] / "examples" / "python" / "fgd_policies.py"
    out_png = tmp_path / "curves.png"
    out = subprocess.run([sys.executable, str(script), "--seeds", "2", "--out", str(out_png)],
                         check=True, capture_output=True, text=True, timeout=300).stdout
    if "matplotlib is not installed" in out:
        pytest.skip("matplotlib is not installed")
    assert out_png.stat().st_size > 0
    for policy in ("fgd", "bestfit", "dotprod", "gpupacking", "gpuclustering", "random"):
        assert policy in out


def test_make_policy_takes_the_target_workload_of_fgdpack() -> None:
    target = [
        {"cpu": 1000, "gpu_share": 810, "gpu_count": 1, "weight": 0.3},
        {"cpu": 1000, "gpu_share": 470, "gpu_count": 1, "weight": 0.3},
        {"cpu": 1000, "gpu_share": 320, "gpu_count": 1, "weight": 0.2},
        {"cpu": 1000, "gpu_share": 650, "gpu_count": 1, "weight": 0.1},
        {"cpu": 1000, "gpu_share": 160, "gpu_count": 1, "weight": 0.1},
    ]

    def pick(policy: gs.Policy) -> str:
        c = gs.Cluster()
        c.add_node(gs.Node("hole-840", gpus=[gs.Gpu(memory=16, model="A")], cpu=32000,
                           gpu_sharing=True))
        # The only node yet: the 160 share lands there.
        assert c.place(gs.Request("bg", gpu_memory=1, compute=160, cpu=1000)).node == "hole-840"
        c.add_node(gs.Node("idle", gpus=[gs.Gpu(memory=16, model="A")], cpu=32000,
                           gpu_sharing=True))
        return c.place(gs.Request("r", gpu_memory=1, compute=650, cpu=1000), policy=policy).node

    # The 840 a 160 share left is kept for an 810 share; without the target,
    # fgdpack measures against one whole-GPU task and takes the tighter GPU.
    assert pick(gs.make_policy("fgdpack", target=target)) == "idle"
    assert pick(gs.make_policy("fgdpack")) == "hole-840"
    # A workload works too: its typical tasks are the target.
    workload = [gs.Request(f"w{i}", compute=s, cpu=1000)
                for i, s in enumerate([810, 810, 810, 470, 470, 470, 320, 320, 650, 160])]
    assert pick(gs.make_policy("fgdpack", target=workload, coverage=1.0)) == "idle"
    with pytest.raises(ValueError, match="resource 'disk'"):
        gs.make_policy("fgdpack", target=target, resource="disk")


@pytest.mark.parametrize("task, message", [
    ({"gpu_share": 4, "gpu_count": 1, "weight": -1}, r"tasks\[1\]\.weight: -1 is not a positive"),
    ({"gpu_share": 4, "gpu_count": 1}, r"tasks\[1\]\.weight: 0 is not a positive"),
    ({"gpu_share": 4, "gpu_count": 1, "weight": float("nan")}, r"tasks\[1\]\.weight: nan"),
    ({"gpu_share": 4, "gpu_count": 0, "weight": 1}, r"tasks\[1\]: gpu_share 4 with gpu_count 0"),
    ({"gpu_share": -4, "gpu_count": 1, "weight": 1}, r"tasks\[1\]\.gpu_share: -4 is outside"),
    ({"gpu_share": 4, "gpu_count": 99, "weight": 1}, r"tasks\[1\]\.gpu_count: 99 is outside"),
    ({"gpu_shares": 4, "gpu_count": 1, "weight": 1}, r"tasks\[1\]: unknown key 'gpu_shares'"),
])
def test_make_policy_refuses_a_bad_target_naming_the_value(task, message) -> None:
    good = {"cpu": 1000, "gpu_share": 8, "gpu_count": 1, "weight": 0.5}
    with pytest.raises(ValueError, match=message):
        gs.make_policy("fgdpack", target=[good, task], resource="memory")
    # The same target is fine once the bad task is left out.
    assert gs.make_policy("fgdpack", target=[good], resource="memory").name() == "fgdpack"
