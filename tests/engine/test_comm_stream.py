"""The communication stream: compute tasks with ``stream=COMM_STREAM`` run on a second serial
stream per device, beside (not after) the compute stream, FIFO or by priority among themselves."""

from __future__ import annotations

import networkx as nx
import pytest

from parplan.engine.simulate import simulate
from parplan.errors import SimulationError
from parplan.taskgraph import COMM_STREAM, TaskGraphBuilder
from parplan.topology.network import Network


def _network() -> Network:
    g = nx.DiGraph()
    for h in ("a", "b"):
        g.add_node(h, kind="device", peak_flop_per_s=1e12, efficiency=1.0, memory_bytes=1e9)
    g.add_edge("a", "b", bandwidth_Bps=1e9, latency_s=0.0, channel=0)
    g.add_edge("b", "a", bandwidth_Bps=1e9, latency_s=0.0, channel=1)
    return Network(g)


def test_comm_stream_overlaps_compute_and_serialises_itself() -> None:
    b = TaskGraphBuilder()
    c = b.compute("a", 2.0)
    x = b.compute("a", 1.5, stream=COMM_STREAM, category="tp")
    y = b.compute("a", 1.0, stream=COMM_STREAM, category="tp")
    z = b.compute("a", 1.0, [c, y])
    graph = b.build()
    assert graph.stream is not None and graph.stream.tolist() == [0, 1, 1, 0]
    sim = simulate(graph, _network())
    assert [sim.start_s[t] for t in (c, x, y, z)] == [0.0, 0.0, 1.5, 2.5]
    assert sim.makespan_s == 3.5
    assert sim.compute_busy_s[graph.devices.index("a")] == 3.0  # the communication stream is apart


def test_priority_mode_orders_each_stream_on_its_own() -> None:
    b = TaskGraphBuilder()
    b.compute("a", 1.0, priority=5)
    b.compute("a", 1.0, priority=1)
    late = b.compute("a", 1.0, priority=9, stream=COMM_STREAM)
    early = b.compute("a", 1.0, priority=2, stream=COMM_STREAM)
    sim = simulate(b.build(), _network())
    assert sim.start_s[early] == 0.0 and sim.start_s[late] == 1.0
    assert sim.makespan_s == 2.0


def test_graphs_without_it_keep_a_constant_column_and_unknown_streams_are_refused() -> None:
    b = TaskGraphBuilder()
    b.compute("a", 1.0)
    assert b.build().stream is None
    with pytest.raises(SimulationError, match="unknown stream 2"):
        b.compute("a", 1.0, stream=2)
