"""The closed-form step of sharded plans against hand-computed cases."""

from __future__ import annotations

import pytest

from parplan.api.sharded_analytic import evaluate_sharded
from parplan.model.transformer import model_flops_per_token
from parplan.plan.sharded.clock import CollectiveClock
from parplan.plan.sharded.costs import CommCall, layout_plan
from tests.plan.sharded.helpers import context, gpt, sharded


def test_one_device_is_its_compute_and_optimizer() -> None:
    ctx = context(gpt(layers=4), batch=4)
    plan = sharded(dp=1)
    est = evaluate_sharded(ctx, plan)
    (chunk,) = est.layout.chunks[0]
    assert est.layout.microbatches == 4
    want = 4 * (chunk.forward_s + chunk.backward_s) + est.layout.optimizer_s[0]
    assert est.step_time_s == pytest.approx(want)
    assert est.bubble_s == 0 and est.p2p_s == 0
    assert est.bound.startswith("compute-bound")


def test_two_stages_pay_one_bubble_and_the_activation_hops() -> None:
    ctx = context(gpt(layers=4), batch=8, nodes=1, per_node=2)
    est = evaluate_sharded(ctx, sharded(pp=2, dp=1))
    layout, m = est.layout, est.layout.microbatches
    t = max(c.forward_s + c.backward_s for row in layout.chunks for c in row)
    hop = CollectiveClock(ctx, layout).seconds(CommCall("send_recv", layout.p2p_bytes, "pp", True, "p2p"), 0)
    assert est.bubble_s == pytest.approx(t)  # (pp - 1) / v chunk times
    assert est.p2p_s == pytest.approx(2 * hop + 2 * m * hop)  # fill/drain + plain 1F1B's steady state
    pipeline = (m + 1) * t + est.p2p_s
    first_stage = pipeline + layout.optimizer_s[0] + est.stages[0].step_sync_s
    assert est.step_time_s == pytest.approx(max(first_stage, est.stages[1].end_s))
    assert est.stages[0].step_sync_s > 0  # the tied embeddings' all-reduce between the two stages


@pytest.mark.parametrize("overlap", [True, False])
def test_gradient_buckets_hide_behind_the_last_backward_only_with_overlap(overlap: bool) -> None:
    ctx = context(gpt(layers=4), batch=4, nodes=1, per_node=2)
    plan = sharded(dp=2, aggregation={"overlap": overlap, "bucket_size": "4MiB"})
    est = evaluate_sharded(ctx, plan)
    layout = est.layout
    clock = CollectiveClock(ctx, layout)
    times = [clock.seconds(c, 0) for c in layout.grad_sync[0]]
    (chunk,) = layout.chunks[0]
    assert len(times) > 1
    compute = layout.microbatches * (chunk.forward_s + chunk.backward_s)
    window = chunk.backward_s if overlap else 0.0
    exposed = times[-1] + max(0.0, sum(times) - times[-1] - window)
    assert est.stages[0].dp_exposed_s == pytest.approx(exposed)
    assert est.step_time_s == pytest.approx(compute + exposed + layout.optimizer_s[0])


def test_mfu_is_model_flops_over_time_gpus_and_peak() -> None:
    ctx = context(gpt(layers=4), batch=16)
    est = evaluate_sharded(ctx, sharded(tp=2, recompute="full"))
    shape = est.layout.shape
    flops = model_flops_per_token(shape) * 16 * shape.sequence_length
    assert est.model_flops_per_step == pytest.approx(flops)
    assert est.mfu == pytest.approx(flops / est.step_time_s / 16 / 312e12)
    assert est.hfu is not None and est.hfu > est.mfu


def test_layout_shared_with_the_expander() -> None:
    ctx = context(gpt(layers=4), batch=16)
    plan = sharded(tp=4, pp=2, sequence_parallel=True)
    assert evaluate_sharded(ctx, plan).layout.chunks == layout_plan(ctx, plan).chunks
