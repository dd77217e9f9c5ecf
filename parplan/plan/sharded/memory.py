"""Peak memory per device of a sharded plan (issue 16 item 9), stage by stage.

- **Weights, gradients, optimizer state**: the parameters a device holds after TP/EP splits
  (:attr:`~parplan.plan.sharded.costs.ChunkWork.params`) times the model spec's
  ``bytes_per_param``, ``bytes_per_grad`` and ``optimizer_bytes_per_param`` (mixed-precision Adam:
  2 + 2 + 12). Megatron-LM and DeepSpeed accumulate bf16 gradients in fp32 main-gradient buffers;
  a model spec with ``bytes_per_grad: 4`` says so (the default 2 is PyTorch's bf16 gradients).
  Divided as the sharding says (ZeRO paper, Rajbhandari et al. 2020, Fig. 1): ZeRO-1 the
  optimizer state over the data ranks, ZeRO-2 and FSDP ``shard_grad_op`` also the gradients,
  ZeRO-3 and FSDP ``full_shard`` also the weights (``hybrid_shard``: over its shard group).
  Dense parameters shard over ``dp x cp``, expert parameters over the expert-data ranks.
  ``shard_grad_op`` keeps the gathered weights from forward to backward: its weights count whole.
- **Activations**: T's ``block_activation_bytes`` per block (Korthikanti et al. 2022 generalised:
  TP, SP, CP, recomputation, flash attention) times the micro-batches in flight:
  GPipe all ``m``; 1F1B ``min(m, pp - stage)``; interleaved 1F1B (Megatron's schedule) holds
  ``min(m v, 2 (pp - stage - 1) + (v - 1) pp + 1)`` model chunks of the stage, which on the first
  stage is ``pp v (1 + (pp - 1) / (pp v))`` chunks: Korthikanti's ``L / pp x pp x (1 + (pp - 1) /
  (pp v))`` layers. Full recomputation adds one block's whole activations (the block being
  rematerialised for its backward); torchtitan's per-op policy (``op``) the block's input and the
  outputs it saves per block, plus once the rest of one block's (recomputed for its backward). With
  dropout the first stage adds the embedding's dropout mask (``s b h / cp`` bytes, over TP with SP)
  per micro-batch in flight; the last stage adds the final norm's input and, for one micro-batch
  (the loss's backward follows its forward), the logits and the loss's fp32 softmax
  (:data:`LOGIT_BYTES` per logit, ``s b V / (cp tp)`` logits; :data:`EAGER_LOGIT_BYTES` with eager
  kernels). Megatron's
  ``selective`` recomputes the attention core only; torchtitan's op-level selective AC is ``op``.
- **Buffers**: pipeline send and receive buffers (two micro-batch activations each way); with SP
  one all-gathered activation; ZeRO-0/1/2 two gradient buckets (one reducing, one filling);
  ZeRO-3/FSDP the gathered weights of two units (the one running and the one prefetched) and
  their gradients before the reduce-scatter; MoE the dispatched tokens of one all-to-all.
- **Fragmentation**: :data:`FRAGMENTATION_FRACTION` of the activations and buffers (memory the
  caching allocator takes and frees within a step; model state is allocated once and packs
  tightly), added to the buffers. The CUDA context and NCCL's own buffers (a few hundred MiB) are
  not counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parplan.plan.base import MemoryBreakdown
from parplan.plan.sharded.sync import fully_sharded, state_sharded

if TYPE_CHECKING:
    from parplan.plan.base import PlanContext
    from parplan.plan.sharded.costs import ShardedLayout

LOGIT_BYTES = 6.0
"""Bytes per logit at the loss: the bf16 logits and the fp32 softmax Megatron's vocabulary-parallel
cross-entropy keeps for backward (its gradient is written in place)."""

EAGER_LOGIT_BYTES = 12.0
"""Bytes per logit at the eager loss's peak, the start of its backward: torchtitan and Hugging Face
compute ``cross_entropy(logits.float(), labels)``, whose ``log_softmax`` keeps its fp32 output;
``nll_loss``'s backward writes a zero-filled fp32 gradient and ``log_softmax``'s backward a third
fp32 tensor while both are alive (torchtitan frees the bf16 logits, ``del pred``, before backward)."""

FRAGMENTATION_FRACTION = 0.10
"""Allocator fragmentation, as a fraction of the per-step (activation and buffer) memory."""


def inflight_chunks(schedule: str, microbatches: int, pp: int, stage: int, virtual_stages: int) -> float:
    """Micro-batch activations (in units of one whole stage's layers) a stage holds at its peak.

    >>> inflight_chunks("1f1b", 16, 8, 0, 1)
    8.0
    >>> inflight_chunks("interleaved_1f1b", 16, 8, 0, 2)  # 8 x (1 + 7 / 16)
    11.5
    """
    if schedule == "gpipe":
        return float(microbatches)
    if virtual_stages == 1:
        return float(min(microbatches, pp - stage))
    chunks = min(microbatches * virtual_stages, 2 * (pp - stage - 1) + (virtual_stages - 1) * pp + 1)
    return chunks / virtual_stages


def _shares(layout: ShardedLayout) -> tuple[int, int]:
    """(ranks dense state is sharded over, ranks expert state is sharded over)."""
    mesh, strategy = layout.mesh, layout.strategy
    data = mesh.dp * mesh.cp
    dense = mesh.sizes["dp_shard"] if strategy.fsdp == "hybrid_shard" else data
    return dense, max(1, data // mesh.ep)


def stage_memory(ctx: PlanContext, layout: ShardedLayout, stage: int) -> MemoryBreakdown:
    """The peak memory of one device of pipeline stage ``stage``."""
    strategy, spec = layout.strategy, ctx.model_spec
    chunks = layout.chunks[stage]
    expert = sum(c.expert_params for c in chunks)
    dense = sum(c.params for c in chunks) - expert
    dense_ranks, expert_ranks = _shares(layout)
    sharded = dense / dense_ranks + expert / expert_ranks
    whole = dense + expert
    weights = sharded if fully_sharded(strategy) and strategy.fsdp != "shard_grad_op" else whole
    grads = sharded if (strategy.zero >= 2 or strategy.fsdp != "none") else whole
    optimizer = sharded if state_sharded(strategy) else whole
    activations = _activations(layout, stage)
    buffers = _buffers(ctx, layout, stage)
    device = layout.mesh.device({"pp": stage})
    return MemoryBreakdown(
        device=device,
        capacity_bytes=ctx.network.device(device).memory_bytes,
        params_bytes=weights * spec.bytes_per_param,
        grads_bytes=grads * spec.bytes_per_grad,
        optimizer_bytes=optimizer * spec.optimizer_bytes_per_param,
        activations_bytes=activations,
        buffers_bytes=buffers + FRAGMENTATION_FRACTION * (activations + buffers),
    )


def _activations(layout: ShardedLayout, stage: int) -> float:
    """Activation bytes of the stage at its peak (module docstring)."""
    from parplan.model.transformer import block_activation_bytes

    strategy, shape = layout.strategy, layout.shape
    pp, v = strategy.pp, strategy.virtual_stages
    b, tp, cp = strategy.microbatch_size, strategy.tp, strategy.cp
    held = inflight_chunks(strategy.schedule, layout.microbatches, pp, stage, v)

    def per_layer(i: int, recompute: str) -> float:
        return float(
            block_activation_bytes(
                shape,
                microbatch=b,
                tp=tp,
                sp=strategy.sequence_parallel,
                cp=cp,
                recompute=recompute,  # type: ignore[arg-type]
                flash_attention=strategy.flash_attention,
                layer=i,
                kernels=strategy.kernels,
                ep=layout.mesh.ep,
                capacity_factor=strategy.capacity_factor,
            )
        )

    kinds: dict[bool, float] = {}
    layers = 0.0
    working = 0.0
    for vc in range(v):
        for i in _block_indices(layout, vc * pp + stage):
            moe = shape.is_moe(i)
            if moe not in kinds:
                kinds[moe] = per_layer(i, strategy.recompute)
                if strategy.recompute == "full":  # one block rematerialised for its backward
                    working = max(working, per_layer(i, "none"))
                elif strategy.recompute == "op":  # the recomputed rest of one block
                    working = max(working, per_layer(i, "none") - kinds[moe])
            layers += kinds[moe]
    total = layers * held + working
    tokens = b * shape.sequence_length / cp
    sp_split = tp if strategy.sequence_parallel else 1
    if stage == 0 and shape.dropout:
        total += tokens * shape.hidden / sp_split * held  # embedding dropout mask, 1 byte per element
    if stage == pp - 1:
        total += tokens * shape.hidden * shape.bytes_per_element / sp_split  # final norm input
        per_logit = EAGER_LOGIT_BYTES if strategy.kernels == "eager" else LOGIT_BYTES
        total += per_logit * tokens * shape.vocabulary / tp  # logits and the loss's softmax
    return total


def _block_indices(layout: ShardedLayout, chunk: int) -> range:
    """The block indices of model chunk ``chunk``."""
    from parplan.plan.sharded.costs import split_layers

    counts = split_layers(layout.shape.layers, layout.strategy.pp * layout.strategy.virtual_stages)
    start = sum(counts[:chunk])
    return range(start, start + counts[chunk])


def _buffers(ctx: PlanContext, layout: ShardedLayout, stage: int) -> float:
    """Communication buffers of one device of the stage (module docstring)."""
    return microbatch_buffers(layout) + sync_buffers(ctx, layout, stage)


def microbatch_buffers(layout: ShardedLayout) -> float:
    """The buffers a micro-batch's activations need: pipeline sends and receives, SP's gathered
    activation, MoE's dispatched tokens (the same on every stage)."""
    strategy, shape = layout.strategy, layout.shape
    out = 0.0
    if strategy.pp > 1:
        out += 4.0 * layout.p2p_bytes
    tokens = strategy.microbatch_size * shape.sequence_length / strategy.cp
    activation = tokens * shape.hidden * shape.bytes_per_element
    if strategy.sequence_parallel and strategy.tp > 1:
        out += activation
    if shape.experts > 1 and layout.mesh.ep > 1:
        out += tokens * shape.top_k * strategy.capacity_factor * shape.hidden * shape.bytes_per_element
    return out


def sync_buffers(ctx: PlanContext, layout: ShardedLayout, stage: int) -> float:
    """The data-parallel buffers of the stage: two gathered units (ZeRO-3/FSDP) or two gradient
    buckets."""
    strategy, spec = layout.strategy, ctx.model_spec
    if fully_sharded(strategy):
        units = [c.size_bytes for c in layout.param_gather[stage]]
        biggest = max(units, default=0.0)
        return 2.0 * biggest * (1.0 + spec.bytes_per_grad / spec.bytes_per_param)
    buckets = [c.size_bytes for c in layout.grad_sync[stage]]
    if buckets:
        return float(2.0 * min(max(buckets), strategy.aggregation.bucket_size_bytes))
    return 0.0


def plan_memory(ctx: PlanContext, layout: ShardedLayout) -> tuple[MemoryBreakdown, ...]:
    """Every device's peak memory: each device of a stage holds what the stage's first does."""
    per_stage = [stage_memory(ctx, layout, s) for s in range(layout.strategy.pp)]
    attrs = ctx.network.graph.nodes
    mesh = layout.mesh
    stride, pp = mesh.stride("pp"), mesh.pp
    out = []
    for r, d in enumerate(mesh.devices):
        m = per_stage[(r // stride) % pp]
        out.append(
            MemoryBreakdown(
                device=d,
                capacity_bytes=float(attrs[d]["memory_bytes"]),
                params_bytes=m.params_bytes,
                grads_bytes=m.grads_bytes,
                optimizer_bytes=m.optimizer_bytes,
                activations_bytes=m.activations_bytes,
                buffers_bytes=m.buffers_bytes,
            )
        )
    return tuple(out)
