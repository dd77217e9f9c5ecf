"""The per-step (sync key) figures of a search's plans, per pipeline stage, without laying each
plan out: a stage's data-parallel calls, optimizer, model state and buffers depend on which
sharding units it holds (the embedding on stage 0, its blocks, the head on the last stage, split
into chunks by :func:`~parplan.plan.sharded.costs.split_layers`) and on its data-parallel groups.
Stages alike in both (most of a pipeline's) are worked out once
(:func:`~parplan.plan.sharded.sync.stage_sync`, :func:`~parplan.plan.sharded.sync.optimizer_params`,
:func:`~parplan.plan.sharded.memory.sync_buffers`), and every sum is taken in the order
:func:`~parplan.api.sharded_analytic._stage_sync` and :func:`~parplan.plan.sharded.memory.
stage_memory` take it, so the figures equal the layout path's (``relayout_sync``) bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from parplan.api.search.chunks import Meshes, group_of
from parplan.api.sharded_analytic import StageSync
from parplan.plan.compute import comm_sm_share
from parplan.plan.sharded.comm import CommCall
from parplan.plan.sharded.costs import split_layers
from parplan.plan.sharded.memory import sync_buffers
from parplan.plan.sharded.parts import (
    block_unit,
    embedding_unit,
    head_unit,
    mesh_stage_sync,
    optimizer_seconds,
)
from parplan.plan.sharded.sync import StageSync as StageCalls
from parplan.plan.sharded.sync import (
    UnitParams,
    fully_sharded,
    optimizer_params,
    state_sharded,
)

if TYPE_CHECKING:
    from parplan.config.strategy import ShardedStrategy
    from parplan.model.transformer import TransformerShape
    from parplan.plan.base import PlanContext
    from parplan.plan.sharded.clock import GroupClock
    from parplan.plan.sharded.costs import ShardedLayout
    from parplan.plan.sharded.mesh import Mesh
    from parplan.topology.network import DeviceInfo

_SYNC_AXES = ("dp_cp", "edp", "dp_shard", "dp_replicate", "embedding")
"""The groups the data-parallel calls run in."""
_DP_AXES = ("dp", "dp_cp", "edp", "dp_replicate")
"""The axes whose all-reduces run the plan's algorithm (the clock's rule)."""


@dataclass(frozen=True)
class Sync:
    """The figures of a structure's sync keys: ``[keys, pp]`` per stage (flags ``[keys, 1]``)."""

    sync: StageSync
    states_bytes: np.ndarray
    buffers_bytes: np.ndarray
    capacity_bytes: np.ndarray


@dataclass(frozen=True)
class _View:
    """What :func:`~parplan.plan.sharded.memory.sync_buffers` reads of a layout (one stage, 0)."""

    strategy: ShardedStrategy
    param_gather: tuple[tuple[CommCall, ...], ...]
    grad_sync: tuple[tuple[CommCall, ...], ...]


class SyncBuilder:
    """Builds :class:`Sync` for one structure's sync keys (module docstring)."""

    def __init__(self, ctx: PlanContext, shape: TransformerShape, clock: GroupClock, meshes: Meshes) -> None:
        self.ctx, self.shape, self.clock, self.meshes = ctx, shape, clock, meshes
        self._times: dict[tuple[Any, ...], float] = {}
        self._params: dict[tuple[Any, ...], tuple[float, float]] = {}
        self._fixed_memo: dict[tuple[Any, ...], tuple[StageCalls, tuple[float, ...]]] = {}

    def _seconds(self, call: CommCall, group: tuple[str, ...], algorithm: Any) -> float:
        key = (group, call.collective, call.size_bytes, algorithm if call.axis in _DP_AXES else None)
        found = self._times.get(key)
        if found is None:
            found = self._times[key] = self.clock.seconds(call, group, algorithm)
        return found

    def _timed(
        self, timed: dict[tuple[Any, ...], float], call: CommCall, groups: dict[str, Any], algorithm: Any
    ) -> float:
        """:meth:`_seconds` of ``call`` in its stage's group, memoised in ``timed`` on what a call's
        time depends on (not its label)."""
        key = (call.collective, call.size_bytes, call.axis)
        found = timed.get(key)
        if found is None:
            found = timed[key] = self._seconds(call, groups[call.axis], algorithm)
        return found

    def _stages(self, mesh: Mesh, v: int) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
        """Each stage's type index (``[pp]``) and the types: (first, last, chunk blocks, groups)."""
        pp = mesh.pp
        counts = split_layers(self.shape.layers, pp * v)
        types: dict[tuple[Any, ...], int] = {}
        index = np.empty(pp, dtype=np.intp)
        for s in range(pp):
            data = group_of(mesh, "dp_cp", s)
            groups = tuple(self.clock.canonical(group_of(mesh, a, s, data)) for a in _SYNC_AXES)
            key = (s == 0, s == pp - 1, tuple(counts[vc * pp + s] for vc in range(v)), groups)
            index[s] = types.setdefault(key, len(types))
        return index, list(types)

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

    def build(self, base: Mesh, strategies: Sequence[ShardedStrategy]) -> Sync:
        """The figures of ``strategies`` (one per sync key, alike but for ZeRO, FSDP and the
        aggregation) on ``base`` (hybrid sharding: its own mesh, as ``relayout_sync`` builds)."""
        hybrid: Mesh | None = None
        staged: dict[int, tuple[np.ndarray, list[tuple[Any, ...]], DeviceInfo]] = {}
        rows = []
        for strategy in strategies:
            mesh = base
            if strategy.fsdp == "hybrid_shard":
                hybrid = mesh = hybrid or self.meshes.build(strategy)
            if id(mesh) not in staged:
                info = self.ctx.network.device(mesh.device({"pp": 0}))
                staged[id(mesh)] = (*self._stages(mesh, strategy.virtual_stages), info)
            index, kinds, info = staged[id(mesh)]
            per_type = np.asarray([self._stage(strategy, mesh, kind, info) for kind in kinds])  # [T, 12]
            rows.append(per_type[index])
        table = np.stack(rows)  # [Y, pp, 12]
        flags = [(fully_sharded(s), fully_sharded(s) and s.fsdp != "shard_grad_op") for s in strategies]
        per_micro = np.asarray([[f[0]] for f in flags])
        sync = StageSync(
            per_microbatch=per_micro,
            gather_backward=np.asarray([[f[1]] for f in flags]),
            gather_first_s=table[..., 0],
            gather_sum_s=table[..., 1],
            scatter_last_s=table[..., 2],
            scatter_sum_s=table[..., 3],
            has_grad_sync=~per_micro & (table[..., 8] > 0),
            grad_last_s=table[..., 2],
            grad_sum_s=table[..., 3],
            overlap=np.asarray([[s.aggregation.overlap] for s in strategies]),
            extra_s=table[..., 4],
            optimizer_s=table[..., 5],
            gather_first_sm_s=table[..., 9],
            gather_rest_sm_s=table[..., 10],
            scatter_rest_sm_s=table[..., 11],
            grad_rest_sm_s=table[..., 11],
        )
        capacity = float(self.ctx.network.device(base.device({"pp": 0})).memory_bytes)
        return Sync(sync, table[..., 6], table[..., 7], np.full(table.shape[:2], capacity))

    def _stage(
        self, strategy: ShardedStrategy, mesh: Mesh, kind: tuple[Any, ...], info: DeviceInfo
    ) -> tuple[float, ...]:
        """One stage type's (gather first, gather sum, scatter last, scatter sum, extra, optimizer,
        model state bytes, sync buffer bytes, gradient calls, and the SM seconds of the first
        gather, the other gathers and every scatter but the last): the calls and what does not
        depend on the all-reduce algorithm memoised (:meth:`_fixed`), the gradient calls timed;
        ``info``: the mesh's device (the array path runs on one kind of device)."""
        calls, fixed = self._fixed(strategy, mesh, kind, info)
        groups = dict(zip(_SYNC_AXES, kind[3], strict=True))
        algorithm = strategy.aggregation.algorithm
        timed: dict[tuple[Any, ...], float] = {}  # a stage's blocks make alike calls: time each once
        scatters = [self._timed(timed, c, groups, algorithm) for c in calls.grad_sync]
        last = scatters[-1] if scatters else 0.0
        scatter_sm = self._stolen(timed, calls.grad_sync[:-1], groups, algorithm, info)
        return (fixed[0], fixed[1], last, sum(scatters), *fixed[2:], scatter_sm)

    def _stolen(
        self,
        timed: dict[tuple[Any, ...], float],
        calls: Sequence[CommCall],
        groups: dict[str, Any],
        algorithm: Any,
        info: DeviceInfo,
    ) -> float:
        """Compute seconds ``calls`` take from what they run beside on ``info``'s SMs, summed in
        call order as :meth:`~parplan.plan.sharded.clock.CollectiveClock.stolen` sums them."""
        channels = self.clock.channels
        return sum(
            self._timed(timed, c, groups, algorithm) * comm_sm_share(info, channels(c, groups[c.axis]))
            for c in calls
        )

    def _fixed(
        self, strategy: ShardedStrategy, mesh: Mesh, kind: tuple[Any, ...], info: DeviceInfo
    ) -> tuple[StageCalls, tuple[float, ...]]:
        """A stage type's calls, and its (gather first, gather sum, extra, optimizer, state
        bytes, buffer bytes, gradient calls, SM seconds of the first gather and of the others),
        alike for every all-reduce algorithm."""
        s = strategy
        key = (s.zero, s.fsdp, s.aggregation.bucket_size_bytes, s.shard_group, mesh.sizes["dp_shard"], kind)
        found = self._fixed_memo.get(key)
        if found is not None:
            return found
        spec, shape = self.ctx.model_spec, self.shape
        first, last = kind[0], kind[1]
        groups = dict(zip(_SYNC_AXES, kind[3], strict=True))
        algorithm = strategy.aggregation.algorithm  # no call here is a data-parallel all-reduce
        units = [u for chunk in self._units(strategy, mesh, kind) for u in chunk]
        data = mesh.dp * mesh.cp
        expert_ranks = data // mesh.ep
        calls = mesh_stage_sync(strategy, units, spec, mesh)
        timed: dict[tuple[Any, ...], float] = {}  # a stage's blocks make alike calls: time each once
        gathers = [self._timed(timed, c, groups, algorithm) for c in calls.param_gather]
        extra = 0.0
        if shape.tie_embeddings and mesh.pp > 1 and (first or last):
            size = shape.vocabulary * shape.hidden / strategy.tp * spec.bytes_per_grad
            call = CommCall("all_reduce", size, "embedding", False, "tied embedding all-reduce")
            extra += self._seconds(call, groups["embedding"], algorithm)
        extra += sum(self._seconds(c, groups[c.axis], algorithm) for c in calls.param_sync)
        owned = optimizer_params(strategy, units, data, expert_ranks, mesh.sizes["dp_shard"])
        optimizer = optimizer_seconds(strategy, spec, owned, info)
        view = _View(strategy, (calls.param_gather,), (calls.grad_sync,))
        buffers = sync_buffers(self.ctx, cast("ShardedLayout", view), 0)
        first_sm = self._stolen(timed, calls.param_gather[:1], groups, algorithm, info)
        rest_sm = self._stolen(timed, calls.param_gather[1:], groups, algorithm, info)
        fixed = (
            gathers[0] if gathers else 0.0,
            sum(gathers),
            extra,
            optimizer,
            self._states(strategy, mesh, kind),
            buffers,
            float(bool(calls.grad_sync)),
            first_sm,
            rest_sm,
        )
        found = self._fixed_memo[key] = (calls, fixed)
        return found

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
