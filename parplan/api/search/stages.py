"""The per-step (sync key) figures of a search's plans, per pipeline stage, without laying each
plan out: a stage's data-parallel calls, optimizer, model state and buffers depend on which
sharding units it holds (the embedding on stage 0, its blocks, the head on the last stage, split
into chunks by :func:`~parplan.plan.sharded.costs.split_layers`) and on its data-parallel groups.
Stages alike in both (most of a pipeline's) are worked out once
(:func:`~parplan.plan.sharded.sync.stage_sync_runs`: the calls of equal blocks as one pattern and
its count; :func:`~parplan.plan.sharded.memory.sync_buffers`; the optimizer and model state in
:mod:`~parplan.api.search.holdings`); each distinct sequence of calls is priced once
per groups and algorithm, and every sum is taken call by call in the order
:func:`~parplan.api.sharded_analytic._stage_sync` and :func:`~parplan.plan.sharded.memory.
stage_memory` take it, so the figures equal the layout path's (``relayout_sync``) bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from parplan.api.search.holdings import StageHoldings, units_key
from parplan.api.search.meshes import Meshes, group_of, run_of, run_period
from parplan.api.sharded_analytic import StageSync
from parplan.plan.compute import comm_memory_excess, comm_sm_share
from parplan.plan.sharded.blocks import bus_bytes
from parplan.plan.sharded.comm import CommCall
from parplan.plan.sharded.costs import split_layers
from parplan.plan.sharded.memory import sync_buffers
from parplan.plan.sharded.parts import (
    mesh_stage_sync_runs,
)
from parplan.plan.sharded.sync import (
    CallRun,
    UnitRun,
    fully_sharded,
)
from parplan.plan.sharded.sync import StageSyncRuns as StageCallRuns

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
_DATA_SLICES = ("dp_cp", "edp", "dp_shard", "dp_replicate")
"""The axes whose groups :func:`~parplan.api.search.meshes.group_of` cuts from the stage's
``dp_cp`` group, from its first rank on."""
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


@dataclass(frozen=True)
class _Staged:
    """What a structure's sync keys on one mesh share (:meth:`SyncBuilder._staged`)."""

    index: np.ndarray  # [pp]: each stage's type
    kinds: list[tuple[Any, ...]]  # (first, last, chunk blocks, group numbers)
    info: DeviceInfo
    tied: tuple[float, ...]  # each type's tied-embedding all-reduce seconds (0 without)
    heads: list[tuple[Any, ...]]  # each type's (first, last, chunk blocks)


@dataclass
class _KeyRows:
    """One mesh's sync keys in :meth:`SyncBuilder.build`: their rows, and each distinct
    (ZeRO, FSDP, bucket)'s static figures and (calls, algorithm)'s sums (memos shared by the
    structures of one mesh shape, :meth:`SyncBuilder._key_rows`)."""

    found: _Staged
    ys: list[int] = field(default_factory=list)
    static_rows: list[np.ndarray] = field(default_factory=list)
    sums_rows: list[np.ndarray] = field(default_factory=list)
    statics: dict[tuple[Any, ...], tuple[tuple[int, ...], np.ndarray]] = field(default_factory=dict)
    sums: dict[tuple[Any, ...], np.ndarray] = field(default_factory=dict)


class SyncBuilder:
    """Builds :class:`Sync` for one structure's sync keys (module docstring)."""

    def __init__(self, ctx: PlanContext, shape: TransformerShape, clock: GroupClock, meshes: Meshes) -> None:
        self.ctx, self.shape, self.clock, self.meshes = ctx, shape, clock, meshes
        self._times: dict[tuple[Any, ...], tuple[float, float, float]] = {}
        self._calls_memo: dict[tuple[Any, ...], tuple[int, float, float]] = {}
        self.holdings = StageHoldings(ctx, shape)
        self._sums_memo: dict[tuple[Any, ...], tuple[float, ...]] = {}
        self._sequence_ids: dict[tuple[Any, ...], int] = {}
        self._algorithm_numbers: dict[Any, int] = {}  # small keys for the memos (a spec hashes its fields)
        self._sequences: list[StageCallRuns] = []
        self._group_ids: dict[tuple[str, ...], int] = {}
        self._groups: list[tuple[str, ...]] = []
        self._by_shape: dict[tuple[Any, ...], _KeyRows] = {}

    def _timed(
        self, call: CommCall, group: int, algorithm: tuple[Any, int], info: DeviceInfo
    ) -> tuple[float, float, float]:
        """(seconds, SM seconds, memory seconds) of ``call`` in the canonical group numbered
        ``group``: the clock's seconds (``algorithm`` runs a data-parallel all-reduce) and those
        times the share of ``info``'s SMs its NCCL channels hold and times its memory excess
        (:meth:`~parplan.plan.sharded.clock.CollectiveClock.sm_stolen` and ``memory_stolen``'s
        products); memoised on what they depend on (not the call's label; the algorithm by its
        number, ``algorithm`` being the spec and its number)."""
        dp_reduce = call.collective == "all_reduce" and call.axis in _DP_AXES
        key = (group, call.collective, call.size_bytes, algorithm[1] if dp_reduce else None)
        found = self._times.get(key)
        if found is None:
            devices = self._groups[group]
            seconds = self.clock.seconds(call, devices, algorithm[0])
            channels = self.clock.channels(call, devices)
            share = comm_sm_share(info, channels)
            excess = comm_memory_excess(
                info, channels, seconds, bus_bytes(call.collective, call.size_bytes, len(devices))
            )
            found = self._times[key] = (seconds, seconds * share, seconds * excess)
        return found

    def _group_id(self, devices: tuple[str, ...]) -> int:
        found = self._group_ids.get(devices)
        if found is None:
            found = self._group_ids[devices] = len(self._groups)
            self._groups.append(devices)
        return found

    def _stages(self, mesh: Mesh, v: int) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
        """Each stage's type index (``[pp]``) and the types: (first, last, chunk blocks, group
        numbers per axis of :data:`_SYNC_AXES`)."""
        pp = mesh.pp
        counts = split_layers(self.shape.layers, pp * v)
        types: dict[tuple[Any, ...], int] = {}
        index = np.empty(pp, dtype=np.intp)
        ranked = self.meshes.shape(mesh) is not None and mesh.cp == 1
        period = run_period(self.clock, self.ctx.network) if ranked else None
        seen: dict[int, tuple[int, ...]] = {}  # groups by first rank mod period (alike: run_period)
        for s in range(pp):
            residue = s * mesh.tp % period if period else s  # stage s's runs start at rank s tp
            groups = seen.get(residue) if ranked else self._groups_of(mesh, s)
            if groups is None:
                groups = seen[residue] = self._ranked_groups(mesh, s)
            key = (s == 0, s == pp - 1, tuple(counts[vc * pp + s] for vc in range(v)), groups)
            index[s] = types.setdefault(key, len(types))
        return index, list(types)

    def _groups_of(self, mesh: Mesh, s: int) -> tuple[int, ...]:
        """Stage ``s``'s group numbers per axis of :data:`_SYNC_AXES`, from its groups' devices."""
        data = group_of(mesh, "dp_cp", s)
        whole = self._group_id(self.clock.canonical(data))
        numbers = []
        for a in _SYNC_AXES:
            group = data if a == "dp_cp" else group_of(mesh, a, s, data)
            # edp, dp_shard and dp_replicate are slices of dp_cp from its first rank: as long
            # as it, they are it (and need no canonical of their own, a hash of every rank)
            same = a in _DATA_SLICES and len(group) == len(data)
            numbers.append(whole if same else self._group_id(self.clock.canonical(group)))
        return tuple(numbers)

    def _ranked_groups(self, mesh: Mesh, s: int) -> tuple[int, ...]:
        """:meth:`_groups_of` on a mesh whose ranks are the network's (:meth:`Meshes.shape`) and
        whose groups are runs of ranks (cp 1, :func:`~parplan.api.search.meshes.run_of`): each
        canonical group by :meth:`~parplan.plan.sharded.clock.GroupClock.canonical_run`."""
        data = cast("tuple[int, int, int]", run_of(mesh, "dp_cp", s))
        whole = self._group_id(self.clock.canonical_run(*data))
        numbers = []
        for a in _SYNC_AXES:
            run = cast("tuple[int, int, int]", run_of(mesh, a, s))
            same = a in _DATA_SLICES and run[2] == data[2]  # as long as dp_cp: dp_cp (above)
            numbers.append(whole if same else self._group_id(self.clock.canonical_run(*run)))
        return tuple(numbers)

    def build(self, base: Mesh, strategies: Sequence[ShardedStrategy]) -> Sync:
        """The figures of ``strategies`` (one per sync key, alike but for ZeRO, FSDP and the
        aggregation) on ``base`` (hybrid sharding: its own mesh, as ``relayout_sync`` builds).
        Per mesh, each distinct (ZeRO, FSDP, bucket) gives every stage type's calls and static
        figures once (:meth:`_statics_of`), each distinct (calls per type, algorithm) their sums
        (:meth:`_sums_of`): arrays over the types, gathered per key and stage at once."""
        hybrid: Mesh | None = None
        groups: dict[int, _KeyRows] = {}  # per mesh
        for y, strategy in enumerate(strategies):
            mesh = base
            if strategy.fsdp == "hybrid_shard":
                hybrid = mesh = hybrid or self.meshes.build(strategy)
            rows = groups.get(id(mesh))
            if rows is None:
                rows = groups[id(mesh)] = self._key_rows(mesh, strategy)
            s, algorithm = strategy, strategy.aggregation.algorithm
            number = self._algorithm_numbers.setdefault(algorithm, len(self._algorithm_numbers))
            prefix = (s.zero, s.fsdp, s.aggregation.bucket_size_bytes)
            statics = rows.statics.get(prefix)
            if statics is None:
                statics = rows.statics[prefix] = self._statics_of(s, mesh, rows.found)
            sums_key = (statics[0], number)
            sums = rows.sums.get(sums_key)
            if sums is None:
                sums = rows.sums[sums_key] = self._sums_of(statics[0], (algorithm, number), rows.found)
            rows.ys.append(y)
            rows.static_rows.append(statics[1])
            rows.sums_rows.append(sums)
        table = np.empty((len(strategies), base.pp, 15))  # [Y, pp, 15]
        for rows in groups.values():
            index = rows.found.index
            static = np.stack(rows.static_rows)[:, index]  # [y, pp, 4]
            summed = np.stack(rows.sums_rows)[:, index]  # [y, pp, 11]
            tied = np.asarray(rows.found.tied)[index]
            table[rows.ys] = np.concatenate(
                [
                    summed[..., [0, 1, 4, 5]],
                    ((0.0 + tied) + summed[..., 7])[..., None],  # extra: 0.0, += tied, += synced
                    static,
                    summed[..., [2, 3, 6, 8, 9, 10]],
                ],
                axis=2,
            )
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
            gather_first_memory_s=table[..., 12],
            gather_rest_memory_s=table[..., 13],
            scatter_rest_memory_s=table[..., 14],
            grad_rest_memory_s=table[..., 14],
        )
        capacity = float(self.ctx.network.device(base.device({"pp": 0})).memory_bytes)
        return Sync(sync, table[..., 6], table[..., 7], np.full(table.shape[:2], capacity))

    def _key_rows(self, mesh: Mesh, strategy: ShardedStrategy) -> _KeyRows:
        """A mesh's rows for :meth:`build`: its :meth:`_staged` and the memos of its static
        figures and sums, kept per mesh shape (:meth:`Meshes.shape`) and virtual stages, which
        fix the stage types (what they read of the strategy besides, its tp and the model's ties,
        is the mesh's or the search's), so structures of one shape share them."""
        shape = self.meshes.shape(mesh)
        if shape is None:
            return _KeyRows(self._staged(mesh, strategy))
        key = (shape, strategy.virtual_stages)
        found = self._by_shape.get(key)
        if found is None:
            found = self._by_shape[key] = _KeyRows(self._staged(mesh, strategy))
        return _KeyRows(found.found, statics=found.statics, sums=found.sums)

    def _staged(self, mesh: Mesh, strategy: ShardedStrategy) -> _Staged:
        """What every sync key on ``mesh`` shares: its stage types (:meth:`_stages`) and their
        ends and blocks, its device, and each type's tied-embedding all-reduce (between
        the first and last stage with a pipeline; not a data-parallel call, so alike for every
        algorithm)."""
        index, kinds = self._stages(mesh, strategy.virtual_stages)
        info = self.ctx.network.device(mesh.device({"pp": 0}))
        shape, spec = self.shape, strategy.aggregation.algorithm
        algorithm = (spec, self._algorithm_numbers.setdefault(spec, len(self._algorithm_numbers)))
        embedding = _SYNC_AXES.index("embedding")
        tied = []
        for first, last, _, gids in kinds:
            seconds = 0.0
            if shape.tie_embeddings and mesh.pp > 1 and (first or last):
                size = shape.vocabulary * shape.hidden / strategy.tp * self.ctx.model_spec.bytes_per_grad
                call = CommCall("all_reduce", size, "embedding", False, "tied embedding all-reduce")
                seconds = self._timed(call, gids[embedding], algorithm, info)[0]
            tied.append(seconds)
        return _Staged(index, kinds, info, tuple(tied), [kind[:3] for kind in kinds])

    def _statics_of(
        self, strategy: ShardedStrategy, mesh: Mesh, found: _Staged
    ) -> tuple[tuple[int, ...], np.ndarray]:
        """Each stage type's number of its sequence of calls and ``[T, 4]`` (optimizer seconds,
        model state bytes, sync buffer bytes, whether it has gradient calls) under ``strategy``:
        the calls as the number of their sequence (:meth:`_summed` prices each distinct sequence
        once: bucket sizes that cut a stage alike make the same calls), and what does not depend
        on the groups. :meth:`build` calls this once per distinct ZeRO, FSDP and bucket of a mesh;
        the units, calls and holdings it reads are memoised on what they depend on
        (:meth:`~parplan.api.search.holdings.StageHoldings.stage_units`, :meth:`_calls`,
        ``owned``), so the stage types of structures alike but for dp share them, and so do
        stages alike but for how their blocks split into chunks; each takes every type at once."""
        heads = found.heads
        units = self.holdings.stage_units(strategy, mesh, heads)
        calls = self._calls(strategy, mesh, heads, [runs for runs, _ in units])
        owned = self.holdings.owned(strategy, mesh, heads, found.info, [sums for _, sums in units])
        rows = [(o[0], o[1], c[1], c[2]) for c, o in zip(calls, owned, strict=True)]
        return tuple(c[0] for c in calls), np.asarray(rows, dtype=float)

    def _sums_of(self, sequences: tuple[int, ...], algorithm: tuple[Any, int], found: _Staged) -> np.ndarray:
        """``[T, 11]``: each stage type's sums of its calls ``sequences[t]`` in its groups
        (:meth:`_summed`), memoised per sequence, groups, algorithm and device."""
        info = found.info
        out = []
        for sequence, kind in zip(sequences, found.kinds, strict=True):
            key = (sequence, kind[3], algorithm[1], info.name)
            sums = self._sums_memo.get(key)
            if sums is None:
                sums = self._sums_memo[key] = self._summed(sequence, kind[3], algorithm, info)
            out.append(sums)
        return np.asarray(out, dtype=float)

    def _calls(
        self, strategy: ShardedStrategy, mesh: Mesh, heads: Sequence[Any], runs: list[list[UnitRun]]
    ) -> list[tuple[int, float, float]]:
        """Each stage type's (the number of its sequence of calls, its sync buffer bytes,
        whether it has gradient calls), ``runs`` its units; memoised on what
        :func:`~parplan.plan.sharded.sync.stage_sync_runs` reads: the sharding, the bucket, the
        units (:func:`~parplan.api.search.holdings.units_key`) and of the ranks whether each
        group has more than one (and a hybrid shard group's size, which divides its all-reduce)."""
        s = strategy
        data, expert, shard = mesh.dp * mesh.cp, mesh.dp * mesh.cp // mesh.ep, mesh.sizes["dp_shard"]
        ranks: tuple[Any, ...] = (data > 1, expert > 1)
        if s.fsdp == "hybrid_shard":
            ranks += (shard, data > shard)
        sharding = (s.zero, s.fsdp, s.framework, s.aggregation.bucket_size_bytes)
        prefix, memo, out = (*sharding, s.tp, mesh.ep, s.pp > 1, ranks), self._calls_memo, []
        for head, stage_runs in zip(heads, runs, strict=True):
            key = (prefix, units_key(head))
            found = memo.get(key)
            if found is None:
                found = memo[key] = self._sequence(strategy, mesh, stage_runs)
            out.append(found)
        return out

    def _sequence(
        self, strategy: ShardedStrategy, mesh: Mesh, runs: list[UnitRun]
    ) -> tuple[int, float, float]:
        """:meth:`_calls` of one stage type, unmemoised."""
        calls = mesh_stage_sync_runs(strategy, runs, self.ctx.model_spec, mesh)
        signature = (calls.param_gather, calls.grad_sync, calls.param_sync)  # equal calls, equal sums
        sequence = self._sequence_ids.get(signature)
        if sequence is None:
            sequence = self._sequence_ids[signature] = len(self._sequences)
            self._sequences.append(calls)
        distinct = [
            tuple(c for pattern, _ in part for c in pattern) for part in (calls.param_gather, calls.grad_sync)
        ]
        view = _View(strategy, (distinct[0],), (distinct[1],))  # the largest call is what counts
        buffers = sync_buffers(self.ctx, cast("ShardedLayout", view), 0)
        return (sequence, buffers, float(bool(calls.grad_sync)))

    def _summed(
        self, sequence: int, gids: tuple[int, ...], algorithm: tuple[Any, int], info: DeviceInfo
    ) -> tuple[float, ...]:
        """The sums of calls ``sequence`` in the groups numbered ``gids`` (:data:`_SYNC_AXES`):
        (gather first, gather sum, first gather's SM seconds, the other gathers', scatter last,
        scatter sum, every scatter's but the last's SM seconds, parameter all-gather sum), each
        added in call order as ``_stage_sync`` adds them one call at a time (:func:`_sums`)."""
        calls = self._sequences[sequence]
        groups = dict(zip(_SYNC_AXES, gids, strict=True))
        gather_first, _, gather_sum, first_sm, rest_sm, _, first_memory, rest_memory, _ = _sums(
            self._priced(calls.param_gather, groups, algorithm, info)
        )
        _, scatter_last, scatter_sum, _, _, scatter_sm, _, _, scatter_memory = _sums(
            self._priced(calls.grad_sync, groups, algorithm, info)
        )
        synced = _sums(self._priced(calls.param_sync, groups, algorithm, info))[2]
        return (
            gather_first,
            gather_sum,
            first_sm,
            rest_sm,
            scatter_last,
            scatter_sum,
            scatter_sm,
            synced,
            first_memory,
            rest_memory,
            scatter_memory,
        )

    def _priced(
        self, runs: Sequence[CallRun], groups: dict[str, int], algorithm: tuple[Any, int], info: DeviceInfo
    ) -> list[tuple[list[tuple[float, float, float]], int]]:
        """``runs`` with each call's (seconds, SM seconds, memory seconds) (:meth:`_timed`)."""
        return [
            ([self._timed(c, groups[c.axis], algorithm, info) for c in pattern], n) for pattern, n in runs
        ]


def _sums(runs: Sequence[tuple[Sequence[tuple[float, float, float]], int]]) -> tuple[float, ...]:
    """Of every call ``runs`` stands for (each pattern ``count`` times in a row), priced
    (seconds, SM seconds, memory seconds): (first seconds, last seconds, sum of seconds, SM
    seconds of the first, of all but the first, of all but the last, and the same three of the
    memory seconds). Each sum adds the calls one after another in call order from 0, as the
    layout path's ``sum`` does, so the figures are its figures."""
    first = last = (0.0, 0.0, 0.0)
    total = rest_sm = head_sm = rest_memory = head_memory = 0.0
    started = False
    for pattern, count in runs:
        for _ in range(count):
            for call in pattern:
                if started:
                    rest_sm += call[1]
                    head_sm += last[1]
                    rest_memory += call[2]
                    head_memory += last[2]
                else:
                    first, started = call, True
                total += call[0]
                last = call
    return (
        first[0],
        last[0],
        total,
        0.0 + first[1],
        rest_sm,
        head_sm,
        0.0 + first[2],
        rest_memory,
        head_memory,
    )
