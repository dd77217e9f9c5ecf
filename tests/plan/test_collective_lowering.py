"""Lowering collective schedules into task graphs: structure, markers, outside dependencies."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.collectives.registry import build_schedule
from parplan.engine.simulate import simulate
from parplan.errors import PlanError
from parplan.plan.collective import collective_taskgraph, lower_schedule
from parplan.taskgraph import MARKER, TRANSFER, TaskGraph, TaskGraphBuilder
from tests.engine.nets import switch_network

ALGORITHMS = ["ring", "centralized", "tree:3", "halving_doubling", "double_binary_tree", "hierarchical:2"]


def _dag(graph: TaskGraph) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(range(graph.num_tasks))
    for t in range(graph.num_tasks):
        g.add_edges_from((int(d), t) for d in graph.deps(t))
    return g


def test_collective_taskgraph_is_the_steps() -> None:
    s = build_schedule("ring", 4, 10)
    devices = ["h3", "h2", "h1", "h0"]
    g = collective_taskgraph(s, devices, 2.0)
    assert g.num_tasks == s.num_steps
    assert np.all(g.kind == TRANSFER)
    assert [g.devices[d] for d in g.device] == [devices[r] for r in s.src]
    assert [g.devices[d] for d in g.dst] == [devices[r] for r in s.dst]
    assert g.size_bytes.tolist() == (s.length * 2.0).tolist()
    assert g.reduce.tolist() == s.reduce.tolist()
    assert g.device.dtype == np.int32 and g.label.dtype == np.int8  # compact ids (issue 15)
    assert np.shares_memory(g.device, s.src) and np.shares_memory(g.dst, s.dst)  # not copied
    assert np.shares_memory(g.label, s.phase)
    assert g.seconds.strides == (0,) and g.max_rate_Bps.strides == (0,)  # unused: no memory
    assert [g.labels[x] for x in g.label[:4]] == ["ring:reduce_scatter"] * 4
    assert g.meta["collective"] == {"algorithm": "ring", "kind": "all_reduce", "ranks": 4, "size_bytes": 20.0}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_lowering_matches_the_standalone_graph_and_time(algorithm: str) -> None:
    p = 6
    s = build_schedule(algorithm, p, 600)
    net = switch_network(p, 1e9, 1e-6, memory_bandwidth_Bps=1e11)
    b = TaskGraphBuilder()
    tasks = lower_schedule(b, s, net.devices, element_bytes=4.0)
    g = b.build()
    steps = slice(tasks.first_task, tasks.first_task + tasks.num_steps)
    alone = collective_taskgraph(s, net.devices, 4.0)
    assert g.kind[steps].tolist() == alone.kind.tolist()
    assert g.size_bytes[steps].tolist() == alone.size_bytes.tolist()
    assert np.all(g.kind[tasks.num_steps :] == MARKER)
    assert g.num_tasks == s.num_steps + p + 1
    r1, r2 = simulate(g, net), simulate(alone, net)
    assert r1.makespan_s == pytest.approx(r2.makespan_s)
    assert r1.end_s[tasks.done] == pytest.approx(r1.makespan_s)


@settings(max_examples=30, deadline=None)
@given(
    algorithm=st.sampled_from(ALGORITHMS),
    p=st.integers(1, 9),
    elements=st.integers(1, 50),
    with_rank_deps=st.booleans(),
)
def test_markers_cover_what_they_claim(algorithm: str, p: int, elements: int, with_rank_deps: bool) -> None:
    s = build_schedule(algorithm, p, elements)
    b = TaskGraphBuilder()
    before = [b.compute(f"h{r}", 1.0) for r in range(p)]
    tasks = lower_schedule(
        b,
        s,
        [f"h{r}" for r in range(p)],
        element_bytes=1.0,
        rank_deps=[[before[r]] for r in range(p)] if with_rank_deps else None,
        deps=() if with_rank_deps else before,
    )
    g = b.build()
    dag = _dag(g)
    ancestors_done = {r: nx.ancestors(dag, tasks.rank_done[r]) for r in range(p)}
    for i in range(s.num_steps):
        step = tasks.step_task(i)
        # Every step into rank r finishes before r is done; every step before the collective's end.
        assert step in ancestors_done[int(s.dst[i])]
        assert step in nx.ancestors(dag, tasks.done)
        up = nx.ancestors(dag, step)
        if with_rank_deps:
            # A step waits for the data of every rank it reads: its sender, and its receiver if it reduces.
            assert before[int(s.src[i])] in up
            if s.reduce[i]:
                assert before[int(s.dst[i])] in up
        else:
            assert set(before) <= up
    assert len(tasks.rank_ready) == (p if with_rank_deps else 0)


def test_rank_deps_delay_only_what_reads_that_rank() -> None:
    p = 4
    net = switch_network(p, 1e9, 0.0)
    s = build_schedule("ring", p, 4000)
    b = TaskGraphBuilder()
    slow = b.compute("h2", 1.0)
    tasks = lower_schedule(b, s, net.devices, element_bytes=1.0, rank_deps=[[], [], [slow], []])
    r = simulate(b.build(), net, gamma_s_per_byte=0.0)
    starts = r.start_s[tasks.first_task : tasks.first_task + tasks.num_steps]
    assert starts.min() == 0.0  # ranks 0, 1 and 3 start at once
    from_2 = s.src == 2
    assert starts[from_2].min() >= 1.0
    assert r.end_s[tasks.done] > 1.0


def test_lowering_rejects_bad_input() -> None:
    s = build_schedule("ring", 3, 9)
    b = TaskGraphBuilder()
    with pytest.raises(PlanError, match="3 ranks"):
        lower_schedule(b, s, ["a", "b"], element_bytes=4.0)
    with pytest.raises(PlanError, match="distinct"):
        lower_schedule(b, s, ["a", "a", "b"], element_bytes=4.0)
    with pytest.raises(PlanError, match="element_bytes"):
        lower_schedule(b, s, ["a", "b", "c"], element_bytes=0.0)
    with pytest.raises(PlanError, match="not an existing task"):
        lower_schedule(b, s, ["a", "b", "c"], element_bytes=4.0, deps=[5])
    with pytest.raises(PlanError, match="rank_deps"):
        lower_schedule(b, s, ["a", "b", "c"], element_bytes=4.0, rank_deps=[[]])
    with pytest.raises(PlanError):
        collective_taskgraph(s, ["a", "b"], 4.0)


def test_labels_name_the_phases() -> None:
    s = build_schedule("tree", 3, 8)
    b = TaskGraphBuilder()
    tasks = lower_schedule(b, s, ["a", "b", "c"], element_bytes=4.0, label="grad", category="dp")
    g = b.build()
    names = {g.labels[g.label[tasks.step_task(i)]] for i in range(s.num_steps)}
    assert names == {"grad:reduce", "grad:broadcast"}
    assert {g.categories[g.category[tasks.step_task(i)]] for i in range(s.num_steps)} == {"dp"}
