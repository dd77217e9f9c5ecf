"""The evaluator: contexts, overrides, the step split, bottlenecks, collectives and the JSON form."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from parplan.api.describe import describe_strategy
from parplan.api.evaluate import build_context, evaluate_plan, evaluate_scenario
from parplan.api.knobs import apply_overrides
from parplan.config.strategy import DataParallelStrategy, ModelParallelStrategy
from parplan.errors import ConfigError, PlanError
from tests.plan.strategy_helpers import (
    chain_model,
    context,
    pipeline,
    plan,
    scenario,
    strategy,
    switch_cluster,
)

ISSUE6_KEYS = {
    "name",
    "strategy",
    "step_time_s",
    "compute_s",
    "exposed_comm_s",
    "throughput_samples_per_s",
    "peak_memory_bytes",
    "fits",
    "bottleneck",
}


def _dp(n: int, **agg: object) -> dict[str, object]:
    return {"kind": "data_parallel", "num_replicas": n, "aggregation": agg}


def test_evaluate_scenario_in_order_and_json() -> None:
    sc = scenario(
        switch_cluster(4),
        chain_model(layers=4),
        [{"kind": "local"}, _dp(4), pipeline(["h0", "h1"], 2, 4)],
        batch=16,
        sequence_length=128,
    )
    results = evaluate_scenario(sc)
    assert [r.name for r in results] == ["p0", "p1", "p2"]
    for r in results:
        d = r.to_dict()
        assert set(d) >= ISSUE6_KEYS
        json.dumps(d, allow_nan=False)
        assert "sim" not in d and "work" not in d
        assert r.sim is not None and r.graph is not None
        assert r.tokens_per_s == pytest.approx(r.throughput_samples_per_s * 128)
        assert r.compute_s + r.exposed_comm_s + r.idle_s == pytest.approx(r.step_time_s)
        assert r.run_time_s == pytest.approx(r.step_time_s)
    assert [r.strategy_kind for r in results] == ["local", "data_parallel", "model_parallel"]
    assert results[1].to_dict()["collectives"][0]["busbw_Bps"] > 0


def test_overrides() -> None:
    dp = strategy(_dp(2))
    assert isinstance(dp, DataParallelStrategy)
    out = apply_overrides(
        dp, {"algorithm": "tree:4", "num_replicas": "8", "bucket_size": "1MiB", "overlap": False}
    )
    assert out.num_replicas == 8 and out.aggregation.algorithm.arity == 4
    assert out.aggregation.bucket_size_bytes == 2**20 and out.aggregation.overlap is False
    assert apply_overrides(dp, {"microbatches": 4}) is dp  # no replica plan: not applicable
    mp = strategy(pipeline(["h0", "h1"], 1, 2))
    assert isinstance(mp, ModelParallelStrategy)
    out_mp = apply_overrides(mp, {"microbatches": 16, "schedule": "1f1b", "algorithm": "ring"})
    assert out_mp.communication.microbatches == 16 and out_mp.communication.schedule == "1f1b"
    two_d = strategy({"kind": "data_parallel", "num_replicas": 2, "replica": pipeline(["h0", "h1"], 1, 2)})
    assert apply_overrides(two_d, {"schedule": "1f1b"}).replica.communication.schedule == "1f1b"
    with pytest.raises(PlanError, match="unknown override frobnicate"):
        apply_overrides(dp, {"frobnicate": 1})
    with pytest.raises(ConfigError, match="overrides"):
        apply_overrides(dp, {"num_replicas": 0})
    with pytest.raises(ConfigError, match="unknown algorithm"):
        apply_overrides(dp, {"algorithm": "bogus"})


def test_overrides_reach_the_simulation() -> None:
    ctx = context(switch_cluster(8, bandwidth="1 GB/s"), chain_model(params=1e7), batch=32)
    base = evaluate_plan(ctx, plan(_dp(2)))
    more = evaluate_plan(ctx, plan(_dp(2)), overrides={"num_replicas": 8})
    assert more.num_devices == 8 and base.num_devices == 2
    assert more.description == "data_parallel ×8 auto"
    tree = evaluate_plan(
        ctx, plan(_dp(2)), overrides={"algorithm": "tree:4", "bucket_size": "1MiB", "overlap": False}
    )
    assert tree.description == "data_parallel ×2 tree:4, 1 MiB buckets, no overlap"


def test_infeasible_memory_is_reported_not_raised() -> None:
    ctx = context(switch_cluster(2, memory="1 GiB"), chain_model(layers=4, params=1e8), batch=8)
    r = evaluate_plan(ctx, plan({"kind": "local"}))
    assert not r.fits
    assert r.bottleneck.startswith("memory on h0: needs")
    assert r.infeasible_reason is not None and "short by" in r.infeasible_reason
    assert r.peak_memory_bytes == pytest.approx(4e8 * 16 + 4 * 8 * 1e3)
    assert r.to_dict()["memory"][0]["shortfall_bytes"] == pytest.approx(r.peak_memory_bytes - 2**30)


def test_bottlenecks() -> None:
    slow = context(switch_cluster(4, bandwidth="100 MB/s"), chain_model(params=1e7), batch=8)
    r = evaluate_plan(slow, plan(_dp(4, overlap=False)))
    assert r.bottleneck.startswith("communication: link h")
    assert r.exposed_comm_s > r.compute_s and r.busiest_link is not None
    fast = context(switch_cluster(4, bandwidth="1 PB/s", latency="0 s"), chain_model(layers=4), batch=8)
    bubble = evaluate_plan(fast, plan(pipeline(["h0", "h1", "h2", "h3"], 1, 1)))
    assert bubble.bottleneck.startswith("the pipeline bubble (75%")
    compute = evaluate_plan(fast, plan(_dp(4)))
    assert compute.bottleneck.startswith("compute on h")


def test_busbw_of_an_exposed_ring_matches_the_link() -> None:
    ctx = context(
        switch_cluster(4, bandwidth="10 GB/s", latency="0 s", memory_bandwidth="1 PB/s"),
        chain_model(layers=2, params=5e7),
        batch=8,
    )
    r = evaluate_plan(ctx, plan(_dp(4, overlap=False, bucket_size="1 GiB")))
    (c,) = r.collectives
    assert c.count == 1 and c.size_bytes == 2e8 and c.num_ranks == 4
    assert c.busbw_Bps == pytest.approx(10e9, rel=1e-3)
    assert c.algbw_Bps == pytest.approx(10e9 * 4 / 6, rel=1e-3)


def test_describe_and_context() -> None:
    sc = scenario(switch_cluster(2), chain_model(), [{"kind": "local", "device": "h1"}])
    ctx = build_context(sc)
    assert ctx.network.devices == ("h0", "h1") and ctx.model.order[0] == "l0"
    assert describe_strategy(sc.plans[0].strategy) == "local on h1"
    mp = strategy(pipeline(["h0", "h1"], 1, 8, "1f1b"))
    assert describe_strategy(mp) == "model_parallel 2 stages, 8 mb 1f1b"


def test_plans_timed_unit_by_unit_use_the_contexts_simulator() -> None:
    """Plan may not import the engine: federated rounds are timed with the context's simulator,
    which build_context sets and evaluate_plan fills in for a context built by hand."""
    from parplan.api.evaluate import makespan_s
    from parplan.plan.strategies import expand

    ctx = context(switch_cluster(3), chain_model(), batch=8)
    fed = strategy({"kind": "federated", "num_clients": 2, "rounds": 2})
    with pytest.raises(PlanError, match="needs a simulator"):
        expand(ctx, fed)
    calls: list[int] = []

    def counting(graph: object, network: object) -> float:
        calls.append(1)
        return makespan_s(graph, network)  # type: ignore[arg-type]

    work = expand(replace(ctx, simulator=counting), fed)
    assert len(calls) == 2 and work.unit == "round"
    result = evaluate_plan(ctx, plan({"kind": "federated", "num_clients": 2, "rounds": 2}))
    assert result.run_time_s == pytest.approx(sum(work.quality["round_times_s"]))
    built = build_context(scenario(switch_cluster(2), chain_model(), [{"kind": "local"}]))
    assert built.simulator is makespan_s
