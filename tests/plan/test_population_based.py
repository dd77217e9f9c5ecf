"""The population_based strategy: generations timed on the engine, copies, waves and PBT quality."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from parplan.api.evaluate import evaluate_plan, makespan_s
from parplan.config.cluster import ClusterSpec
from parplan.config.model import ModelSpec
from parplan.config.scenario import PlanSpec, TrainingSpec
from parplan.config.strategy import PopulationBasedStrategy
from parplan.errors import PlanError, TopologyError
from parplan.model.graph import build_model
from parplan.plan.base import PlanContext
from parplan.plan.compute import forward_seconds, step_compute
from parplan.plan.strategies import expand
from parplan.plan.strategies.population_based import copy_bytes
from parplan.taskgraph import COMPUTE, TRANSFER
from parplan.topology.build import build_network

PARAMS = 1e7
MODEL = ModelSpec.model_validate(
    {"name": "m", "nodes": [{"id": "net", "params": PARAMS, "forward_flops": 1e9, "activation": 1e4}]}
)
STATE_BYTES = PARAMS * (2 + 12)  # weights + Adam state move with a copy


def switch(hosts: int, bandwidth: str = "100 GB/s") -> ClusterSpec:
    return ClusterSpec.model_validate(
        {
            "generator": {
                "kind": "switch",
                "hosts": hosts,
                "device": {
                    "peak_flops": 1e13,
                    "efficiency": 1.0,
                    "memory": 80 * 2**30,
                    "memory_bandwidth": 1e12,
                },
                "link": {"bandwidth": bandwidth, "latency": "1 us"},
            }
        }
    )


def ctx_for(cluster: ClusterSpec, batch: int = 32, **training: Any) -> PlanContext:
    training_spec = TrainingSpec(global_batch_size=batch, **training)
    return PlanContext(build_network(cluster), build_model(MODEL), MODEL, training_spec, simulator=makespan_s)


def pbt(**fields: Any) -> PopulationBasedStrategy:
    return PopulationBasedStrategy.model_validate({"kind": "population_based", **fields})


def member_seconds(ctx: PlanContext, steps: int) -> float:
    t = step_compute(ctx, "h0", None, 32.0)
    return steps * t.total_s + forward_seconds(ctx, "h0", ctx.model.order, 32.0)


def test_copy_transfers_appear_in_the_graph_with_the_model_state_size() -> None:
    ctx = ctx_for(switch(8))
    work = expand(ctx, pbt(population_size=8, generations=4, steps_per_generation=5))
    assert copy_bytes(ctx) == STATE_BYTES
    shown = work.quality["shown_generation"]
    copies = work.quality["copies_per_generation"][shown]
    assert copies  # truncation 0.25 of 8: two copies after every generation but the last
    g = work.graph
    tr = np.flatnonzero(g.kind == TRANSFER)
    assert np.all(g.size_bytes[tr] == STATE_BYTES)
    moved = sorted((g.devices[g.device[t]], g.devices[g.dst[t]]) for t in tr)
    assert moved == sorted((f"h{src}", f"h{dst}") for dst, src in copies)
    assert {g.categories[c] for c in g.category[tr]} == {"exploit"}


def test_copies_over_a_slow_network_show_in_generation_time() -> None:
    fast = expand(
        ctx_for(switch(8, "100 GB/s")), pbt(population_size=8, generations=3, steps_per_generation=2)
    )
    slow = expand(ctx_for(switch(8, "1 GB/s")), pbt(population_size=8, generations=3, steps_per_generation=2))
    assert fast.quality["copies_per_generation"] == slow.quality["copies_per_generation"]
    t_fast, t_slow = fast.quality["generation_times_s"], slow.quality["generation_times_s"]
    # generations with copies pay STATE_BYTES at 1 GB/s (copies to distinct devices run in parallel
    # unless they share a source); the last generation copies nothing and costs the same
    assert t_slow[-1] == pytest.approx(t_fast[-1], rel=1e-6)
    assert t_slow[0] - t_fast[0] >= STATE_BYTES / 1e9 * 0.99


def test_members_queue_in_waves_when_there_are_more_members_than_devices() -> None:
    ctx = ctx_for(switch(4))
    one_wave = expand(ctx, pbt(population_size=4, generations=3, steps_per_generation=10))
    two_waves = expand(ctx, pbt(population_size=8, generations=3, steps_per_generation=10))
    per_member = member_seconds(ctx, 10)
    last1, last2 = one_wave.quality["generation_times_s"][-1], two_waves.quality["generation_times_s"][-1]
    assert last1 == pytest.approx(per_member, rel=1e-9)  # no copies after the last generation
    assert last2 == pytest.approx(2 * per_member, rel=1e-9)
    assert two_waves.quality["mean_generation_time_s"] / one_wave.quality[
        "mean_generation_time_s"
    ] == pytest.approx(2.0, rel=0.05)
    assert two_waves.quality["waves"] == 2
    assert two_waves.quality["member_devices"] == ["h0", "h1", "h2", "h3"] * 2
    assert any("2 waves" in n for n in two_waves.notes)
    # earlier waves first: member 0's evaluation ends before member 4 starts on h0
    g = two_waves.graph
    pri = {g.labels[g.label[t]]: int(g.priority[t]) for t in np.flatnonzero(g.kind == COMPUTE)}
    assert pri["member 0 forward"] == 0 and pri["member 4 forward"] == 1


def test_copies_between_members_of_one_device_move_nothing() -> None:
    ctx = ctx_for(switch(1))
    work = expand(ctx, pbt(population_size=4, generations=3))
    assert not np.any(work.graph.kind == TRANSFER)
    assert work.quality["network_copies_per_generation"] == [0, 0, 0]
    assert sum(len(c) for c in work.quality["copies_per_generation"]) == 2


def test_samples_units_and_run_time() -> None:
    ctx = ctx_for(switch(4))
    spec = PlanSpec.model_validate(
        {
            "name": "pbt",
            "strategy": {
                "kind": "population_based",
                "population_size": 6,
                "generations": 5,
                "steps_per_generation": 3,
                "exploit": {"kind": "tournament"},
            },
        }
    )
    result = evaluate_plan(ctx, spec)
    q = result.quality
    assert result.unit == "generation"
    assert result.samples_per_step == 6 * 3 * 32
    assert result.units_per_run == 5
    assert result.run_time_s == pytest.approx(sum(q["generation_times_s"]))
    assert result.step_time_s == pytest.approx(q["generation_times_s"][q["shown_generation"]])


def test_quality_finds_the_known_optimum_neighbourhood() -> None:
    ctx = ctx_for(switch(8))
    for exploit in ({"kind": "truncation"}, {"kind": "tournament"}):
        work = expand(ctx, pbt(population_size=8, generations=30, steps_per_generation=4, exploit=exploit))
        q = work.quality
        assert q["known_optimum"] == {"score": 0.0, "hyperparameters": [0.6, 0.3]}
        assert q["best_score"] >= -0.02
        assert q["hyperparameter_error"] <= 0.15
        assert len(q["best_score_per_generation"]) == len(q["best_hyperparameters_per_generation"]) == 30


def test_memory_counts_resident_members() -> None:
    ctx = ctx_for(switch(2))
    work = expand(ctx, pbt(population_size=5, generations=1))
    mem = {m.device: m for m in work.memory}
    assert mem["h0"].params_bytes == 3 * PARAMS * 2  # members 0, 2, 4
    assert mem["h1"].optimizer_bytes == 2 * PARAMS * 12  # members 1, 3
    assert mem["h0"].grads_bytes == PARAMS * 2  # one member trains at a time
    assert mem["h0"].activations_bytes == 32 * 1e4


def test_deterministic_under_seeds() -> None:
    ctx = ctx_for(switch(4), straggler_jitter=0.1, seed=3)
    a = expand(ctx, pbt(population_size=6, generations=4, seed=1))
    b = expand(ctx, pbt(population_size=6, generations=4, seed=1))
    c = expand(ctx, pbt(population_size=6, generations=4, seed=2))
    assert a.quality == b.quality
    assert np.array_equal(a.graph.seconds, b.graph.seconds)
    assert c.quality["best_score_per_generation"] != a.quality["best_score_per_generation"]


def test_device_errors() -> None:
    ctx = ctx_for(switch(2))
    with pytest.raises(TopologyError, match="nowhere"):
        expand(ctx, pbt(population_size=2, devices=["h0", "nowhere"]))
    with pytest.raises(PlanError, match="twice"):
        expand(ctx, pbt(population_size=2, devices=["h0", "h0"]))
