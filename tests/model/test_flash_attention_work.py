"""FlashAttention-2's work under a causal mask beyond the mask's half (whole diagonal tiles) and its
backward's two memory-bound kernels (flash-attn 2.5.6), as :mod:`parplan.model.transformer` counts
them and :func:`parplan.plan.compute.op_seconds` times them."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.model.transformer import (
    FLASH_CAUSAL_BLOCK,
    Kernels,
    TransformerShape,
    attention_ops,
    flash_backward_passes,
    flash_causal_block,
    flash_causal_keys,
)
from parplan.plan.compute import KERNEL_LAUNCH_S, MEMORY_EFFICIENCY, op_seconds
from parplan.topology.network import DeviceInfo


def _pairs_by_tiles(sequence: int, block: int) -> int:
    """Query-key pairs FA2's forward multiplies: query tile ``m`` meets every key up to the end of
    its own tile (``n_block_max``), clipped to the sequence."""
    return sum(
        min(block, sequence - m * block) * min(sequence, (m + 1) * block)
        for m in range(math.ceil(sequence / block))
    )


def _pairs_backward(sequence: int, block: int) -> int:
    """The backward's count the other way round: key tile ``n`` meets every query from its own
    first row on (``m_block_min``)."""
    return sum(
        min(block, sequence - n * block) * (sequence - n * block) for n in range(math.ceil(sequence / block))
    )


@settings(max_examples=60, deadline=None)
@given(sequence=st.integers(1, 20000), head_dim=st.sampled_from([64, 96, 128, 160, 256]))
def test_causal_keys_count_whole_diagonal_tiles(sequence: int, head_dim: int) -> None:
    block = flash_causal_block(head_dim)
    keys = flash_causal_keys(sequence, head_dim)
    assert keys * sequence == pytest.approx(_pairs_by_tiles(sequence, block))
    if sequence % block == 0:  # the two loops agree on whole tiles
        assert keys * sequence == pytest.approx(_pairs_backward(sequence, block))
    # never below what the mask keeps, never above the whole square
    assert (sequence + 1) / 2 <= keys + 1e-9 and keys <= sequence


def test_causal_keys_at_the_validation_lengths() -> None:
    assert FLASH_CAUSAL_BLOCK == 128 == flash_causal_block(128) and flash_causal_block(192) == 64
    assert flash_causal_keys(8192, 128) == (8192 + 128) / 2  # +1.6% over S / 2
    assert flash_causal_keys(4096, 128) == (4096 + 128) / 2  # +3.1%
    assert flash_causal_keys(100, 128) == 100  # one tile: every key


def _llama(sequence: int = 8192) -> TransformerShape:
    return TransformerShape(
        layers=1, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocabulary=128256,
        sequence_length=sequence, activation="swiglu", tie_embeddings=False, experts=0, top_k=1,
        moe_ffn_hidden=14336, moe_every=1, bytes_per_element=2.0, norm="rmsnorm", bias=False,
        qkv_bias=False, position="rope", dropout=False,
    )  # fmt: skip


def test_flash_core_counts_the_diagonal_tiles() -> None:
    ops = attention_ops(_llama(), microbatch=2, tp=2, cp=1, flash_attention=True, kernels="eager")
    attention = next(op for op in ops if op.name == "attention")
    rows = 2 * 8192 * 16  # tokens x local heads
    assert attention.flops == 4.0 * rows * (8192 + 128) / 2 * 128
    assert attention.gemm_mnk == (rows, (8192 + 128) // 2, 128)


@pytest.mark.parametrize("kernels", ["fused", "eager"])
def test_flash_core_lists_its_backward_kernels(kernels: Kernels) -> None:
    ops = attention_ops(_llama(), microbatch=2, tp=2, cp=1, flash_attention=True, kernels=kernels)
    names = [op.name for op in ops]
    assert names[-3:] == ["attention", "attention_bwd_prep", "attention_bwd_dq"]
    attention = ops[-3]
    rows = 2 * 8192 * 16  # tokens x local heads
    assert attention.flops == 4.0 * rows * (8192 + 128) / 2 * 128
    prep, convert = ops[-2:]
    elements = rows * 128
    assert prep.backward_bytes_moved == (2 * 2 + 4) * elements + 4 * rows  # dO, O; zeroed fp32 dQ
    assert convert.backward_bytes_moved == (4 + 2) * elements  # fp32 accumulator in, bf16 dQ out
    assert prep.kind == convert.kind == "elementwise"
    unfused = attention_ops(_llama(), microbatch=2, tp=2, cp=1, flash_attention=False, kernels=kernels)
    assert not any(op.name.startswith("attention_bwd") for op in unfused)


def test_backward_only_kernels_cost_nothing_forward_and_stream_their_bytes_backward() -> None:
    device = DeviceInfo("g", 1e15, 0.5, 1.0, 8e10, 2e12, None, sm_count=100)
    prep, convert = flash_backward_passes(1e8, 1e6, 2.0)
    for op in (prep, convert):
        assert op_seconds(device, op, "bf16") == 0.0
        assert op.backward_bytes_moved is not None
        expected = op.backward_bytes_moved / (2e12 * MEMORY_EFFICIENCY) + KERNEL_LAUNCH_S
        assert op_seconds(device, op, "bf16", backward=True) == pytest.approx(expected)
