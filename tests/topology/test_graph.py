"""LinkGraph, topology's own directed graph: it reads like networkx's DiGraph, converts both ways, and
routes over it equal the brute-force networkx reference on every sample cluster."""

from __future__ import annotations

import itertools
from pathlib import Path

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.config.loader import load_cluster
from parplan.topology.build import build_network
from parplan.topology.graph import LinkGraph, as_link_graph, biconnected_blocks
from parplan.topology.network import Network
from parplan.topology.routing import TieBreak
from tests.topology.helpers import DEVICE, LINK, network
from tests.topology.test_routing import reference_path

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = sorted(p for p in (ROOT / "sample_configs" / "clusters").rglob("*.*") if p.is_file())
ALL_PAIRS_UP_TO = 64
"""Sample clusters with at most this many devices are checked on every ordered device pair."""

GENERATORS = [
    {"kind": "switch", "hosts": 5, "device": DEVICE, "link": LINK},
    {"kind": "ring", "hosts": 9, "device": DEVICE, "link": LINK},
    {"kind": "torus2d", "x": 3, "y": 4, "device": DEVICE, "link": LINK},
    {"kind": "fat_tree", "k": 4, "device": DEVICE, "link": LINK},
    {
        "kind": "hierarchical", "nodes": 3, "devices_per_node": 4, "device": DEVICE, "nics_per_node": 2,
        "intra": LINK, "nic": LINK, "pcie": {"bandwidth": "16 GB/s", "latency": "1 us"},
    },
    {
        "kind": "hierarchical", "nodes": 2, "devices_per_node": 2, "device": DEVICE, "nics_per_node": 4,
        "intra": {"bandwidth": "100 GB/s", "latency": "1 us"}, "nic": LINK, "fabric": "rails",
    },
]  # fmt: skip


def _pair(edges: list[tuple[str, str, dict[str, object]]]) -> tuple[LinkGraph, nx.DiGraph]:
    ours, theirs = LinkGraph(), nx.DiGraph()
    for g in (ours, theirs):
        g.add_node("lonely", kind="device")
        for u, v, d in edges:
            g.add_edge(u, v, **d)
        g.add_node("a", kind="switch")  # an update keeps the node's place
    return ours, theirs


def test_link_graph_reads_like_networkx() -> None:
    edges = [("a", "b", {"channel": 0}), ("b", "a", {"channel": 1}), ("b", "c", {"channel": 2})]
    edges.append(("d", "c", {}))
    ours, theirs = _pair(edges)
    assert list(ours.nodes) == list(theirs.nodes) and len(ours) == len(theirs)
    assert ours.nodes(data=True) == list(theirs.nodes(data=True))
    assert ours.nodes(data="kind") == list(theirs.nodes(data="kind"))
    assert ours.nodes.get("zz", {}) == {} and ours.nodes["a"] == theirs.nodes["a"]
    assert ours.edges(data=True) == list(theirs.edges(data=True))
    assert ours.edges(data="channel", default=-1) == list(theirs.edges(data="channel", default=-1))
    assert list(ours.edges) == list(theirs.edges) and ours.edges() == list(theirs.edges())
    assert [(n, dict(nbrs)) for n, nbrs in ours.adjacency()] == [
        (n, dict(nbrs)) for n, nbrs in theirs.adjacency()
    ]
    assert ours.edges["b", "c"] == theirs.edges["b", "c"] and ("d", "c") in ours.edges
    for n in theirs:
        assert n in ours and ours.has_node(n)
        assert list(ours.successors(n)) == list(theirs.successors(n))
        assert list(ours.predecessors(n)) == list(theirs.predecessors(n))
        assert ours.out_edges(n, data=True) == list(theirs.out_edges(n, data=True))
        assert ours.in_edges(n, data=True) == list(theirs.in_edges(n, data=True))
        assert ours.degree(n) == theirs.degree(n) and ours.out_degree(n) == theirs.out_degree(n)
        assert ours.in_degree(n) == theirs.in_degree(n)
        assert ours.descendants(n) == nx.descendants(theirs, n)
        assert ours.ancestors(n) == nx.ancestors(theirs, n)
    assert ours.has_edge("a", "b") and not ours.has_edge("c", "b")
    assert ours.number_of_edges() == theirs.number_of_edges() == len(ours.edges)
    assert ours.number_of_nodes() == theirs.number_of_nodes()
    assert ours.weakly_connected_components() == list(nx.weakly_connected_components(theirs))


def test_conversions_keep_orders_and_attributes() -> None:
    ours, theirs = _pair([("x", "y", {"latency_s": 1.0}), ("y", "x", {"latency_s": 2.0})])
    theirs.graph["hardware"] = "h"
    read = as_link_graph(theirs)
    assert read.edges(data=True) == ours.edges(data=True) and read.graph == {"hardware": "h"}
    assert read.nodes["x"] is theirs.nodes["x"]  # shared, not copied
    assert as_link_graph(ours) is ours
    back = ours.to_networkx()
    assert list(back.nodes(data=True)) == list(theirs.nodes(data=True))
    assert list(back.edges(data=True)) == list(theirs.edges(data=True))


def test_network_accepts_a_networkx_graph() -> None:
    built = network(generator={"kind": "switch", "hosts": 3, "device": DEVICE, "link": LINK})
    again = Network(built.to_networkx(), name="again")
    assert isinstance(again.graph, LinkGraph) and again.devices == built.devices
    assert again.path("h0", "h2") == built.path("h0", "h2") == ["h0", "sw0", "h2"]
    assert again.channel_names == built.channel_names


def _undirected(g: LinkGraph) -> tuple[list[list[int]], nx.Graph]:
    index = {n: i for i, n in enumerate(g.nodes)}
    adjacency: list[dict[int, None]] = [{} for _ in index]
    theirs = nx.Graph()
    theirs.add_nodes_from(range(len(index)))
    for u, v in g.edges:
        if u != v:
            adjacency[index[u]][index[v]] = adjacency[index[v]][index[u]] = None
            theirs.add_edge(index[u], index[v])
    return [list(a) for a in adjacency], theirs


def _nx_blocks(g: nx.Graph) -> list[list[int]]:
    return sorted(sorted(b) for b in nx.biconnected_components(g))


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 14),
    pairs=st.lists(st.tuples(st.integers(0, 13), st.integers(0, 13)), max_size=40),
)
def test_biconnected_blocks_equal_networkx(n: int, pairs: list[tuple[int, int]]) -> None:
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from((a % n, b % n) for a, b in pairs if a % n != b % n)
    adjacency = [list(g.adj[v]) for v in range(n)]
    assert biconnected_blocks(adjacency) == _nx_blocks(g)


def test_a_long_ring_does_not_recurse() -> None:
    n = 5000
    adjacency = [[(v - 1) % n, (v + 1) % n] for v in range(n)]
    assert biconnected_blocks(adjacency) == [list(range(n))]


@pytest.mark.parametrize("path", CLUSTERS, ids=lambda p: p.name)
def test_sample_cluster_routes_equal_networkx_reference(path: Path) -> None:
    """Blocks as networkx finds them; routes as the brute-force reference over networkx finds them:
    every ordered device pair up to 64 devices, a spread of pairs beyond."""
    net = build_network(load_cluster(path))
    adjacency, theirs = _undirected(net.graph)
    assert biconnected_blocks(adjacency) == _nx_blocks(theirs)
    g = net.to_networkx()
    devices = net.devices
    if len(devices) <= ALL_PAIRS_UP_TO:
        pairs = list(itertools.permutations(devices, 2))
    else:
        step = len(devices) // (23 if len(devices) <= 1024 else 6)
        pairs = [(devices[0], d) for d in devices[1::step]] + [
            (devices[i], devices[-1 - i]) for i in range(0, len(devices) // 2, step)
        ]
    tie_breaks: tuple[TieBreak, ...] = ("first", "spread")
    for tie_break in tie_breaks:
        tables = net.routing_tables(tie_break)
        for s, t in pairs:
            assert tables.path(s, t) == reference_path(g, s, t, tie_break), (tie_break, s, t)


@pytest.mark.parametrize("generator", GENERATORS, ids=lambda g: str(g["kind"]))
def test_generator_routes_equal_networkx_reference_on_all_pairs(generator: dict[str, object]) -> None:
    net = network(generator=generator)
    adjacency, theirs = _undirected(net.graph)
    assert biconnected_blocks(adjacency) == _nx_blocks(theirs)
    g = net.to_networkx()
    tie_breaks: tuple[TieBreak, ...] = ("first", "spread")
    for tie_break in tie_breaks:
        tables = net.routing_tables(tie_break)
        for s, t in itertools.permutations(g.nodes, 2):
            assert tables.path(s, t) == reference_path(g, s, t, tie_break), (tie_break, s, t)
