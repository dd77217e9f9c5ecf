"""``framework: deepspeed`` on a sharded plan: DeepSpeed's BF16_Optimizer adds every micro-batch's
gradients to fp32 copies and all-reduces them under ZeRO-1; Megatron (the default) does neither.
Both send a stage's activation split over the TP group."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from parplan.plan.compute import MEMORY_EFFICIENCY, memory_bandwidth_Bps
from parplan.plan.sharded.costs import layout_plan
from tests.plan.sharded.helpers import context, gpt, sharded


def test_megatron_is_the_default() -> None:
    assert sharded(tp=2).framework == "megatron"


def test_deepspeed_partitions_the_activation_over_tp_as_megatron_does() -> None:
    # DeepSpeed's PipelineEngine: is_pipe_partitioned with model parallelism (PartitionedTensor)
    ctx = context(gpt(layers=4), batch=16)
    megatron = layout_plan(ctx, sharded(tp=4, pp=2, dp=2))
    deepspeed = layout_plan(ctx, sharded(tp=4, pp=2, dp=2, framework="deepspeed"))
    shape = megatron.shape
    assert deepspeed.p2p_bytes == megatron.p2p_bytes == shape.sequence_length * shape.hidden * 2.0 / 4


def test_deepspeed_accumulates_each_micro_batch_in_fp32() -> None:
    ctx = context(gpt(layers=4), batch=16)
    megatron = layout_plan(ctx, sharded(tp=2, pp=2, dp=2))
    deepspeed = layout_plan(ctx, sharded(tp=2, pp=2, dp=2, framework="deepspeed"))
    rate = memory_bandwidth_Bps(ctx.network.device(ctx.network.devices[0])) * MEMORY_EFFICIENCY
    for row_m, row_d in zip(megatron.chunks, deepspeed.chunks, strict=True):
        for m, d in zip(row_m, row_d, strict=True):
            # cast: read the bf16 gradient, write fp32; add_: read two fp32 tensors, write one
            assert d.backward_s - m.backward_s == pytest.approx(m.params * (2.0 + 16.0) / rate)
            assert d.forward_s == m.forward_s and d.recompute_s == m.recompute_s


def test_deepspeed_zero1_all_reduces_gradients_and_gathers_parameters() -> None:
    ctx = context(gpt(layers=4), batch=16)
    bf16_optimizer = layout_plan(ctx, sharded(dp=16, zero=1, framework="deepspeed"))
    assert {c.collective for c in bf16_optimizer.grad_sync[0]} == {"all_reduce"}
    assert {c.collective for c in bf16_optimizer.param_sync[0]} == {"all_gather"}
    megatron = layout_plan(ctx, sharded(dp=16, zero=1))
    assert {c.collective for c in megatron.grad_sync[0]} == {"reduce_scatter"}
    zero2 = layout_plan(ctx, sharded(dp=16, zero=2, framework="deepspeed"))
    assert {c.collective for c in zero2.grad_sync[0]} == {"reduce_scatter"}


def test_deepspeed_does_not_run_fsdp() -> None:
    with pytest.raises(ValidationError, match="DeepSpeed shards with zero"):
        sharded(dp=16, fsdp="full_shard", framework="deepspeed")


def test_fsdp_steps_pytorchs_foreach_adamw_and_zero_a_fused_adam() -> None:
    from parplan.plan.compute import foreach_adamw_bytes_per_param, optimizer_bytes_moved_per_param
    from parplan.plan.sharded.sync import optimizer_params

    ctx = context(gpt(layers=4), batch=16)
    rate = memory_bandwidth_Bps(ctx.network.device(ctx.network.devices[0]))
    spec = ctx.model_spec
    g = spec.bytes_per_grad  # clipping: torch's norm, then its scale of every gradient; Megatron's norm
    for plan, per_param in (
        (sharded(dp=16, fsdp="full_shard"), foreach_adamw_bytes_per_param(spec) + 3 * g),
        (sharded(dp=16, zero=3), optimizer_bytes_moved_per_param(spec) + g),
    ):
        layout = layout_plan(ctx, plan)
        owned = optimizer_params(plan, layout.units[0], 16, 16, 16)
        assert layout.optimizer_s[0] == pytest.approx(owned * per_param / rate)
    # mixed-precision defaults (2 + 2 + 12): 4 x 2 + 3 x 2 + 14 x 6 against the fused 2 + 4 + 24
    assert foreach_adamw_bytes_per_param(spec) == 98.0
    assert optimizer_bytes_moved_per_param(spec) == 30.0
