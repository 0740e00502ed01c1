#!/usr/bin/env python3
"""The FGD paper's experiment on every openb task trace: one markdown table.

Runs `gpushare simulate` (the CLI) once per task file in ../shared/traces/openb/
with the GPU node list, seeds 42-51 and inflation 1.3, and prints unallocated
GPU % at arrived 100% of capacity (mean ± sd over the seeds) for every policy,
one row per trace, plus the wall time of each trace's six policies x ten seeds.

  cmake --build build --target gpushare
  python3 scripts/fgd_table.py [--cli build/cli/gpushare] [--traces ../shared/traces/openb]
                               [--policies fgd,bestfit,...]
"""

import argparse
import glob
import os
import re
import subprocess
import sys
import time

POLICIES = ["fgd", "bestfit", "dotprod", "gpupacking", "gpuclustering", "random"]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", default=os.path.join(root, "build", "cli", "gpushare"))
    ap.add_argument("--traces", default=os.path.join(root, "..", "shared", "traces", "openb"))
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--inflate", default="1.3")
    ap.add_argument("--policies", default=",".join(POLICIES))
    args = ap.parse_args()
    policies = args.policies.split(",")
    nodes = os.path.join(args.traces, "openb_node_list_gpu_node.csv")
    tasks = sorted(glob.glob(os.path.join(args.traces, "openb_pod_list_*.csv")))
    if not os.path.exists(nodes) or not tasks:
        sys.exit("no openb traces in %s" % args.traces)
    # default first, then the variants by name.
    tasks.sort(key=lambda p: (not p.endswith("_default.csv"), p))
    print("| trace | " + " | ".join(policies) + " | wall s |")
    print("|---" * (len(policies) + 2) + "|")
    for path in tasks:
        start = time.monotonic()
        out = subprocess.run(
            [args.cli, "simulate", "--nodes", nodes, "--tasks", path, "--policies",
             ",".join(policies), "--seeds", args.seeds, "--inflate", args.inflate,
             "--markdown"], check=True, capture_output=True, text=True).stdout
        wall = time.monotonic() - start
        at100 = {}
        for line in out.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) >= 4 and cells[0] in policies:
                # policy, @90, @95, @100, ...; the first table only.
                at100.setdefault(cells[0], cells[3])
        missing = [p for p in policies if p not in at100]
        if missing:
            sys.exit("no result for %s on %s:\n%s" % (missing, path, out))
        values = [float(re.split(r"\s*±\s*", at100[p])[0]) for p in policies]
        best = min(values)
        cells = ["**%s**" % at100[p] if v == best else at100[p] for p, v in zip(policies, values)]
        name = os.path.basename(path)[len("openb_pod_list_"):-len(".csv")]
        print("| %s | %s | %.1f |" % (name, " | ".join(cells), wall), flush=True)


if __name__ == "__main__":
    main()
