"""gpushare: where GPU-sharing Kubernetes workloads go.

The allocation brain of GPU sharing (pods asking for GPU memory units, several
pods per GPU, multi-GPU splits, exclusive GPUs) as a library::

    import gpushare as gs

    c = gs.Cluster(memory_unit="GiB")
    c.add_node("sd-cluster-04", gpus=[gs.Gpu(memory=14, model="T4")],
               labels={"gpushare": "true"}, address="192.168.1.214")
    p = c.place(gs.Request("binpack-1", gpu_memory=2), policy="binpack")
    p.node, p.gpus, p.memory_per_gpu, p.env["ALIYUN_COM_GPU_MEM_CONTAINER"]
    print(c.inspect())

Errors: every error is a ``gs.Error`` with ``.code``; ``InvalidArgumentError``
is also a ``ValueError``, ``NotFoundError`` a ``KeyError``;
``InsufficientCapacityError`` means nothing fits now; ``ConflictError`` (and its
subclass ``AlreadyExistsError``) that the call contradicts the cluster's state.

Experiments: ``gs.simulate`` runs the FGD trace experiment once (or per seed);
``gs.sweep`` runs traces x policies x seeds on any concurrent.futures executor
(Dask's included) into a pandas DataFrame; ``gpushare.plot`` draws the results.
"""

from . import _core
from ._core import (
    GPU_COMPUTE,
    MAX_GPUS_PER_NODE,
    MAX_QUANTITY,
    AlreadyExistsError,
    BatchResult,
    Cluster,
    ConflictError,
    Demand,
    DeviceView,
    Error,
    FitResult,
    Gpu,
    GpuStatus,
    InsufficientCapacityError,
    InvalidArgumentError,
    Migration,
    MigrationPlan,
    Node,
    NodeStatus,
    NotFoundError,
    Placement,
    Policy,
    Request,
    Score,
    SimulationResult,
    TOPOLOGY_ANNOTATION,
    Topology,
    Usage,
    fragmentation,
    load_openb_nodes,
    load_openb_tasks,
    make_policy,
    policy_names,
    replay,
    simulate,
    typical_tasks,
    version,
)
from ._html import cluster_html as _cluster_html
from ._sweep import sweep

__version__ = version()

# Notebooks call _repr_html_ to draw a cluster (a table with a bar per GPU).
setattr(Cluster, "_repr_html_", _cluster_html)

__all__ = [
    "GPU_COMPUTE",
    "MAX_GPUS_PER_NODE",
    "MAX_QUANTITY",
    "AlreadyExistsError",
    "BatchResult",
    "Cluster",
    "ConflictError",
    "Demand",
    "DeviceView",
    "Error",
    "FitResult",
    "Gpu",
    "GpuStatus",
    "InsufficientCapacityError",
    "InvalidArgumentError",
    "Migration",
    "MigrationPlan",
    "Node",
    "NodeStatus",
    "NotFoundError",
    "Placement",
    "Policy",
    "Request",
    "Score",
    "SimulationResult",
    "TOPOLOGY_ANNOTATION",
    "Topology",
    "Usage",
    "fragmentation",
    "load_openb_nodes",
    "load_openb_tasks",
    "make_policy",
    "policy_names",
    "replay",
    "simulate",
    "sweep",
    "typical_tasks",
    "version",
]

del _core
