"""The Cluster API: plan/commit/release, bulk calls, snapshots, records, policies."""

from __future__ import annotations

import copy
import json
import pickle
import threading

import gpushare as gs
import pytest


def test_plan_changes_nothing_and_commit_applies(s1: gs.Cluster) -> None:
    req = gs.Request("web-1", gpu_memory=3)
    p = s1.plan(req, policy="spread")
    assert s1.num_placements == 0 and "web-1" not in s1
    s1.commit(p)
    assert "web-1" in s1
    assert s1.get_placement("web-1") == p
    assert s1.get_node(p.node).gpu_memory_used == 3
    s1.release("web-1")
    assert s1.usage().gpu_memory_used == 0


def test_spread_and_binpack_choose_differently(s1: gs.Cluster) -> None:
    s1.place(gs.Request("a", gpu_memory=4))
    used = s1.get_placement("a").node
    assert s1.plan(gs.Request("b", gpu_memory=1), policy="binpack").node == used
    assert s1.plan(gs.Request("b", gpu_memory=1), policy="spread").node != used
    assert s1.plan(gs.Request("b", gpu_memory=1), policy=gs.make_policy("spread")).node != used


def test_fit_reports_every_node_with_a_reason(s1: gs.Cluster) -> None:
    s1.place(gs.Request("a", gpu_memory=10))
    results = s1.fit(gs.Request("b", gpu_memory=5))
    assert [r.node for r in results] == ["sd-cluster-04", "sd-cluster-05"]
    by_node = {r.node: r for r in results}
    full = s1.get_placement("a").node
    assert not by_node[full].feasible and "largest free 4, need 5" in by_node[full].reason
    other = next(n for n in by_node if n != full)
    assert by_node[other].feasible and by_node[other].reason == ""
    assert bool(by_node[other]) is True


def test_place_replicas_as_many_as_fit(s1: gs.Cluster) -> None:
    placed = s1.place_replicas(gs.Request("r", gpu_memory=6), 5, all_or_nothing=False)
    assert len(placed) == 4
    with pytest.raises(gs.InsufficientCapacityError):
        s1.place_replicas(gs.Request("s", gpu_memory=1), 9, all_or_nothing=True)
    assert s1.num_placements == 4


def test_place_many_returns_none_where_nothing_fits(s1: gs.Cluster) -> None:
    reqs = [gs.Request(f"r{i}", gpu_memory=5) for i in range(6)]
    result = s1.place_many(reqs, policy="binpack")
    assert len(result) == 6
    assert [p is None for p in result] == [False, False, False, False, True, True]
    assert all(p.request_id == r.id for p, r in zip(result, reqs) if p is not None)
    assert s1.num_placements == 4
    s1.release_many(["r0", "r1", "r2", "r3"])
    assert s1.num_placements == 0
    s1.check_invariants()


def test_place_many_is_all_or_nothing_on_bad_input(s1: gs.Cluster) -> None:
    s1.place(gs.Request("taken", gpu_memory=1))
    with pytest.raises(ValueError, match=r"requests\[1\]"):
        s1.place_many([gs.Request("a", gpu_memory=1), gs.Request("b", gpu_memory=-1)])
    with pytest.raises(gs.AlreadyExistsError):
        s1.place_many([gs.Request("a", gpu_memory=1), gs.Request("taken", gpu_memory=1)])
    with pytest.raises(ValueError, match="twice"):
        s1.place_many([gs.Request("a", gpu_memory=1), gs.Request("a", gpu_memory=1)])
    with pytest.raises(TypeError):
        s1.place_many([gs.Request("a", gpu_memory=1), "not a request"])  # type: ignore[list-item]
    assert s1.num_placements == 1


def test_release_many_is_all_or_nothing(s1: gs.Cluster) -> None:
    s1.place_many([gs.Request(f"r{i}", gpu_memory=1) for i in range(3)])
    with pytest.raises(KeyError):
        s1.release_many(["r0", "missing"])
    with pytest.raises(gs.ConflictError):
        s1.release_many(["r0", "r0"])
    assert s1.num_placements == 3
    s1.release_many(["r0"])
    with pytest.raises(gs.ConflictError, match="already released"):
        s1.release_many(["r1", "r0"])
    assert s1.num_placements == 2


def test_json_round_trip_keeps_the_whole_state(s1: gs.Cluster) -> None:
    s1.place(gs.Request("a", gpu_memory=3, cpu=0))
    s1.place(gs.Request("ns/b", gpu_memory=2))
    s1.set_gpu_healthy("sd-cluster-04", 0, healthy=False)
    text = s1.to_json()
    again = gs.Cluster.from_json(text)
    assert again.to_json() == text
    assert again.placements() == s1.placements()
    assert again.inspect(details=True) == s1.inspect(details=True)
    assert json.loads(s1.to_json(indent=2)) == json.loads(text)
    with pytest.raises(ValueError):
        gs.Cluster.from_json(text[: len(text) // 2])


def test_copies_and_pickles_are_independent(s1: gs.Cluster) -> None:
    s1.place(gs.Request("a", gpu_memory=3))
    for twin in (s1.copy(), copy.copy(s1), copy.deepcopy(s1), pickle.loads(pickle.dumps(s1))):
        assert twin.placements() == s1.placements()
        twin.place(gs.Request("only-in-twin", gpu_memory=1))
        assert "only-in-twin" not in s1


def test_results_are_snapshots_not_live_views(s1: gs.Cluster) -> None:
    node = s1.get_node("sd-cluster-04")
    records = s1.to_records()
    s1.place(gs.Request("a", gpu_memory=3), policy="spread")
    s1.place(gs.Request("b", gpu_memory=3), policy="spread")
    assert node.gpu_memory_used == 0
    assert all(r["memory_used"] == 0 for r in records)
    p = s1.get_placement("a")
    p.gpus = [5]
    assert s1.get_placement("a").gpus == [0]


def test_to_records_feed_a_dataframe_shape(s1: gs.Cluster) -> None:
    s1.place(gs.Request("a", gpu_memory=3))
    records = s1.to_records()
    assert len(records) == 2
    assert set(records[0]) == {"node", "address", "gpu", "model", "uuid", "healthy",
                               "schedulable", "gpu_sharing", "memory", "memory_used",
                               "memory_free", "compute_used", "holders"}
    row = next(r for r in records if r["memory_used"] == 3)
    assert row["memory_free"] == 11 and row["holders"] == 1 and row["model"] == "T4"
    columns = {key: [r[key] for r in records] for key in records[0]}  # what pandas does
    assert columns["node"] == ["sd-cluster-04", "sd-cluster-05"]


def test_to_records_make_a_pandas_dataframe_directly(s1: gs.Cluster) -> None:
    pd = pytest.importorskip("pandas", reason="pandas is not installed")
    s1.place(gs.Request("a", gpu_memory=3))
    s1.add_node("v100", gpus=[gs.Gpu(memory=15, model="V100")] * 2, labels={"gpushare": "true"})
    df = pd.DataFrame(s1.to_records())
    assert df.shape == (4, 13)
    assert list(df["node"]) == ["sd-cluster-04", "sd-cluster-05", "v100", "v100"]
    assert list(df["gpu"]) == [0, 0, 0, 1]
    assert df["memory"].sum() == s1.usage().gpu_memory
    assert df["memory_used"].sum() == 3
    assert str(df["memory_free"].dtype) == "int64" and str(df["healthy"].dtype) == "bool"
    assert df.groupby("model")["memory"].sum().to_dict() == {"T4": 28, "V100": 30}


def test_repr_html_draws_one_bar_per_gpu(s1: gs.Cluster) -> None:
    s1.place(gs.Request("a", gpu_memory=7))
    s1.add_node("big", gpus=[16, 16, 16], labels={"gpushare": "true"})
    s1.set_node_schedulable("big", False)
    page = s1._repr_html_()
    assert page.count("<tr>") == 4  # header + 3 nodes
    assert "7/14" in page and "GPU2" in page and "(cordoned)" in page
    assert "GPU Memory(GiB)" in page
    assert page.count('<div style="width:') == 5
    assert "width:45px" in page  # 7 of 14 units: half of the 90 px bar.


def test_repr_html_of_a_large_cluster_is_summarised() -> None:
    from gpushare import _html

    c = gs.Cluster()
    for i in range(10_000):
        c.add_node(f"node-{i:05d}", gpus=[16] * 8, labels={"gpushare": "true"})
    c.place(gs.Request("a", gpu_memory=3))
    page = c._repr_html_()
    assert len(page) < 200_000, len(page)
    assert page.count("<tr>") == 1 + _html.MAX_HTML_NODES + 1
    assert f"... and {10_000 - _html.MAX_HTML_NODES} more nodes" in page
    assert "node-00000" in page and "node-09999" not in page
    # The totals still cover every node.
    assert "3/1280000 (0%), 1 requests" in page


def test_cluster_options_and_mib(s1: gs.Cluster) -> None:
    c = gs.Cluster(memory_unit="MiB", tie_break_seed=7, remembered_releases=10)
    assert (c.memory_unit, c.tie_break_seed, c.remembered_releases) == ("MiB", 7, 10)
    c.add_node("n", gpus=[gs.Gpu(memory=15360)], labels={"gpushare": "true"})
    assert "GPU Memory(MiB)" in c.inspect()
    assert s1.memory_unit == "GiB" and s1.num_nodes == 2
    assert s1.node_names() == ["sd-cluster-04", "sd-cluster-05"]


def test_remove_node_and_add_node_objects() -> None:
    c = gs.Cluster()
    c.add_node(gs.Node("n1", gpus=[gs.Gpu(memory=8)], gpu_sharing=True))
    c.place(gs.Request("a", gpu_memory=1))
    with pytest.raises(gs.ConflictError):
        c.remove_node("n1")
    c.release("a")
    c.remove_node("n1")
    assert c.num_nodes == 0


def test_nodes_needed_for_elastic_inference() -> None:
    c = gs.Cluster()
    shape = gs.Node("spot", gpus=[gs.Gpu(memory=16, model="T4")],
                    labels={"inference": "tensorflow"})
    c.add_node(gs.Node("spot-a", gpus=[gs.Gpu(memory=16, model="T4")],
                       labels={"inference": "tensorflow"}))
    req = gs.Request("serving", whole_gpus=1, node_selector={"inference": "tensorflow"})
    assert c.capacity(req) == 1
    assert c.nodes_needed(req, 10, shape) == 9
    assert len(c.place_replicas(req, 1)) == 1
    assert c.nodes_needed(req, 3, shape=shape, policy="spread") == 3


class FirstFit(gs.Policy):
    """The lowest GPUs of the first node in name order."""

    def __init__(self) -> None:
        super().__init__()
        self.committed: list[str] = []

    def name(self) -> str:
        return "first_fit"

    def evaluate(self, demand, node, fitting):
        return (-sum(ord(ch) for ch in node.name), fitting[: demand.gpu_count])

    def on_committed(self, placement) -> None:
        self.committed.append(placement.request_id)


def test_python_policies_choose_and_see_commits() -> None:
    c = gs.Cluster()
    for name in ("b", "a", "c"):
        c.add_node(name, gpus=[8, 8], labels={"gpushare": "true"})
    policy = FirstFit()
    assert c.place(gs.Request("x", gpu_memory=2), policy=policy).node == "a"
    assert [p.node for p in c.place_many([gs.Request("y", gpu_memory=2)], policy=policy)] == ["a"]
    assert policy.committed == ["x", "y"]
    assert policy.name() == "first_fit" and repr(policy) == "FirstFit()"


def test_python_policy_errors_propagate_and_roll_back() -> None:
    class Broken(gs.Policy):
        def evaluate(self, demand, node, fitting):
            raise RuntimeError("policy bug")

    class BadShape(gs.Policy):
        def evaluate(self, demand, node, fitting):
            return "nonsense"

    c = gs.Cluster()
    c.add_node("n", gpus=[8], labels={"gpushare": "true"})
    with pytest.raises(RuntimeError, match="policy bug"):
        c.place_replicas(gs.Request("r", gpu_memory=1), 3, policy=Broken())
    with pytest.raises(TypeError):
        c.place(gs.Request("r", gpu_memory=1), policy=BadShape())
    assert c.num_placements == 0
    c.check_invariants()


def test_python_policy_gpu_indices_are_read_strictly() -> None:
    class Returns(gs.Policy):
        def __init__(self, gpus) -> None:
            super().__init__()
            self.gpus = gpus

        def evaluate(self, demand, node, fitting):
            return (1.0, self.gpus)

    c = gs.Cluster()
    c.add_node("n", gpus=[8, 8], labels={"gpushare": "true"})
    # True is no GPU index 1.
    bool_error = r"^an item of the gpus evaluate\(\) returned must be an int, not bool$"
    with pytest.raises(TypeError, match=bool_error):
        c.place(gs.Request("r", gpu_memory=1), policy=Returns([True]))
    with pytest.raises(ValueError, match="returned 4294967297 is out of range"):
        c.place(gs.Request("r", gpu_memory=1), policy=Returns([2**32 + 1]))
    assert c.num_placements == 0
    c.check_invariants()
    assert c.place(gs.Request("r", gpu_memory=1), policy=Returns((i for i in [1]))).gpus == [1]


def test_threads_can_share_a_cluster() -> None:
    c = gs.Cluster()
    for i in range(8):
        c.add_node(f"n{i}", gpus=[16] * 4, labels={"gpushare": "true"})

    def worker(k: int) -> None:
        for j in range(20):
            c.place_many([gs.Request(f"t{k}-{j}-{i}", gpu_memory=1) for i in range(10)])
            c.plan(gs.Request(f"probe-{k}", gpu_memory=1))
            c.release_many([f"t{k}-{j}-{i}" for i in range(0, 10, 2)])

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert c.num_placements == 4 * 20 * 5
    c.check_invariants()


def test_policy_names_and_version() -> None:
    assert {"binpack", "spread"} <= set(gs.policy_names())
    assert gs.__version__ == gs.version() and gs.__version__.count(".") == 2
    with pytest.raises(ValueError, match="known policies"):
        gs.make_policy("nope")
