"""Quick start: scenario S1 of the GPU-sharing field reports through the Python API.

Two nodes with one Tesla T4 (14 GiB) each, labelled for sharing; four requests
placed with binpack, the `kubectl inspect gpushare` table after each step, and
the environment each container would see. Run: python3 examples/python/quickstart.py
"""

from __future__ import annotations

import gpushare as gs


def main() -> None:
    c = gs.Cluster(memory_unit="GiB")
    for name, address in (("sd-cluster-04", "192.168.1.214"), ("sd-cluster-05", "192.168.1.215")):
        c.add_node(name, gpus=[gs.Gpu(memory=14, model="T4")],
                   labels={"gpushare": "true"}, address=address)

    steps = [("binpack-1", 2, 1), ("binpack-2", 8, 2), ("binpack-3", 2, 1), ("binpack-4", 5, 1)]
    expected = {"binpack-1": ["sd-cluster-05"], "binpack-2": ["sd-cluster-05", "sd-cluster-04"],
                "binpack-3": ["sd-cluster-05"], "binpack-4": ["sd-cluster-04"]}
    for n, (rid, units, replicas) in enumerate(steps, start=1):
        request = gs.Request(rid, gpu_memory=units)
        if replicas == 1:
            placed = [c.place(request, policy="binpack")]
        else:
            placed = c.place_replicas(request, replicas, policy="binpack", all_or_nothing=True)
        print(f"step {n}: {rid} asks {units} GiB x {replicas}")
        for p in placed:
            print("  ", p)
        assert [p.node for p in placed] == expected[rid], placed
        print(c.inspect())
        if n == 3:
            free = c.usage().gpu_memory - c.usage().gpu_memory_used
            print(f"{free} GiB free; 6 GiB pods that fit: "
                  f"{c.capacity(gs.Request('probe', gpu_memory=6))}, 7 GiB pods: "
                  f"{c.capacity(gs.Request('probe', gpu_memory=7))}")
            for fit in c.fit(gs.Request("probe", gpu_memory=7)):
                print(f"  {fit.node}: {fit.reason}")
            print()

    print(c.inspect(details=True))
    for p in c.placements():
        env = p.env
        print(f"{p.request_id:12} NVIDIA_VISIBLE_DEVICES={env['NVIDIA_VISIBLE_DEVICES']} "
              f"ALIYUN_COM_GPU_MEM_DEV={env['ALIYUN_COM_GPU_MEM_DEV']} "
              f"ALIYUN_COM_GPU_MEM_CONTAINER={env['ALIYUN_COM_GPU_MEM_CONTAINER']}")

    try:
        c.place(gs.Request("too-big", gpu_memory=7))
    except gs.InsufficientCapacityError as e:
        print(f"\ntoo-big stays pending: {e}")

    snapshot = c.to_json()
    assert gs.Cluster.from_json(snapshot).placements() == c.placements()
    print(f"snapshot: {len(snapshot)} bytes of JSON, {c.num_placements} placements")


if __name__ == "__main__":
    main()
