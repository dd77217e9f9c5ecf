"""Communication kernels take memory bandwidth from the memory-bound compute they overlap: the
share of the compute's rate a call takes (:func:`parplan.plan.compute.comm_compute_share`), the
memory-bound share of a block's kernels (:meth:`parplan.plan.sharded.blocks.Roofline.
memory_share`), the bus bytes of a call (:func:`parplan.plan.sharded.blocks.bus_bytes`) and the
layout clock putting them together."""

from __future__ import annotations

import pytest

from parplan.model.transformer import block_ops
from parplan.plan.compute import (
    COMM_HBM_BYTES_PER_BUS_BYTE,
    MEMORY_EFFICIENCY,
    comm_compute_share,
    comm_sm_share,
    op_seconds,
)
from parplan.plan.sharded.blocks import bus_bytes
from parplan.plan.sharded.clock import CollectiveClock
from parplan.plan.sharded.costs import block_memory_share, layout_plan, transformer_shape
from parplan.topology.network import DeviceInfo
from tests.plan.sharded.test_contention import _context, _fsdp


def _device(memory_Bps: float | None = 2e12, sm_count: int | None = 100) -> DeviceInfo:
    return DeviceInfo("g", 1e15, 0.5, 1.0, 8e10, memory_Bps, None, sm_count=sm_count)


def test_memory_traffic_slows_only_the_memory_bound_share() -> None:
    d = _device()
    c = comm_sm_share(d, 10)
    # 1 ms moving 3 x 425 MB: 75% of the 1.7 TB/s the kernels reach
    h = COMM_HBM_BYTES_PER_BUS_BYTE * 4.25e8 / (2e12 * MEMORY_EFFICIENCY) / 1e-3
    assert h == pytest.approx(0.75)
    assert comm_compute_share(d, 10, 1e-3, 4.25e8, 0.0) == c  # no memory-bound compute: the SMs only
    assert comm_compute_share(d, 10, 1e-3, 4.25e8, 1.0) == pytest.approx(h)  # all memory bound
    assert comm_compute_share(d, 10, 1e-3, 4.25e8, 0.3) == pytest.approx(c + 0.3 * (h - c))
    # a call whose traffic takes less than its SMs do: the SMs bound every kernel
    assert comm_compute_share(d, 10, 1.0, 4.25e8, 0.5) == pytest.approx(c)
    # never more than the whole bandwidth
    assert comm_compute_share(d, 10, 1e-6, 4.25e8, 1.0) == pytest.approx(1.0)


def test_calls_that_are_not_nccl_kernels_take_nothing() -> None:
    d = _device()
    assert comm_compute_share(d, 0, 1e-3, 4.25e8, 0.5) == 0.0  # send/recv, all-to-all
    assert comm_compute_share(d, 10, 0.0, 4.25e8, 0.5) == comm_sm_share(d, 10)
    assert comm_compute_share(_device(sm_count=None), 10, 1e-3, 4.25e8, 0.5) == pytest.approx(0.5 * 0.75)


def test_bus_bytes_are_nccl_tests_factors() -> None:
    assert bus_bytes("all_reduce", 100.0, 4) == pytest.approx(150.0)
    assert bus_bytes("all_gather", 100.0, 4) == pytest.approx(75.0)
    assert bus_bytes("reduce_scatter", 100.0, 8) == pytest.approx(87.5)
    assert bus_bytes("broadcast", 100.0, 8) == 100.0
    assert bus_bytes("all_reduce", 100.0, 1) == 0.0


def test_memory_share_is_the_non_gemm_kernels_seconds() -> None:
    ctx = _context()
    strategy = _fsdp()
    layout = layout_plan(ctx, strategy)
    info = ctx.network.device(layout.mesh.device({"pp": 0}))
    ops = block_ops(
        transformer_shape(ctx),
        microbatch=strategy.microbatch_size,
        tp=1,
        sp=False,
        cp=1,
        flash_attention=strategy.flash_attention,
        ep=1,
        capacity_factor=strategy.capacity_factor,
        layer=0,
        kernels=strategy.kernels,
    )
    assert strategy.recompute == "none"
    seconds = [
        op_seconds(info, op, strategy.dtype) + op_seconds(info, op, strategy.dtype, backward=True)
        for op in ops
    ]
    memory = sum(s for s, op in zip(seconds, ops, strict=True) if op.kind not in ("gemm", "attention"))
    share = block_memory_share(ctx, strategy, layout.mesh, info)
    assert 0.0 < share < 1.0
    assert share == pytest.approx(memory / sum(seconds))


def test_the_clock_takes_the_calls_memory_traffic_from_the_compute() -> None:
    ctx = _context()
    layout = layout_plan(ctx, _fsdp())
    clock = CollectiveClock(ctx, layout)
    gather = layout.param_gather[0][1]
    group = clock.group(gather.axis, 0)
    info = ctx.network.device(group[0])
    seconds = clock.seconds(gather, 0)
    memory_s = (
        3.0
        * (len(group) - 1)
        / len(group)
        * gather.size_bytes
        / (float(info.memory_bandwidth_Bps or 0) * 0.85)
    )
    c, f = clock.sm_share(gather, 0), clock.memory_share(0)
    assert memory_s / seconds > c  # the ring's traffic takes more of the bandwidth than its SMs
    assert clock.compute_share(gather, 0) == pytest.approx(c + f * (memory_s / seconds - c))
    assert clock.stolen([gather], 0) == pytest.approx(seconds * (c + f * (memory_s / seconds - c)))


@pytest.mark.parametrize("recompute", ["none", "selective", "full", "op"])
def test_block_figures_and_memory_share_read_from_one_roofline_equal_fresh_ones(recompute: str) -> None:
    """One :class:`Roofline` handed to both (the search's memo) gives what each computes alone."""
    from parplan.plan.sharded.blocks import Roofline
    from parplan.plan.sharded.costs import block_figures

    ctx = _context()
    strategy = _fsdp().model_copy(update={"recompute": recompute})
    layout = layout_plan(ctx, strategy)
    info = ctx.network.device(layout.mesh.devices[0])
    roof = Roofline(ctx, strategy, transformer_shape(ctx), info)
    share = block_memory_share(ctx, strategy, layout.mesh, info, roof=roof)  # the ops worked out here
    figures = block_figures(ctx, strategy, layout.mesh, info, roof=roof)  # and read back here
    assert figures == block_figures(ctx, strategy, layout.mesh, info)
    assert share == block_memory_share(ctx, strategy, layout.mesh, info)
