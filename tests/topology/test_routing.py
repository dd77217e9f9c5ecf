"""Routing: fewest hops, then lowest latency, then the tie-break; equal to a brute-force reference."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import get_args

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parplan.errors import TopologyError
from parplan.topology import route_tables
from parplan.topology.build import build_network
from parplan.topology.network import Network, networkx_route, shortest_hop_route, spread_route
from parplan.topology.routing import RoutingTables, TieBreak, latency_fs
from tests.topology.helpers import DEVICE, LINK, cluster, network


def widest(g: nx.DiGraph, s: object, t: object) -> float:
    """The largest w such that links at least w wide join s to t (a link without a bandwidth is
    infinitely wide), by trying every bandwidth of the graph."""
    widths = sorted({d.get("bandwidth_Bps", math.inf) for _, _, d in g.edges(data=True)}, reverse=True)
    for w in widths:
        sub = nx.subgraph_view(
            g, filter_edge=lambda u, v, w=w: g.edges[u, v].get("bandwidth_Bps", math.inf) >= w
        )
        if nx.has_path(sub, s, t):
            return w
    raise AssertionError("no path")


def reference_path(g: nx.DiGraph, s: object, t: object, tie_break: TieBreak = "first") -> list[object]:
    """Brute force over every fewest-hop path over the links as wide as the widest path: lowest
    integer latency, then the tie-break rule."""
    index = {n: i for i, n in enumerate(g.nodes)}
    if s == t:
        return [s]
    w = widest(g, s, t)
    wide = nx.subgraph_view(g, filter_edge=lambda u, v: g.edges[u, v].get("bandwidth_Bps", math.inf) >= w)
    paths = list(nx.all_shortest_paths(wide, s, t))

    def lat(p: list[object]) -> int:
        return sum(latency_fs(g.edges[u, v]["latency_s"]) for u, v in itertools.pairwise(p))

    best = min(lat(p) for p in paths)
    paths = [p for p in paths if lat(p) == best]
    out = [s]
    key = index[t]
    for i in range(1, len(paths[0])):
        options = sorted({index[p[i]] for p in paths})
        pick = options[0] if tie_break == "first" else options[key % len(options)]
        key //= len(options)
        paths = [p for p in paths if index[p[i]] == pick]
        out.append(paths[0][i])
    return out


@st.composite
def digraphs(draw: st.DrawFn) -> nx.DiGraph:
    """Small random graphs: mostly two-way links, some one-way, latencies from a tiny set (many ties)."""
    n = draw(st.integers(2, 11))
    # Half the graphs have one bandwidth (or none) everywhere, half mix a few (widths decide).
    uniform = draw(st.booleans())
    widths = (
        st.just({}) if uniform else st.sampled_from([{}, {"bandwidth_Bps": 10.0}, {"bandwidth_Bps": 30.0}])
    )
    order = draw(st.permutations(list(range(n))))
    g = nx.DiGraph()
    g.add_nodes_from(f"v{i}" for i in order)  # insertion order differs from the names
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    for a, b in pairs:
        if a == b:
            continue
        lat = draw(st.sampled_from([0.0, 1e-6, 2e-6, 3e-6]))
        bw = draw(widths)
        g.add_edge(f"v{a}", f"v{b}", latency_s=lat, **bw)
        if draw(st.integers(0, 4)):
            g.add_edge(f"v{b}", f"v{a}", latency_s=draw(st.sampled_from([0.0, 1e-6, 2e-6])), **draw(widths))
    return g


@pytest.fixture(params=["python", "numpy"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run a test with the pure-Python or the numpy breadth-first search inside blocks."""
    if request.param == "numpy":
        monkeypatch.setattr(route_tables, "_NUMPY_MIN_EDGES", 0)
        monkeypatch.setattr(route_tables, "_NUMPY_MIN_EDGES_PER_LEVEL", 0)
    else:
        monkeypatch.setattr(route_tables, "_NUMPY_MIN_EDGES", 10**9)
    yield request.param


def check_all_pairs(g: nx.DiGraph, tie_break: TieBreak) -> None:
    tables = RoutingTables(g, tie_break)
    for s in g.nodes:
        reachable = nx.descendants(g, s) | {s}
        for t in g.nodes:
            if t in reachable:
                assert tables.path(s, t) == reference_path(g, s, t, tie_break), (s, t)
            else:
                with pytest.raises(TopologyError, match="no route"):
                    tables.path(s, t)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(g=digraphs(), tie_break=st.sampled_from(["first", "spread"]))
def test_routes_equal_brute_force_reference(g: nx.DiGraph, tie_break: TieBreak, backend: str) -> None:
    check_all_pairs(g, tie_break)


def test_generated_topologies_equal_reference(backend: str) -> None:
    specs = [
        {"kind": "torus2d", "x": 3, "y": 4, "device": DEVICE, "link": LINK},
        {"kind": "fat_tree", "k": 4, "device": DEVICE, "link": LINK},
        {"kind": "ring", "hosts": 7, "device": DEVICE, "link": LINK},
        {
            "kind": "hierarchical", "nodes": 3, "devices_per_node": 4, "device": DEVICE, "nics_per_node": 2,
            "intra": LINK, "nic": LINK, "pcie": {"bandwidth": "16 GB/s", "latency": "1 us"},
        },
    ]  # fmt: skip
    for gen in specs:
        g = network(generator=gen).to_networkx()
        for tie_break in get_args(TieBreak):
            check_all_pairs(g, tie_break)


def line(latencies: dict[tuple[str, str], float], nodes: list[str]) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    for (a, b), lat in latencies.items():
        g.add_edge(a, b, latency_s=lat)
        g.add_edge(b, a, latency_s=lat)
    return g


def test_widest_path_beats_fewer_hops_and_lower_latency() -> None:
    # Two GPUs of one node: NVSwitch at 300 GB/s and 2 us, or a shared NIC over PCIe at 16 GB/s
    # and 1 us: the same hop count and a smaller latency by PCIe, but traffic stays on NVLink.
    g = nx.DiGraph()
    g.add_nodes_from(["d0", "d1", "nic", "sw"])
    for a, b, bw, lat in [("d0", "nic", 16e9, 1e-6), ("d1", "nic", 16e9, 1e-6), ("d0", "sw", 300e9, 2e-6),
                          ("d1", "sw", 300e9, 2e-6), ("d0", "d1", 8e9, 0.0)]:  # fmt: skip
        g.add_edge(a, b, bandwidth_Bps=bw, latency_s=lat)
        g.add_edge(b, a, bandwidth_Bps=bw, latency_s=lat)
    assert RoutingTables(g).path("d0", "d1") == ["d0", "sw", "d1"]


def test_hierarchical_node_traffic_stays_on_nvlink_with_a_faster_pcie_latency() -> None:
    gen = {
        "kind": "hierarchical", "nodes": 2, "devices_per_node": 4, "device": DEVICE, "nics_per_node": 1,
        "intra": {"bandwidth": "300 GB/s", "latency": "2 us"},
        "nic": {"bandwidth": "25 GB/s", "latency": "2 us"},
        "pcie": {"bandwidth": "32 GB/s", "latency": "1 us"},
    }  # fmt: skip
    net = network(generator=gen)
    assert net.path("n0.d0", "n0.d3") == ["n0.d0", "n0.sw", "n0.d3"]
    assert net.path("n0.d1", "n1.d2") == ["n0.d1", "n0.nic0", "fabric", "n1.nic0", "n1.d2"]


def test_fewest_hops_beats_lower_latency() -> None:
    # s-t direct at 10 us, or s-a-t at 1 us + 1 us: one hop wins
    g = line({("s", "t"): 10e-6, ("s", "a"): 1e-6, ("a", "t"): 1e-6}, ["s", "t", "a"])
    assert RoutingTables(g).path("s", "t") == ["s", "t"]


def test_lower_latency_breaks_equal_hops() -> None:
    g = line({("s", "a"): 2e-6, ("a", "t"): 2e-6, ("s", "b"): 1e-6, ("b", "t"): 2e-6}, ["s", "t", "a", "b"])
    assert RoutingTables(g).path("s", "t") == ["s", "b", "t"]


def test_latency_ties_are_exact_whatever_the_float_sums() -> None:
    via_x = 0.2e-6 + 1.1e-6
    via_y = 0.1e-6 + 1.2e-6
    assert via_y < via_x  # in floats y looks 2e-22 s faster ...
    g = nx.DiGraph()
    g.add_nodes_from(["s", "t", "x", "y"])
    for u, v, lat in [("s", "x", 0.2e-6), ("x", "t", 1.1e-6), ("s", "y", 0.1e-6), ("y", "t", 1.2e-6)]:
        g.add_edge(u, v, latency_s=lat)
    # ... but routes compare integer femtoseconds: a tie, won by insertion order (x first)
    assert RoutingTables(g).path("s", "t") == ["s", "x", "t"]


def test_ties_go_to_insertion_order_not_names() -> None:
    lat = {("s", "m2"): 1e-6, ("m2", "t"): 1e-6, ("s", "m1"): 1e-6, ("m1", "t"): 1e-6}
    g = line(lat, ["s", "t", "m2", "m1"])
    assert RoutingTables(g).path("s", "t") == ["s", "m2", "t"]


def fat_tree(k: int, hosts: int | None = None, router: object = None) -> Network:
    gen: dict[str, object] = {"kind": "fat_tree", "k": k, "device": DEVICE, "link": LINK}
    if hosts is not None:
        gen["hosts"] = hosts
    return build_network(cluster(generator=gen), router)  # type: ignore[arg-type]


def test_fat_tree_first_shortest_path_is_deterministic_and_ecmp_free() -> None:
    net = fat_tree(4, router=shortest_hop_route)
    up_and_down = ["h0", "pod0.edge0", "pod0.agg0", "core0", "pod3.agg0", "pod3.edge1", "h15"]
    assert net.path("h0", "h15") == up_and_down
    assert net.path("h0", "h3") == ["h0", "pod0.edge0", "pod0.agg0", "pod0.edge1", "h3"]
    assert net.path("h0", "h1") == ["h0", "pod0.edge0", "h1"]
    again = fat_tree(4, router=shortest_hop_route)
    assert all(again.path(a, b) == net.path(a, b) for a in net.devices for b in net.devices)
    # every inter-pod route leaves pod 0 through its first aggregation and first core switch
    for dst in net.devices[4:]:
        assert net.path("h0", dst)[2:4] == ["pod0.agg0", "core0"]


def test_spread_route_fans_out_over_core_switches() -> None:
    net = fat_tree(4, router=spread_route)
    cores = {net.path("h0", dst)[3] for dst in net.devices[4:]}
    assert cores == {"core0", "core1", "core2", "core3"}
    for dst in net.devices[4:]:
        p = net.path("h0", dst)
        assert len(p) == 7 and p == reference_path(net.to_networkx(), "h0", dst, "spread")


def test_route_channels_and_latency() -> None:
    net = fat_tree(4)
    channels, latency_s = net.route("h0", "h15")
    path = net.path("h0", "h15")
    assert channels.tolist() == [net.graph.edges[e]["channel"] for e in itertools.pairwise(path)]
    assert latency_s == pytest.approx(6e-6)
    assert net.route("h0", "h15")[0] is channels  # cached


def test_routes_vectorised_csr() -> None:
    net = fat_tree(4)
    srcs = ["h0", "h1", "h2", "h2"]
    dsts = ["h1", "h15", "h2", "h3"]
    offsets, channels, latency_s = net.routes(srcs, dsts)
    assert offsets.tolist() == [0, 2, 8, 8, 10]
    for i, (s, d) in enumerate(zip(srcs, dsts, strict=True)):
        ch, lat = net.route(s, d)
        assert channels[offsets[i] : offsets[i + 1]].tolist() == ch.tolist()
        assert latency_s[i] == lat
    by_index = net.routes(np.array([0, 1, 2, 2]), np.array([1, 15, 2, 3]))
    assert all((a == b).all() for a, b in zip(by_index, (offsets, channels, latency_s), strict=True))
    with pytest.raises(TopologyError, match="out of range"):
        net.routes(np.array([0]), np.array([16]))
    with pytest.raises(TopologyError, match="2 sources but 1 destinations"):
        net.routes(["h0", "h1"], ["h2"])
    empty = net.routes([], [])
    assert empty[0].tolist() == [0] and empty[1].size == 0 and empty[2].size == 0


def test_unknown_devices_and_no_route() -> None:
    net = fat_tree(4)
    with pytest.raises(TopologyError, match="unknown node 'nope'"):
        net.route("h0", "nope")
    g = nx.DiGraph()
    g.add_edge("a", "b", latency_s=0.0)  # one way only
    g.add_edge("b", "c", latency_s=0.0)
    g.add_edge("c", "b", latency_s=0.0)
    tables = RoutingTables(g)
    assert tables.path("a", "c") == ["a", "b", "c"]
    with pytest.raises(TopologyError, match="no route from 'c' to 'a'"):
        tables.path("c", "a")
    with pytest.raises(TopologyError, match="unknown tie-break"):
        RoutingTables(g, "random")  # type: ignore[arg-type]


def test_networkx_route_agrees_on_hops_and_latency() -> None:
    net = fat_tree(4)
    ref = fat_tree(4, router=networkx_route)
    for s in net.devices[:4]:
        for d in net.devices:
            assert len(net.path(s, d)) == len(ref.path(s, d))
            assert net.route(s, d)[1] == pytest.approx(ref.route(s, d)[1])


def test_tables_cache_is_bounded_and_results_stay_the_same() -> None:
    g = network(generator={"kind": "torus2d", "x": 6, "y": 6, "device": DEVICE, "link": LINK}).graph
    small = RoutingTables(g, cache_entries=100)
    big = RoutingTables(g)
    nodes = list(g.nodes)
    for s in nodes[:6]:
        for t in nodes:
            assert small.path(s, t) == big.path(s, t)
    assert small._cache_entries <= 100 or len(small._cache) == 1
    assert small.tables_built > big.tables_built


def test_ring_all_reduce_pairs_on_a_k26_fat_tree() -> None:
    """The engine's largest case (p = 4096 ring neighbours over 4,394 hosts) routes in one go.

    Not a timed assertion: it checks the fast path is taken (few tables) and the routes are right.
    """
    net = fat_tree(26)
    assert len(net.devices) == 4394
    p = 4096
    ranks = net.devices[:p]
    offsets, _channels, latency_s = net.routes(ranks, ranks[1:] + ranks[:1])
    hops = np.diff(offsets)
    # 13 hosts per edge switch, 169 per pod: neighbours share an edge switch, a pod, or neither
    assert set(hops.tolist()) == {2, 4, 6}
    assert int((hops == 6).sum()) == p // 169 + 1
    assert int((hops == 4).sum()) == p // 13 - p // 169
    assert latency_s == pytest.approx(hops * 1e-6)
    # a few dozen destination tables, not thousands of per-pair searches
    assert net.routing_tables().tables_built <= 64
    assert net.path("h168", "h169") == reference_path(net.to_networkx(), "h168", "h169")


@pytest.mark.parametrize("tie_break", get_args(TieBreak))
def test_k8_fat_tree_sample_equals_reference_with_default_thresholds(tie_break: TieBreak) -> None:
    net = fat_tree(8)
    tables = RoutingTables(net.graph, tie_break)
    rng = np.random.default_rng(7)
    for a, b in rng.integers(0, len(net.devices), size=(150, 2)).tolist():
        s, t = net.devices[a], net.devices[b]
        assert tables.path(s, t) == reference_path(net.to_networkx(), s, t, tie_break), (s, t)
    # a route between edge switches needed a table of the one big switch block, built in numpy
    assert tables.tables_built > 0
    assert any(block.use_numpy for block in tables._blocks.values())
