"""The FGD experiment from Python: unallocated GPUs against arrived workload.

Runs the six policies of the FGD paper (Weng et al., USENIX ATC 2023) on the
openb trace, 10 seeds each (run in parallel on all cores), and draws the mean
unallocated GPU % against the arrived GPU request (% of capacity), with the
spread over seeds shaded. Writes fgd_policies.png (or --out) and prints the
value at arrived = 100%.

Run: python3 examples/python/fgd_policies.py [--trace default] [--out FILE]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys

import gpushare as gs

OPENB = pathlib.Path(__file__).resolve().parents[3] / "shared" / "traces" / "openb"
POLICIES = ["fgd", "bestfit", "dotprod", "gpupacking", "gpuclustering", "random"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=str(OPENB), help="folder of the openb CSVs")
    parser.add_argument("--trace", default="default", help="task file suffix, e.g. gpushare40")
    parser.add_argument("--seeds", type=int, default=10, help="seeds 42, 43, ...")
    parser.add_argument("--out", default="fgd_policies.png")
    args = parser.parse_args()
    traces = pathlib.Path(args.traces)
    nodes_csv = traces / "openb_node_list_gpu_node.csv"
    tasks_csv = traces / f"openb_pod_list_{args.trace}.csv"
    if not nodes_csv.exists() or not tasks_csv.exists():
        print(f"openb trace not found in {traces}; nothing to do")
        return 0
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (Debian: python3-matplotlib); nothing drawn")
        return 0

    nodes = gs.load_openb_nodes(nodes_csv)
    tasks = gs.load_openb_tasks(tasks_csv)
    seeds = list(range(42, 42 + args.seeds))
    fig, ax = plt.subplots(figsize=(8, 5))
    print(f"{'policy':<14} unallocated GPU % at arrived 100% (mean ± sd, {len(seeds)} seeds)")
    for policy in POLICIES:
        runs = gs.simulate(nodes, tasks, policy=policy, seed=seeds, inflate=1.3)
        x = runs[0].curve["arrived_pct"]
        n = min(len(r.curve["unallocated_pct"]) for r in runs)
        columns = list(zip(*(r.curve["unallocated_pct"][:n] for r in runs)))
        mean = [statistics.fmean(c) for c in columns]
        low, high = [min(c) for c in columns], [max(c) for c in columns]
        ax.plot(x[:n], mean, label=policy)
        ax.fill_between(x[:n], low, high, alpha=0.2)
        at100 = [r.unallocated_at(100) for r in runs]
        sd = statistics.stdev(at100) if len(at100) > 1 else 0.0
        print(f"{policy:<14} {statistics.fmean(at100):6.2f} ± {sd:.2f}")
    ax.set_xlabel("arrived GPU request (% of GPU capacity)")
    ax.set_ylabel("unallocated GPUs (%)")
    ax.set_xlim(80, 130)
    ax.set_ylim(0, 25)
    ax.set_title(f"openb {args.trace}: {len(nodes)} nodes, inflated to 130%")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
