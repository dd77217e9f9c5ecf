"""What one transformer block, the embedding and the head put into a sharded plan's model chunk
besides compute: the parameters one device holds for each (after TP/EP splits), the activation
bytes sent between chunks, the seconds of FSDP2's copies and of DeepSpeed's gradient
accumulation; and the seconds of a stage's optimizer step (with its gradient clipping).
:func:`~parplan.plan.sharded.costs.layout_plan` sums them chunk by chunk; a search sums them as
arrays over many plans at once (:mod:`parplan.api.search.chunks`), so both read these functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from parplan.config.strategy import ShardedStrategy
from parplan.plan.compute import (
    foreach_adamw_bytes_per_param,
    memory_bandwidth_Bps,
    optimizer_bytes_moved_per_param,
)
from parplan.plan.sharded.sync import (
    StageSync,
    StageSyncRuns,
    UnitParams,
    UnitRun,
    accumulation_bytes,
    fsdp_copy_bytes,
    gathered_param_bytes,
    stage_sync,
    stage_sync_runs,
)

if TYPE_CHECKING:
    from parplan.config.model import ModelSpec
    from parplan.model.transformer import TransformerShape
    from parplan.plan.sharded.mesh import Mesh
    from parplan.topology.network import DeviceInfo


def embedding_unit(shape: TransformerShape, strategy: ShardedStrategy, name: str = "embedding") -> UnitParams:
    """The embedding's parameters on one device (split over TP)."""
    return UnitParams(name, shape.embedding_params() / strategy.tp, 0.0)


def block_unit(
    shape: TransformerShape, strategy: ShardedStrategy, ep: int, layer: int, name: str = "block"
) -> UnitParams:
    """Block ``layer``'s parameters on one device: dense over TP, experts over TP x EP."""
    experts = shape.expert_params(layer)
    return UnitParams(name, (shape.block_params(layer) - experts) / strategy.tp, experts / (strategy.tp * ep))


def head_unit(shape: TransformerShape, strategy: ShardedStrategy, name: str = "head") -> UnitParams:
    """The head's parameters on one device (split over TP; the tied embedding's copy with a
    pipeline, as Megatron keeps it on the last stage)."""
    head = shape.head_params()
    if shape.tie_embeddings and strategy.pp > 1:
        head = float(shape.vocabulary * shape.hidden)  # Megatron's copy on the last stage
    return UnitParams(name, head / strategy.tp, 0.0)


def p2p_bytes(strategy: ShardedStrategy, shape: TransformerShape) -> float:
    """Bytes one micro-batch sends between consecutive chunks: its activation scattered over the
    TP group (:mod:`~parplan.plan.sharded.costs`)."""
    tokens = strategy.microbatch_size * shape.sequence_length / strategy.cp
    return tokens * shape.hidden * shape.bytes_per_element / strategy.tp


def fsdp_copy_seconds(
    strategy: ShardedStrategy, units: Sequence[UnitParams], spec: ModelSpec, info: DeviceInfo
) -> tuple[float, float]:
    """(forward, backward) seconds of FSDP2's copies for ``units`` on ``info``'s memory (zero
    without FSDP): what a chunk adds to its compute. Works on numpy arrays of
    parameter counts too (the search's vectorized chunks)."""
    from parplan.plan.compute import MEMORY_EFFICIENCY

    param_bytes = gathered_param_bytes(spec.bytes_per_param, strategy.dtype)
    fwd, bwd = fsdp_copy_bytes(strategy, units, param_bytes, spec.bytes_per_grad)
    rate = memory_bandwidth_Bps(info) * MEMORY_EFFICIENCY
    return fwd / rate, bwd / rate


def accumulation_seconds(strategy: ShardedStrategy, params: float, info: DeviceInfo) -> float:
    """Seconds one micro-batch's gradient accumulation adds to a chunk's backward for its
    ``params`` parameters (:func:`~parplan.plan.sharded.sync.accumulation_bytes`: DeepSpeed's,
    memory bound; 0 under Megatron and FSDP). Works on numpy arrays of parameter counts too."""
    from parplan.plan.compute import MEMORY_EFFICIENCY

    if strategy.framework != "deepspeed":
        return 0.0
    return accumulation_bytes(strategy, 1.0) * params / (memory_bandwidth_Bps(info) * MEMORY_EFFICIENCY)


def clip_bytes_per_param(strategy: ShardedStrategy, spec: ModelSpec) -> float:
    """Memory traffic per owned parameter of clipping the gradients by their total norm before the
    update, ``g`` bytes a gradient. Under FSDP PyTorch's ``clip_grad_norm_`` (torchtitan clips every
    step, ``max_norm`` 1.0, ``foreach``): ``_foreach_norm`` reads every gradient and
    ``clip_grads_with_norm_`` scales them all by the clamped coefficient (``_foreach_mul_``, read and
    write): ``3g``. Megatron's ``clip_grad_norm_fp32`` (``multi_tensor_l2norm``, ``--clip-grad`` 1.0
    by default) and DeepSpeed's ``clip_tensors_by_global_norm`` read the gradients for the norm and
    scale them only when it exceeds the limit: ``g``."""
    return (3.0 if strategy.fsdp != "none" else 1.0) * spec.bytes_per_grad


def optimizer_seconds(
    strategy: ShardedStrategy, spec: ModelSpec, owned_params: float, info: DeviceInfo
) -> float:
    """Seconds of the optimizer step over the ``owned_params`` a device updates: a fused Adam
    kernel under Megatron and ZeRO, PyTorch's foreach AdamW under FSDP (torch.optim's default on
    CUDA, what FSDP runs), memory bound; after the gradient clipping that precedes it
    (:func:`clip_bytes_per_param`)."""
    fused = strategy.fsdp == "none"
    per_param = optimizer_bytes_moved_per_param(spec) if fused else foreach_adamw_bytes_per_param(spec)
    per_param += clip_bytes_per_param(strategy, spec)
    return owned_params * per_param / memory_bandwidth_Bps(info)


def _mesh_sync_args(strategy: ShardedStrategy, spec: ModelSpec, mesh: Mesh) -> dict[str, Any]:
    """:func:`~parplan.plan.sharded.sync.stage_sync`'s keyword arguments on ``mesh``: the model's
    gradient and gathered parameter bytes, the mesh's data, expert and shard groups."""
    data_ranks = mesh.dp * mesh.cp
    return {
        "grad_bytes": spec.bytes_per_grad,
        "param_bytes": gathered_param_bytes(spec.bytes_per_param, strategy.dtype),
        "shard_group": mesh.sizes["dp_shard"],
        "data_ranks": data_ranks,
        "expert_ranks": data_ranks // mesh.ep,
    }


def mesh_stage_sync(
    strategy: ShardedStrategy, units: Sequence[UnitParams], spec: ModelSpec, mesh: Mesh
) -> StageSync:
    """:func:`~parplan.plan.sharded.sync.stage_sync` of a stage holding ``units`` on ``mesh``."""
    return stage_sync(strategy, units, **_mesh_sync_args(strategy, spec, mesh))


def mesh_stage_sync_runs(
    strategy: ShardedStrategy, runs: Sequence[UnitRun], spec: ModelSpec, mesh: Mesh
) -> StageSyncRuns:
    """:func:`mesh_stage_sync` in run-length form (:func:`~parplan.plan.sharded.sync.stage_sync_runs`:
    the same calls, equal units' repeated)."""
    return stage_sync_runs(strategy, runs, **_mesh_sync_args(strategy, spec, mesh))
