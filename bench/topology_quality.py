#!/usr/bin/env python3
"""Topology-aware vs topology-blind placement on the openb traces.

Attaches fixture topologies (tests/data/topology) to the openb GPU nodes by
GPU count and model: the DGX-1 hybrid cube-mesh to 8-GPU V100 nodes, the
2-socket PCIe server to the other 8-GPU nodes, the 4 x T4 layout to 4-GPU T4
nodes (other nodes stay topology-blind). Then runs the FGD-paper experiment
(gs.simulate, inflate 1.3) twice per trace and seed: requests as they are
(topology "prefer") and with topology "none" (GPUs chosen as on blind nodes),
and prints a Markdown table: the share of multi-GPU tasks on nodes with a
topology that got the best connectivity available there at placement time,
and the unallocated GPU % at 100 % arrived.

    PYTHONPATH=build/bindings/python python3 bench/topology_quality.py \\
        [--traces /work/shared/traces/openb] [--policy fgd] [--seeds 42 43 ...]
"""

import argparse
import os

import gpushare as gs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "data", "topology")


def fixture(name):
    return os.path.join(FIXTURES, name)


# gs.simulate(topologies=...): the first matching key wins; a str key takes the
# nodes of that model with as many GPUs as the topology, an int key every node
# with that many GPUs.
TOPOLOGIES = {
    "V100M16": fixture("dgx1_v100.txt"),
    "V100M32": fixture("dgx1_v100.txt"),
    8: fixture("pcie_2socket_8gpu.txt"),
    "T4": fixture("t4x4.txt"),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default="/work/shared/traces/openb")
    ap.add_argument("--policy", default="fgd")
    ap.add_argument("--seeds", type=int, nargs="+", default=[42])
    ap.add_argument("--variants", nargs="+", default=["multigpu20", "multigpu40"])
    args = ap.parse_args()
    nodes = gs.load_openb_nodes(os.path.join(args.traces, "openb_node_list_gpu_node.csv"))
    print("| trace | policy | seed | multi-GPU tasks on topology nodes (aware / blind) "
          "| best connectivity, aware | best connectivity, blind "
          "| unallocated GPU % at 100 %, aware | blind | change |")
    print("|---|---|---|---|---|---|---|---|---|")
    for variant in args.variants:
        tasks = gs.load_openb_tasks(os.path.join(args.traces, f"openb_pod_list_{variant}.csv"))
        blind_tasks = []
        for t in tasks:
            b = gs.Request(t.id, gpu_memory=t.gpu_memory, gpu_count=t.gpu_count,
                           compute=t.compute, whole_gpus=t.whole_gpus, cpu=t.cpu,
                           host_memory=t.host_memory, gpu_models=t.gpu_models,
                           node_selector=t.node_selector, topology="none")
            blind_tasks.append(b)
        rows = []
        # All seeds of one side in one call: they run on parallel threads.
        aware_runs = gs.simulate(nodes, tasks, policy=args.policy, seed=args.seeds,
                                 topologies=TOPOLOGIES)
        blind_runs = gs.simulate(nodes, blind_tasks, policy=args.policy, seed=args.seeds,
                                 topologies=TOPOLOGIES)
        for seed, a, b in zip(args.seeds, aware_runs, blind_runs):
            aware, blind = a.summary, b.summary
            share = lambda s: 100.0 * s["topology_best"] / max(s["topology_tasks"], 1)
            ua, ub = aware["unallocated_at_100"], blind["unallocated_at_100"]
            print(f"| {variant} | {args.policy} | {seed} | {aware['topology_tasks']} / "
                  f"{blind['topology_tasks']} | {share(aware):.1f} % | {share(blind):.1f} % "
                  f"| {ua:.2f} | {ub:.2f} | {ua - ub:+.2f} |", flush=True)
            rows.append((share(aware), share(blind), ua, ub))
        if len(rows) > 1:
            mean = [sum(r[i] for r in rows) / len(rows) for i in range(4)]
            print(f"| {variant} | {args.policy} | mean of {len(rows)} | | {mean[0]:.1f} % "
                  f"| {mean[1]:.1f} % | {mean[2]:.2f} | {mean[3]:.2f} | {mean[2] - mean[3]:+.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
