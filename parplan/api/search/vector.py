"""The closed-form step of every candidate of a search at once: step time, peak memory per device,
MFU and what bounds each plan, as numpy columns aligned with a
:class:`~parplan.api.search.space.CandidateTable`.

One algorithm in one place: the arithmetic from chunk figures to the step
(:func:`~parplan.api.sharded_analytic.stage_micro`, :func:`~parplan.api.sharded_analytic.assemble_step`)
is the one :func:`~parplan.api.sharded_analytic.evaluate_layout` runs, here on arrays shaped
``[candidates, stages]``. What feeds it is memoised on the keys it depends on: a candidate is a
*structure* (devices, dp, tp, pp, cp, ep, virtual stages), a *micro-batch* key (micro-batch size,
SP, recomputation: the per-chunk compute and TP/CP/EP calls, the activations, the pipeline hops)
and a *sync* key (ZeRO, FSDP, algorithm, bucket: the data-parallel calls, the optimizer, the model
state). Per structure the micro-batch keys' figures come from per-block figures as arrays
(:mod:`~parplan.api.search.chunks`) and the sync keys' per kind of stage
(:mod:`~parplan.api.search.stages`), both without laying a plan out and both equal to the layout
path's bit for bit (the builders and their memos kept from one evaluation to the next on a
network: :mod:`~parplan.api.search.memo`); then every candidate of the structure is assembled
from them with numpy. Memory follows :func:`~parplan.plan.sharded.memory.stage_memory` term by
term. Structures the array path does not cover (:func:`~parplan.api.search.meshes.applies`:
blocks of two kinds, mixed devices) take the layout path: per micro-batch key one
:func:`~parplan.plan.sharded.costs.layout_plan`, per sync key one
:func:`~parplan.plan.sharded.costs.relayout_sync`, timed by a
:class:`~parplan.plan.sharded.clock.CollectiveClock` sharing congruent groups.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from parplan.api.search.chunks import Micro
from parplan.api.search.memo import builders
from parplan.api.search.meshes import applies, group_of
from parplan.api.search.space import FSDP_MODES, RECOMPUTE_MODES, CandidateTable, _algorithms
from parplan.api.search.stages import Sync
from parplan.api.sharded_analytic import (
    StageMicro,
    StageSync,
    StepFigures,
    _chunk_sums,
    _stage_sync,
    assemble_step,
    stage_micro,
)
from parplan.plan.sharded.clock import CollectiveClock
from parplan.plan.sharded.costs import CommCall, layout_plan, relayout_sync
from parplan.plan.sharded.memory import (
    FRAGMENTATION_FRACTION,
    microbatch_buffers,
    stage_memory,
    sync_buffers,
)
from parplan.plan.sharded.symmetry import node_symmetry

if TYPE_CHECKING:
    from parplan.config.search import SearchSpec
    from parplan.plan.base import PlanContext
    from parplan.plan.sharded.costs import ShardedLayout

BOUND_NAMES: tuple[str, ...] = (
    "compute",
    "pipeline bubble",
    "blocking TP/EP communication",
    "exposed overlappable communication (TP/CP/FSDP)",
    "data-parallel gradient sync",
    "optimizer",
)
"""What bounds a plan, in :func:`~parplan.api.sharded_analytic.bound_text`'s order and words."""

_DP_AXES = ("dp", "dp_cp", "edp", "dp_replicate")
"""The axes whose all-reduces run the search's algorithm (the clock's rule)."""
_STRUCTURE = ("devices", "dp", "tp", "pp", "cp", "ep", "virtual_stages")
_MICRO = ("microbatch_size", "sequence_parallel", "recompute", "fsdp")
_COPIES_AS = {
    "none": "none",
    "full_shard": "full_shard",
    "hybrid_shard": "full_shard",
    "shard_grad_op": "shard_grad_op",
}
"""The FSDP mode a micro-batch key is laid out with: its chunks carry FSDP2's copies
(:func:`~parplan.plan.sharded.sync.fsdp_copy_bytes`), which hybrid sharding makes as full sharding
does; the mesh stays the structure's."""
_COPIES_KEY = np.asarray([FSDP_MODES.index(_COPIES_AS[mode]) for mode in FSDP_MODES])
"""Each FSDP mode's micro-batch key value (by :data:`FSDP_MODES` index): alike where the copies are."""
_SYNC = ("zero", "fsdp", "algorithm", "bucket")
_MICRO_FIELDS = tuple(f.name for f in fields(StageMicro))
_SYNC_FIELDS = tuple(f.name for f in fields(StageSync))


@dataclass(frozen=True)
class Evaluation:
    """The closed-form figures of every candidate, aligned with the table's rows."""

    step_time_s: np.ndarray
    peak_memory_bytes: np.ndarray
    mfu: np.ndarray
    fits: np.ndarray
    bound: np.ndarray

    def take(self, rows: np.ndarray) -> Evaluation:
        """The figures of ``rows``, in that order."""
        return Evaluation(**{f.name: getattr(self, f.name)[rows] for f in fields(self)})


class _MeshClock(CollectiveClock):
    """A :class:`CollectiveClock` sharing congruent groups, whose groups come from rank arithmetic
    on the default placement (tp, cp, pp, dp innermost first; the search's): the members
    :meth:`~parplan.plan.sharded.mesh.Mesh.group` lists, without walking coordinates."""

    def __init__(self, ctx: PlanContext, layout: ShardedLayout, times: dict[tuple[Any, ...], float]) -> None:
        super().__init__(ctx, layout, share_congruent=True)
        self.shared = times
        mesh = layout.mesh
        self.mesh_key = (mesh.size, mesh.tp, mesh.pp, mesh.cp, mesh.dp, mesh.ep, mesh.sizes["dp_shard"])

    def seconds(self, call: CommCall, stage: int) -> float:
        """Seconds ``call`` takes on stage ``stage``'s group, shared by every plan on this mesh
        (the all-reduce algorithm is part of the key where it applies)."""
        algorithm = None
        if call.collective == "all_reduce" and call.axis in _DP_AXES:
            algorithm = self.layout.strategy.aggregation.algorithm
        key = (*self.mesh_key, call.collective, call.axis, call.size_bytes, stage, algorithm)
        found = self.shared.get(key)
        if found is None:
            found = self.shared[key] = super().seconds(call, stage)
        return found

    def group(self, axis: str, stage: int) -> tuple[str, ...]:
        """The devices of ``axis``'s group holding stage ``stage``'s first device."""
        key = (axis, stage)
        found = self._groups.get(key)
        if found is None:
            found = self._groups[key] = _group(self.layout, axis, stage)
        return found


def _group(layout: ShardedLayout, axis: str, stage: int) -> tuple[str, ...]:
    """:meth:`Mesh.group` of stage ``stage``'s first device on the default placement."""
    from parplan.config.strategy import DEFAULT_PLACEMENT

    mesh = layout.mesh
    if tuple(layout.strategy.placement) != DEFAULT_PLACEMENT:
        if axis == "pp":
            return (mesh.device({"pp": stage}), mesh.device({"pp": (stage + 1) % mesh.pp}))
        return mesh.group(axis, mesh.device({"pp": stage}))  # type: ignore[arg-type]
    return group_of(mesh, axis, stage)


def _micro(ctx: PlanContext, layout: ShardedLayout, times: dict[tuple[Any, ...], float]) -> Micro:
    """The reference path's figures of one micro-batch key (one laid-out plan), as a one-key
    :class:`Micro`."""
    clock = _MeshClock(ctx, layout, times)
    strategy, pp = layout.strategy, layout.strategy.pp
    chunks = _chunk_sums(clock)
    hop = 0.0
    if pp > 1:
        call = CommCall("send_recv", layout.p2p_bytes, "pp", True, "p2p")
        hop = max(clock.seconds(call, s) for s in range(pp))
    micro = stage_micro(chunks, strategy.tp_comm_overlap)
    return Micro(
        micro=StageMicro(*(np.asarray(getattr(micro, f.name))[None] for f in fields(StageMicro))),
        first_backward_s=chunks.backward_s[None, :, 0],
        hop_s=np.asarray([hop]),
        microbatches=np.asarray([layout.microbatches]),
        activations_bytes=np.asarray([[stage_memory(ctx, layout, s).activations_bytes for s in range(pp)]]),
        buffers_bytes=np.asarray([microbatch_buffers(layout)]),
    )


def _stack(micros: list[Micro]) -> Micro:
    """One :class:`Micro` of several keys' (in order)."""

    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(m, name) for m in micros])

    micro = StageMicro(
        *(np.concatenate([getattr(m.micro, f.name) for m in micros]) for f in fields(StageMicro))
    )
    return Micro(micro, *(cat(f.name) for f in fields(Micro) if f.name != "micro"))


def _sync(ctx: PlanContext, layout: ShardedLayout, times: dict[tuple[Any, ...], float]) -> Sync:
    """The layout path's figures of one sync key (one re-laid plan), as a one-key :class:`Sync`."""
    clock = _MeshClock(ctx, layout, times)
    pp = layout.strategy.pp
    memory = [stage_memory(ctx, layout, s) for s in range(pp)]
    sync = _stage_sync(clock)
    return Sync(
        sync=StageSync(*(np.broadcast_to(getattr(sync, f.name), (pp,))[None] for f in fields(StageSync))),
        states_bytes=np.asarray([[m.params_bytes + m.grads_bytes + m.optimizer_bytes for m in memory]]),
        buffers_bytes=np.asarray([[sync_buffers(ctx, layout, s) for s in range(pp)]]),
        capacity_bytes=np.asarray([[m.capacity_bytes for m in memory]]),
    )


def _stack_sync(syncs: list[Sync]) -> Sync:
    """One :class:`Sync` of several keys' (in order)."""

    def cat(values: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(values)

    sync = StageSync(*(cat([getattr(y.sync, f.name) for y in syncs]) for f in fields(StageSync)))
    return Sync(sync, *(cat([getattr(y, f.name) for y in syncs]) for f in fields(Sync) if f.name != "sync"))


def _keys(
    table: CandidateTable, names: tuple[str, ...], remap: dict[str, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each distinct key, each row's key index), keys in lexicographic order of
    their columns; ``remap[name]`` maps a column's values first (values that key alike). The
    columns are folded into one int64 per row (mixed radix over each column's range, which keeps
    the lexicographic order), so one 1-D ``np.unique`` does what ``np.unique(axis=0)`` on the
    stacked columns does at several times the cost; a test holds the two equal."""
    remap = remap or {}
    columns = [getattr(table, n).astype(np.int64) for n in names]
    keyed = [remap[n][c] if n in remap else c for n, c in zip(names, columns, strict=True)]
    code = np.zeros(len(table), dtype=np.int64)
    span = 1
    for column in keyed:
        low = int(column.min()) if len(column) else 0
        radix = (int(column.max()) - low + 1) if len(column) else 1
        span *= radix
        if span >= 2**62:  # too many combinations for one int64: the stacked rows
            _, first, inverse = np.unique(
                np.stack(keyed, axis=1), axis=0, return_index=True, return_inverse=True
            )
            return first, inverse.reshape(-1)
        code = code * radix + (column - low)
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


class _Evaluator:
    """Fills the output columns structure by structure (module docstring)."""

    def __init__(self, ctx: PlanContext, search: SearchSpec, table: CandidateTable) -> None:
        from parplan.model.transformer import model_flops_per_token
        from parplan.plan.sharded.costs import transformer_shape

        self.ctx, self.search, self.table = ctx, search, table
        self.times: dict[tuple[Any, ...], float] = {}
        shape = self.shape = transformer_shape(ctx)
        kept = builders(ctx, search, shape)
        self.chunks, self.stages, self.meshes = kept.chunks, kept.stages, kept.meshes
        tokens = float(ctx.training.global_batch_size * shape.sequence_length)
        self.flops = float(model_flops_per_token(shape)) * tokens
        device = ctx.network.device(ctx.network.devices[0])
        peak = device.peak_for(search.dtype)
        self.peak = float(peak if peak is not None else device.peak_flop_per_s)
        self._algorithms = _algorithms(search)
        self._aggregations: dict[tuple[int, int], Any] = {}
        n = len(table)
        self.step = np.empty(n)
        self.memory = np.empty(n)
        self.mfu = np.empty(n)
        self.fits = np.empty(n, dtype=bool)
        self.bound = np.empty(n, dtype=np.int8)

    def structure(self, rows: np.ndarray) -> None:
        """Evaluate the candidates ``rows``, which share one structure."""
        sub = self.table.take(rows)
        k_first, k_index = _keys(sub, _MICRO, {"fsdp": _COPIES_KEY})
        y_first, y_index = _keys(sub, _SYNC)
        # micro-batch keys laid out without ZeRO (FSDP only for its copies) on one mesh; sync keys
        # re-laid on the first
        base = sub.strategy(int(k_first[0]), self.search)
        strategies = []
        for r in k_first.tolist():
            update = self._varying(sub, r)
            update.update(zero=0, fsdp=_COPIES_AS[update["fsdp"]])
            strategies.append(base.model_copy(update=update))
        mesh = self.meshes.build(strategies[0])
        sync_strategies = []
        for r in y_first.tolist():
            row = self._varying(sub, r)
            update = {"zero": row["zero"], "fsdp": row["fsdp"], "aggregation": row["aggregation"]}
            sync_strategies.append(strategies[0].model_copy(update=update))
        if applies(self.ctx, mesh, strategies[0], self.shape, self.meshes.kind):
            figures = self.chunks.build(mesh, strategies)
            states = self.stages.build(mesh, sync_strategies)
        else:
            layouts = [layout_plan(self.ctx, strategy, mesh) for strategy in strategies]
            figures = _stack([_micro(self.ctx, layout, self.times) for layout in layouts])
            relaid = [relayout_sync(self.ctx, layouts[0], strategy) for strategy in sync_strategies]
            states = _stack_sync([_sync(self.ctx, layout, self.times) for layout in relaid])
        # each row's key's figures (np.take: the rows' copies, faster than fancy indexing)
        micro = StageMicro(
            *(np.take(getattr(figures.micro, name), k_index, axis=0) for name in _MICRO_FIELDS)
        )
        sync = StageSync(*(np.take(getattr(states.sync, name), y_index, axis=0) for name in _SYNC_FIELDS))
        m = figures.microbatches[k_index][:, None]
        hop = figures.hop_s[k_index][:, None]
        first_backward = np.take(figures.first_backward_s, k_index, axis=0)
        pp, v = int(sub.pp[0]), int(sub.virtual_stages[0])
        step = assemble_step(micro, sync, first_backward, hop, (pp, v, m))
        total = step.step_s[:, 0]
        self.step[rows] = total
        achieved = np.where(total > 0, self.flops / np.where(total > 0, total, 1.0) / sub.devices, 0.0)
        self.mfu[rows] = achieved / self.peak if self.peak > 0 else 0.0
        self._bound(rows, micro, sync, step, m)
        self._memory(rows, figures, states, k_index, y_index)

    def _varying(self, sub: CandidateTable, r: int) -> dict[str, Any]:
        """Row ``r``'s values of the fields that vary inside a structure, as
        :meth:`~parplan.api.search.space.CandidateTable.strategy` sets them: a copy of the
        structure's first strategy updated with them is that row's strategy, without validating
        each (the enumeration kept only rows that validate)."""
        from parplan.config.strategy import AggregationSpec

        key = (int(sub.algorithm[r]), int(sub.bucket[r]))
        aggregation = self._aggregations.get(key)
        if aggregation is None:
            aggregation = self._aggregations[key] = AggregationSpec(
                algorithm=self._algorithms[key[0]], bucket_size_bytes=self.search.bucket_sizes_bytes[key[1]]
            )
        return {
            "microbatch_size": int(sub.microbatch_size[r]),
            "sequence_parallel": bool(sub.sequence_parallel[r]),
            "recompute": RECOMPUTE_MODES[int(sub.recompute[r])],
            "zero": int(sub.zero[r]),
            "fsdp": FSDP_MODES[int(sub.fsdp[r])],
            "aggregation": aggregation,
        }

    def _bound(
        self, rows: np.ndarray, micro: StageMicro, sync: StageSync, step: StepFigures, m: np.ndarray
    ) -> None:
        """The largest share of each step, at its critical stage (``bound_text``'s parts)."""

        def at(values: np.ndarray) -> np.ndarray:
            return np.take_along_axis(values, step.critical, axis=-1)[:, 0]

        parts = np.stack(
            [
                m[:, 0] * at(micro.compute_s),
                step.bubble_s[:, 0],
                m[:, 0] * at(micro.blocking_s),
                m[:, 0] * at(step.exposed_s),
                at(step.dp_exposed_s) + at(sync.extra_s),
                at(sync.optimizer_s),
            ],
            axis=1,
        )
        self.bound[rows] = np.argmax(parts, axis=1)

    def _memory(
        self, rows: np.ndarray, figures: Micro, states: Sync, k_index: np.ndarray, y_index: np.ndarray
    ) -> None:
        activations = figures.activations_bytes[k_index]
        buffers = figures.buffers_bytes[k_index][:, None] + states.buffers_bytes[y_index]
        total = (
            states.states_bytes[y_index]
            + activations
            + (buffers + FRAGMENTATION_FRACTION * (activations + buffers))
        )
        self.memory[rows] = total.max(axis=1)
        capacity = states.capacity_bytes[y_index]
        self.fits[rows] = np.all(total <= capacity * (1.0 - self.search.memory_headroom), axis=1)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while the body runs, as it was after. An evaluation
    allocates a few hundred thousand small tuples, dicts and arrays, which reference counting
    frees; every few thousand allocations the collector would otherwise walk the objects alive
    in the process, the cluster's graph (10,906 nodes and 30,784 links for MT-NLG's cluster) and
    the scenario included: about 0.1 s of a cold MT-NLG evaluation's 0.7 s CPU, for no garbage
    (the cycles the body leaves, if any, are collected once it is back on)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def network_setup(ctx: PlanContext) -> None:
    """Build what an evaluation reads of the cluster once per network, which it otherwise builds
    on first use (and keeps for the next evaluation on the network): whether the nodes are
    interchangeable (:func:`~parplan.plan.sharded.clock.node_symmetry`) and the router's tables,
    with one route from the first device to the last. For a benchmark that reports this set-up
    apart from the per-plan work; :func:`evaluate_candidates` does not need it called first."""
    network = ctx.network
    with _collector_paused():
        node_symmetry(network)
        if len(network.devices) > 1:
            network.route(network.devices[0], network.devices[-1])


def evaluate_candidates(ctx: PlanContext, search: SearchSpec, table: CandidateTable) -> Evaluation:
    """Step time, peak memory, MFU, fit and bound of every candidate of ``table`` (module docstring)."""
    with _collector_paused():
        return _evaluate(ctx, search, table)  # its memos freed before the collector resumes


def _evaluate(ctx: PlanContext, search: SearchSpec, table: CandidateTable) -> Evaluation:
    """:func:`evaluate_candidates`, structure by structure."""
    evaluator = _Evaluator(ctx, search, table)
    if len(table):
        _, inverse = _keys(table, _STRUCTURE)
        order = np.argsort(inverse, kind="stable")
        cuts = np.flatnonzero(np.diff(inverse[order])) + 1
        for rows in np.split(order, cuts):
            evaluator.structure(rows)
    return Evaluation(
        step_time_s=evaluator.step,
        peak_memory_bytes=evaluator.memory,
        mfu=evaluator.mfu,
        fits=evaluator.fits,
        bound=evaluator.bound,
    )
