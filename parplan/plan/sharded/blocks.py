"""One transformer block's, the embedding's and the head's work on one device, for one plan: the
seconds of their kernels (:class:`Roofline`, the roofline of :mod:`parplan.plan.compute` over the
ops of :mod:`parplan.model.transformer`, cached per kind of block) and their TP/SP/CP/EP calls
(:func:`chunk_calls`). :mod:`parplan.plan.sharded.costs` strings them into model chunks; the
search sums them as arrays (:mod:`parplan.api.search.chunks`). :func:`bus_bytes`: what a call
moves over each rank's bus (what its memory traffic is counted from).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from parplan.config.strategy import ShardedStrategy
from parplan.plan.sharded.comm import CommSizes, LayerComm, embedding_comm, head_comm, layer_comm

if TYPE_CHECKING:
    from parplan.model.transformer import Op, TransformerShape
    from parplan.plan.base import PlanContext
    from parplan.plan.sharded.mesh import Mesh
    from parplan.topology.network import DeviceInfo


class Roofline:
    """Ops and their seconds on one device, cached per kind of block (dense or MoE); each op's
    forward and backward seconds worked out once (the block's sums, its attention's and its
    memory-bound share read them), in ``op_memo`` when given: a memo of :func:`~parplan.plan.
    compute.op_seconds` per (op, backward) that Rooflines of one device kind and dtype may share
    (plans alike but for recomputation run the same ops)."""

    def __init__(
        self,
        ctx: PlanContext,
        strategy: ShardedStrategy,
        shape: TransformerShape,
        device: DeviceInfo,
        op_memo: dict[tuple[Op, bool], float] | None = None,
    ) -> None:
        self.strategy, self.shape, self.device = strategy, shape, device
        self._op_memo: dict[tuple[Op, bool], float] = {} if op_memo is None else op_memo
        self._blocks: dict[bool, tuple[float, float, float, float, float]] = {}
        self._memory: dict[bool, float] = {}
        self._comm: dict[bool, LayerComm] = {}

    def layer_comm(self, sizes: CommSizes, moe: bool, ep: int) -> LayerComm:
        """The calls of a dense or MoE block (the same for every block of its kind)."""
        found = self._comm.get(moe)
        if found is None:
            found = self._comm[moe] = layer_comm(self.strategy, sizes, moe=moe, ep=ep)
        return found

    def _recomputed(self, ops: Sequence[Op]) -> Sequence[Op]:
        """The ops the strategy's recomputation runs again before the backward."""
        mode = self.strategy.recompute
        if mode == "op":
            from parplan.model.checkpointing import recomputed_ops

            return tuple(recomputed_ops(ops))
        return {"none": (), "selective": tuple(op for op in ops if op.kind == "attention"), "full": ops}[mode]

    def _op(self, op: Op, backward: bool) -> float:
        """:func:`~parplan.plan.compute.op_seconds` of ``op`` on the device, memoised."""
        key = (op, backward)
        found = self._op_memo.get(key)
        if found is None:
            from parplan.plan.compute import op_seconds

            found = self._op_memo[key] = op_seconds(self.device, op, self.strategy.dtype, backward=backward)
        return found

    def _seconds(self, ops: Sequence[Op]) -> tuple[float, float, float, float, float]:
        fwd = sum(self._op(op, False) for op in ops)
        bwd = sum(self._op(op, True) for op in ops)
        core = [op for op in ops if op.kind == "attention"]
        attention = sum(self._op(op, False) for op in core)
        attention_bwd = sum(self._op(op, True) for op in core)
        mode = self.strategy.recompute
        if mode == "op":
            recompute = sum(self._op(op, False) for op in self._recomputed(ops))
        else:
            recompute = {"none": 0.0, "selective": attention, "full": fwd}[mode]
        return fwd, bwd, recompute, attention, attention_bwd

    def _memory_share(self, ops: Sequence[Op]) -> float:
        """Share of the ops' forward, backward and recomputed seconds in memory-bound kernels
        (every kind but GEMMs and attention: the roofline runs them at the vector peak, bounded by
        the memory bandwidth)."""
        total = memory = 0.0
        for op, backward in (
            *((op, False) for op in ops),
            *((op, True) for op in ops),
            *((op, False) for op in self._recomputed(ops)),
        ):
            seconds = self._op(op, backward)
            total += seconds
            if op.kind not in ("gemm", "attention"):
                memory += seconds
        return memory / total if total > 0.0 else 0.0

    def block(self, layer: int, mesh: Mesh) -> tuple[float, float, float, float, float]:
        """(forward, backward, recompute, attention forward, attention backward) seconds of block
        ``layer``."""
        key = self.shape.is_moe(layer)
        found = self._blocks.get(key)
        if found is None:
            from parplan.model.transformer import block_ops

            s = self.strategy
            ops = block_ops(
                self.shape,
                microbatch=s.microbatch_size,
                tp=s.tp,
                sp=s.sequence_parallel,
                cp=s.cp,
                flash_attention=s.flash_attention,
                ep=mesh.ep,
                capacity_factor=s.capacity_factor,
                layer=layer,
                kernels=s.kernels,
            )
            found = self._blocks[key] = self._seconds(ops)
            self._memory[key] = self._memory_share(ops)
        return found

    def memory_share(self, layer: int, mesh: Mesh) -> float:
        """Share of block ``layer``'s kernel seconds (forward, backward, recomputation) that is
        memory bound: the compute the collectives beside it slow through the memory bandwidth
        they take (:func:`~parplan.plan.compute.comm_compute_share`)."""
        self.block(layer, mesh)
        return self._memory[self.shape.is_moe(layer)]

    def ends(self, which: str) -> tuple[float, float]:
        """(forward, backward) seconds of the embedding or the head."""
        from parplan.model.transformer import embedding_ops, head_ops

        s = self.strategy
        if which == "embedding":
            ops = embedding_ops(self.shape, microbatch=s.microbatch_size, tp=s.tp, cp=s.cp, kernels=s.kernels)
        else:
            ops = head_ops(
                self.shape,
                microbatch=s.microbatch_size,
                tp=s.tp,
                cp=s.cp,
                sp=s.sequence_parallel,
                kernels=s.kernels,
            )
        fwd, bwd, _, _, _ = self._seconds(ops)
        return fwd, bwd


def comm_sizes(strategy: ShardedStrategy, shape: TransformerShape) -> CommSizes:
    tokens = strategy.microbatch_size * shape.sequence_length / strategy.cp
    e = shape.bytes_per_element
    kv = 2.0 * tokens * (shape.kv_heads / strategy.tp) * shape.head_dim * e if strategy.cp > 1 else 0.0
    dispatch = tokens * shape.top_k * strategy.capacity_factor * shape.hidden * e
    return CommSizes(activation_bytes=tokens * shape.hidden * e, kv_step_bytes=kv, dispatch_bytes=dispatch)


def chunk_calls(
    strategy: ShardedStrategy, shape: TransformerShape, ep: int, layer: int = 0
) -> tuple[LayerComm, LayerComm, LayerComm]:
    """The TP/SP/CP/EP calls of block ``layer``, of the embedding and of the head, one
    micro-batch (what every chunk strings together in model order)."""
    sizes = comm_sizes(strategy, shape)
    tokens = strategy.microbatch_size * shape.sequence_length / strategy.cp
    return (
        layer_comm(strategy, sizes, moe=shape.is_moe(layer), ep=ep),
        embedding_comm(strategy, sizes.activation_bytes),
        head_comm(strategy, sizes.activation_bytes, tokens),
    )


def bus_bytes(collective: str, size_bytes: float, ranks: int) -> float:
    """Bytes each rank's bus carries for one call of ``size_bytes`` (the buffer nccl-tests calls
    ``n``) on ``ranks`` ranks: ``2(p-1)/p n`` for an all-reduce, ``(p-1)/p n`` for an all-gather,
    reduce-scatter or all-to-all, ``n`` otherwise (nccl-tests' bus bandwidth factors); 0 on one.

    >>> bus_bytes("all_reduce", 8.0, 4), bus_bytes("all_gather", 8.0, 4), bus_bytes("broadcast", 8.0, 4)
    (12.0, 6.0, 8.0)
    """
    if ranks <= 1:
        return 0.0
    if collective == "all_reduce":
        return 2.0 * (ranks - 1) / ranks * size_bytes
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (ranks - 1) / ranks * size_bytes
    return size_bytes
