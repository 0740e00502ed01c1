"""Figures of gpushare results (matplotlib; ``pip install 'gpushare[plot]'``).

    import gpushare as gs
    import gpushare.plot

    df = gs.sweep(nodes_csv, tasks_csv)               # six policies x 10 seeds
    fig = gpushare.plot.unallocated_curve(df)          # the FGD paper's main figure
    fig = gpushare.plot.occupancy(cluster)             # one cell per GPU

Both return a matplotlib Figure (drawn into `ax` when one is given) and never
call plt.show(): a notebook shows the returned figure, a script saves it.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence

from . import _core


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise ImportError("gpushare.plot needs matplotlib: pip install 'gpushare[plot]'") from None
    return plt


def _require_columns(df: Any, columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in getattr(df, "columns", ())]
    if missing:
        raise _core.InvalidArgumentError(
            f"the DataFrame lacks the column(s) {', '.join(missing)} (expected the result of "
            "gs.sweep())")


def policy_means(df: Any) -> Any:
    """Per policy and arrived step: mean, min and max unallocated % over seeds.

    Only steps every seed of the policy reached are kept (runs end at slightly
    different arrived percentages, by the inflation's sampling). A DataFrame
    with columns policy, arrived, mean, min, max, in the policies' order of
    first appearance.
    """
    _require_columns(df, ["policy", "seed", "arrived", "unallocated"])
    order = list(dict.fromkeys(df["policy"]))
    g = df.groupby(["policy", "arrived"], sort=False)["unallocated"]
    out = g.agg(["mean", "min", "max", "count"]).reset_index()
    seeds = df.groupby("policy", sort=False)["seed"].nunique()
    out = out[out["count"] == out["policy"].map(seeds)].drop(columns="count")
    out["policy"] = out["policy"].astype("category").cat.set_categories(order)
    out = out.sort_values(["policy", "arrived"], kind="stable").reset_index(drop=True)
    out["policy"] = out["policy"].astype(str)
    return out


def unallocated_curve(df: Any, *, trace: Optional[str] = None, ax: Any = None,
                      band: bool = True, xlim: Optional[Sequence[float]] = (80, 130)) -> Any:
    """Unallocated GPUs (%) against arrived GPU request (% of capacity), per policy.

    `df` is a DataFrame of gs.sweep(). One line per policy, the mean over seeds
    (labelled with the policy's name), with the min..max over seeds shaded
    when `band` and there are several seeds. With several traces in `df` and
    no `trace`, one panel per trace (titled with it); `trace` picks one. `ax`
    draws into existing axes (one trace only). Returns the Figure.
    """
    _require_columns(df, ["trace", "policy", "seed", "arrived", "unallocated"])
    plt = _pyplot()
    traces: List[str] = list(dict.fromkeys(df["trace"]))
    if trace is not None:
        if trace not in traces:
            raise _core.InvalidArgumentError(
                f"trace '{trace}' is not in the DataFrame (its traces: {', '.join(traces)})")
        traces = [trace]
    if not traces:
        raise _core.InvalidArgumentError("the DataFrame has no rows")
    if ax is not None:
        if len(traces) > 1:
            raise _core.InvalidArgumentError(
                "ax= draws one trace; the DataFrame has several: pass trace=")
        fig, axes = ax.figure, [ax]
    else:
        cols = min(3, len(traces))
        rows = math.ceil(len(traces) / cols)
        fig, grid = plt.subplots(rows, cols, figsize=(5.5 * cols, 4 * rows), squeeze=False)
        axes = [a for row in grid for a in row]
        for extra in axes[len(traces):]:
            extra.set_visible(False)
    for a, name in zip(axes, traces):
        m = policy_means(df[df["trace"] == name])
        for policy, rows_p in m.groupby("policy", sort=False):
            line, = a.plot(rows_p["arrived"], rows_p["mean"], label=policy)
            if band and df[(df["trace"] == name) & (df["policy"] == policy)]["seed"].nunique() > 1:
                a.fill_between(rows_p["arrived"], rows_p["min"], rows_p["max"],
                               color=line.get_color(), alpha=0.2, linewidth=0)
        a.set_title(name)
        a.set_xlabel("arrived GPU request (% of GPU capacity)")
        a.set_ylabel("unallocated GPUs (%)")
        if xlim is not None:
            a.set_xlim(*xlim)
        a.grid(True, alpha=0.3)
        a.legend()
    fig.tight_layout()
    return fig


def occupancy_grid(cluster: Any, resource: str = "memory") -> Any:
    """The occupancy of every GPU as a numpy array: one row per node, one
    column per GPU index, used / capacity in 0..1 (memory, or compute in
    thousandths of a GPU), NaN where the node has no such GPU. Also returns
    the node names: (names, grid)."""
    import numpy as np  # noqa: PLC0415 (matplotlib depends on numpy)

    if resource not in ("memory", "compute"):
        raise _core.InvalidArgumentError(f"resource '{resource}' is not 'memory' or 'compute'")
    records = cluster.to_records()
    names = list(dict.fromkeys(r["node"] for r in records))
    width = max((r["gpu"] + 1 for r in records), default=0)
    grid = np.full((len(names), width), np.nan)
    row = {n: i for i, n in enumerate(names)}
    for r in records:
        if resource == "memory":
            used = r["memory_used"] / r["memory"] if r["memory"] else 0.0
        else:
            used = r["compute_used"] / _core.GPU_COMPUTE
        grid[row[r["node"]], r["gpu"]] = used
    return names, grid


def occupancy(cluster: Any, *, resource: str = "memory", ax: Any = None) -> Any:
    """A picture of a gs.Cluster: one cell per GPU (rows: nodes, columns: GPU
    index), coloured by the share of its memory (or compute) in use, blank
    where a node has fewer GPUs. Returns the Figure; the image's data is
    occupancy_grid(cluster, resource)[1]."""
    plt = _pyplot()
    import numpy as np  # noqa: PLC0415

    names, grid = occupancy_grid(cluster, resource)
    if not names:
        raise _core.InvalidArgumentError("the cluster has no nodes")
    if ax is None:
        height = min(12.0, 1.5 + 0.3 * len(names))
        fig, ax = plt.subplots(figsize=(1.5 + 0.6 * grid.shape[1] + 1.5, height))
    else:
        fig = ax.figure
    image = ax.imshow(np.ma.masked_invalid(grid), aspect="auto", cmap="viridis", vmin=0, vmax=1,
                      interpolation="nearest")
    ax.set_xlabel("GPU")
    ax.set_xticks(range(grid.shape[1]))
    if len(names) <= 40:
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(names)
    else:
        ax.set_ylabel(f"node ({len(names)})")
    ax.set_title(f"GPU {resource} in use")
    fig.colorbar(image, ax=ax, label=f"{resource} used / capacity")
    return fig


__all__ = ["unallocated_curve", "occupancy", "occupancy_grid", "policy_means"]
