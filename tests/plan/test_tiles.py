"""The last wave of a causal FlashAttention-2 launch (:mod:`parplan.plan.tiles`): unequal tiles in
launch order on the SMs, and the roofline stretching the attention kernel by it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.model.transformer import TransformerShape, attention_ops
from parplan.plan.compute import KERNEL_LAUNCH_S, op_seconds
from parplan.plan.tiles import _Launch, causal_tile_waves
from parplan.topology.network import DeviceInfo


def _by_hand(groups: int, tiles: int, sms: int, descending: bool) -> float:
    """The same schedule without a heap: each tile to the SM that is free first (lowest index on
    a tie), in launch order."""
    free = [0] * sms
    for _ in range(groups):
        for t in range(tiles):
            work = tiles - t if descending else t + 1
            i = min(range(sms), key=lambda j: (free[j], j))
            free[i] += work
    return max(free) / (groups * tiles * (tiles + 1) / 2 / sms)


@settings(max_examples=40, deadline=None)
@given(groups=st.integers(1, 12), tiles=st.integers(1, 24), sms=st.integers(1, 20), descending=st.booleans())
def test_makespan_of_the_tiles_in_launch_order(groups: int, tiles: int, sms: int, descending: bool) -> None:
    got = causal_tile_waves(groups, tiles, sms, descending=descending)
    assert got >= 1.0
    if groups * tiles <= sms:
        assert got == 1.0  # one wave: the roofline's size curve covers a launch too small to fill it
    else:
        assert got == pytest.approx(max(1.0, _by_hand(groups, tiles, sms, descending)))


def _heap_form(groups: int, tiles: int, sms: int, descending: bool) -> float:
    """The schedule tile by tile with a heap of free times, as the module computed it before it
    kept a pattern's cycle (:class:`_Launch`): every tile of every group."""
    import heapq

    if sms <= 0 or groups * tiles <= sms:
        return 1.0
    order = range(tiles, 0, -1) if descending else range(1, tiles + 1)
    free = [0] * sms
    end = 0
    for _ in range(groups):
        for work in order:
            finish = free[0] + work
            heapq.heapreplace(free, finish)
            end = max(end, finish)
    ideal = groups * tiles * (tiles + 1) / 2.0 / sms
    return max(1.0, end / ideal)


@settings(max_examples=150, deadline=None)
@given(
    groups=st.lists(st.integers(1, 700), min_size=1, max_size=4),
    tiles=st.integers(1, 40),
    sms=st.integers(1, 140),
    descending=st.booleans(),
)
def test_the_kept_cycle_gives_the_floats_of_every_tile_scheduled(
    groups: list[int], tiles: int, sms: int, descending: bool
) -> None:
    launch = _Launch(tiles, sms, descending)  # one kept schedule asked in any order
    for g in groups:
        ideal = g * tiles * (tiles + 1) / 2.0 / sms
        assert g * tiles <= sms or max(1.0, launch.makespan(g) / ideal) == _heap_form(
            g, tiles, sms, descending
        )
        assert causal_tile_waves(g, tiles, sms, descending=descending) == _heap_form(
            g, tiles, sms, descending
        )


@pytest.mark.parametrize(("tiles", "sms"), [(32, 108), (16, 108), (64, 132), (64, 108), (128, 108)])
@pytest.mark.parametrize("descending", [False, True])
def test_the_searchs_launches_equal_every_tile_scheduled(tiles: int, sms: int, descending: bool) -> None:
    launch = _Launch(tiles, sms, descending)
    for groups in (1024, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1000, 2048):
        expected = _heap_form(groups, tiles, sms, descending)
        ideal = groups * tiles * (tiles + 1) / 2.0 / sms
        assert max(1.0, launch.makespan(groups) / ideal) == expected
    assert launch.cycle is not None and len(launch.ends) < 300  # the cycle, not every group


def test_the_forward_order_leaves_a_longer_tail_and_more_waves_a_shorter_one() -> None:
    forward = causal_tile_waves(64, 64, 108, descending=False)  # Llama 3 70B, one sequence of 8k
    backward = causal_tile_waves(64, 64, 108, descending=True)
    assert 1.0 < backward < forward < 1.05
    assert causal_tile_waves(1024, 64, 108, descending=False) < forward


def _llama() -> TransformerShape:
    return TransformerShape(
        layers=1, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, vocabulary=128256,
        sequence_length=8192, activation="swiglu", tie_embeddings=False, experts=0, top_k=1,
        moe_ffn_hidden=28672, moe_every=1, bytes_per_element=2.0, norm="rmsnorm", bias=False,
        qkv_bias=False, position="rope", dropout=False,
    )  # fmt: skip


def test_the_attention_kernel_carries_its_grid_and_the_roofline_stretches_it() -> None:
    ops = attention_ops(_llama(), microbatch=1, tp=2, cp=1, flash_attention=True, kernels="eager")
    (attention,) = (op for op in ops if op.kind == "attention")
    assert attention.causal_grid == (32, 64)  # 1 sequence x 32 local heads, 8192 / 128 tiles
    ring = attention_ops(_llama(), microbatch=1, tp=2, cp=2, flash_attention=True, kernels="eager")
    assert all(op.causal_grid is None for op in ring)  # context parallelism: not this launch
    a100 = DeviceInfo("a", 312e12, 0.5, 1.0, 8e10, 2.039e12, None, sm_count=108)
    flat = replace(attention, causal_grid=None)
    for backward in (False, True):
        stretched = op_seconds(a100, attention, "bf16", backward=backward)
        plain = op_seconds(a100, flat, "bf16", backward=backward)
        tail = causal_tile_waves(32, 64, 108, descending=backward)
        assert tail > 1.0
        assert stretched - KERNEL_LAUNCH_S == pytest.approx((plain - KERNEL_LAUNCH_S) * tail)
    no_sms = replace(a100, sm_count=None)
    assert op_seconds(no_sms, attention, "bf16") == op_seconds(no_sms, flat, "bf16")
