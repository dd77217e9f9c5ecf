"""What a pipeline stage of a search's plan holds, without laying the plan out: its sharding
units in model order (the embedding on stage 0, its blocks, the head on the last stage), their
parameter sums, and what those give per data-parallel layout: the optimizer's seconds and the
model state's bytes (:func:`~parplan.plan.sharded.memory.stage_memory`'s terms), each summed as
the layout path sums it, so the figures are its figures bit for bit. Memoised on what they read;
:class:`~parplan.api.search.stages.SyncBuilder` adds the stage's calls. And the activations a
stage holds per micro-batch key (:class:`StageActivations`, which the chunk builder reads).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from parplan.plan.sharded.memory import EAGER_LOGIT_BYTES, LOGIT_BYTES, inflight_chunks
from parplan.plan.sharded.parts import block_unit, embedding_unit, head_unit, optimizer_seconds
from parplan.plan.sharded.sync import (
    UnitParams,
    UnitRun,
    fully_sharded,
    optimizer_params,
    state_sharded,
    unit_runs,
)

if TYPE_CHECKING:
    from parplan.config.strategy import ShardedStrategy
    from parplan.model.transformer import TransformerShape
    from parplan.plan.base import PlanContext
    from parplan.plan.sharded.mesh import Mesh
    from parplan.topology.network import DeviceInfo


class StageHoldings:
    """A stage type's units, parameter sums, optimizer seconds and model state bytes, memoised
    for one search (the stage type: whether it holds the embedding and the head, its blocks per
    chunk)."""

    def __init__(self, ctx: PlanContext, shape: TransformerShape) -> None:
        self.ctx, self.shape = ctx, shape
        self._params: dict[tuple[Any, ...], tuple[float, float]] = {}
        self._unit_memo: dict[tuple[Any, ...], tuple[list[UnitRun], tuple[UnitParams, UnitParams]]] = {}
        self._owned: dict[tuple[Any, ...], tuple[float, float]] = {}

    def _units(self, strategy: ShardedStrategy, mesh: Mesh, kind: tuple[Any, ...]) -> list[list[UnitParams]]:
        """The units of each chunk of a stage of type ``kind``, in model order."""
        first, last, counts = kind[0], kind[1], kind[2]
        block = block_unit(self.shape, strategy, mesh.ep, 0)
        out = []
        for vc, n in enumerate(counts):
            units = [embedding_unit(self.shape, strategy)] if first and vc == 0 else []
            units += [block] * n
            if last and vc == len(counts) - 1:
                units.append(head_unit(self.shape, strategy))
            out.append(units)
        return out

    def _state_params(
        self, strategy: ShardedStrategy, mesh: Mesh, kind: tuple[Any, ...]
    ) -> tuple[float, float]:
        """(dense, expert) parameters of the stage, summed as ``stage_memory`` sums its chunks."""
        key = (strategy.tp, mesh.ep, strategy.pp > 1, *kind[:3])
        found = self._params.get(key)
        if found is None:
            chunks = self._units(strategy, mesh, kind)
            params = [sum(u.dense + u.expert for u in units) for units in chunks]
            experts = [sum(u.expert for u in units) for units in chunks]
            expert = sum(experts)
            found = self._params[key] = (sum(params) - expert, expert)
        return found

    def owned(
        self,
        strategy: ShardedStrategy,
        mesh: Mesh,
        kinds: Sequence[tuple[Any, ...]],
        info: DeviceInfo,
        sums: Sequence[tuple[UnitParams, UnitParams]],
    ) -> list[tuple[float, float]]:
        """Each stage type's of ``kinds`` (optimizer seconds, model state bytes), ``sums`` its
        units' (:meth:`stage_units`); memoised on what they read: not the bucket (the calls'
        alone), and of ZeRO and FSDP only which of the weights, gradients and optimizer state are
        sharded, over which ranks, and whether the optimizer is fused
        (:func:`~parplan.plan.sharded.parts.optimizer_seconds`), so the bucket and ZeRO variants
        of a stage share them. The key's part the types share is made once for all of them."""
        s = strategy
        flags = (
            fully_sharded(s) and s.fsdp != "shard_grad_op",
            s.zero >= 2 or s.fsdp != "none",
            state_sharded(s),
            s.fsdp == "hybrid_shard",
            s.fsdp == "none",
        )
        data, expert, shard = mesh.dp * mesh.cp, mesh.dp * mesh.cp // mesh.ep, mesh.sizes["dp_shard"]
        prefix = (flags, shard, data, mesh.ep, s.tp, s.pp > 1, info.name)
        memo = self._owned
        out = []
        for kind, kind_sums in zip(kinds, sums, strict=True):
            key = (prefix, kind[:3])
            found = memo.get(key)
            if found is None:
                owned = optimizer_params(s, kind_sums, data, expert, shard)
                found = memo[key] = (
                    optimizer_seconds(s, self.ctx.model_spec, owned, info),
                    self._states(s, mesh, kind),
                )
            out.append(found)
        return out

    def stage_units(
        self, strategy: ShardedStrategy, mesh: Mesh, kinds: Sequence[tuple[Any, ...]]
    ) -> list[tuple[list[UnitRun], tuple[UnitParams, UnitParams]]]:
        """Each stage type's of ``kinds`` units as runs, and two units holding their dense and
        their expert sums (added one unit at a time: what :func:`~parplan.plan.sharded.sync.
        optimizer_params` adds, which adds these two to the same figures, ``x + 0.0 == x``): the
        units in model order, the same for every split of the stage's blocks into chunks
        (:func:`units_key`)."""
        prefix = (strategy.tp, mesh.ep, strategy.pp > 1)
        memo = self._unit_memo
        out = []
        for kind in kinds:
            key = (prefix, units_key(kind))
            found = memo.get(key)
            if found is None:
                units = [u for chunk in self._units(strategy, mesh, kind) for u in chunk]
                dense, expert = sum(u.dense for u in units), sum(u.expert for u in units)
                sums = (UnitParams("dense", dense, 0.0), UnitParams("expert", 0.0, expert))
                found = memo[key] = (unit_runs(units), sums)
            out.append(found)
        return out

    def _states(self, strategy: ShardedStrategy, mesh: Mesh, kind: tuple[Any, ...]) -> float:
        """Weights, gradients and optimizer state in bytes (``stage_memory``'s terms)."""
        spec = self.ctx.model_spec
        dense, expert = self._state_params(strategy, mesh, kind)
        data = mesh.dp * mesh.cp
        dense_ranks = mesh.sizes["dp_shard"] if strategy.fsdp == "hybrid_shard" else data
        sharded = dense / dense_ranks + expert / max(1, data // mesh.ep)
        whole = dense + expert
        weights = sharded if fully_sharded(strategy) and strategy.fsdp != "shard_grad_op" else whole
        grads = sharded if (strategy.zero >= 2 or strategy.fsdp != "none") else whole
        optimizer = sharded if state_sharded(strategy) else whole
        return float(
            weights * spec.bytes_per_param
            + grads * spec.bytes_per_grad
            + optimizer * spec.optimizer_bytes_per_param
        )


def units_key(kind: tuple[Any, ...]) -> tuple[bool, bool, int]:
    """What a stage type's units in model order depend on: whether it holds the embedding (first)
    and the head (last), and its blocks (:meth:`StageHoldings._units` lays them out chunk by chunk,
    embedding first and head last, so any split of the blocks gives one sequence of units: the
    calls and the unit sums are alike; the model state, summed per chunk, is not)."""
    return (kind[0], kind[1], sum(kind[2]))


class StageActivations:
    """The activations each pipeline stage holds (:func:`~parplan.plan.sharded.memory.stage_memory`'s
    terms), memoised per schedule and per block figure for one search."""

    def __init__(self, shape: TransformerShape) -> None:
        self.shape = shape
        self._held: dict[tuple[Any, ...], np.ndarray] = {}
        self._prefixes: dict[tuple[float, int], np.ndarray] = {}

    def of(
        self, s: ShardedStrategy, pp: int, m: int, blocks: np.ndarray, per_block: float, working: float
    ) -> np.ndarray:
        """``[pp]``: the activations of each stage holding ``blocks[stage]`` blocks of ``per_block``
        bytes each (and ``working`` bytes of one block's at work) under ``s`` with ``m``
        micro-batches."""
        shape, v = self.shape, s.virtual_stages
        key = (s.schedule, m, pp, v)
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = np.asarray(
                [inflight_chunks(s.schedule, m, pp, st, v) for st in range(pp)]
            )
        width = int(blocks.max())
        prefix = self._prefixes.get((per_block, width))
        if prefix is None:  # 0, one block's, two blocks' ... added one at a time
            prefix = self._prefixes[(per_block, width)] = np.add.accumulate(
                np.concatenate([[0.0], np.full(width, per_block)])
            )
        layers = prefix[blocks]
        total = layers * held + working
        tokens = s.microbatch_size * shape.sequence_length / s.cp
        sp_split = s.tp if s.sequence_parallel else 1
        if shape.dropout:
            total[0] += tokens * shape.hidden / sp_split * held[0]
        total[pp - 1] += tokens * shape.hidden * shape.bytes_per_element / sp_split
        per_logit = EAGER_LOGIT_BYTES if s.kernels == "eager" else LOGIT_BYTES
        total[pp - 1] += per_logit * tokens * shape.vocabulary / s.tp
        return np.asarray(total)
