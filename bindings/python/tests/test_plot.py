"""gpushare.plot: the figures carry the series they claim (no image comparison)."""

from __future__ import annotations

import math
import statistics

import gpushare as gs
import pytest

pytest.importorskip("pandas", reason="pandas is not installed")
matplotlib = pytest.importorskip("matplotlib", reason="matplotlib is not installed")
matplotlib.use("Agg")

import gpushare.plot  # noqa: E402
from test_simulate import small_cluster, small_workload  # noqa: E402

POLICIES = ["fgd", "bestfit", "gpupacking"]
SEEDS = [1, 2, 3]


def test_unallocated_curve_draws_the_mean_over_seeds_per_policy() -> None:
    df = gs.sweep(small_cluster(), {"small": small_workload()}, POLICIES, SEEDS, progress=False)
    fig = gpushare.plot.unallocated_curve(df, xlim=None)
    ax = fig.axes[0]
    assert ax.get_title() == "small"
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == POLICIES
    assert [t.get_text() for t in ax.get_legend().get_texts()] == POLICIES
    for policy, line in zip(POLICIES, lines):
        curves = [gs.simulate(small_cluster(), small_workload(), policy=policy, seed=s).curve
                  for s in SEEDS]
        n = min(len(c["arrived_pct"]) for c in curves)
        assert list(line.get_xdata()) == curves[0]["arrived_pct"][:n]
        want = [statistics.fmean(c["unallocated_pct"][i] for c in curves) for i in range(n)]
        assert all(math.isclose(a, b) for a, b in zip(line.get_ydata(), want))
    # One shaded min..max band per policy.
    assert len(ax.collections) == len(POLICIES)


def test_unallocated_curve_has_a_panel_per_trace_and_checks_its_input() -> None:
    traces = {"a": small_workload(), "b": small_workload()[:40]}
    df = gs.sweep(small_cluster(), traces, ["fgd", "random"], [5], progress=False)
    fig = gpushare.plot.unallocated_curve(df)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in visible] == ["a", "b"]
    assert all(len(ax.collections) == 0 for ax in visible)  # one seed: no band
    one = gpushare.plot.unallocated_curve(df, trace="b")
    assert [ax.get_title() for ax in one.axes] == ["b"]
    with pytest.raises(ValueError, match="trace 'c' is not in the DataFrame"):
        gpushare.plot.unallocated_curve(df, trace="c")
    with pytest.raises(ValueError, match="lacks the column"):
        gpushare.plot.unallocated_curve(df.drop(columns="unallocated"))


def test_occupancy_shows_each_gpu_in_use() -> None:
    c = gs.Cluster(memory_unit="GiB")
    c.add_node("big", gpus=[gs.Gpu(memory=16)] * 4, gpu_sharing=True)
    c.add_node("small", gpus=[gs.Gpu(memory=8)], gpu_sharing=True)
    c.place(gs.Request("a", gpu_memory=4), policy="binpack")
    c.place(gs.Request("b", gpu_memory=8, gpu_count=2), policy="binpack")
    c.place(gs.Request("c", gpu_memory=6), policy="binpack")
    fig = gpushare.plot.occupancy(c)
    ax = fig.axes[0]
    image = ax.get_images()[0].get_array()
    used = {(r["node"], r["gpu"]): r["memory_used"] / r["memory"] for r in c.to_records()}
    assert sum(r["memory_used"] for r in c.to_records()) == 4 + 8 + 6
    assert image.shape == (2, 4)
    for (node, gpu), share in used.items():
        assert image[["big", "small"].index(node), gpu] == share
    # The small node has no GPUs 1..3: masked, not shown as idle.
    assert list(image.mask[1]) == [False, True, True, True]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["big", "small"]
    with pytest.raises(ValueError, match="resource 'disk'"):
        gpushare.plot.occupancy(c, resource="disk")
