"""gs.Topology and topology-aware placement from Python."""

import os
import pickle

import pytest

import gpushare as gs

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "data", "topology")


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


def test_from_nvidia_smi_reads_links_and_interns():
    t = gs.Topology.from_nvidia_smi(fixture("dgx1_v100.txt"))
    assert t.num_gpus == 8
    assert t.link(0, 3) == "NV2"
    assert t.link(0, 5) == "SYS"
    assert not t.uniform
    assert t.gpu_numa == [0, 0, 0, 0, 1, 1, 1, 1]
    assert gs.Topology.from_nvidia_smi(fixture("dgx1_v100.txt")) is t
    assert gs.Topology.from_json(t.to_json()) is t
    assert pickle.loads(pickle.dumps(t)) == t
    assert t.best_set(4) == ([0, 1, 2, 3], "NV1")
    assert t.best_set(1, free=[5]) == ([5], None)
    heavy = gs.Topology.from_nvidia_smi(fixture("dgx1_v100.txt"), weights={"nvlink": 40})
    assert heavy is not t and heavy.weight(0, 3) == 80


def test_parser_errors_name_line_and_token():
    text = fixture("t4x4.txt").replace("GPU0\t X \tPHB", "GPU0\t X \tPHX")
    with pytest.raises(gs.InvalidArgumentError, match="line 2: unknown link from GPU0 to GPU1 'PHX'"):
        gs.Topology.from_nvidia_smi(text)
    with pytest.raises(ValueError, match="unknown link weight 'qpi'"):
        gs.Topology.from_nvidia_smi(fixture("t4x4.txt"), weights={"qpi": 1.0})


def test_placement_on_a_dgx1_gets_nvlinked_sets():
    t = gs.Topology.from_nvidia_smi(fixture("dgx1_v100.txt"))
    c = gs.Cluster()
    c.add_node("dgx1", gpus=[32] * 8, labels={"gpushare": "true"}, topology=t)
    pair = c.place(gs.Request("pair", whole_gpus=2))
    assert pair.gpus == [0, 3] and pair.weakest_link == "NV2"
    quad = c.place(gs.Request("quad", gpu_memory=64, gpu_count=4))
    assert quad.gpus == [4, 5, 6, 7] and quad.weakest_link == "NV1"
    assert c.get_node("dgx1").topology is t
    assert c.get_placement("quad").weakest_link == "NV1"
    strict = gs.Request("strict", whole_gpus=2, topology="NV4")
    assert strict.topology == "NV4"
    fit = c.fit(strict)
    assert not fit[0].feasible and "weakest link" in fit[0].reason
    with pytest.raises(gs.InsufficientCapacityError, match="best set"):
        c.place(strict)
    with pytest.raises(gs.InvalidArgumentError, match="topology 'fastest'"):
        gs.Request("x", whole_gpus=2, topology="fastest")
    back = gs.Cluster.from_json(c.to_json())
    assert back.get_node("dgx1").topology is t


def test_node_objects_and_blind_nodes():
    t = gs.Topology.from_links([["X", "PIX"], ["PIX", "X"]])
    n = gs.Node("n", gpus=[16, 16], labels={"gpushare": "true"}, topology=t)
    assert n.topology is t
    assert "Topology.from_json(" in repr(n)
    c = gs.Cluster()
    c.add_node(n)
    c.add_node("blind", gpus=[16, 16], labels={"gpushare": "true"})
    p = c.place(gs.Request("a", whole_gpus=2), policy="spread")
    assert (p.weakest_link is None) == (p.node == "blind")
    with pytest.raises(gs.InvalidArgumentError, match="topology has 2 GPUs but the node has 3"):
        c.add_node("wrong", gpus=[16] * 3, topology=t)


def _trace_nodes(topologies=None):
    return [gs.Node(f"n{i}", gpus=[gs.Gpu(memory=16, model="V100M32" if i % 2 else "P100")] * 8,
                    cpu=96000, host_memory=262144,
                    topology=None if topologies is None else topologies[i % 2])
            for i in range(6)]


def _multi_gpu_tasks(topology=None):
    tasks = []
    for i in range(60):
        extra = {} if topology is None else {"topology": topology}
        if i % 3 == 0:
            tasks.append(gs.Request(f"t{i}", compute=300, cpu=1000, **extra))
        else:
            tasks.append(gs.Request(f"t{i}", whole_gpus=2 if i % 3 == 1 else 4, cpu=1000, **extra))
    return tasks


def test_simulate_attaches_topologies_and_reports_connectivity():
    dgx1 = gs.Topology.from_nvidia_smi(fixture("dgx1_v100.txt"))
    pcie = os.path.join(FIXTURES, "pcie_2socket_8gpu.txt")
    aware = gs.simulate(_trace_nodes(), _multi_gpu_tasks(), policy="fgd", inflate=0.9,
                        topologies={"V100M32": dgx1, 8: pcie}).summary
    assert aware["topology_tasks"] > 10
    assert aware["topology_best"] == aware["topology_tasks"]
    weakest = aware["topology_weakest"]
    assert sum(weakest.values()) == aware["topology_tasks"]
    assert set(weakest) <= {"NV2", "NV1", "PIX", "PXB", "NODE", "SYS"}
    # The same as putting the topologies on the nodes.
    nodes = _trace_nodes([gs.Topology.from_nvidia_smi(fixture("pcie_2socket_8gpu.txt")), dgx1])
    same = gs.simulate(nodes, _multi_gpu_tasks(), policy="fgd", inflate=0.9).summary
    assert same["topology_weakest"] == weakest
    # Topology-blind GPU choice gets worse links.
    blind = gs.simulate(_trace_nodes(), _multi_gpu_tasks("none"), policy="fgd", inflate=0.9,
                        topologies={8: dgx1}).summary
    assert blind["topology_best"] < blind["topology_tasks"]
    none = gs.simulate(_trace_nodes(), _multi_gpu_tasks(), policy="fgd", inflate=0.9).summary
    assert none["topology_tasks"] == 0 and none["topology_weakest"] == {}


def test_simulate_topology_rules_are_checked():
    dgx1 = gs.Topology.from_nvidia_smi(fixture("dgx1_v100.txt"))
    with pytest.raises(ValueError, match=r"topologies\[4\] has 8 GPUs, not 4"):
        gs.simulate(_trace_nodes(), _multi_gpu_tasks(), topologies={4: dgx1})
    with pytest.raises(ValueError, match="has 8 GPUs, not 2"):
        gs.simulate(_trace_nodes(), _multi_gpu_tasks(),
                    topologies={2: os.path.join(FIXTURES, "dgx1_v100.txt")})
    with pytest.raises(TypeError, match="must be a gs.Topology or a path"):
        gs.simulate(_trace_nodes(), _multi_gpu_tasks(), topologies={8: 3})
    with pytest.raises(TypeError, match="topologies must be a dict"):
        gs.simulate(_trace_nodes(), _multi_gpu_tasks(), topologies=[dgx1])
