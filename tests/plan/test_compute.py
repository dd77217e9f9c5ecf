"""The compute model: FLOPs to seconds, backward = 2 x forward, optimizer by bytes, seeded jitter."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.plan.compute import (
    BACKWARD_TO_FORWARD,
    DEFAULT_FLOP_PER_BYTE,
    backward_seconds,
    forward_flops,
    forward_seconds,
    jitter_factor,
    optimizer_bytes_moved_per_param,
    optimizer_seconds,
    step_compute,
)
from tests.plan.strategy_helpers import chain_model, context, switch_cluster


def test_forward_is_flops_over_effective_rate() -> None:
    ctx = context(switch_cluster(1), chain_model(layers=3, flops=2e9))
    # 3 layers x 2 GFLOP x 10 samples at 100 TFLOP/s x 0.5
    assert forward_flops(ctx.model, ctx.model.order, 10) == pytest.approx(6e10)
    assert forward_seconds(ctx, "h0", ctx.model.order, 10) == pytest.approx(6e10 / 5e13)


def test_backward_is_twice_forward() -> None:
    ctx = context(switch_cluster(1), chain_model())
    f = forward_seconds(ctx, "h0", ["l1", "l2"], 7)
    assert backward_seconds(ctx, "h0", ["l1", "l2"], 7) == pytest.approx(BACKWARD_TO_FORWARD * f)
    assert BACKWARD_TO_FORWARD == 2.0


def test_speed_factor_scales_compute() -> None:
    slow = context(switch_cluster(1, speed_factor=0.5), chain_model())
    fast = context(switch_cluster(1), chain_model())
    assert forward_seconds(slow, "h0", ["l0"], 4) == pytest.approx(2 * forward_seconds(fast, "h0", ["l0"], 4))


def test_optimizer_is_memory_bound_on_the_state_bytes() -> None:
    ctx = context(switch_cluster(1), chain_model(params=1e6))
    # Adam mixed precision: grad 2 + weights read/write 2x2 + state read/write 2x12 = 30 bytes per param
    assert optimizer_bytes_moved_per_param(ctx.model_spec) == 30.0
    assert optimizer_seconds(ctx, "h0", 4e6) == pytest.approx(4e6 * 30 / 2e12)
    assert optimizer_seconds(ctx, "h0", 0) == 0.0


def test_optimizer_without_memory_bandwidth_uses_machine_balance() -> None:
    ctx = context(switch_cluster(1, memory_bandwidth=None), chain_model())
    assert optimizer_seconds(ctx, "h0", 1e6) == pytest.approx(1e6 * 30 / (100e12 / DEFAULT_FLOP_PER_BYTE))


def test_step_compute_totals() -> None:
    ctx = context(switch_cluster(1), chain_model(layers=4, params=1e6, flops=1e9))
    t = step_compute(ctx, "h0", None, 8)
    assert t.forward_s == pytest.approx(4e9 * 8 / 5e13)
    assert t.backward_s == pytest.approx(2 * t.forward_s)
    assert t.total_s == pytest.approx(t.forward_s + t.backward_s + t.optimizer_s)


@given(seed=st.integers(0, 2**31), jitter=st.floats(0.001, 0.9), step=st.integers(0, 100))
@settings(max_examples=50, deadline=None)
def test_jitter_is_seeded_and_bounded(seed: int, jitter: float, step: int) -> None:
    a = jitter_factor(seed, jitter, "n0.d3", step)
    assert a == jitter_factor(seed, jitter, "n0.d3", step)
    assert 1 - jitter <= a <= 1 + jitter


def test_jitter_differs_by_device_and_step_and_is_off_by_default() -> None:
    values = {jitter_factor(3, 0.2, d, s) for d in ("h0", "h1", "h2") for s in range(3)}
    assert len(values) == 9
    assert jitter_factor(3, 0.0, "h0", 0) == 1.0
    jittered = context(switch_cluster(2), chain_model(), straggler_jitter=0.1, seed=5)
    plain = context(switch_cluster(2), chain_model())
    ratio = forward_seconds(jittered, "h1", ["l0"], 4) / forward_seconds(plain, "h1", ["l0"], 4)
    assert ratio == pytest.approx(jitter_factor(5, 0.1, "h1", 0))
    assert ratio != 1.0
