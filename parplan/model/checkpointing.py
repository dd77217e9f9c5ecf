"""torchtitan's per-op selective activation checkpointing (``recompute: op``): what it saves, what
it recomputes, and the bytes a block keeps for backward.

torchtitan wraps every transformer block in ``torch.utils.checkpoint`` with a selective policy
(``torchtitan/models/llama/parallelize_llama.py``, ``_apply_ac_to_transformer_block`` with
``selective_ac_option = "op"``, the default of its Llama configs; PyTorch's
``create_selective_checkpoint_contexts``): the outputs of the ops in ``_save_list`` are kept
(``MUST_SAVE``): ``aten.mm``, the SDPA flash and memory-efficient attention kernels and the
functional reduce-scatter, **except every second** ``aten.mm`` of the block (the policy counts them
in forward order, ``mm_count % 2 == 0`` recomputes). Every other op is ``PREFER_RECOMPUTE``: in
backward the block's forward runs again, the saved outputs are handed back instead of recomputed,
and the rest (norms, RoPE, SwiGLU's ``silu`` and product, residual adds, ``repeat_kv``, the
recomputed GEMMs) runs again.

Here, on a block's forward :class:`~parplan.model.transformer.Op` list:

- the linear layers (:data:`LINEAR_OPS`; a 2-D ``aten.mm`` each, ``F.linear`` on ``[b, s, h]``
  folds to one) are numbered in order, odd ones saved, even ones recomputed;
- the fused ``attention`` kernel is saved: its output and its fp32 log-sum-exp per query row;
- everything else is recomputed: memory-bound kernels, and batched matmuls (``aten.bmm``: the
  unfused attention's scores and context, grouped expert GEMMs) which the save list does not name.

The recompute costs the forward of the recomputed ops; the block keeps its input (the checkpoint's
argument) and the saved outputs. Between its recompute and its backward a block holds about its
whole activations again, which the memory model adds once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from parplan.model.transformer import Op

LINEAR_OPS = frozenset({"qkv", "q", "k", "v", "proj", "mlp_gate", "mlp_up", "mlp_down", "router"})
"""Block ops that are one ``aten.mm`` (an ``nn.Linear``) each, counted by the policy."""

LSE_BYTES = 4.0
"""Bytes of the fp32 log-sum-exp the attention kernel keeps per query row (head x token)."""


def saved_by_op_policy(ops: Sequence[Op]) -> tuple[bool, ...]:
    """For each forward op of a block, whether torchtitan's op policy keeps its output (module
    docstring): odd-numbered linear layers and the fused attention kernel.

    >>> from parplan.model.transformer import Op
    >>> ops = [Op(n, "gemm" if n != "attention" else "attention", 1.0, 1.0)
    ...        for n in ("q", "k", "v", "attention", "proj", "mlp_gate", "mlp_up", "mlp_down")]
    >>> [op.name for op, kept in zip(ops, saved_by_op_policy(ops)) if kept]
    ['q', 'v', 'attention', 'mlp_gate', 'mlp_down']
    """
    out: list[bool] = []
    count = 0
    for op in ops:
        if op.kind == "gemm" and op.name in LINEAR_OPS:
            count += 1
            out.append(count % 2 == 1)
        else:
            out.append(op.kind == "attention")
    return tuple(out)


def recomputed_ops(ops: Sequence[Op]) -> tuple[Op, ...]:
    """The ops the op policy runs again in backward."""
    return tuple(op for op, kept in zip(ops, saved_by_op_policy(ops), strict=True) if not kept)


def output_bytes(op: Op, bytes_per_element: float) -> float:
    """Bytes of what a saved op keeps: a GEMM's ``m x n`` output; the attention kernel's output
    (``rows x head_dim``) and its log-sum-exp per row."""
    if op.gemm_mnk is None:
        return 0.0
    m, n, k = op.gemm_mnk
    if op.kind == "attention":
        return m * k * bytes_per_element + LSE_BYTES * m
    return m * n * bytes_per_element


def op_policy_saved_bytes(ops: Sequence[Op], input_bytes: float, bytes_per_element: float) -> float:
    """Bytes a block keeps for backward under the op policy: its input and the saved outputs."""
    kept = (op for op, saved in zip(ops, saved_by_op_policy(ops), strict=True) if saved)
    return input_bytes + sum(output_bytes(op, bytes_per_element) for op in kept)
