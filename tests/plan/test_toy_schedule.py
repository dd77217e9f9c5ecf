"""A toy pipeline schedule defined here and registered with one line runs end to end: the config
accepts its name, the plan builder follows its order and rules, the memory model its in-flight count."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from parplan.api.evaluate import evaluate_plan
from parplan.engine.simulate import simulate
from parplan.errors import PlanError
from parplan.pipeline import PipelineSchedule, Stage, Unit, register, unregister
from parplan.plan.compute import backward_seconds, forward_seconds, optimizer_seconds
from parplan.plan.strategies.model_parallel import expand
from parplan.taskgraph import COMPUTE
from tests.plan.strategy_helpers import chain_model, context, pipeline, plan, strategy, switch_cluster


class Lockstep(PipelineSchedule):
    """One micro-batch at a time on every stage: ``F0 B0 F1 B1 ...``; forward ``j`` waits for
    backward ``j - 1``. It claims no in-flight count: the base class takes the peak of its order."""

    name = "lockstep"

    def worker_order(self, stage: Stage) -> tuple[Unit, ...]:
        return tuple(Unit(d, j) for j in range(stage.microbatches) for d in ("F", "B"))

    def waits_for(self, unit: Unit, stage: Stage) -> tuple[Unit, ...]:
        return (Unit("B", unit.microbatch - 1),) if unit.direction == "F" and unit.microbatch else ()


@pytest.fixture
def lockstep() -> Iterator[PipelineSchedule]:
    yield register(Lockstep())
    unregister("lockstep")


def test_a_registered_toy_schedule_runs_a_model_parallel_plan(lockstep: PipelineSchedule) -> None:
    s, m = 3, 4
    ctx = context(
        switch_cluster(s, bandwidth="1 PB/s", latency="0 s"),
        chain_model(layers=s, activation=10.0, saved=1000.0),
        batch=8 * m,
    )
    strat = strategy(pipeline([f"h{i}" for i in range(s)], 1, m, "lockstep"))
    assert strat.communication.schedule == "lockstep"
    work = expand(ctx, strat)
    assert work.graph.meta["schedule"] == "lockstep"
    # one micro-batch of 8 samples in flight on every stage
    assert [mem.activations_bytes for mem in work.memory] == [8 * 1000.0] * s
    g = work.graph
    sim = simulate(g, ctx.network)
    for i in range(s):
        d = g.devices.index(f"h{i}")
        tasks = [
            t
            for t in np.flatnonzero((g.kind == COMPUTE) & (g.device == d))
            if g.categories[g.category[t]] in ("forward", "backward")
        ]
        tasks.sort(key=lambda t: sim.start_s[t])
        seq = [
            Unit(g.categories[g.category[t]][0].upper(), int(g.labels[g.label[t]].split("mb")[1]))
            for t in tasks
        ]
        assert seq == list(lockstep.worker_order(Stage(index=i, num_stages=s, microbatches=m)))
    # fully serial: every micro-batch crosses all stages and back before the next starts
    result = evaluate_plan(ctx, plan(pipeline([f"h{i}" for i in range(s)], 1, m, "lockstep")))
    tf = forward_seconds(ctx, "h0", ["l0"], 8)
    tb = backward_seconds(ctx, "h0", ["l0"], 8)
    opt = optimizer_seconds(ctx, "h0", 1e6)
    assert result.step_time_s == pytest.approx(m * s * (tf + tb) + opt, rel=1e-6)


class _Skips(Lockstep):
    """Broken: its order leaves out the last backward."""

    name = "skips"

    def worker_order(self, stage: Stage) -> tuple[Unit, ...]:
        return super().worker_order(stage)[:-1]


class _WaitsAhead(Lockstep):
    """Broken: forward ``j`` waits for backward ``j + 1``, which is built after it."""

    name = "waits_ahead"

    def waits_for(self, unit: Unit, stage: Stage) -> tuple[Unit, ...]:
        last = unit.microbatch + 1 >= stage.microbatches
        return () if unit.direction == "B" or last else (Unit("B", unit.microbatch + 1),)


class _EarlyBarrier(Lockstep):
    """Broken: a barrier over every forward, but built micro-batch by micro-batch."""

    name = "early_barrier"
    backward_waits_for_forwards = True

    def build_order(self, microbatches: int) -> tuple[Unit, ...]:
        return tuple(Unit(d, j) for j in range(microbatches) for d in ("F", "B"))


@pytest.mark.parametrize(
    ("toy", "message"),
    [
        (_Skips(), "'skips' does not order every forward and backward exactly once on stage 0"),
        (_WaitsAhead(), r"'waits_ahead' makes Unit\(direction='F', microbatch=0\) wait for"),
        (_EarlyBarrier(), "'early_barrier' builds a backward before every forward"),
    ],
)
def test_a_schedule_that_breaks_its_contract_is_a_plan_error(toy: PipelineSchedule, message: str) -> None:
    ctx = context(switch_cluster(2), chain_model(layers=2), batch=8)
    register(toy)
    try:
        with pytest.raises(PlanError, match=message):
            expand(ctx, strategy(pipeline(["h0", "h1"], 1, 2, toy.name)))
    finally:
        unregister(toy.name)
