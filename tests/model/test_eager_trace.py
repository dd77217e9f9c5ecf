"""The eager kernel counts of :mod:`parplan.model.transformer` against the aten ops PyTorch really
runs for a torchtitan-style Llama block (traced op by op with a dispatch mode, on the CPU)."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from parplan.model.transformer import TransformerShape, block_ops, eager_bytes_per_element

HAVE_TORCH = importlib.util.find_spec("torch") is not None
requires_torch = pytest.mark.skipif(
    not HAVE_TORCH,
    reason="torch is not installed, so there is no block to trace (pip install 'parplan[torch]')",
)

B, S, H, HEADS, KV, FFN = 1, 16, 64, 4, 2, 128


def _llama_block() -> Any:
    """torchtitan's Llama block (``torchtitan/models/llama/model.py``): RMSNorm, three projections,
    RoPE, ``repeat_kv``, SDPA, output projection, residual; RMSNorm, SwiGLU, residual."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    hd = H // HEADS

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wq, self.wk = nn.Linear(H, HEADS * hd, bias=False), nn.Linear(H, KV * hd, bias=False)
            self.wv, self.wo = nn.Linear(H, KV * hd, bias=False), nn.Linear(HEADS * hd, H, bias=False)
            self.w1, self.w3 = nn.Linear(H, FFN, bias=False), nn.Linear(H, FFN, bias=False)
            self.w2 = nn.Linear(FFN, H, bias=False)
            self.attention_norm, self.ffn_norm = nn.RMSNorm(H), nn.RMSNorm(H)
            freqs = 1.0 / (500000.0 ** (torch.arange(0, hd, 2).float() / hd))
            angles = torch.outer(torch.arange(S).float(), freqs)
            self.freqs_cis = torch.polar(torch.ones_like(angles), angles).view(1, S, 1, hd // 2)

        def rope(self, x: Any) -> Any:
            rotated = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2)) * self.freqs_cis
            return torch.view_as_real(rotated).flatten(3).type_as(x)

        def attention(self, x: Any) -> Any:
            q = self.rope(self.wq(x).view(B, S, HEADS, hd))
            k = self.rope(self.wk(x).view(B, S, KV, hd))
            v = self.wv(x).view(B, S, KV, hd)
            k, v = (t.unsqueeze(3).expand(B, S, KV, HEADS // KV, hd).reshape(B, S, HEADS, hd) for t in (k, v))
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.wo(out.transpose(1, 2).contiguous().view(B, S, -1))

        def forward(self, x: Any) -> Any:
            h = x + self.attention(self.attention_norm(x))
            y = self.ffn_norm(h)
            return h + self.w2(F.silu(self.w1(y)) * self.w3(y))

    return Block().to(torch.bfloat16)


@pytest.mark.torch
@requires_torch
def test_autograd_sums_the_gradients_of_every_tensor_several_ops_read() -> None:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    adds: list[tuple[int, ...]] = []

    class Adds(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten.add.Tensor and out.dtype == torch.bfloat16:
                adds.append(tuple(out.shape))
            return out

    block = _llama_block()
    x = torch.randn(B, S, H, dtype=torch.bfloat16, requires_grad=True)
    y = block(x)
    with Adds():
        y.backward(torch.ones_like(y))
    hidden_sums = sum(1 for shape in adds if shape[-1] == H and shape[0] * shape[-2] == B * S)
    # two residuals, then the sums of the gradients of the norms' outputs: wq/wk/wv (2), w1/w3 (1)
    assert hidden_sums == 2 + 2 + 1

    shape = TransformerShape(
        layers=1, hidden=H, heads=HEADS, kv_heads=KV, ffn_hidden=FFN, vocabulary=100, sequence_length=S,
        activation="swiglu", tie_embeddings=False, experts=0, top_k=1, moe_ffn_hidden=FFN, moe_every=1,
        bytes_per_element=2.0, norm="rmsnorm", bias=False, qkv_bias=False, position="rope", dropout=False,
    )  # fmt: skip
    kw: dict[str, Any] = {"microbatch": B, "tp": 1, "sp": False, "cp": 1, "flash_attention": True}
    eager = {op.name: op for op in block_ops(shape, **kw, kernels="eager")}
    elements = B * S * H
    add_bytes = 3 * 2.0 * elements  # one bf16 add over the hidden states: read two, write one
    norm_bytes = eager_bytes_per_element("rmsnorm", 2.0)[1] * elements  # the norm's own backward
    modelled_sums = sum(
        (eager[n].bytes_moved * eager[n].backward_bytes_factor - norm_bytes) / add_bytes
        for n in ("attn_norm", "mlp_norm")
    )
    assert modelled_sums == pytest.approx(hidden_sums - 2)  # the residuals' sums are their own ops
    assert eager["attn_residual"].backward_bytes_factor == 1.0  # 3e both ways
