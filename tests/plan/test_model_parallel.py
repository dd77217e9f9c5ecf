"""Model-parallel plans: segments, cut-edge transfers, GPipe and 1F1B order, bubble, memory."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.api.evaluate import evaluate_plan
from parplan.config.model import ModelSpec
from parplan.engine.simulate import simulate
from parplan.errors import InfeasiblePlanError, PlanError, TopologyError
from parplan.pipeline import Stage, Unit
from parplan.pipeline import get as get_schedule
from parplan.pipeline.one_f_one_b import warmup_microbatches
from parplan.plan.compute import backward_seconds, forward_seconds, optimizer_seconds
from parplan.plan.strategies.model_parallel import analyse_partitions, expand
from parplan.taskgraph import COMPUTE, TRANSFER, TaskGraph
from tests.plan.strategy_helpers import (
    chain_model,
    context,
    diamond_model,
    pipeline,
    plan,
    strategy,
    switch_cluster,
)

FAST_NET = {"bandwidth": "1 PB/s", "latency": "0 s"}


def _ctx(hosts: int, model: ModelSpec, batch: int = 64) -> Any:
    return context(switch_cluster(hosts, **FAST_NET), model, batch=batch)


def _cat(g: TaskGraph, name: str) -> np.ndarray:
    return (
        np.flatnonzero(g.category == g.categories.index(name)) if name in g.categories else np.zeros(0, int)
    )


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved_1f1b"])  # one chunk per stage: 1F1B
@pytest.mark.parametrize(("s", "m"), [(2, 1), (2, 4), (4, 4), (4, 8), (3, 16)])
def test_uniform_stages_show_the_textbook_bubble(schedule: str, s: int, m: int) -> None:
    ctx = _ctx(s, chain_model(layers=2 * s, activation=1.0), batch=16 * m)
    strat = pipeline([f"h{i}" for i in range(s)], 2, m, schedule)
    r = evaluate_plan(ctx, plan(strat))
    assert r.bubble_fraction == pytest.approx((s - 1) / (m + s - 1), rel=1e-6)
    tf = forward_seconds(ctx, "h0", ["l0", "l1"], 16)
    tb = backward_seconds(ctx, "h0", ["l0", "l1"], 16)
    opt = optimizer_seconds(ctx, "h0", 2e6)
    assert r.step_time_s == pytest.approx((m + s - 1) * (tf + tb) + opt, rel=1e-6)
    assert r.compute_s + r.exposed_comm_s + r.idle_s == pytest.approx(r.step_time_s)
    assert r.idle_s == pytest.approx((s - 1) * (tf + tb), rel=1e-6)


def test_1f1b_stream_order_and_memory() -> None:
    ctx = _ctx(4, chain_model(layers=4, activation=10.0, saved=1000.0), batch=64)
    gp = expand(ctx, strategy(pipeline(["h0", "h1", "h2", "h3"], 1, 8, "gpipe")))
    ob = expand(ctx, strategy(pipeline(["h0", "h1", "h2", "h3"], 1, 8, "1f1b")))
    # GPipe holds all 8 micro-batches of 8 samples on every stage; 1F1B at most 4 - stage.
    assert [m.activations_bytes for m in gp.memory] == [8 * 8 * 1000] * 4
    assert [m.activations_bytes for m in ob.memory] == [k * 8 * 1000 for k in (4, 3, 2, 1)]
    sim = simulate(ob.graph, ctx.network)
    g = ob.graph
    for dev, warm in (("h0", 4), ("h2", 2), ("h3", 1)):
        stage = Stage(index=int(dev[1:]), num_stages=4, microbatches=8)
        assert warmup_microbatches(stage) == warm
        d = g.devices.index(dev)
        tasks = [
            t
            for t in np.flatnonzero((g.kind == COMPUTE) & (g.device == d))
            if g.categories[g.category[t]] in ("forward", "backward")
        ]
        tasks.sort(key=lambda t: sim.start_s[t])
        seq = [
            Unit(
                "F" if g.categories[g.category[t]] == "forward" else "B",
                int(g.labels[g.label[t]].split("mb")[1]),
            )
            for t in tasks
        ]
        assert seq == list(get_schedule("1f1b").worker_order(stage))
    sim_g = simulate(gp.graph, ctx.network)
    d0 = gp.graph.devices.index("h3")
    last_fwd = max(sim_g.end_s[t] for t in _cat(gp.graph, "forward") if gp.graph.device[t] == d0)
    first_bwd = min(sim_g.start_s[t] for t in _cat(gp.graph, "backward") if gp.graph.device[t] == d0)
    assert first_bwd >= last_fwd  # GPipe: all forwards before any backward


def test_cut_edges_become_transfers_of_the_right_size() -> None:
    ctx = _ctx(2, diamond_model(), batch=12)
    # non-contiguous on a branching DAG: a and d on h0; b, c, e on h1
    strat = {
        "kind": "model_parallel",
        "partitions": [
            {"name": "A", "nodes": ["a", "d"], "worker": "h0"},
            {"name": "B", "nodes": ["b", "c", "e"], "worker": "h1"},
        ],
        "communication": {"microbatches": 3},
    }
    layout = analyse_partitions(ctx, strategy(strat))
    assert [(s.worker, s.nodes) for s in layout.segments] == [
        ("h0", ("a",)),
        ("h1", ("b", "c")),
        ("h0", ("d",)),
        ("h1", ("e",)),
    ]
    work = expand(ctx, strategy(strat))
    g = work.graph
    act, grad = _cat(g, "activation"), _cat(g, "activation_grad")
    # per micro-batch: a->h1 (shared by b and c), b->h0, c->h0, d->h1; c->e stays on h1
    assert len(act) == len(grad) == 4 * 3
    assert sorted(g.size_bytes[act]) == sorted([1000 * 4, 2000 * 4, 3000 * 4, 4000 * 4] * 3)
    assert sorted(g.size_bytes[grad]) == sorted(g.size_bytes[act])
    for t in act:
        src, dst = g.devices[g.device[t]], g.devices[g.dst[t]]
        assert src != dst
    sim = simulate(g, ctx.network)
    # every consumer starts after the transfer it needs has arrived
    for t in act:
        for c in np.flatnonzero([t in g.deps(i) for i in range(g.num_tasks)]):
            assert sim.start_s[c] >= sim.end_s[t] - 1e-15
    r = evaluate_plan(ctx, plan(strat))
    assert r.compute_s + r.exposed_comm_s + r.idle_s == pytest.approx(r.step_time_s)


def test_chain_cut_count_matches_stages_and_microbatches() -> None:
    ctx = _ctx(4, chain_model(layers=8, activation=100.0), batch=32)
    g = expand(ctx, strategy(pipeline(["h0", "h1", "h2", "h3"], 2, 4))).graph
    act = _cat(g, "activation")
    assert len(act) == 3 * 4 and len(_cat(g, "activation_grad")) == 3 * 4
    assert set(g.size_bytes[act]) == {100.0 * 8}


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_several_partitions_on_one_worker(schedule: str) -> None:
    ctx = _ctx(2, chain_model(layers=4), batch=16)
    strat = {
        "kind": "model_parallel",
        "partitions": [{"name": f"p{i}", "nodes": [f"l{i}"], "worker": f"h{i % 2}"} for i in range(4)],
        "communication": {"microbatches": 4, "schedule": schedule},
    }
    r = evaluate_plan(ctx, plan(strat))
    f = forward_seconds(ctx, "h0", ["l0", "l2"], 16)
    b = backward_seconds(ctx, "h0", ["l0", "l2"], 16)
    assert r.compute_s == pytest.approx(f + b + optimizer_seconds(ctx, "h0", 2e6))
    assert [m.params_bytes for m in r.memory] == [2 * 2e6, 2 * 2e6]


@st.composite
def _dag_plans(draw: st.DrawFn) -> tuple[ModelSpec, dict[str, Any]]:
    n = draw(st.integers(2, 7))
    nodes = [
        {
            "id": f"n{i}",
            "params": draw(st.integers(0, 3)) * 1e6,
            "forward_flops": draw(st.integers(1, 4)) * 1e9,
            "activation": draw(st.integers(0, 4)) * 1e3,
        }
        for i in range(n)
    ]
    edges = [[f"n{i}", f"n{j}"] for i in range(n) for j in range(i + 1, n) if draw(st.booleans())]
    workers = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    parts: dict[int, list[str]] = {}
    for i, w in enumerate(workers):
        parts.setdefault(w, []).append(f"n{i}")
    strat = {
        "kind": "model_parallel",
        "partitions": [{"name": f"w{w}", "nodes": ns, "worker": f"h{w}"} for w, ns in sorted(parts.items())],
        "communication": {
            "microbatches": draw(st.integers(1, 4)),
            "schedule": draw(st.sampled_from(["gpipe", "1f1b"])),
        },
    }
    return ModelSpec.model_validate({"nodes": nodes, "edges": edges}), strat


@given(_dag_plans())
@settings(max_examples=80, deadline=None)
def test_any_partition_of_any_dag_runs(case: tuple[ModelSpec, dict[str, Any]]) -> None:
    model, strat = case
    ctx = context(switch_cluster(3, bandwidth="10 GB/s"), model, batch=8)
    work = expand(ctx, strategy(strat))
    sim = simulate(work.graph, ctx.network)
    g = work.graph
    busy = np.bincount(
        g.device[g.kind == COMPUTE], weights=g.seconds[g.kind == COMPUTE], minlength=len(g.devices)
    )
    assert sim.makespan_s >= busy.max() * (1 - 1e-9)
    for t in range(g.num_tasks):
        for d in g.deps(t):
            assert sim.start_s[t] >= sim.end_s[d] - 1e-12
    # bytes across cuts: each cross-worker (producer, consumer worker) pair once per micro-batch each way
    layout = analyse_partitions(ctx, strategy(strat))
    m = strat["communication"]["microbatches"]
    pairs = sum(len(s) for s in layout.sends)
    assert int(np.sum(g.kind == TRANSFER)) == 2 * pairs * m


def test_partition_errors() -> None:
    ctx = _ctx(2, chain_model(layers=3))
    missing = {"kind": "model_parallel", "partitions": [{"name": "a", "nodes": ["l0", "l1"], "worker": "h0"}]}
    with pytest.raises(PlanError, match="in no partition: l2"):
        expand(ctx, strategy(missing))
    twice = {
        "kind": "model_parallel",
        "partitions": [
            {"name": "a", "nodes": ["l0", "l1"], "worker": "h0"},
            {"name": "b", "nodes": ["l1", "l2"], "worker": "h1"},
        ],
    }
    with pytest.raises(PlanError, match="'l1' is in partitions 'a' and 'b'"):
        expand(ctx, strategy(twice))
    unknown = {
        "kind": "model_parallel",
        "partitions": [{"name": "a", "nodes": ["l0", "l1", "l2", "zz"], "worker": "h0"}],
    }
    with pytest.raises(PlanError, match="unknown model node 'zz'"):
        expand(ctx, strategy(unknown))
    with pytest.raises(TopologyError, match="h7"):
        expand(ctx, strategy(pipeline(["h0", "h7", "h1"], 1, 1)))
    with pytest.raises(InfeasiblePlanError, match="4 samples cannot fill 8 micro-batches"):
        expand(_ctx(3, chain_model(layers=3), batch=4), strategy(pipeline(["h0", "h1", "h2"], 1, 8)))


def test_protocol_none_is_one_batch_and_deterministic() -> None:
    ctx = _ctx(2, chain_model(layers=2), batch=10)
    strat = {**pipeline(["h0", "h1"], 1, 4), "communication": {"protocol": "none", "microbatches": 4}}
    g = expand(ctx, strategy(strat)).graph
    assert len(_cat(g, "forward")) == 2 and g.meta["microbatches"] == 1
    a = evaluate_plan(ctx, plan(pipeline(["h0", "h1"], 1, 4, "1f1b"))).to_dict()
    b = evaluate_plan(ctx, plan(pipeline(["h0", "h1"], 1, 4, "1f1b"))).to_dict()
    assert a == b
