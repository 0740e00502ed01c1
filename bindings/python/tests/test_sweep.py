"""gs.sweep(): traces x policies x seeds on any executor, into a DataFrame."""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import subprocess
import sys
import textwrap
from typing import Any, Callable

import gpushare as gs
import pytest

pd = pytest.importorskip("pandas", reason="pandas is not installed")


def write_trace(folder: pathlib.Path, name: str, shares: list[int], whole_every: int) -> pathlib.Path:
    """A small openb task CSV: shared GPU tasks of `shares` and whole-GPU tasks."""
    path = folder / f"openb_pod_list_{name}.csv"
    lines = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
             "creation_time,deletion_time,scheduled_time"]
    for i in range(60):
        if i % whole_every == 0:
            lines.append(f"p{i},4000,8192,1,1000,,LS,Running,{i},{i + 500},{i}")
        else:
            lines.append(f"p{i},2000,4096,1,{shares[i % len(shares)]},,LS,Running,{i},{i + 500},{i}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def traces(tmp_path: pathlib.Path) -> dict[str, Any]:
    nodes = tmp_path / "openb_node_list_gpu_node.csv"
    rows = ["sn,cpu_milli,memory_mib,gpu,model"]
    rows += [f"n{i},64000,262144,{2 if i % 2 else 4},T4" for i in range(6)]
    nodes.write_text("\n".join(rows) + "\n")
    return {
        "nodes": nodes,
        "tasks": [write_trace(tmp_path, "small", [200, 300, 500, 810], 5),
                  write_trace(tmp_path, "halves", [500, 250], 3)],
    }


POLICIES = ["fgd", "bestfit", "random"]
SEEDS = [42, 7]


def test_sweep_rows_equal_individual_simulate_runs(traces: dict[str, Any]) -> None:
    df = gs.sweep(traces["nodes"], traces["tasks"], POLICIES, SEEDS, inflate=1.5, progress=False)
    assert list(df.columns) == ["trace", "policy", "seed", "arrived", "unallocated",
                                "frag_amount", "frag_rate"]
    # Runs in the order given, whatever order they finished in.
    runs = list(dict.fromkeys(zip(df["trace"], df["policy"], df["seed"])))
    assert runs == [(t, p, s) for t in ("small", "halves") for p in POLICIES for s in SEEDS]
    for (trace, policy, seed), rows in df.groupby(["trace", "policy", "seed"], sort=False):
        path = next(p for p in traces["tasks"] if p.stem.endswith(trace))
        r = gs.simulate(traces["nodes"], path, policy=policy, seed=int(seed), inflate=1.5)
        assert rows["arrived"].tolist() == r.curve["arrived_pct"]
        assert rows["unallocated"].tolist() == r.curve["unallocated_pct"]
        assert rows["frag_rate"].tolist() == r.curve["frag_rate"]
        assert rows["frag_amount"].tolist() == r.curve["frag_amount"]
    # The two traces and the policies really differ: a mix-up would show.
    at = df[df["arrived"] == 100].groupby(["trace", "policy"])["unallocated"].mean()
    assert at.nunique() > 1


def test_sweep_takes_in_memory_inputs_and_a_dict_of_traces() -> None:
    from test_simulate import small_cluster, small_workload

    df = gs.sweep(small_cluster(), {"mine": small_workload()}, "bestfit", 3, progress=False)
    one = gs.simulate(small_cluster(), small_workload(), policy="bestfit", seed=3)
    assert set(df["trace"]) == {"mine"} and set(df["policy"]) == {"bestfit"}
    assert df["unallocated"].tolist() == one.curve["unallocated_pct"]
    assert df["seed"].tolist() == [3] * len(one.curve["arrived_pct"])


def test_process_pool_and_dask_give_the_same_dataframe(traces: dict[str, Any]) -> None:
    distributed = pytest.importorskip("distributed", reason="dask[distributed] is not installed")
    expected = gs.sweep(traces["nodes"], traces["tasks"], POLICIES, SEEDS, progress=False)
    with concurrent.futures.ProcessPoolExecutor(max_workers=2) as pool:
        got = gs.sweep(traces["nodes"], traces["tasks"], POLICIES, SEEDS, executor=pool,
                       progress=False)
    pd.testing.assert_frame_equal(got, expected)
    # A real local Dask cluster: two worker processes, no dashboard.
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        got = gs.sweep(traces["nodes"], traces["tasks"], POLICIES, SEEDS,
                       executor=client.get_executor(), progress=False)
        # The runs did go to the workers' processes.
        pids = client.run(os.getpid)
        assert len(pids) == 2 and os.getpid() not in pids.values()
    pd.testing.assert_frame_equal(got, expected)


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    """A thread pool that counts the work submitted to it."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.submitted = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


def test_bad_arguments_fail_before_any_run(traces: dict[str, Any], tmp_path: pathlib.Path) -> None:
    nodes, tasks = traces["nodes"], traces["tasks"]
    missing = tmp_path / "openb_pod_list_nope.csv"
    with CountingExecutor() as ex:
        with pytest.raises(gs.InvalidArgumentError, match="unknown policy 'nope'"):
            gs.sweep(nodes, tasks, ["fgd", "nope"], SEEDS, executor=ex)
        with pytest.raises(ValueError, match="seeds gives no seed"):
            gs.sweep(nodes, tasks, POLICIES, [], executor=ex)
        with pytest.raises(ValueError, match="seeds lists seed 7 twice"):
            gs.sweep(nodes, tasks, POLICIES, [7, 8, 7], executor=ex)
        # The missing file comes last: every trace is read before the first run.
        with pytest.raises(gs.NotFoundError, match="openb_pod_list_nope.csv"):
            gs.sweep(nodes, tasks + [missing], POLICIES, SEEDS, executor=ex)
        with pytest.raises(gs.NotFoundError, match="nodes.csv"):
            gs.sweep(tmp_path / "nodes.csv", tasks, POLICIES, SEEDS, executor=ex)
        with pytest.raises(ValueError, match="inflate 200"):
            gs.sweep(nodes, tasks, POLICIES, SEEDS, inflate=200, executor=ex)
        with pytest.raises(ValueError, match="policies names no policy"):
            gs.sweep(nodes, tasks, [], SEEDS, executor=ex)
        with pytest.raises(ValueError, match="label 'small'"):
            gs.sweep(nodes, [tasks[0], tasks[0]], POLICIES, SEEDS, executor=ex)
        assert ex.submitted == 0
    with pytest.raises(TypeError, match="concurrent.futures.Executor"):
        gs.sweep(nodes, tasks, POLICIES, SEEDS, executor=object())  # type: ignore[arg-type]


def test_in_memory_inputs_cannot_go_to_other_processes() -> None:
    from test_simulate import small_cluster, small_workload

    with concurrent.futures.ProcessPoolExecutor(max_workers=1) as pool:
        with pytest.raises(TypeError, match="pass openb CSV paths"):
            gs.sweep(small_cluster(), small_workload(), "fgd", 1, executor=pool)


SCRIPT = textwrap.dedent("""
    import sys
    import gpushare as gs
    df = gs.sweep(sys.argv[1], sys.argv[2:], ["fgd", "bestfit"], [1, 2, 3])
    print(len(df))
""")


def test_progress_only_where_a_person_looks(traces: dict[str, Any]) -> None:
    pytest.importorskip("tqdm", reason="tqdm is not installed")
    args = [sys.executable, "-c", SCRIPT, str(traces["nodes"])] + [str(t) for t in traces["tasks"]]
    # Piped, as in a CI log: no bar, nothing on stderr.
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=120)
    assert out.stderr == ""
    assert int(out.stdout) > 0
    # stderr on a terminal (80 columns): the bar counts the 12 runs.
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    try:
        proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=follower, text=True,
                              check=True, timeout=120)
        os.close(follower)
        follower = -1
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    assert proc.stdout.strip() == out.stdout.strip()
    assert b"12/12" in seen and b"sweep" in seen


def test_progress_argument_is_checked(traces: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match="progress must be None, True or False"):
        gs.sweep(traces["nodes"], traces["tasks"], "fgd", 1, progress="yes")  # type: ignore[arg-type]
