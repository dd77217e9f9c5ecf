"""The per-layer communication of a sharded transformer on one device, one micro-batch: tensor
(and sequence) parallel collectives, context-parallel ring attention, expert all-to-all.

Sizes follow the nccl-tests convention (all-reduce: the tensor; all-gather: the output;
reduce-scatter: the input; all-to-all: what one rank holds before the exchange). With ``b``
samples per micro-batch, ``S`` tokens per sample, ``h`` hidden and ``e`` bytes per activation
element, one device's share of the sequence is ``T = b S / cp`` tokens and a full activation
``A = T h e`` bytes.

**Tensor parallelism** (Megatron-LM, Shoeybi et al. 2019; tp > 1). Without sequence parallelism
each block all-reduces ``A`` after attention and after the MLP in forward (blocking: the next
layer norm needs it); in backward the column-parallel layers (QKV, MLP up) all-reduce their input
gradient, which Megatron launches asynchronously beside the weight-gradient GEMM
(``async_tensor_model_parallel_allreduce``), so those are not blocking. With sequence parallelism
(Korthikanti et al. 2022) the forward all-gathers ``A`` before each column-parallel GEMM and
reduce-scatters ``A`` after each row-parallel GEMM (both blocking); backward all-gathers the output
gradient (blocking), re-gathers the saved sharded input for the weight gradient and
reduce-scatters the input gradient (both overlapped with GEMMs, not blocking).
``tp_comm_overlap`` (Transformer Engine's userbuffers) makes every TP collective non-blocking.

**Context parallelism** (ring attention, Megatron-Core's ``p2p`` CP): each block's attention passes
the local K and V blocks around the CP ring: ``cp - 1`` send/recv steps of ``2 T (kv_heads / tp)
d e`` bytes in forward, and of twice that in backward (K, V and their gradients), each overlapped
with the attention of the block already received.

**Expert parallelism** (MoE blocks, Megatron-Core's all-to-all dispatcher): dispatch and combine
all-to-alls of ``T top_k capacity_factor h e`` bytes per device in forward, the same two in
backward; blocking. Megatron-Core requires sequence parallelism with TP in MoE models; the
tokens a TP rank routes are then its group's (gathered by the sequence-parallel all-gather).

**Full recomputation** redoes each block's forward, collectives included, before its backward;
**selective** recomputation redoes the attention core, so only the CP ring runs again; **op**
(torchtitan's per-op policy) keeps the attention output and reduce-scatter results, so its
recompute repeats the forward's TP all-reduces and all-gathers and the EP all-to-alls (the
functional collectives its save list does not name), not the CP ring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from parplan.config.strategy import ShardedStrategy

CollectiveName = Literal["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv", "broadcast"]
CommAxis = Literal["tp", "cp", "ep", "dp", "pp", "embedding", "dp_cp", "edp", "dp_shard", "dp_replicate"]
"""The group a call runs in: a :meth:`~parplan.plan.sharded.mesh.Mesh.group` axis (``pp``: the
neighbouring stage; ``dp`` is kept for callers that mean the data axis alone)."""


@dataclass(frozen=True)
class CommCall:
    """One collective call of one device: which, how big (nccl-tests convention), in which group,
    whether the compute stream waits for it, and a label for traces."""

    collective: CollectiveName
    size_bytes: float
    axis: CommAxis
    blocking: bool
    label: str


@dataclass(frozen=True)
class LayerComm:
    """The calls of one transformer block, forward and backward (backward order), one micro-batch."""

    forward: tuple[CommCall, ...]
    backward: tuple[CommCall, ...]


@dataclass(frozen=True)
class CommSizes:
    """The per-device tensor sizes the calls of one micro-batch move."""

    activation_bytes: float  # A: one device's tokens x hidden x bytes per element
    kv_step_bytes: float  # one CP ring step's K and V
    dispatch_bytes: float  # one MoE all-to-all


def _tp_pair(strategy: ShardedStrategy, size: float, where: str, *, forward: bool) -> list[CommCall]:
    """The TP calls around one sub-layer (attention or MLP), forward or backward (module docstring)."""
    if strategy.tp == 1:
        return []
    overlap = strategy.tp_comm_overlap
    if not strategy.sequence_parallel:
        if forward:
            return [CommCall("all_reduce", size, "tp", not overlap, f"tp all-reduce {where}")]
        return [CommCall("all_reduce", size, "tp", False, f"tp all-reduce {where} grad")]
    if forward:
        return [
            CommCall("all_gather", size, "tp", not overlap, f"sp all-gather {where}"),
            CommCall("reduce_scatter", size, "tp", not overlap, f"sp reduce-scatter {where}"),
        ]
    return [
        CommCall("all_gather", size, "tp", not overlap, f"sp all-gather {where} grad"),
        CommCall("all_gather", size, "tp", False, f"sp re-gather {where} input"),
        CommCall("reduce_scatter", size, "tp", False, f"sp reduce-scatter {where} grad"),
    ]


def _cp_ring(strategy: ShardedStrategy, step_bytes: float, label: str) -> list[CommCall]:
    return [
        CommCall("send_recv", step_bytes, "cp", False, f"{label} {i + 1}/{strategy.cp - 1}")
        for i in range(strategy.cp - 1)
    ]


def _ep_pair(strategy: ShardedStrategy, size: float, *, forward: bool) -> list[CommCall]:
    suffix = "" if forward else " grad"
    first, second = ("dispatch", "combine") if forward else ("combine", "dispatch")
    return [
        CommCall("all_to_all", size, "ep", True, f"ep {first}{suffix}"),
        CommCall("all_to_all", size, "ep", True, f"ep {second}{suffix}"),
    ]


def layer_comm(strategy: ShardedStrategy, sizes: CommSizes, *, moe: bool, ep: int) -> LayerComm:
    """The calls of one block (dense or MoE) on one device for one micro-batch."""
    a = sizes.activation_bytes
    forward: list[CommCall] = []
    attn = _tp_pair(strategy, a, "attention", forward=True)
    mlp = _tp_pair(strategy, a, "mlp", forward=True)
    cut = 1 if strategy.sequence_parallel else 0  # the SP all-gather comes before the GEMMs
    forward += attn[:cut] + _cp_ring(strategy, sizes.kv_step_bytes, "cp kv") + attn[cut:]
    moe_calls = moe and ep > 1
    dispatch = _ep_pair(strategy, sizes.dispatch_bytes, forward=True) if moe_calls else []
    forward += mlp[:cut] + dispatch[:1] + dispatch[1:] + mlp[cut:]
    backward: list[CommCall] = []
    if strategy.recompute == "full":
        backward += [
            CommCall(c.collective, c.size_bytes, c.axis, c.blocking, f"recompute {c.label}") for c in forward
        ]
    elif strategy.recompute == "selective":
        backward += _cp_ring(strategy, sizes.kv_step_bytes, "recompute cp kv")
    elif strategy.recompute == "op":  # the attention output is saved; reduce-scatters are too
        backward += [
            CommCall(c.collective, c.size_bytes, c.axis, c.blocking, f"recompute {c.label}")
            for c in forward
            if c.axis != "cp" and c.collective != "reduce_scatter"
        ]
    backward += _tp_pair(strategy, a, "mlp", forward=False)[:1]
    backward += _ep_pair(strategy, sizes.dispatch_bytes, forward=False) if moe_calls else []
    backward += _tp_pair(strategy, a, "mlp", forward=False)[1:]
    backward += _tp_pair(strategy, a, "attention", forward=False)[:1]
    backward += _cp_ring(strategy, 2.0 * sizes.kv_step_bytes, "cp kv+grad")
    backward += _tp_pair(strategy, a, "attention", forward=False)[1:]
    return LayerComm(tuple(forward), tuple(backward))


def embedding_comm(strategy: ShardedStrategy, activation_bytes: float) -> LayerComm:
    """The vocabulary-parallel embedding: its output is all-reduced (reduce-scattered with SP) over
    TP in forward; backward needs nothing (the input is token ids)."""
    if strategy.tp == 1:
        return LayerComm((), ())
    kind: CollectiveName = "reduce_scatter" if strategy.sequence_parallel else "all_reduce"
    blocking = not strategy.tp_comm_overlap
    return LayerComm((CommCall(kind, activation_bytes, "tp", blocking, "tp embedding"),), ())


def head_comm(strategy: ShardedStrategy, activation_bytes: float, tokens: float) -> LayerComm:
    """The vocabulary-parallel logits and cross-entropy: with SP the final hidden states are
    all-gathered first; the loss all-reduces three fp32 values per token (max, sum of
    exponentials, target logit); backward reduce-scatters (SP) or all-reduces the input gradient."""
    if strategy.tp == 1:
        return LayerComm((), ())
    blocking = not strategy.tp_comm_overlap
    loss = CommCall("all_reduce", 3.0 * 4.0 * tokens, "tp", True, "tp cross-entropy")
    if strategy.sequence_parallel:
        fwd = (CommCall("all_gather", activation_bytes, "tp", blocking, "sp all-gather head"), loss)
        bwd = (CommCall("reduce_scatter", activation_bytes, "tp", blocking, "sp reduce-scatter head grad"),)
        return LayerComm(fwd, bwd)
    return LayerComm(
        (loss,), (CommCall("all_reduce", activation_bytes, "tp", blocking, "tp all-reduce head grad"),)
    )
