"""The event engine on hand-built task graphs: sharing, latency, streams, reductions, determinism."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.engine.simulate import simulate
from parplan.errors import SimulationError, TopologyError
from parplan.taskgraph import TaskGraph, TaskGraphBuilder
from parplan.topology.network import Network
from tests.engine.nets import PEAK, chain_network, full_mesh_network, switch_network
from tests.engine.reference import reference_times

GB = 1e9


def test_two_flows_on_one_link_each_get_half() -> None:
    net = switch_network(3, bandwidth_Bps=1 * GB, latency_s=0.0)
    b = TaskGraphBuilder()
    b.transfer("h0", "h2", 1 * GB)
    b.transfer("h1", "h2", 1 * GB)
    r = simulate(b.build(), net)
    # Both cross sw0->h2; alone each would take 1 s.
    assert r.end_s.tolist() == pytest.approx([2.0, 2.0], rel=1e-12)
    sw_h2 = net.channel_names.index("sw0->h2")
    assert r.channel_bytes[sw_h2] == pytest.approx(2 * GB)
    assert r.channel_busy_s[sw_h2] == pytest.approx(2.0)
    assert r.busiest_channel() is not None and r.busiest_channel().name == "sw0->h2"  # type: ignore[union-attr]


def test_flow_over_two_links_runs_at_the_smaller_bandwidth() -> None:
    net = chain_network([4 * GB, 1 * GB], [0.0, 0.0])
    b = TaskGraphBuilder()
    b.transfer("d0", "d2", 2 * GB)
    r = simulate(b.build(), net)
    assert r.makespan_s == pytest.approx(2.0, rel=1e-12)
    assert r.channel_utilisation.max() == pytest.approx(1.0)


def test_latency_adds_per_hop() -> None:
    latencies = [1e-6, 3e-6, 5e-6]
    net = chain_network([1 * GB] * 3, latencies)
    for hops in (1, 2, 3):
        b = TaskGraphBuilder()
        b.transfer("d0", f"d{hops}", 1e6)
        r = simulate(b.build(), net)
        assert r.makespan_s == pytest.approx(sum(latencies[:hops]) + 1e6 / GB, rel=1e-12)


def test_latency_is_a_delay_before_the_bytes_move() -> None:
    # A second flow issued while the first is still in its latency does not slow the first.
    net = switch_network(3, bandwidth_Bps=1 * GB, latency_s=0.5)
    b = TaskGraphBuilder()
    b.transfer("h0", "h2", 1 * GB)  # bytes move in [1, 2]
    c = b.compute("h1", 1.0)
    b.transfer("h1", "h2", 1 * GB, [c])  # bytes would move from 2.0: no overlap
    r = simulate(b.build(), net)
    assert r.end_s[0] == pytest.approx(2.0)
    assert r.end_s[2] == pytest.approx(3.0)
    assert r.start_s[2] == pytest.approx(1.0)  # issued when its dependency ended


def test_max_min_fairness_textbook_example() -> None:
    # Links L1 (1 GB/s) and L2 (2 GB/s) in a line; A crosses both, B only L1, C only L2.
    # Max-min: L1 is the bottleneck, A = B = 0.5; C gets what A leaves of L2: 1.5 GB/s.
    net = chain_network([1 * GB, 2 * GB], [0.0, 0.0])
    b = TaskGraphBuilder()
    a = b.transfer("d0", "d2", 1 * GB)
    bb = b.transfer("d0", "d1", 1 * GB)
    c = b.transfer("d1", "d2", 3 * GB)
    r = simulate(b.build(), net)
    # A and B finish at 2 s; C has moved 3 GB by then as well (1.5 GB/s x 2 s).
    assert r.end_s[a] == pytest.approx(2.0)
    assert r.end_s[bb] == pytest.approx(2.0)
    assert r.end_s[c] == pytest.approx(2.0)
    # With 4 GB, C still has 1 GB left at 2 s and then runs alone at 2 GB/s.
    b2 = TaskGraphBuilder()
    b2.transfer("d0", "d2", 1 * GB)
    b2.transfer("d0", "d1", 1 * GB)
    c2 = b2.transfer("d1", "d2", 4 * GB)
    r2 = simulate(b2.build(), net)
    assert r2.end_s[c2] == pytest.approx(2.5)


def test_rates_are_recomputed_when_a_flow_ends() -> None:
    net = switch_network(3, bandwidth_Bps=1 * GB, latency_s=0.0)
    b = TaskGraphBuilder()
    short = b.transfer("h0", "h2", 0.5 * GB)
    long = b.transfer("h1", "h2", 1.5 * GB)
    r = simulate(b.build(), net)
    # Shared until the short one ends at 1 s (0.5 GB each), then the long one runs alone: 1 GB more.
    assert r.end_s[short] == pytest.approx(1.0)
    assert r.end_s[long] == pytest.approx(2.0)


def test_half_duplex_link_shares_both_directions() -> None:
    g = nx.DiGraph()
    for name in ("a", "b"):
        g.add_node(name, kind="device", peak_flop_per_s=PEAK, efficiency=1.0, memory_bytes=1e9)
    g.add_edge("a", "b", bandwidth_Bps=GB, latency_s=0.0, channel=0)
    g.add_edge("b", "a", bandwidth_Bps=GB, latency_s=0.0, channel=0)
    b = TaskGraphBuilder()
    b.transfer("a", "b", GB)
    b.transfer("b", "a", GB)
    assert simulate(b.build(), Network(g)).makespan_s == pytest.approx(2.0)
    full = full_mesh_network(2, bandwidth_Bps=GB, latency_s=0.0)
    b = TaskGraphBuilder()
    b.transfer("h0", "h1", GB)
    b.transfer("h1", "h0", GB)
    assert simulate(b.build(), full).makespan_s == pytest.approx(1.0)


def test_link_sharing_off_gives_each_flow_its_path_bandwidth() -> None:
    net = switch_network(3, bandwidth_Bps=1 * GB, latency_s=0.0)
    b = TaskGraphBuilder()
    b.transfer("h0", "h2", 1 * GB)
    b.transfer("h1", "h2", 1 * GB)
    assert simulate(b.build(), net, link_sharing=False).makespan_s == pytest.approx(1.0)


def test_compute_stream_is_serial_in_readiness_order() -> None:
    net = switch_network(2)
    b = TaskGraphBuilder()
    first = b.compute("h0", 2.0)
    second = b.compute("h0", 1.0)
    other = b.compute("h1", 1.5)
    r = simulate(b.build(), net)
    assert (r.start_s[first], r.end_s[first]) == (0.0, 2.0)
    assert (r.start_s[second], r.end_s[second]) == (2.0, 3.0)
    assert r.end_s[other] == 1.5
    assert r.compute_busy_s.tolist() == [3.0, 1.5]


def test_priority_picks_among_ready_tasks() -> None:
    net = switch_network(1)
    b = TaskGraphBuilder()
    gate = b.compute("h0", 1.0, priority=0)
    low = b.compute("h0", 1.0, priority=5)  # ready at 0, runs after gate
    high = b.compute("h0", 1.0, [gate], priority=1)  # ready at 1: beats low, which is still waiting
    r = simulate(b.build(), net)
    assert r.start_s[gate] == 0.0
    assert r.start_s[high] == 1.0
    assert r.start_s[low] == 2.0


def test_flops_use_peak_times_efficiency_times_speed() -> None:
    net = switch_network(1)  # peak 100 TFLOP/s, efficiency 0.5
    b = TaskGraphBuilder()
    b.compute_flops("h0", 100e12)
    assert simulate(b.build(), net).makespan_s == pytest.approx(2.0)


def test_reductions_serialise_on_the_receivers_reduction_stream() -> None:
    net = switch_network(4, bandwidth_Bps=1 * GB, latency_s=0.0, memory_bandwidth_Bps=3 * GB)
    b = TaskGraphBuilder()
    for src in ("h1", "h2", "h3"):
        b.transfer(src, "h0", 1 * GB, reduce=True)
    c = b.compute("h0", 0.5)
    r = simulate(b.build(), net)
    # Three flows share h0's link: all in at 3 s. gamma = 3 / (3 GB/s) = 1 s per GB, one at a time.
    assert sorted(r.end_s[:3].tolist()) == pytest.approx([4.0, 5.0, 6.0])
    assert r.arrive_s[:3].tolist() == pytest.approx([3.0, 3.0, 3.0])
    assert r.reduction_busy_s[r.devices.index("h0")] == pytest.approx(3.0)
    assert r.end_s[c] == 0.5  # the compute stream is a different stream
    assert simulate(b.build(), net, gamma_s_per_byte=0.0).makespan_s == pytest.approx(3.0)


def test_markers_take_no_time_and_join_dependencies() -> None:
    net = switch_network(2)
    b = TaskGraphBuilder()
    x = b.compute("h0", 1.0)
    y = b.compute("h1", 2.0)
    m = b.marker([x, y])
    m2 = b.marker([m])
    z = b.compute("h0", 1.0, [m2])
    r = simulate(b.build(), net)
    assert r.end_s[m] == r.start_s[m] == 2.0
    assert r.end_s[m2] == 2.0
    assert r.start_s[z] == 2.0
    assert np.isnan(r.arrive_s[m])


def test_same_device_transfer_is_free() -> None:
    net = switch_network(2)
    b = TaskGraphBuilder()
    t = b.transfer("h0", "h0", 1 * GB)
    assert simulate(b.build(), net).end_s[t] == 0.0


def test_zero_byte_transfer_costs_only_latency() -> None:
    net = chain_network([GB], [2e-6])
    b = TaskGraphBuilder()
    b.transfer("d0", "d1", 0.0)
    assert simulate(b.build(), net).makespan_s == pytest.approx(2e-6)


def test_empty_graph() -> None:
    r = simulate(TaskGraphBuilder().build(), switch_network(1))
    assert r.makespan_s == 0.0
    assert r.num_events == 0


def test_unknown_device_is_a_topology_error() -> None:
    b = TaskGraphBuilder()
    b.compute("nope", 1.0)
    with pytest.raises(TopologyError, match="nope"):
        simulate(b.build(), switch_network(2))


def test_dependency_cycle_is_reported() -> None:
    good = TaskGraphBuilder()
    good.compute("h0", 1.0)
    good.compute("h0", 1.0, [0])
    g = good.build()
    cyclic = TaskGraph(**{**g.__dict__, "dep_offsets": np.array([0, 1, 2]), "dep_indices": np.array([1, 0])})
    with pytest.raises(SimulationError, match="never ran"):
        simulate(cyclic, switch_network(1))


def test_bad_gamma_is_rejected() -> None:
    with pytest.raises(SimulationError):
        simulate(TaskGraphBuilder().build(), switch_network(1), gamma_s_per_byte=-1.0)


def _random_graph(seed: int, hosts: int, tasks: int) -> TaskGraph:
    rng = np.random.default_rng(seed)
    b = TaskGraphBuilder([f"h{i}" for i in range(hosts)])
    for t in range(tasks):
        deps = sorted({int(d) for d in rng.integers(0, t, size=rng.integers(0, 3))}) if t else []
        kind = rng.integers(0, 4)
        a, c = (f"h{int(x)}" for x in rng.integers(0, hosts, size=2))
        if kind == 0:
            b.compute(a, float(rng.uniform(0, 1e-3)), deps, priority=int(rng.integers(0, 3)))
        elif kind == 1:
            b.marker(deps)
        else:
            b.transfer(a, c, float(rng.integers(0, 10**6)), deps, reduce=bool(kind == 3))
    return b.build()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), hosts=st.integers(1, 6), tasks=st.integers(1, 60))
def test_random_graphs_respect_dependencies_and_are_deterministic(seed: int, hosts: int, tasks: int) -> None:
    graph = _random_graph(seed, hosts, tasks)
    net = switch_network(hosts, bandwidth_Bps=1e9, latency_s=1e-6, memory_bandwidth_Bps=1e11)
    r1 = simulate(graph, net)
    r2 = simulate(graph, net)
    assert np.array_equal(r1.start_s, r2.start_s) and np.array_equal(r1.end_s, r2.end_s)
    assert np.array_equal(r1.channel_bytes, r2.channel_bytes)
    for t in range(graph.num_tasks):
        assert r1.start_s[t] <= r1.end_s[t]
        for d in graph.deps(t):
            assert r1.end_s[d] <= r1.start_s[t] + 1e-15
    # Every compute stream runs one task at a time.
    comp = np.flatnonzero(graph.kind == 0)
    for dev in range(hosts):
        mine = comp[graph.device[comp] == dev]
        spans = sorted(zip(r1.start_s[mine], r1.end_s[mine], strict=True))
        for (_, e1), (s2, _) in itertools.pairwise(spans):
            assert e1 <= s2 + 1e-15
    # Bytes on channels add up to each transfer's bytes times its hop count.
    tr = np.flatnonzero((graph.kind == 1) & (graph.device != graph.dst) & (graph.size_bytes > 0))
    hops = sum(
        len(net.route(graph.devices[graph.device[t]], graph.devices[graph.dst[t]])[0]) * graph.size_bytes[t]
        for t in tr
    )
    assert r1.channel_bytes.sum() == pytest.approx(hops)


def _two_switch_network(rng: np.random.Generator, hosts: int) -> Network:
    """Hosts split over two switches joined by one link; random bandwidths and latencies."""
    g = nx.DiGraph()
    for i in range(hosts):
        g.add_node(
            f"h{i}",
            kind="device",
            peak_flop_per_s=PEAK,
            efficiency=0.5,
            memory_bytes=1e9,
            memory_bandwidth_Bps=float(rng.choice([1e10, 1e11])),
        )
    g.add_node("s0", kind="switch")
    g.add_node("s1", kind="switch")
    channel = 0
    links = [(f"h{i}", f"s{i % 2}") for i in range(hosts)] + [("s0", "s1")]
    for a, b in links:
        bw = float(rng.uniform(0.5e9, 2e9))
        lat = float(rng.uniform(0, 3e-6))
        for u, v in ((a, b), (b, a)):
            g.add_edge(u, v, bandwidth_Bps=bw, latency_s=lat, channel=channel)
            channel += 1
    return Network(g)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), hosts=st.integers(2, 6), tasks=st.integers(1, 50))
def test_engine_matches_a_plain_reference_simulator(seed: int, hosts: int, tasks: int) -> None:
    rng = np.random.default_rng(seed)
    net = _two_switch_network(rng, hosts)
    b = TaskGraphBuilder([f"h{i}" for i in range(hosts)])
    for t in range(tasks):
        deps = sorted({int(d) for d in rng.integers(0, t, size=rng.integers(0, 3))}) if t else []
        kind = rng.integers(0, 5)
        a, c = rng.choice(hosts, size=2, replace=False)
        if kind == 0:
            b.compute(f"h{a}", float(rng.uniform(1e-4, 1e-3)), deps, priority=int(rng.integers(0, 2)))
        elif kind == 1:
            b.marker(deps)
        else:
            b.transfer(f"h{a}", f"h{c}", float(rng.uniform(1e5, 1e6)), deps, reduce=bool(kind == 4))
    graph = b.build()
    result = simulate(graph, net)
    start, end = reference_times(graph, net)
    assert result.end_s.tolist() == pytest.approx(end, rel=1e-9, abs=1e-15)
    assert result.start_s.tolist() == pytest.approx(start, rel=1e-9, abs=1e-15)


def test_ring_on_a_fat_tree_matches_the_reference() -> None:
    # Mixed path latencies (2, 4 hops): the engine's exclusive regime books flows ahead.
    from parplan.collectives.registry import build_schedule
    from parplan.plan.collective import collective_taskgraph
    from tests.engine.nets import leaf_spine_network

    net = leaf_spine_network(6, 2, 2, bandwidth_Bps=1e9, latency_s=1e-6)
    graph = collective_taskgraph(build_schedule("ring", 6, 6000), net.devices, 4.0)
    start, end = reference_times(graph, net, gamma_s_per_byte=1e-10)
    result = simulate(graph, net, gamma_s_per_byte=1e-10)
    assert result.end_s.tolist() == pytest.approx(end, rel=1e-9)
    assert result.start_s.tolist() == pytest.approx(start, rel=1e-9)
