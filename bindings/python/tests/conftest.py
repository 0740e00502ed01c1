"""Shared fixtures: the clusters of the field scenarios."""

from __future__ import annotations

import gpushare as gs
import pytest


def t4_node(cluster: gs.Cluster, name: str, address: str = "") -> None:
    cluster.add_node(name, gpus=[gs.Gpu(memory=14, model="T4")],
                     labels={"gpushare": "true"}, address=address)


@pytest.fixture
def s1() -> gs.Cluster:
    """Scenario S1: two nodes with one 14 GiB T4 each, labelled for sharing."""
    c = gs.Cluster(memory_unit="GiB")
    t4_node(c, "sd-cluster-04", "192.168.1.214")
    t4_node(c, "sd-cluster-05", "192.168.1.215")
    return c
