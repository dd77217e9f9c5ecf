"""What one step of a sharded plan costs, stage by stage: :func:`layout_plan` turns a
:class:`~parplan.config.strategy.ShardedStrategy` into a :class:`ShardedLayout` that both the
closed-form evaluation (:mod:`parplan.api.sharded_analytic`) and the event-simulated task graph
(:mod:`parplan.plan.sharded.tasks`) read.

**Model chunks.** The ``L`` blocks are split over ``C = pp x virtual_stages`` model chunks in model
order; chunk ``c`` runs on stage ``c mod pp`` as that stage's virtual chunk ``c // pp`` (Megatron's
interleaving). Uneven splits are allowed: every chunk gets ``L // C`` blocks and the ``L mod C``
left over go one each to chunks ``1, 2, .., C - 2``, then ``C - 1``, then ``0`` (the first and last
chunks also carry the embedding and the logits, so they take extra blocks last). The embedding runs
on chunk 0, the head (logits and loss) on chunk ``C - 1``.

**Compute** per chunk, one micro-batch, one device: T's ``block_ops`` / ``embedding_ops`` /
``head_ops`` for this device's share (TP, SP, CP, EP split) timed by the roofline ``op_seconds``
of the stage's device in the strategy's dtype; backward with ``backward=True``. Recomputation
(Korthikanti et al. 2022): ``full`` redoes every block's forward before its backward; ``selective``
redoes the attention core (the ``attention`` ops); ``op`` (torchtitan's per-op policy,
:mod:`parplan.model.checkpointing`) redoes every op of the block but the fused attention and every
other linear layer. The straggler jitter of other plans is not applied.

**FSDP copies**: with ``fsdp`` each chunk's forward and backward also carry FSDP2's copies
around its all-gathers and reduce-scatters (:func:`~parplan.plan.sharded.sync.fsdp_copy_bytes`),
memory-bound kernels on the compute stream.

**DeepSpeed's gradient accumulation** (``framework: deepspeed``): each chunk's backward also adds
its gradients to fp32 copies (:func:`~parplan.plan.sharded.sync.accumulation_bytes`), memory bound.

**Communication**: :mod:`parplan.plan.sharded.comm` (TP/SP, CP ring, EP all-to-all per block) and
:mod:`parplan.plan.sharded.sync` (data-parallel reduction, ZeRO/FSDP gathers, tied embeddings).
Between consecutive chunks each micro-batch sends ``p2p_bytes`` = ``b S / cp x h x e / tp``: the
activation as Megatron sends it (scattered over the TP group, sequence-parallel or not) and, in
backward, its gradient of the same size. DeepSpeed's ``PipelineEngine`` sends the same: with model
parallelism it partitions the stage's output and its gradient over the TP group
(``is_pipe_partitioned``, ``PartitionedTensor``) and the receiver all-gathers them inside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from parplan.config.strategy import ShardedStrategy
from parplan.errors import PlanError
from parplan.plan.sharded.blocks import Roofline, comm_sizes
from parplan.plan.sharded.comm import CommCall, LayerComm, embedding_comm, head_comm
from parplan.plan.sharded.mesh import Mesh, build_mesh, check_shape, microbatches_per_pipeline
from parplan.plan.sharded.parts import (
    accumulation_seconds,
    block_unit,
    embedding_unit,
    fsdp_copy_seconds,
    head_unit,
    mesh_stage_sync,
    optimizer_seconds,
    p2p_bytes,
)
from parplan.plan.sharded.sync import (
    UnitParams,
    optimizer_params,
)

if TYPE_CHECKING:
    from parplan.config.model import ModelSpec
    from parplan.model.transformer import TransformerShape
    from parplan.plan.base import PlanContext
    from parplan.topology.network import DeviceInfo

__all__ = [
    "ChunkWork",
    "CommCall",
    "ShardedLayout",
    "block_figures",
    "block_memory_share",
    "layout_plan",
    "split_layers",
    "transformer_shape",
]


@dataclass(frozen=True)
class ChunkWork:
    """One model chunk (virtual stage) of one pipeline stage, one micro-batch, one device.

    ``forward_s`` / ``backward_s`` / ``recompute_s`` are compute only; ``forward_comm`` /
    ``backward_comm`` are the TP/SP/CP/EP calls in the order they run (``recompute ...`` calls of
    full recomputation first in backward). ``params`` are what this device holds for the chunk
    after TP/EP splits, before ZeRO/FSDP (``expert_params`` of them are expert weights).
    ``attention_forward_s`` / ``attention_backward_s`` are the times of the attention cores (what
    CP's ring hides behind); ``layer_comm`` the calls of each block (forward and backward), for a
    builder that works layer by layer.
    """

    layers: tuple[str, ...]
    forward_s: float
    backward_s: float
    recompute_s: float
    forward_comm: tuple[CommCall, ...]
    backward_comm: tuple[CommCall, ...]
    params: float
    expert_params: float = 0.0
    attention_forward_s: float = 0.0
    attention_backward_s: float = 0.0
    layer_comm: tuple[LayerComm, ...] = ()


@dataclass(frozen=True)
class ShardedLayout:
    """A sharded plan's mesh and per-stage costs (module docstring). Per ``[stage]``:
    ``chunks[s][v]`` holds model chunk ``v x pp + s``; ``param_gather`` the ZeRO-3/FSDP all-gathers
    in forward order (again before backward when ``param_gather_backward``); ``grad_sync`` the
    gradient reduce-scatters / all-reduces in backward order; ``param_sync`` the all-gathers of
    updated parameters after the optimizer (ZeRO-1/2); ``optimizer_s`` the update.
    ``per_microbatch_sync``: the gathers and ``grad_sync`` run every micro-batch (ZeRO-3, FSDP),
    not once per step. ``embedding_sync`` is the tied-embedding all-reduce between first and last
    stage (``None`` without tied embeddings or a pipeline); ``units`` the sharding units each stage
    holds (what the data-parallel fields are built from); ``bare_chunks`` and ``chunk_units`` the
    chunks before FSDP's copies and the units of each, from which a re-layout adds another
    strategy's copies."""

    strategy: ShardedStrategy
    mesh: Mesh
    shape: TransformerShape
    microbatches: int
    chunks: tuple[tuple[ChunkWork, ...], ...]
    p2p_bytes: float
    param_gather: tuple[tuple[CommCall, ...], ...]
    grad_sync: tuple[tuple[CommCall, ...], ...]
    optimizer_s: tuple[float, ...]
    embedding_sync: CommCall | None
    param_sync: tuple[tuple[CommCall, ...], ...] = ()
    param_gather_backward: bool = False
    per_microbatch_sync: bool = False
    bare_chunks: tuple[tuple[ChunkWork, ...], ...] = ()  # ``chunks`` before FSDP's copies
    chunk_units: tuple[tuple[tuple[UnitParams, ...], ...], ...] = ()  # per stage, per chunk

    @property
    def units(self) -> tuple[tuple[UnitParams, ...], ...]:
        """The sharding units each stage holds, in model order (its chunks' units)."""
        return stage_units(self.chunk_units)

    @property
    def virtual_stages(self) -> int:
        """Model chunks per stage."""
        return len(self.chunks[0])

    def stage_params(self, stage: int) -> float:
        """Parameters one device of ``stage`` holds (TP/EP split, before ZeRO/FSDP)."""
        return sum(c.params for c in self.chunks[stage])


def stage_units(
    chunk_units: Sequence[Sequence[Sequence[UnitParams]]],
) -> tuple[tuple[UnitParams, ...], ...]:
    """Per stage, its chunks' sharding units in model order."""
    return tuple(tuple(u for units in row for u in units) for row in chunk_units)


def transformer_shape(ctx: PlanContext) -> TransformerShape:
    """The scenario model's transformer shape (its sequence the scenario's
    ``training.sequence_length`` when given), or a :class:`PlanError` for another model."""
    from parplan.model.transformer import shape_of

    shape = shape_of(ctx.model, ctx.training.sequence_length)
    if shape is None:
        raise PlanError(
            f"a sharded plan needs a transformer model; {ctx.model.name!r} is not one "
            "(use a transformer generator or a Hugging Face config)"
        )
    return shape


def split_layers(layers: int, chunks: int) -> tuple[int, ...]:
    """Blocks per model chunk (module docstring's rule for the remainder).

    >>> split_layers(10, 4)
    (2, 3, 3, 2)
    >>> split_layers(7, 4)
    (1, 2, 2, 2)
    """
    base, extra = divmod(layers, chunks)
    counts = [base] * chunks
    preference = [*range(1, chunks - 1), chunks - 1, 0] if chunks > 1 else [0]
    for c in preference[:extra]:
        counts[c] += 1
    return tuple(counts)


def block_figures(
    ctx: PlanContext,
    strategy: ShardedStrategy,
    mesh: Mesh,
    info: DeviceInfo,
    layer: int = 0,
    roof: Roofline | None = None,
) -> tuple[tuple[float, float, float, float, float], tuple[float, float], tuple[float, float]]:
    """One block's (forward, backward, recompute, attention forward, attention backward)
    seconds, and the embedding's and the head's (forward, backward), on ``info``: what
    :func:`layout_plan` sums into chunks (the search sums them itself, as arrays). ``roof``: the
    :class:`Roofline` of ``strategy`` on ``info`` to read (it caches the block's ops, which
    :func:`block_memory_share` reads too), else a new one."""
    roof = roof or Roofline(ctx, strategy, transformer_shape(ctx), info)
    return roof.block(layer, mesh), roof.ends("embedding"), roof.ends("head")


def block_memory_share(
    ctx: PlanContext,
    strategy: ShardedStrategy,
    mesh: Mesh,
    info: DeviceInfo,
    layer: int = 0,
    roof: Roofline | None = None,
) -> float:
    """The memory-bound share of one block's kernel seconds on ``info``
    (:meth:`~parplan.plan.sharded.blocks.Roofline.memory_share`): what the collectives overlapping
    the blocks slow through the memory bandwidth they take; the layout's clock and the search read
    the same figure. ``roof``: as :func:`block_figures`'."""
    roof = roof or Roofline(ctx, strategy, transformer_shape(ctx), info)
    return roof.memory_share(layer, mesh)


def _node_ids(ctx: PlanContext, shape: TransformerShape) -> tuple[str, tuple[str, ...], str]:
    """(embedding id, block ids, head id) of the model graph: its first, middle and last nodes."""
    order = ctx.model.order
    if len(order) != shape.layers + 2:
        raise PlanError(
            f"model {ctx.model.name!r} has {len(order)} nodes; a sharded plan expects an embedding, "
            f"{shape.layers} blocks and a head"
        )
    return order[0], tuple(order[1:-1]), order[-1]


def _chunk(
    ctx: PlanContext,
    layout: tuple[ShardedStrategy, TransformerShape, Mesh],
    roof: Roofline,
    chunk: int,
    first: int,
    count: int,
) -> tuple[ChunkWork, list[UnitParams]]:
    """The work of model chunk ``chunk`` holding blocks ``first .. first + count - 1``."""
    strategy, shape, mesh = layout
    total = strategy.pp * strategy.virtual_stages
    emb_id, block_ids, head_id = _node_ids(ctx, shape)
    sizes = comm_sizes(strategy, shape)
    fwd = bwd = rec = attn = attn_bwd = 0.0
    fcomm: list[CommCall] = []
    bcomm: list[LayerComm] = []
    per_layer: list[LayerComm] = []
    units: list[UnitParams] = []
    names: list[str] = []
    if chunk == 0:
        f, b = roof.ends("embedding")
        fwd, bwd = fwd + f, bwd + b
        lc = embedding_comm(strategy, sizes.activation_bytes)
        fcomm += lc.forward
        bcomm.append(lc)
        names.append(emb_id)
        units.append(embedding_unit(shape, strategy, emb_id))
    for i in range(first, first + count):
        f, b, r, a, ab = roof.block(i, mesh)
        fwd, bwd, rec, attn, attn_bwd = fwd + f, bwd + b, rec + r, attn + a, attn_bwd + ab
        lc = roof.layer_comm(sizes, shape.is_moe(i), mesh.ep)
        per_layer.append(lc)
        fcomm += lc.forward
        bcomm.append(lc)
        names.append(block_ids[i])
        units.append(block_unit(shape, strategy, mesh.ep, i, block_ids[i]))
    if chunk == total - 1:
        f, b = roof.ends("head")
        fwd, bwd = fwd + f, bwd + b
        tokens = strategy.microbatch_size * shape.sequence_length / strategy.cp
        lc = head_comm(strategy, sizes.activation_bytes, tokens)
        fcomm += lc.forward
        bcomm.append(lc)
        names.append(head_id)
        units.append(head_unit(shape, strategy, head_id))
    backward = tuple(c for lc in reversed(bcomm) for c in lc.backward)
    work = ChunkWork(
        layers=tuple(names),
        forward_s=fwd,
        backward_s=bwd,
        recompute_s=rec,
        forward_comm=tuple(fcomm),
        backward_comm=backward,
        params=sum(u.dense + u.expert for u in units),
        expert_params=sum(u.expert for u in units),
        attention_forward_s=attn,
        attention_backward_s=attn_bwd,
        layer_comm=tuple(per_layer),
    )
    return work, units


def _with_grad_accumulation(work: ChunkWork, strategy: ShardedStrategy, info: DeviceInfo) -> ChunkWork:
    """The chunk with its gradients' accumulation (DeepSpeed's) after its backward."""
    extra = accumulation_seconds(strategy, work.params, info)
    return replace(work, backward_s=work.backward_s + extra) if extra > 0.0 else work


def _with_fsdp_copies(
    work: ChunkWork, strategy: ShardedStrategy, units: Sequence[UnitParams], spec: ModelSpec, info: DeviceInfo
) -> ChunkWork:
    """The chunk with FSDP2's copies around its collectives (:func:`~parplan.plan.sharded.sync.
    fsdp_copy_bytes`) on its compute stream, memory bound."""
    fwd, bwd = fsdp_copy_seconds(strategy, units, spec, info)
    if fwd <= 0.0 and bwd <= 0.0:
        return work
    return replace(work, forward_s=work.forward_s + fwd, backward_s=work.backward_s + bwd)


def layout_plan(ctx: PlanContext, strategy: ShardedStrategy, mesh: Mesh | None = None) -> ShardedLayout:
    """The mesh and the per-stage costs of ``strategy`` on the scenario (module docstring);
    :class:`PlanError` for a plan that does not fit the model, the cluster or the batch. ``mesh``:
    ``build_mesh(strategy, ctx.network)`` already built (a search lays out many plans on one)."""
    shape = transformer_shape(ctx)
    mesh = mesh if mesh is not None else build_mesh(strategy, ctx.network)
    check_shape(strategy, shape, mesh)
    m = microbatches_per_pipeline(strategy, ctx.training.global_batch_size, mesh.dp)
    pp, v = strategy.pp, strategy.virtual_stages
    counts = split_layers(shape.layers, pp * v)
    starts = [sum(counts[:c]) for c in range(pp * v)]
    spec = ctx.model_spec
    bare: list[tuple[ChunkWork, ...]] = []
    per_chunk: list[tuple[tuple[UnitParams, ...], ...]] = []
    roofs: dict[DeviceInfo, Roofline] = {}
    for s in range(pp):
        info = ctx.network.device(mesh.device({"pp": s}))
        kind = replace(info, name="", group=None)  # alike devices time alike: one roofline
        roof = roofs.get(kind)
        if roof is None:
            roof = roofs[kind] = Roofline(ctx, strategy, shape, info)
        row: list[ChunkWork] = []
        row_units: list[tuple[UnitParams, ...]] = []
        for vc in range(v):
            c = vc * pp + s
            work, chunk_units = _chunk(ctx, (strategy, shape, mesh), roof, c, starts[c], counts[c])
            row.append(_with_grad_accumulation(work, strategy, info))
            row_units.append(tuple(chunk_units))
        bare.append(tuple(row))
        per_chunk.append(tuple(row_units))
    embedding_sync = None
    if shape.tie_embeddings and pp > 1:
        size = shape.vocabulary * shape.hidden / strategy.tp * spec.bytes_per_grad
        embedding_sync = CommCall("all_reduce", size, "embedding", False, "tied embedding all-reduce")
    return ShardedLayout(
        strategy=strategy,
        mesh=mesh,
        shape=shape,
        microbatches=m,
        chunks=_copied_chunks(ctx, strategy, mesh, bare, per_chunk),
        p2p_bytes=p2p_bytes(strategy, shape),
        embedding_sync=embedding_sync,
        bare_chunks=tuple(bare),
        chunk_units=tuple(per_chunk),
        **_sync_fields(ctx, strategy, mesh, stage_units(per_chunk)),
    )


def _copied_chunks(
    ctx: PlanContext,
    strategy: ShardedStrategy,
    mesh: Mesh,
    bare: Sequence[Sequence[ChunkWork]],
    chunk_units: Sequence[Sequence[Sequence[UnitParams]]],
) -> tuple[tuple[ChunkWork, ...], ...]:
    """Each stage's chunks with ``strategy``'s FSDP copies (:func:`_with_fsdp_copies`)."""
    spec = ctx.model_spec
    out = []
    for s, (row, row_units) in enumerate(zip(bare, chunk_units, strict=True)):
        info = ctx.network.device(mesh.device({"pp": s}))
        pairs = zip(row, row_units, strict=True)
        out.append(tuple(_with_fsdp_copies(w, strategy, u, spec, info) for w, u in pairs))
    return tuple(out)


def _sync_fields(
    ctx: PlanContext, strategy: ShardedStrategy, mesh: Mesh, stage_units: Sequence[Sequence[UnitParams]]
) -> dict[str, Any]:
    """The layout's data-parallel fields (gathers, gradient sync, parameter sync, optimizer) of
    stages holding ``stage_units``."""
    spec = ctx.model_spec
    data_ranks = mesh.dp * mesh.cp
    expert_ranks = data_ranks // mesh.ep
    gathers, grads, params_after, optimizer = [], [], [], []
    for s, units in enumerate(stage_units):
        info = ctx.network.device(mesh.device({"pp": s}))
        sync = mesh_stage_sync(strategy, units, spec, mesh)
        gathers.append(sync.param_gather)
        grads.append(sync.grad_sync)
        params_after.append(sync.param_sync)
        owned = optimizer_params(strategy, units, data_ranks, expert_ranks, mesh.sizes["dp_shard"])
        optimizer.append(optimizer_seconds(strategy, spec, owned, info))
    fully = strategy.zero == 3 or strategy.fsdp != "none"
    return {
        "param_gather": tuple(gathers),
        "grad_sync": tuple(grads),
        "optimizer_s": tuple(optimizer),
        "param_sync": tuple(params_after),
        "param_gather_backward": fully and strategy.fsdp != "shard_grad_op",
        "per_microbatch_sync": fully,
    }


def relayout_sync(ctx: PlanContext, layout: ShardedLayout, strategy: ShardedStrategy) -> ShardedLayout:
    """``layout`` for ``strategy``, which differs from the layout's only in ZeRO, FSDP and
    ``aggregation`` (what a search varies on one laid-out plan): the same chunks with the new
    strategy's FSDP copies, the data-parallel fields again (and the mesh again under hybrid
    sharding, whose shard group it sets)."""
    mesh = layout.mesh
    if "hybrid_shard" in (strategy.fsdp, layout.strategy.fsdp):
        mesh = build_mesh(strategy, ctx.network)
    chunks = _copied_chunks(ctx, strategy, mesh, layout.bare_chunks, layout.chunk_units)
    return replace(
        layout, strategy=strategy, mesh=mesh, chunks=chunks, **_sync_fields(ctx, strategy, mesh, layout.units)
    )
