"""Data-parallel plans: batch split, buckets, overlap, all-reduce lowering, 2-D plans."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.api.evaluate import evaluate_plan
from parplan.errors import InfeasiblePlanError, PlanError
from parplan.plan.compute import backward_seconds, forward_seconds, optimizer_seconds
from parplan.plan.strategies.data_parallel import expand, gradient_buckets, round_robin_sizes, shard_sizes
from parplan.taskgraph import COMPUTE, TRANSFER
from tests.plan.strategy_helpers import (
    chain_model,
    context,
    dgx_cluster,
    hetero_cluster,
    pipeline,
    plan,
    strategy,
    switch_cluster,
)


def dp(n: int, **agg: Any) -> dict[str, Any]:
    return {"kind": "data_parallel", "num_replicas": n, "aggregation": agg}


def test_one_replica_equals_local() -> None:
    for jitter in (0.0, 0.2):
        ctx = context(switch_cluster(4), chain_model(layers=6), batch=24, straggler_jitter=jitter, seed=3)
        local = evaluate_plan(ctx, plan({"kind": "local"}))
        one = evaluate_plan(ctx, plan(dp(1)))
        assert one.step_time_s == pytest.approx(local.step_time_s, rel=1e-12)
        assert one.compute_s == pytest.approx(local.compute_s, rel=1e-12)
        assert one.memory == local.memory
        assert one.collectives == () and one.exposed_comm_s == 0


@given(
    n=st.integers(1, 8), batch=st.integers(8, 200), layers=st.integers(1, 6), mb=st.sampled_from([0.5, 4, 64])
)
@settings(max_examples=40, deadline=None)
def test_step_never_below_compute_over_replicas(n: int, batch: int, layers: int, mb: float) -> None:
    ctx = context(switch_cluster(8), chain_model(layers=layers), batch=batch)
    local = evaluate_plan(ctx, plan({"kind": "local"}))
    r = evaluate_plan(ctx, plan(dp(n, bucket_size=f"{mb} MiB")))
    assert r.step_time_s >= local.compute_s / n * (1 - 1e-12)
    assert r.compute_s + r.exposed_comm_s + r.idle_s == pytest.approx(r.step_time_s)


@given(
    bucket_mib=st.floats(0.0, 40.0),
    n=st.integers(2, 6),
    algorithm=st.sampled_from(["ring", "tree:2", "centralized", "halving_doubling", "double_binary_tree"]),
)
@settings(max_examples=40, deadline=None)
def test_overlap_never_makes_a_step_slower(bucket_mib: float, n: int, algorithm: str) -> None:
    ctx = context(switch_cluster(8, bandwidth="10 GB/s"), chain_model(layers=8, params=2e6), batch=32)
    kw = {"algorithm": algorithm, "bucket_size": f"{bucket_mib} MiB"}
    on = evaluate_plan(ctx, plan(dp(n, overlap=True, **kw)))
    off = evaluate_plan(ctx, plan(dp(n, overlap=False, **kw)))
    assert on.step_time_s <= off.step_time_s * (1 + 1e-9)
    assert on.exposed_comm_s <= off.exposed_comm_s * (1 + 1e-9) + 1e-12


def test_overlap_hides_communication_behind_backward() -> None:
    ctx = context(
        switch_cluster(4, bandwidth="10 GB/s"), chain_model(layers=8, params=4e6, flops=2e10), batch=64
    )
    on = evaluate_plan(ctx, plan(dp(4, bucket_size="8 MiB", overlap=True)))
    off = evaluate_plan(ctx, plan(dp(4, bucket_size="8 MiB", overlap=False)))
    assert off.hidden_comm_s == pytest.approx(0.0, abs=1e-6)
    assert on.hidden_comm_s > 0.5 * off.exposed_comm_s
    assert on.step_time_s < off.step_time_s
    # without overlap the whole all-reduce is exposed: ring 2(p-1)/p n/B plus latencies and reductions
    n_bytes = 8 * 4e6 * 2
    assert off.exposed_comm_s >= 2 * 3 / 4 * n_bytes / 10e9
    assert off.exposed_comm_s == pytest.approx(off.collectives[0].time_s, rel=1e-6)


def test_buckets_follow_reverse_layer_order_and_size() -> None:
    ctx = context(switch_cluster(2), chain_model(layers=5, params=1e6))  # 2 MB of gradients per layer
    buckets = gradient_buckets(ctx, ctx.model.order, 3e6)
    assert [b.nodes for b in buckets] == [("l4", "l3"), ("l2", "l1"), ("l0",)]
    assert [b.size_bytes for b in buckets] == [4e6, 4e6, 2e6]
    assert len(gradient_buckets(ctx, ctx.model.order, 0)) == 5
    assert len(gradient_buckets(ctx, ctx.model.order, 1e12)) == 1
    work = expand(ctx, strategy(dp(2, bucket_size=3e6)))
    assert [c.size_bytes for c in work.collectives] == [4e6, 4e6, 2e6]
    assert all(c.num_ranks == 2 and c.algorithm == "auto=ring/simple" for c in work.collectives)


def test_bucket_all_reduce_waits_for_its_gradients_only_with_overlap() -> None:
    ctx = context(switch_cluster(2), chain_model(layers=4, params=1e6))
    from parplan.engine.simulate import simulate

    for overlap in (True, False):
        work = expand(ctx, strategy(dp(2, bucket_size=2e6, overlap=overlap)))
        g = work.graph
        sim = simulate(g, ctx.network)
        bwd_end = {
            g.labels[g.label[t]]: sim.end_s[t]
            for t in range(g.num_tasks)
            if g.kind[t] == COMPUTE and g.device[t] == 0 and g.categories[g.category[t]] == "backward"
        }
        first = work.collectives[0]
        tr = [t for t in range(first.first_task, first.last_task) if g.kind[t] == TRANSFER]
        start = min(sim.start_s[tr])
        if overlap:  # bucket 0 holds l3 only: it starts right after l3's backward
            assert start == pytest.approx(max(bwd_end["bwd l3"], sim.end_s[_bwd(g, 1, "l3")]))
            assert start < bwd_end["bwd l0"]
        else:
            assert start >= bwd_end["bwd l0"]


def _bwd(g: Any, dev: int, node: str) -> int:
    return next(t for t in range(g.num_tasks) if g.device[t] == dev and g.labels[g.label[t]] == f"bwd {node}")


def test_reduce_modes_cost_the_same() -> None:
    ctx = context(switch_cluster(4), chain_model(), batch=16)
    times = {
        m: evaluate_plan(ctx, plan(dp(4, reduce=m))).step_time_s
        for m in ("mean", "sum", "weighted_by_samples")
    }
    assert len(set(times.values())) == 1


def test_round_robin_and_by_speed_shards() -> None:
    assert round_robin_sizes(10, 4) == [3, 3, 2, 2]
    ctx = context(hetero_cluster([1.0, 1.0, 2.0]), chain_model(layers=4, params=1e4, flops=1e10), batch=40)
    rr = plan({"kind": "data_parallel", "num_replicas": 3})
    fast = plan({"kind": "data_parallel", "num_replicas": 3, "batch_split": "by_speed"})
    assert shard_sizes(ctx, strategy(rr.strategy.model_dump()), [1, 1, 2]) == [14, 13, 13]
    assert shard_sizes(ctx, strategy(fast.strategy.model_dump()), [1, 1, 2]) == [10, 10, 20]
    work = expand(ctx, strategy(fast.strategy.model_dump()))
    assert work.graph.meta["shards"] == [10, 10, 20]
    r_rr, r_fast = evaluate_plan(ctx, rr), evaluate_plan(ctx, fast)
    assert r_fast.step_time_s < r_rr.step_time_s
    assert r_rr.critical_device in ("h0", "h1")  # the slow devices with 14 and 13 samples


def test_hierarchical_groups_by_node() -> None:
    ctx = context(dgx_cluster(2, 4), chain_model(layers=2, params=1e6), batch=16)
    work = expand(ctx, strategy(dp(8, algorithm="hierarchical", bucket_size="1 GiB")))
    g = work.graph
    tr = np.flatnonzero(g.kind == TRANSFER)
    cross = [t for t in tr if g.devices[g.device[t]][:2] != g.devices[g.dst[t]][:2]]
    # only the node leaders talk across nodes
    assert {(g.devices[g.device[t]], g.devices[g.dst[t]]) for t in cross} <= {
        ("n0.d0", "n1.d0"),
        ("n1.d0", "n0.d0"),
    }
    assert cross


def test_errors() -> None:
    ctx = context(switch_cluster(4), chain_model(), batch=3)
    with pytest.raises(InfeasiblePlanError, match="3 samples cannot feed 4 replicas"):
        expand(ctx, strategy(dp(4)))
    with pytest.raises(PlanError, match="exceeds"):
        expand(ctx, strategy(dp(5)))
    with pytest.raises(PlanError, match="devices lists 1 devices for 2 replicas"):
        expand(ctx, strategy({"kind": "data_parallel", "num_replicas": 2, "devices": ["h1"]}))


def test_explicit_devices_and_memory() -> None:
    ctx = context(switch_cluster(4), chain_model(layers=3, params=1e6, activation=100.0), batch=10)
    work = expand(
        ctx,
        strategy(
            {
                "kind": "data_parallel",
                "num_replicas": 2,
                "devices": ["h3", "h1"],
                "aggregation": {"bucket_size": "1 MiB"},
            }
        ),
    )
    assert work.devices == ("h3", "h1")
    for m in work.memory:
        assert m.params_bytes == 6e6 and m.optimizer_bytes == 36e6
        assert m.activations_bytes == pytest.approx(3 * 100 * 5)
        assert m.buffers_bytes == 2e6  # one bucket: each layer's 2 MB of gradients closes a 1 MiB bucket


def two_d(replicas: int, workers: list[str], mb: int, schedule: str = "1f1b", **kw: Any) -> dict[str, Any]:
    return {
        "kind": "data_parallel",
        "num_replicas": replicas,
        "replica": pipeline(workers, 2, mb, schedule),
        **kw,
    }


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_2d_with_one_replica_equals_its_pipeline(schedule: str) -> None:
    ctx = context(switch_cluster(8), chain_model(layers=8), batch=32)
    mp = evaluate_plan(ctx, plan(pipeline(["h0", "h1", "h2", "h3"], 2, 4, schedule)))
    one = evaluate_plan(ctx, plan(two_d(1, ["h0", "h1", "h2", "h3"], 4, schedule)))
    assert one.step_time_s == pytest.approx(mp.step_time_s, rel=1e-12)
    assert one.bubble_fraction == pytest.approx(mp.bubble_fraction, rel=1e-12)
    assert one.memory == mp.memory


def test_2d_replicas_and_stage_all_reduces() -> None:
    ctx = context(dgx_cluster(2, 4), chain_model(layers=4, params=1e6, flops=1e10), batch=32)
    strat = two_d(4, ["n0.d0", "n0.d1"], 4)
    work = expand(ctx, strategy(strat))
    assert set(work.devices) == {f"n{i}.d{j}" for i in range(2) for j in range(4)}
    by_stage = {c.label: c for c in work.collectives}
    assert set(by_stage) == {"allreduce n0.d0 bucket0", "allreduce n0.d1 bucket0"}
    g = work.graph
    for c in work.collectives:
        ends = {g.devices[g.device[t]] for t in range(c.first_task, c.last_task) if g.kind[t] == TRANSFER}
        want = (
            {"n0.d0", "n0.d2", "n1.d0", "n1.d2"}
            if "n0.d0" in c.label
            else {"n0.d1", "n0.d3", "n1.d1", "n1.d3"}
        )
        assert ends == want
        assert c.num_ranks == 4 and c.size_bytes == 2 * 2e6
    r = evaluate_plan(ctx, plan(strat))
    assert r.bubble_fraction is not None and r.compute_s + r.exposed_comm_s + r.idle_s == pytest.approx(
        r.step_time_s
    )
    # each replica pipelines 8 samples in 4 micro-batches of 2
    f = forward_seconds(ctx, "n0.d0", ["l0", "l1"], 2)
    b = backward_seconds(ctx, "n0.d0", ["l0", "l1"], 2)
    assert r.compute_s == pytest.approx(4 * (f + b) + optimizer_seconds(ctx, "n0.d0", 2e6))


def test_deterministic_under_a_seed() -> None:
    def run(seed: int) -> dict[str, Any]:
        ctx = context(switch_cluster(4), chain_model(), batch=16, straggler_jitter=0.1, seed=seed)
        return evaluate_plan(ctx, plan(dp(4, algorithm="tree:2"))).to_dict()

    assert run(7) == run(7)
    assert run(7)["step_time_s"] != run(8)["step_time_s"]


def test_aggregation_defaults_to_auto_which_times_as_the_ring_without_a_gpu() -> None:
    """``auto`` is the default aggregation; on a cluster that names no GPU architecture it is the
    ring with NCCL's Simple protocol, so only the label differs from ``ring``."""
    ctx = context(dgx_cluster(), chain_model(layers=4), batch=64)
    default = evaluate_plan(ctx, plan(dp(16)))
    ring = evaluate_plan(ctx, plan(dp(16, algorithm="ring")))
    assert default.collectives[0].algorithm == "auto=ring/simple" and ring.collectives[0].algorithm == "ring"
    assert default.step_time_s == ring.step_time_s
    assert default.exposed_comm_s == ring.exposed_comm_s


def test_auto_aggregation_runs_what_nccl_picks_per_bucket() -> None:
    """``auto`` (the default) asks NCCL's tuner per bucket size on the system the replicas form,
    and each bucket runs that schedule with its protocol and per-call cost, as ``parplan
    collective`` times it."""
    from pathlib import Path

    from parplan.config.loader import load_cluster

    root = Path(__file__).resolve().parents[2]
    cluster = load_cluster(root / "validation" / "clusters" / "hgx-h100-8gpu.yaml")
    ctx = context(cluster, chain_model(layers=6), batch=16)
    auto = evaluate_plan(ctx, plan(dp(8, bucket_size="64 MiB")))
    labels = {c.algorithm for c in auto.collectives}
    assert labels and all(label.startswith("auto=") for label in labels), labels
    forced = evaluate_plan(ctx, plan(dp(8, algorithm="auto", bucket_size="64 MiB")))
    assert {c.algorithm for c in forced.collectives} == labels
    assert forced.step_time_s == auto.step_time_s
    # Without a GPU architecture there is no tuner: the ring with Simple, named so.
    plain = context(switch_cluster(4), chain_model(layers=6), batch=24)
    assert {c.algorithm for c in evaluate_plan(plain, plan(dp(4))).collectives} == {"auto=ring/simple"}
