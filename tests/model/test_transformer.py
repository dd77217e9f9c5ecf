"""The transformer as kernels: shapes, per-device ops under TP/SP/CP/EP, Korthikanti's activations."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.config.model import ModelSpec, TransformerGenerator
from parplan.model.graph import build_model, transformer_params
from parplan.model.transformer import (
    CAUSAL_FRACTION,
    TransformerShape,
    block_activation_bytes,
    block_ops,
    embedding_ops,
    head_ops,
    model_flops_per_token,
    shape_of,
    shape_of_generator,
)

GPT_1_3B: dict[str, Any] = {
    "kind": "transformer",
    "layers": 24,
    "hidden": 2048,
    "heads": 16,
    "seq_len": 2048,
    "vocab": 50257,
}


def gpt(**fields: Any) -> TransformerShape:
    """A GPT block of the given sizes (Korthikanti et al.'s setting: dropout, GELU 4h, fp16)."""
    gen = TransformerGenerator.model_validate({**GPT_1_3B, **fields})
    return shape_of_generator(gen, 2.0)


def matmul_flops(ops: tuple[Any, ...]) -> float:
    return sum(o.flops for o in ops if o.kind in ("gemm", "attention"))


def test_shape_of_a_generated_model_and_of_others() -> None:
    m = build_model(ModelSpec.model_validate({"name": "xl", "generator": GPT_1_3B}))
    shape = shape_of(m)
    assert shape is not None
    assert (shape.layers, shape.hidden, shape.heads, shape.kv_heads) == (24, 2048, 16, 16)
    assert (shape.ffn_hidden, shape.vocabulary, shape.sequence_length) == (8192, 50257, 2048)
    assert shape.head_dim == 128 and shape.name == "xl"
    assert shape.total_params() == m.total_params
    assert shape.block_params(3) == m.node("block3").params
    assert shape.embedding_params() == m.node("embedding").params
    assert shape.head_params() == m.node("head").params == 0.0
    mlp = build_model(ModelSpec.model_validate({"generator": {"kind": "mlp", "widths": [4, 3]}}))
    assert shape_of(mlp) is None


def test_block_ops_sum_to_the_node_flops_without_parallelism() -> None:
    m = build_model(ModelSpec.model_validate({"generator": GPT_1_3B}))
    shape = shape_of(m)
    assert shape is not None
    ops = block_ops(shape, microbatch=1, tp=1, sp=False, cp=1, flash_attention=False)
    assert [o.name for o in ops] == [
        "attn_norm", "qkv", "attn_scores", "softmax", "attn_context", "proj",
        "attn_residual", "mlp_norm", "mlp_up", "mlp_activation", "mlp_down", "mlp_residual",
    ]  # fmt: skip
    assert matmul_flops(ops) == m.node("block0").forward_flops_per_sample
    qkv = ops[1]
    assert qkv.gemm_mnk == (2048, 3 * 2048, 2048)
    assert qkv.flops == 2 * 2048 * 3 * 2048 * 2048
    assert qkv.backward_flops_factor == 2.0
    # FlashAttention-2 executes the score tiles under the causal mask: half of them, plus the
    # diagonal's 128 x 128 tiles whole (S = 2048: (2048 + 128) / 2 keys a query row)
    flash = block_ops(shape, microbatch=1, tp=1, sp=False, cp=1, flash_attention=True)
    attn = next(o for o in flash if o.name == "attention")
    assert attn.flops == 4 * 2048 * 2048 * (2048 * CAUSAL_FRACTION + 128 / 2)
    assert attn.backward_flops_factor == 2.5
    assert attn.bytes_moved < next(o for o in ops if o.name == "softmax").bytes_moved


@settings(max_examples=30, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4, 8, 16]),
    cp=st.sampled_from([1, 2, 4]),
    b=st.integers(1, 4),
    sp=st.booleans(),
    flash=st.booleans(),
)
def test_tp_and_cp_split_the_work_evenly(tp: int, cp: int, b: int, sp: bool, flash: bool) -> None:
    shape = gpt()
    whole = block_ops(shape, microbatch=b, tp=1, sp=False, cp=1, flash_attention=flash)
    part = block_ops(shape, microbatch=b, tp=tp, sp=sp, cp=cp, flash_attention=flash)
    assert matmul_flops(part) * tp * cp == pytest.approx(matmul_flops(whole))
    norms = [o for o in part if o.kind == "norm"]
    factor = tp if sp else 1
    base = [o for o in whole if o.kind == "norm"]
    for n, w in zip(norms, base, strict=True):
        assert n.bytes_moved * factor * cp == pytest.approx(w.bytes_moved)


def test_embedding_and_head_ops() -> None:
    shape = gpt()
    (lookup, add) = embedding_ops(shape, microbatch=2, tp=4, cp=1)
    assert lookup.flops == 0.0 and lookup.kind == "embedding"
    assert add.kind == "elementwise"
    (_, add_sp) = embedding_ops(shape, microbatch=2, tp=4, cp=1, sp=True)
    assert add_sp.bytes_moved * 4 == pytest.approx(add.bytes_moved)
    norm, logits, loss = head_ops(shape, microbatch=2, tp=4, cp=2)
    tokens = 2 * 2048 / 2
    assert logits.flops == 2 * tokens * (50257 / 4) * 2048
    assert logits.gemm_mnk == (2048, 12565, 2048)
    assert loss.kind == "loss" and norm.kind == "norm"
    rope = replace(shape, position="rope", dropout=False)
    assert len(embedding_ops(rope, microbatch=1, tp=1, cp=1)) == 1


# -- Korthikanti et al. 2022, Table 2 -----------------------------------------------------------

# Table 3 of the paper: the models it measures (s = 2048, t = 8, micro-batch 1; 22B with b = 4)
PAPER = {
    "22B": {"heads": 64, "hidden": 6144, "b": 4},
    "175B": {"heads": 96, "hidden": 12288, "b": 1},
    "530B": {"heads": 128, "hidden": 20480, "b": 1},
    "1T": {"heads": 160, "hidden": 25600, "b": 1},
}


@pytest.mark.parametrize("name", list(PAPER))
def test_table_2_of_korthikanti(name: str) -> None:
    cfg = PAPER[name]
    a, h, b, s, t = cfg["heads"], cfg["hidden"], cfg["b"], 2048, 8
    shape = gpt(heads=a, hidden=h)

    def act(tp: int, sp: bool, recompute: Any) -> float:
        return block_activation_bytes(
            shape, microbatch=b, tp=tp, sp=sp, cp=1, recompute=recompute, flash_attention=False
        )

    sbh = s * b * h
    assert act(1, False, "none") == pytest.approx(sbh * (34 + 5 * a * s / h))
    assert act(t, False, "none") == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert act(t, True, "none") == pytest.approx(sbh * (34 / t + 5 * a * s / (h * t)))
    assert act(t, False, "selective") == pytest.approx(sbh * (10 + 24 / t))
    assert act(t, True, "selective") == pytest.approx(sbh * 34 / t)
    assert act(1, False, "full") == pytest.approx(2 * sbh)


def test_selective_recomputation_saves_seventy_percent_on_gpt3() -> None:
    # Section 5 of the paper: for GPT-3 175B, 5as/h = 80, so keeping only the 34 saves 70%
    shape = gpt(heads=96, hidden=12288)
    kw: Any = {"microbatch": 1, "tp": 8, "sp": True, "cp": 1, "flash_attention": False}
    full = block_activation_bytes(shape, recompute="none", **kw)
    selective = block_activation_bytes(shape, recompute="selective", **kw)
    assert 1 - selective / full == pytest.approx(80 / 114)


def test_node_saved_bytes_match_the_per_device_formula() -> None:
    m = build_model(ModelSpec.model_validate({"generator": GPT_1_3B}))
    shape = shape_of(m)
    assert shape is not None
    saved = block_activation_bytes(
        shape, microbatch=1, tp=1, sp=False, cp=1, recompute="none", flash_attention=False
    )
    assert saved == m.node("block0").saved_bytes_per_sample


def test_flash_attention_drops_the_quadratic_term() -> None:
    shape = gpt(heads=96, hidden=12288)
    kw: Any = {"microbatch": 1, "tp": 8, "sp": True, "cp": 1, "recompute": "none"}
    flash = block_activation_bytes(shape, flash_attention=True, **kw)
    sbh = 2048 * 12288
    assert flash == pytest.approx(sbh * 34 / 8 + 4 * 96 * 2048 / 8)
    # CP divides the local sequence
    cp = block_activation_bytes(shape, flash_attention=True, **{**kw, "cp": 2})
    assert cp == pytest.approx(flash / 2)


def test_generalised_activations_gqa_swiglu_no_dropout() -> None:
    llama = gpt(heads=32, hidden=4096, kv_heads=8, ffn_hidden=14336, activation="swiglu", dropout=False)
    c1 = (2 + 2 + 4 * 0.25 + 2) + (2 + 6 * 14336 / 4096) + 4
    s, h = 2048, 4096
    got = block_activation_bytes(
        llama, microbatch=1, tp=1, sp=False, cp=1, recompute="none", flash_attention=True
    )
    assert got == pytest.approx(s * h * c1 + 4 * 32 * s)
    # fp32 activations double the 16-bit terms; the byte masks stay
    fp32 = replace(gpt(), bytes_per_element=4.0)
    kw: Any = {"microbatch": 1, "tp": 1, "sp": False, "cp": 1, "recompute": "selective"}
    assert block_activation_bytes(fp32, flash_attention=False, **kw) == pytest.approx(
        2048 * 2048 * (32 * 2 + 2)
    )


# -- variants -------------------------------------------------------------------------------------


def test_gqa_swiglu_rmsnorm_no_bias_params() -> None:
    gen = TransformerGenerator.model_validate(
        {
            **GPT_1_3B,
            "hidden": 4096,
            "heads": 32,
            "kv_heads": 8,
            "ffn_hidden": 14336,
            "activation": "swiglu",
            "norm": "rmsnorm",
            "bias": False,
            "position": "rope",
        }
    )
    h, f = 4096, 14336
    block = h * (h + 2 * 1024) + h * h + 3 * h * f + 2 * h
    shape = shape_of_generator(gen)
    assert shape.block_params() == block
    m = build_model(ModelSpec(generator=gen))
    assert m.node("block0").params == block
    assert m.node("embedding").params == 50257 * h  # no position table with RoPE
    assert transformer_params(gen) == m.total_params == shape.total_params()
    assert m.node("block0").forward_flops_per_sample == pytest.approx(
        2 * (block - 2 * h) * 2048 + 4 * 2048 * 2048 * h
    )


def test_moe_blocks() -> None:
    gen = TransformerGenerator.model_validate(
        {**GPT_1_3B, "experts": 8, "top_k": 2, "moe_every": 2, "activation": "swiglu", "bias": False}
    )
    shape = shape_of_generator(gen)
    m = build_model(ModelSpec(generator=gen))
    assert shape.is_moe(0) and not shape.is_moe(1)
    h, f = 2048, 8192
    expert = 3 * h * f
    assert shape.block_params(0) - shape.block_params(1) == 7 * expert + 8 * h
    assert m.node("block0").params == shape.block_params(0)
    assert m.node("block1").params == shape.block_params(1)
    assert shape.expert_params(0) == 8 * expert and shape.expert_params(1) == 0
    assert shape.active_block_params(0) == shape.block_params(1) + expert + 8 * h
    ops = block_ops(shape, microbatch=1, tp=2, sp=True, cp=1, flash_attention=True, ep=4, layer=0)
    names = [o.name for o in ops]
    assert "router" in names and "experts_up" in names and "mlp_up" not in names
    up = next(o for o in ops if o.name == "experts_up")
    assert up.flops == 2 * (2048 * 2) * (2 * f / 2) * h  # T x top_k slots, gate+up split over tp
    assert up.gemm_mnk == (2048 * 2 // 2, f, h)  # per local expert: 4096 slots over 2 experts
    dense = block_ops(shape, microbatch=1, tp=2, sp=True, cp=1, flash_attention=True, layer=1)
    assert "mlp_up" in [o.name for o in dense]
    # the node's FLOPs see the active experts only
    assert m.node("block0").forward_flops_per_sample == pytest.approx(
        2 * (shape.active_block_params(0) - 4 * h) * 2048 + 4 * 2048 * 2048 * h
    )


def test_model_flops_per_token_is_the_palm_formula() -> None:
    shape = gpt()
    n = 24 * shape.block_params() + 50257 * 2048
    assert model_flops_per_token(shape) == 6 * n + 12 * 24 * 2048 * 2048


def test_generator_rejects_bad_grouping() -> None:
    with pytest.raises(ValueError, match="kv_heads"):
        TransformerGenerator.model_validate({**GPT_1_3B, "kv_heads": 3})
    with pytest.raises(ValueError, match="top_k"):
        TransformerGenerator.model_validate({**GPT_1_3B, "experts": 2, "top_k": 4})


def test_kv_heads_fewer_than_tp_ranks_are_replicated() -> None:
    shape = gpt(heads=64, hidden=8192, kv_heads=8, ffn_hidden=28672, activation="swiglu")
    (qkv,) = [
        o
        for o in block_ops(shape, microbatch=1, tp=16, sp=True, cp=1, flash_attention=True)
        if o.name == "qkv"
    ]
    assert qkv.gemm_mnk == (2048, (64 // 16 + 2 * 1) * 128, 8192)  # one K and one V head per rank
    (qkv8,) = [
        o
        for o in block_ops(shape, microbatch=1, tp=8, sp=True, cp=1, flash_attention=True)
        if o.name == "qkv"
    ]
    assert qkv8.gemm_mnk == (2048, (64 // 8 + 2 * 1) * 128, 8192)
    (up,) = [
        o
        for o in block_ops(shape, microbatch=1, tp=8, sp=True, cp=1, flash_attention=True)
        if o.name == "mlp_up"
    ]
    assert up.gemm_mnk == (2048, 2 * 28672 // 8, 8192)  # SwiGLU's gate and up in one GEMM


# -- kernel style: fused chains or PyTorch's eager kernels ----------------------------------------


def llama(**fields: Any) -> TransformerShape:
    """A Llama-style block (RMSNorm, RoPE, SwiGLU, grouped-query attention, no dropout), bf16."""
    base = {
        "kind": "transformer",
        "layers": 2,
        "hidden": 1024,
        "heads": 16,
        "kv_heads": 4,
        "ffn_hidden": 2816,
        "seq_len": 512,
        "vocab": 32000,
        "activation": "swiglu",
        "norm": "rmsnorm",
        "position": "rope",
        "bias": False,
        "dropout": False,
        "tie_embeddings": False,
    }
    return shape_of_generator(TransformerGenerator.model_validate({**base, **fields}), 2.0)


def by_name(ops: tuple[Any, ...]) -> dict[str, Any]:
    return {o.name: o for o in ops}


def test_eager_bytes_exceed_fused_by_the_counted_ratio() -> None:
    shape = llama()
    kw: dict[str, Any] = {"microbatch": 2, "tp": 1, "sp": False, "cp": 1, "flash_attention": True}
    fused, eager = by_name(block_ops(shape, **kw)), by_name(block_ops(shape, **kw, kernels="eager"))
    tokens, h, e, f = 2 * 512, 1024, 2.0, 4.0
    # RMSNorm: 2e fused against 4e + 7f eager forward (36 bytes), 8e + 19f backward (92 bytes), plus
    # autograd's sums of the input gradients of the GEMMs reading the output: wq, wk, wv (two adds)
    # after the attention norm, w1, w3 (one add) after the MLP norm, 3e each
    assert fused["attn_norm"].bytes_moved == tokens * h * 2 * e
    assert eager["attn_norm"].bytes_moved == tokens * h * 36.0
    assert eager["attn_norm"].bytes_moved / fused["attn_norm"].bytes_moved == pytest.approx(9.0)
    assert eager["attn_norm"].bytes_moved * eager["attn_norm"].backward_bytes_factor == pytest.approx(
        tokens * h * (92.0 + 2 * 3 * e)
    )
    assert eager["mlp_norm"].bytes_moved * eager["mlp_norm"].backward_bytes_factor == pytest.approx(
        tokens * h * (92.0 + 3 * e)
    )
    assert fused["attn_norm"].backward_bytes_factor == fused["mlp_norm"].backward_bytes_factor == 1.5
    # RoPE over Q and K: 2e fused, 2e + 4f eager (fp32 complex multiply), both ways
    rotated = tokens * (16 + 4) * 64
    assert eager["rope"].bytes_moved == rotated * (2 * e + 4 * f) == 5.0 * fused["rope"].bytes_moved
    assert eager["rope"].backward_bytes_factor == 1.0
    # SwiGLU: 3e fused, silu (2e) then mul (3e) eager; w1 and w3 two GEMMs of the fused one's FLOPs
    assert eager["mlp_activation"].bytes_moved / fused["mlp_activation"].bytes_moved == pytest.approx(5 / 3)
    assert eager["mlp_gate"].flops + eager["mlp_up"].flops == fused["mlp_up"].flops
    # residual adds: 3e both ways
    assert eager["attn_residual"].bytes_moved == fused["attn_residual"].bytes_moved
    # repeat_kv: K and V read at 4 heads, written at 16; the core then reads 16 heads of K and V
    assert eager["repeat_kv"].bytes_moved == 2 * tokens * (4 + 16) * 64 * e
    assert "repeat_kv" not in fused
    kv_extra = 2 * 2 * 512 * (16 - 4) * 64 * e
    assert eager["attention"].bytes_moved - fused["attention"].bytes_moved == pytest.approx(kv_extra)
    # matmul FLOPs are the same: the kernel style moves bytes, not arithmetic
    assert matmul_flops(tuple(eager.values())) == matmul_flops(tuple(fused.values()))


def test_eager_loss_norm_and_embedding_gradient() -> None:
    shape = llama()
    _, _, f_loss = head_ops(shape, microbatch=1, tp=2, cp=1)
    e_norm, _, e_loss = head_ops(shape, microbatch=1, tp=2, cp=1, kernels="eager")
    logits = 512 * 32000 / 2
    assert f_loss.bytes_moved == logits * 10.0  # e + 8
    # 16,000 fp32 logits a row do not fit 48 KiB of shared memory: log_softmax reads the row three
    # times (max, sum of exponentials, output), its backward twice (the gradient's sum, the output)
    assert e_loss.bytes_moved == logits * 22.0  # cast (e + f) + log_softmax (4f)
    assert e_loss.bytes_moved * e_loss.backward_bytes_factor == pytest.approx(logits * 26.0)  # e + 6f
    *_, short = head_ops(shape, microbatch=1, tp=4, cp=1, kernels="eager")  # 8,000 a row: on chip
    assert short.bytes_moved == logits / 2 * 14.0  # cast (e + f) + log_softmax (2f)
    assert short.bytes_moved * short.backward_bytes_factor == pytest.approx(logits / 2 * 22.0)  # e + 5f
    assert e_norm.bytes_moved == 512 * 1024 * 36.0
    (f_emb,) = embedding_ops(shape, microbatch=1, tp=2, cp=1)
    (e_emb,) = embedding_ops(shape, microbatch=1, tp=2, cp=1, kernels="eager")
    assert e_emb.bytes_moved == f_emb.bytes_moved
    table = 32000 / 2 * 1024 * 2.0  # the zero-filled gradient of the rank's table
    assert e_emb.bytes_moved * e_emb.backward_bytes_factor == pytest.approx(f_emb.bytes_moved + table)


def test_eager_layernorm_gelu_dropout_and_unfused_softmax() -> None:
    shape = gpt()
    kw: dict[str, Any] = {"microbatch": 1, "tp": 2, "sp": False, "cp": 1, "flash_attention": False}
    fused, eager = by_name(block_ops(shape, **kw)), by_name(block_ops(shape, **kw, kernels="eager"))
    # native LayerNorm and GELU are single kernels eager too: the same forward bytes
    assert eager["attn_norm"].bytes_moved == fused["attn_norm"].bytes_moved
    assert eager["mlp_activation"].bytes_moved == fused["mlp_activation"].bytes_moved
    # LayerNorm's backward (5e), then the two sums of the q, k and v GEMMs' input gradients (3e each)
    assert eager["attn_norm"].backward_bytes_factor == (5 + 2 * 3) / 2
    assert eager["mlp_norm"].backward_bytes_factor == 2.5  # one GELU up GEMM reads it
    # residual with dropout: native_dropout (2e + mask) then the add (3e)
    assert eager["attn_residual"].bytes_moved == 2048 * 2048 * (5 * 2.0 + 1.0)
    # no grouping, no repeat_kv; the softmax chain: scale, mask add, fp32 softmax, cast, dropout
    assert "repeat_kv" not in eager
    scores = 2048 * 8 * 2048
    assert eager["softmax"].bytes_moved == scores * (4 + 4 + 6 + 6 + 5)
    assert fused["softmax"].bytes_moved == scores * 7  # read, write, dropout output and mask


def test_fused_is_the_default() -> None:
    for shape in (gpt(), llama(), llama(experts=4, top_k=2)):
        kw: dict[str, Any] = {"microbatch": 1, "tp": 2, "sp": True, "cp": 1, "flash_attention": True}
        assert block_ops(shape, **kw) == block_ops(shape, **kw, kernels="fused")
        assert head_ops(shape, microbatch=1, tp=2, cp=1) == head_ops(
            shape, microbatch=1, tp=2, cp=1, kernels="fused"
        )
        assert embedding_ops(shape, microbatch=1, tp=2, cp=1) == embedding_ops(
            shape, microbatch=1, tp=2, cp=1, kernels="fused"
        )
