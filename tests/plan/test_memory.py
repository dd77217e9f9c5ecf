"""The memory model: state per parameter, activations held, in-flight micro-batches, shortfalls."""

from __future__ import annotations

import pytest

from parplan.errors import InfeasiblePlanError
from parplan.plan.base import MemoryBreakdown
from parplan.plan.memory import (
    combine,
    infeasible_message,
    inflight_microbatches,
    model_state_bytes,
    plan_memory,
    require_fits,
    saved_activation_bytes,
)
from tests.plan.strategy_helpers import chain_model, context, switch_cluster


def test_model_state_uses_the_spec_byte_sizes() -> None:
    spec = chain_model()
    assert model_state_bytes(spec, 1e9) == (2e9, 2e9, 12e9)
    fp32 = spec.model_copy(
        update={"bytes_per_param": 4.0, "bytes_per_grad": 4.0, "optimizer_bytes_per_param": 8.0}
    )
    assert model_state_bytes(fp32, 10) == (40.0, 40.0, 80.0)


def test_saved_activations_default_to_output_activation() -> None:
    ctx = context(switch_cluster(1), chain_model(layers=3, activation=100.0))
    assert saved_activation_bytes(ctx.model, ctx.model.order, 5) == pytest.approx(3 * 100 * 5)
    ctx2 = context(switch_cluster(1), chain_model(layers=3, activation=100.0, saved=700.0))
    assert saved_activation_bytes(ctx2.model, ["l0"], 2) == pytest.approx(1400.0)


@pytest.mark.parametrize(("m", "s", "i", "want"), [(8, 4, 0, 4), (8, 4, 3, 1), (2, 4, 0, 2), (8, 1, 0, 1)])
def test_1f1b_holds_at_most_s_minus_stage(m: int, s: int, i: int, want: int) -> None:
    assert inflight_microbatches("1f1b", m, s, i) == want
    assert inflight_microbatches("gpipe", m, s, i) == m


def test_plan_memory_and_fit() -> None:
    ctx = context(switch_cluster(1, memory="10 GiB"), chain_model())
    m = plan_memory(ctx, "h0", params=1e8, activations_bytes=2**30, buffers_bytes=2**20)
    assert m.params_bytes == 2e8 and m.grads_bytes == 2e8 and m.optimizer_bytes == 12e8
    assert m.total_bytes == pytest.approx(16e8 + 2**30 + 2**20)
    assert m.capacity_bytes == 10 * 2**30
    assert m.fits and m.shortfall_bytes == 0
    require_fits([m])


def test_shortfall_is_reported_with_figures() -> None:
    big = MemoryBreakdown(device="h3", capacity_bytes=2**30, params_bytes=3 * 2**30)
    ok = MemoryBreakdown(device="h0", capacity_bytes=2**30, params_bytes=2**20)
    assert big.shortfall_bytes == 2 * 2**30
    msg = infeasible_message([ok, big])
    assert msg is not None
    assert "h3 needs 3 GiB of 1 GiB (short by 2 GiB" in msg
    assert "h0" not in msg
    assert infeasible_message([ok]) is None
    with pytest.raises(InfeasiblePlanError, match="short by 2 GiB"):
        require_fits([ok, big])


def test_combine_sums_per_device() -> None:
    a = MemoryBreakdown(device="h0", capacity_bytes=100, params_bytes=10, activations_bytes=5)
    b = MemoryBreakdown(device="h1", capacity_bytes=100, params_bytes=1)
    c = MemoryBreakdown(device="h0", capacity_bytes=100, params_bytes=20, buffers_bytes=3)
    out = combine([a, b, c])
    assert [m.device for m in out] == ["h0", "h1"]
    assert out[0].total_bytes == 38 and out[0].params_bytes == 30
