"""gs.sweep(): the FGD trace experiment over traces x policies x seeds.

Every combination is one run of ``gs.simulate`` (one seed each), submitted to a
``concurrent.futures.Executor``: by default a thread pool over the local cores
(the simulator releases the GIL, so threads run in parallel and nothing needs
pickling), or any executor the caller gives, such as a process pool or the
executor of a Dask distributed client (``client.get_executor()``) to spread a
sweep over a cluster. The result is the same whatever the executor: the rows
are ordered by trace, policy and seed as given, not by completion.

Everything that can be checked is checked before the first run is submitted:
policy names, seeds, inflate, and every trace file (loaded once here).
"""

from __future__ import annotations

import concurrent.futures
import math
import os
import pathlib
import sys
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _core

PathLike = Union[str, "os.PathLike[str]"]

# The columns of gs.sweep()'s DataFrame, in order.
COLUMNS = ("trace", "policy", "seed", "arrived", "unallocated", "frag_amount", "frag_rate")


def _is_path(x: object) -> bool:
    return isinstance(x, (str, os.PathLike))


def _trace_label(path: PathLike) -> str:
    """The label of a task file: its name without the openb prefix and .csv."""
    name = pathlib.Path(os.fspath(path)).name
    if name.endswith(".csv"):
        name = name[:-4]
    return name[len("openb_pod_list_"):] if name.startswith("openb_pod_list_") else name


def _traces_arg(tasks: Any) -> List[Tuple[str, Any]]:
    """(label, path or list of gs.Request) per trace, in the given order."""
    if _is_path(tasks):
        items: List[Tuple[str, Any]] = [(_trace_label(tasks), tasks)]
    elif isinstance(tasks, Mapping):
        items = []
        for label, t in tasks.items():
            if not isinstance(label, str):
                raise TypeError(f"tasks: a trace label must be a str, not {type(label).__name__}")
            items.append((label, t))
    else:
        seq = list(tasks)
        if seq and all(isinstance(t, _core.Request) for t in seq):
            items = [("tasks", seq)]
        else:
            items = []
            for t in seq:
                if not _is_path(t):
                    raise TypeError("tasks must be a task CSV path, a list of paths, a list of "
                                    "gs.Request or a dict of label -> path or list of gs.Request; "
                                    f"got an item of type {type(t).__name__}")
                items.append((_trace_label(t), t))
    if not items:
        raise _core.InvalidArgumentError("tasks names no trace")
    seen: Dict[str, int] = {}
    for label, _ in items:
        if label in seen:
            raise _core.InvalidArgumentError(
                f"tasks: two traces have the label '{label}' (pass a dict to name them)")
        seen[label] = 1
    return items


def _policies_arg(policies: Union[str, Iterable[str]]) -> List[str]:
    names = [policies] if isinstance(policies, str) else list(policies)
    if not names:
        raise _core.InvalidArgumentError("policies names no policy")
    known = _core.policy_names()
    for name in names:
        if not isinstance(name, str) or name not in known:
            raise _core.InvalidArgumentError(
                f"unknown policy {name!r}; known policies: {', '.join(known)}")
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise _core.InvalidArgumentError(f"policies lists '{twice}' twice")
    return names


def _seeds_arg(seeds: Union[int, Iterable[int]]) -> List[int]:
    if isinstance(seeds, bool):
        raise TypeError("seeds must be an int or an iterable of ints, not bool")
    if isinstance(seeds, int):
        seeds = [seeds]
    out: List[int] = []
    seen = set()
    for s in seeds:
        if isinstance(s, bool) or not hasattr(s, "__index__"):
            raise TypeError(f"an item of seeds must be an int, not {type(s).__name__}")
        s = s.__index__()
        if not 0 <= s < 2 ** 64:
            raise _core.InvalidArgumentError(f"seed {s} is not in 0..2**64-1")
        if s in seen:
            raise _core.InvalidArgumentError(f"seeds lists seed {s} twice")
        seen.add(s)
        out.append(s)
    if not out:
        raise _core.InvalidArgumentError("seeds gives no seed")
    return out


def _run(label: str, nodes: Any, tasks: Any, policy: str, seed: int, inflate: float,
         shuffle: bool) -> Dict[str, Any]:
    """One run, as columns (plain lists: cheap to send back from a worker)."""
    from gpushare import _core as core  # noqa: PLC0415 (a worker imports the package here)

    r = core.simulate(nodes, tasks, policy=policy, seed=seed, inflate=inflate, shuffle=shuffle)
    assert isinstance(r, core.SimulationResult)  # one seed: one result
    curve = r.curve
    n = len(curve["arrived_pct"])
    return {
        "trace": [label] * n,
        "policy": [policy] * n,
        "seed": [seed] * n,
        "arrived": curve["arrived_pct"],
        "unallocated": curve["unallocated_pct"],
        "frag_amount": curve["frag_amount"],
        "frag_rate": curve["frag_rate"],
    }


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        ip = shell.get_ipython()  # type: ignore[attr-defined]
    except AttributeError:
        return False
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


def progress_bar(total: int, desc: str, progress: Optional[bool]) -> Any:
    """A tqdm bar over `total` steps, or None for no bar.

    progress=None shows one when tqdm is installed and the output is seen by a
    person: stderr is a terminal, or the code runs in a notebook kernel. It is
    never drawn into a log or a pipe. progress=True asks for one (an error if
    tqdm is missing); progress=False never shows one.
    """
    if progress is False:
        return None
    if progress is not None and progress is not True:
        raise TypeError(f"progress must be None, True or False, not {progress!r}")
    try:
        import tqdm  # type: ignore  # noqa: F401,PLC0415 (optional; may have no stubs)
    except ImportError:
        if progress:
            raise ImportError("progress=True needs tqdm: pip install tqdm") from None
        return None
    notebook = _in_notebook()
    if progress is None and not notebook:
        try:
            if not sys.stderr.isatty():
                return None
        except (AttributeError, ValueError):
            return None
    if notebook:
        try:
            import ipywidgets  # type: ignore  # noqa: F401,PLC0415
            from tqdm.notebook import tqdm as bar  # type: ignore  # noqa: PLC0415
            return bar(total=total, desc=desc, unit="run")
        except ImportError:
            pass
    from tqdm.std import tqdm as text_bar  # type: ignore  # noqa: PLC0415
    return text_bar(total=total, desc=desc, unit="run", file=sys.stderr)


def _default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def sweep(nodes: Any, tasks: Any, policies: Union[str, Iterable[str]] = (
              "fgd", "bestfit", "dotprod", "gpupacking", "gpuclustering", "random"),
          seeds: Union[int, Iterable[int]] = range(42, 52), *, inflate: float = 1.3,
          shuffle: bool = True, executor: Optional[concurrent.futures.Executor] = None,
          progress: Optional[bool] = None) -> Any:
    """Runs the FGD trace experiment for every trace x policy x seed.

    nodes: an openb node CSV path or a list of gs.Node. tasks: a task CSV path,
    a list of them, a list of gs.Request, or a dict of label -> path or list of
    gs.Request (a path's label is its file name without ``openb_pod_list_`` and
    ``.csv``). policies: names of gs.policy_names() (default: the six FGD-paper
    policies). seeds: an int or an iterable of distinct ints (default 42..51).
    inflate and shuffle: as in gs.simulate.

    executor: any concurrent.futures.Executor (a process pool, or a Dask
    client's ``client.get_executor()``; trace paths must then exist on the
    workers; in-memory nodes or tasks need a ThreadPoolExecutor);
    None runs on a thread pool over the local cores. progress: a tqdm bar, see
    progress_bar().

    Returns a pandas DataFrame with one row per run and 1 % step of arrived
    GPU request: trace, policy, seed, arrived (% of GPU capacity),
    unallocated (% of GPUs), frag_amount (thousandths of a GPU) and frag_rate
    (0..1), the values of gs.simulate(...).curve for that run; rows in the
    order of traces, policies and seeds as given.

    Errors, raised before any run starts: gs.InvalidArgumentError (a
    ValueError) for an unknown or repeated policy, no seeds or a repeated
    seed, no traces or an inflate outside [0, 100]; gs.NotFoundError for a
    missing trace file; TypeError for arguments of the wrong type or
    in-memory inputs given to an executor other than a thread pool.
    """
    try:
        import pandas as pd  # type: ignore  # noqa: PLC0415 (may have no stubs)
    except ImportError:
        raise ImportError("gs.sweep needs pandas: pip install pandas "
                          "(or pip install 'gpushare[sweep]')") from None
    names = _policies_arg(policies)
    seed_list = _seeds_arg(seeds)
    if isinstance(inflate, bool) or not isinstance(inflate, (int, float)) or \
            math.isnan(inflate) or not 0 <= inflate <= 100:
        raise _core.InvalidArgumentError(f"inflate {inflate!r} is not a number in [0, 100]")
    traces = _traces_arg(tasks)
    if executor is not None and not isinstance(executor, concurrent.futures.Executor):
        raise TypeError("executor must be a concurrent.futures.Executor "
                        f"(for Dask: client.get_executor()), not {type(executor).__name__}")
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be None, True or False, not {progress!r}")

    # Load every input once: a missing or malformed file fails here, naming it.
    if _is_path(nodes):
        loaded_nodes = _core.load_openb_nodes(nodes)
    else:
        loaded_nodes = list(nodes)
        if not all(isinstance(n, _core.Node) for n in loaded_nodes):
            raise TypeError("nodes must be an openb node CSV path or a list of gs.Node")
    if not loaded_nodes:
        raise _core.InvalidArgumentError("nodes: the cluster has no nodes")
    for label, t in traces:
        reqs = _core.load_openb_tasks(t) if _is_path(t) else list(t)
        if not reqs:
            raise _core.InvalidArgumentError(f"tasks: trace '{label}' has no tasks")
        if not _is_path(t) and not all(isinstance(q, _core.Request) for q in reqs):
            raise TypeError(f"tasks: trace '{label}' must be a path or a list of gs.Request")

    # Paths go to the workers as strings (each loads its files); in-memory
    # inputs as they are, which only a thread pool can share.
    node_arg = os.fspath(nodes) if _is_path(nodes) else loaded_nodes
    jobs = [(label, node_arg, os.fspath(t) if _is_path(t) else list(t), policy, seed,
             float(inflate), bool(shuffle))
            for label, t in traces for policy in names for seed in seed_list]
    in_memory = not _is_path(nodes) or any(not _is_path(t) for _, t in traces)
    if in_memory and executor is not None and \
            not isinstance(executor, concurrent.futures.ThreadPoolExecutor):
        # gs.Node and gs.Request do not pickle; a path is read by each worker.
        raise TypeError("in-memory gs.Node or gs.Request lists run only on a thread pool (the "
                        "default executor): for this executor, pass openb CSV paths")

    own = executor is None
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=_default_workers()) if own \
        else executor
    assert pool is not None
    bar = progress_bar(len(jobs), "sweep", progress)
    results: List[Optional[Dict[str, Any]]] = [None] * len(jobs)
    try:
        futures = {pool.submit(_run, *job): i for i, job in enumerate(jobs)}
        try:
            for f in concurrent.futures.as_completed(futures):
                results[futures[f]] = f.result()
                if bar is not None:
                    bar.update(1)
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    finally:
        if bar is not None:
            bar.close()
        if own:
            pool.shutdown(wait=True)
    columns: Dict[str, List[Any]] = {c: [] for c in COLUMNS}
    for r in results:
        assert r is not None
        for c in COLUMNS:
            columns[c].extend(r[c])
    df = pd.DataFrame(columns, columns=list(COLUMNS))
    df["seed"] = df["seed"].astype("uint64" if any(s >= 2 ** 63 for s in seed_list) else "int64")
    return df


__all__: Sequence[str] = ["sweep", "progress_bar", "COLUMNS"]
