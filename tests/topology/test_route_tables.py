"""The flat link arrays routing cuts its blocks from (:class:`~parplan.topology.route_tables.Edges`)
and the components of a block's links per width (:class:`~parplan.topology.route_tables.Widths`),
checked against plain dict walks and networkx's connected components."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.errors import TopologyError
from parplan.topology.graph import LinkGraph
from parplan.topology.route_tables import Block, Edges, Widths
from parplan.topology.routing import RoutingTables

WIDTHS_Bps = (25e9, 50e9, 100e9, float("inf"))


@st.composite
def graphs(draw: st.DrawFn) -> tuple[int, list[tuple[int, int, int, float]]]:
    """A directed graph on ``n`` nodes: links ``(tail, head, latency fs, bandwidth)``, no loops."""
    n = draw(st.integers(min_value=1, max_value=12))
    pairs = draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=40))
    links = [
        (u, v, draw(st.integers(0, 5)), draw(st.sampled_from(WIDTHS_Bps))) for u, v in sorted(pairs) if u != v
    ]
    draw(st.randoms()).shuffle(links)  # any tail order: Edges sorts by tail, keeping each tail's order
    return n, links


def _edges(n: int, links: list[tuple[int, int, int, float]]) -> Edges:
    return Edges(
        [u for u, *_ in links],
        [v for _, v, *_ in links],
        [w for *_, w, _ in links],
        [b for *_, b in links],
        n,
    )


@settings(max_examples=200, deadline=None)
@given(graphs(), st.data())
def test_block_links_are_the_dict_walk(
    graph: tuple[int, list[tuple[int, int, int, float]]], data: st.DataObject
) -> None:
    """A block's in-links (and their plain-Python lists) are the ones a walk over each member's
    out-links in order finds, at and above a width."""
    n, links = graph
    nodes = sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1)))
    floor = data.draw(st.sampled_from((None, *WIDTHS_Bps)))
    edges = _edges(n, links)
    block = Block(nodes, edges, floor)
    local = {g: i for i, g in enumerate(nodes)}
    expected: list[tuple[int, int, int]] = []
    for g in nodes:  # each tail's links in their order of appearance
        for u, v, w, b in links:
            if u == g and v in local and (floor is None or b >= floor):
                expected.append((local[u], local[v], w))
    expected.sort(key=lambda e: e[1])  # stable: grouped by head
    got = list(zip(block.in_src.tolist(), block.in_dst.tolist(), block.in_lat.tolist(), strict=True))
    assert got == expected
    assert block.num_edges == len(expected)
    lists: list[list[tuple[int, int]]] = [[] for _ in nodes]
    for a, b, w in expected:
        lists[b].append((a, w))
    assert block.in_lists == lists


@settings(max_examples=200, deadline=None)
@given(graphs())
def test_widths_components_are_connected_components(
    graph: tuple[int, list[tuple[int, int, int, float]]],
) -> None:
    """At every level two nodes share a component exactly when links at least that wide join
    them (both ways), and the levels are the block's bandwidths, widest first."""
    n, links = graph
    widths = Widths(list(range(n)), _edges(n, links))
    assert widths.levels == sorted({b for *_, b in links}, reverse=True)
    for level, comp in zip(widths.levels, widths.component, strict=True):
        g = nx.Graph()
        g.add_nodes_from(range(n))
        g.add_edges_from((u, v) for u, v, _, b in links if b >= level)
        for part in nx.connected_components(g):
            assert len({int(comp[x]) for x in part}) == 1
        assert len(set(np.asarray(comp).tolist())) == nx.number_connected_components(g)
    for s in range(n):
        for t in range(n):
            joined = [k for k, comp in enumerate(widths.component) if comp[s] == comp[t]]
            assert widths.first_level(s, t) == (joined[0] if joined else len(widths.levels))


def test_a_negative_latency_is_refused_however_many_links_share_it() -> None:
    """Each distinct latency is converted once: a negative one is still refused."""
    g = LinkGraph()
    g.add_edge("a", "b", latency_s=1e-6, bandwidth_Bps=1e9)
    g.add_edge("b", "c", latency_s=1e-6, bandwidth_Bps=1e9)
    g.add_edge("c", "a", latency_s=-1e-6, bandwidth_Bps=1e9)
    with pytest.raises(TopologyError, match="c->a has a negative latency"):
        RoutingTables(g)


@settings(max_examples=200, deadline=None)
@given(graphs())
def test_per_node_links_are_the_dicts_built_link_by_link(
    graph: tuple[int, list[tuple[int, int, int, float]]],
) -> None:
    """Each node's out-latencies, in-latencies and out-widths, read from the flat arrays, are the
    dicts a walk over the links in order fills (tails sorted, each tail's links in order); each
    node's undirected neighbours are its heads and tails, each once."""
    n, links = graph
    edges = _edges(n, links)
    ordered = sorted(links, key=lambda link: link[0])  # stable: each tail's links in order
    succ: list[dict[int, int]] = [{} for _ in range(n)]
    pred: list[dict[int, int]] = [{} for _ in range(n)]
    width: list[dict[int, float]] = [{} for _ in range(n)]
    for u, v, w, b in ordered:
        succ[u][v] = w
        pred[v][u] = w
        width[u][v] = b
    undirected = edges.undirected(n)
    for x in range(n):
        assert list(edges.succ[x].items()) == list(succ[x].items())
        assert list(edges.pred[x].items()) == list(pred[x].items())
        assert list(edges.width[x].items()) == list(width[x].items())
        assert undirected[x] == sorted(set(succ[x]) | set(pred[x]))
