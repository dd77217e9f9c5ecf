"""Whether a cluster's nodes are interchangeable (:func:`~parplan.plan.sharded.symmetry.node_symmetry`):
on the sample clusters, and after changing one attribute of one node's element or link (which
breaks it unless the attribute is the link's channel)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from parplan.config.loader import load_cluster
from parplan.plan.sharded.symmetry import HashedTuple, node_symmetry
from parplan.topology.build import build_network
from parplan.topology.network import Network

_CLUSTERS = Path(__file__).resolve().parents[3] / "sample_configs" / "clusters"
_ALIKE = {
    "dgx-a100-128nodes.yaml": 128,
    "dgx-a100-2nodes.yaml": 2,
    "dgx-h100-8nodes.yaml": 8,
    "p5-efa-2nodes.yaml": 2,
}
_UNALIKE = (
    "edge-federated.yaml",
    "edge-jetsons.yaml",
    "fat-tree-16.yaml",
    "switch-4hosts.yaml",
    "torus-4x4.toml",
)


def _network(name: str) -> Network:
    return build_network(load_cluster(_CLUSTERS / name))


@pytest.mark.parametrize("name", sorted(_ALIKE))
def test_nodes_built_alike_are_interchangeable(name: str) -> None:
    network = _network(name)
    found = node_symmetry(network)
    assert found is not None
    nodes, where = found
    assert len(nodes) == _ALIKE[name]
    assert set(where) == set(network.devices)
    for device, (k, inside) in where.items():
        assert device == f"{nodes[k]}.{inside}"


@pytest.mark.parametrize("name", _UNALIKE)
def test_other_clusters_are_not(name: str) -> None:
    assert node_symmetry(_network(name)) is None


@pytest.mark.parametrize(
    ("what", "key", "alike"),
    [
        ("device", "memory_bandwidth_Bps", False),
        ("device", "extra", False),
        ("link", "latency_s", False),
        ("link", "extra", False),
        ("link", "channel", True),
        ("link", "channel_name", True),
    ],
)
def test_one_changed_attribute_of_one_node(what: str, key: str, alike: bool) -> None:
    """Node 1 of 8 changed in one attribute: still interchangeable only when the attribute is the
    link's channel number or name (set or removed)."""
    network = _network("dgx-h100-8nodes.yaml")
    graph = network.graph
    device = network.devices[len(network.devices) // 8]  # node 1's first device
    attrs = (
        graph.nodes[device] if what == "device" else graph.edges[device, next(iter(graph.successors(device)))]
    )
    if key in attrs:
        del attrs[key]
    else:
        attrs[key] = 1.0
    assert (node_symmetry(network) is not None) is alike


def test_a_hashed_tuple_hashes_afresh_in_another_process() -> None:
    """Pickled and loaded in a process with another string hash seed, a HashedTuple still hashes
    as the plain tuple there (a kept hash would miss every dict lookup)."""
    data = pickle.dumps(HashedTuple(("n0.d0", "n1.d0")))
    code = (
        "import pickle, sys; t = pickle.loads(sys.stdin.buffer.read()); "
        "print(hash(t) == hash(tuple(t)), {tuple(t): 1}.get(t), type(t).__name__)"
    )
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            input=data,
            capture_output=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert out.stdout.decode().split() == ["True", "1", "HashedTuple"]
    copy = pickle.loads(data)
    assert copy == ("n0.d0", "n1.d0") and hash(copy) == hash(("n0.d0", "n1.d0"))
