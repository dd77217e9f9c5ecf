"""The micro-batch figures of a search's plans, built as arrays from per-block figures instead of
one :func:`~parplan.plan.sharded.costs.layout_plan` pass per plan.

A plan's chunks string together the same pieces: the embedding (chunk 0), ``n`` blocks, the head
(the last chunk). One block's compute (:func:`~parplan.plan.sharded.costs.block_figures`), calls
(:func:`~parplan.plan.sharded.blocks.chunk_calls`) and parameters
(:mod:`~parplan.plan.sharded.parts`) depend on the micro-batch key (tp, cp, ep, micro-batch size,
SP, recomputation) and the device, not on pp, virtual stages, dp or the device count: they are
memoised on that key and spread over a structure's chunks by :func:`~parplan.plan.sharded.costs.
split_layers`. Each chunk's sums are the sums ``layout_plan`` and
:func:`~parplan.api.sharded_analytic._chunk_sums` take, in the same order (``np.add.accumulate``
adds left to right, and zeros stand for what a sum skips), so the figures are the reference's to
the last bit. Collective times come from the :class:`~parplan.plan.sharded.clock.GroupClock` per
congruent group (:func:`~parplan.api.search.meshes.stage_groups`).

What a chunk sums (module docstring of :mod:`parplan.api.sharded_analytic`) reaches
:func:`~parplan.api.sharded_analytic.stage_micro` unchanged; activations follow
:func:`~parplan.plan.sharded.memory.stage_memory` term by term (the search's equality test holds
both to the reference). Models whose blocks differ (MoE every other block), clusters of mixed
devices and placements other than the default take the reference path
(:func:`~parplan.api.search.meshes.applies`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from parplan.api.search.holdings import StageActivations
from parplan.api.search.meshes import Meshes, device_kind, stage_groups
from parplan.api.sharded_analytic import ChunkSums, StageMicro, stage_micro
from parplan.plan.compute import comm_compute_share
from parplan.plan.sharded.blocks import Roofline, bus_bytes, chunk_calls
from parplan.plan.sharded.comm import CommCall
from parplan.plan.sharded.costs import block_figures, block_memory_share, split_layers
from parplan.plan.sharded.memory import microbatch_buffers
from parplan.plan.sharded.mesh import microbatches_per_pipeline
from parplan.plan.sharded.parts import (
    accumulation_seconds,
    block_unit,
    embedding_unit,
    fsdp_copy_seconds,
    head_unit,
    p2p_bytes,
)
from parplan.plan.sharded.sync import UnitParams

if TYPE_CHECKING:
    from parplan.config.strategy import ShardedStrategy
    from parplan.model.transformer import Op, TransformerShape
    from parplan.plan.base import PlanContext
    from parplan.plan.sharded.clock import GroupClock
    from parplan.plan.sharded.costs import ShardedLayout
    from parplan.plan.sharded.mesh import Mesh
    from parplan.topology.network import DeviceInfo

_CHUNK_AXES = ("tp", "cp", "ep")
"""The groups a chunk's calls run in."""
_COMM_FIELDS = 12
"""blocking, blocking forward, busy forward, busy backward, tp forward, tp backward, cp forward,
cp backward, and the SM seconds of the last four: :class:`ChunkSums`' call sums, in its order."""


@dataclass(frozen=True)
class Micro:
    """The figures of a structure's micro-batch keys: ``[keys, pp]`` per stage, ``[keys]`` else."""

    micro: StageMicro
    first_backward_s: np.ndarray
    hop_s: np.ndarray
    microbatches: np.ndarray
    activations_bytes: np.ndarray
    buffers_bytes: np.ndarray


@dataclass(frozen=True)
class _View:
    """What :func:`~parplan.plan.sharded.memory.microbatch_buffers` reads of a layout."""

    strategy: ShardedStrategy
    shape: TransformerShape
    mesh: Mesh
    p2p_bytes: float


class ChunkBuilder:
    """Builds :class:`Micro` for one structure's micro-batch keys; per-block figures memoised
    across structures (on the evaluator's lifetime: one search, one cluster)."""

    def __init__(
        self, ctx: PlanContext, shape: TransformerShape, clock: GroupClock, meshes: Meshes | None = None
    ) -> None:
        self.ctx, self.shape, self.clock, self.meshes = ctx, shape, clock, meshes
        self._stage_groups: dict[tuple[Any, ...], tuple[np.ndarray, list[tuple[Any, ...]]]] = {}
        self._blocks: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._times: dict[tuple[Any, ...], float] = {}
        self._comms: dict[tuple[Any, ...], np.ndarray] = {}
        self._rows: dict[tuple[Any, ...], np.ndarray] = {}
        self._indices: dict[tuple[Any, ...], np.ndarray] = {}
        self.activations = StageActivations(shape)
        self._kinds: dict[str, int] = {}
        self._kind_numbers: dict[DeviceInfo, int] = {}
        self._palettes: dict[tuple[Any, ...], tuple[np.ndarray, tuple[int, ...]]] = {}
        self._all_comms: dict[tuple[Any, ...], np.ndarray] = {}
        self._memory: dict[tuple[Any, ...], float] = {}
        self._roofs: dict[tuple[Any, ...], Roofline] = {}
        self._op_seconds: dict[tuple[int, str], dict[tuple[Op, bool], float]] = {}

    def seconds(self, call: CommCall, group: tuple[str, ...]) -> float:
        """``call``'s seconds on the canonical ``group`` (no group: a single rank, 0 s)."""
        if not group:
            return 0.0
        key = (group, call.collective, call.size_bytes)
        found = self._times.get(key)
        if found is None:
            found = self._times[key] = self.clock.seconds(call, group)
        return found

    def _key(self, s: ShardedStrategy, mesh: Mesh, info: DeviceInfo) -> tuple[Any, ...]:
        """What one block's figures depend on."""
        kind = self._kinds.get(info.name)
        if kind is None:  # alike devices, one number (a small key, hashed at every lookup)
            kind = self._kinds[info.name] = self._kind_numbers.setdefault(
                device_kind(info), len(self._kind_numbers)
            )
        # pp > 1: the head holds the tied embedding's copy (parts.head_unit)
        return (s.tp, s.cp, mesh.ep, s.microbatch_size, s.sequence_parallel, s.recompute, s.pp > 1, kind)

    def _memory_share(self, s: ShardedStrategy, mesh: Mesh, info: DeviceInfo) -> float:
        """The memory-bound share of a block's kernel seconds (:func:`~parplan.plan.sharded.costs.
        block_memory_share`), memoised like the block's figures."""
        key = self._key(s, mesh, info)
        found = self._memory.get(key)
        if found is None:
            roof = self._roofline(key, s, info)
            found = self._memory[key] = block_memory_share(self.ctx, s, mesh, info, roof=roof)
        return found

    def _roofline(self, key: tuple[Any, ...], s: ShardedStrategy, info: DeviceInfo) -> Roofline:
        """The :class:`~parplan.plan.sharded.blocks.Roofline` of block key ``key``: the block's
        figures and its memory-bound share read one (it works the block's ops out once), and the
        Rooflines of one device kind and dtype share their ops' seconds (keys alike but for the
        recomputation or the pipeline run the same ops)."""
        found = self._roofs.get(key)
        if found is None:
            ops = self._op_seconds.setdefault((key[-1], s.dtype), {})  # per device kind and dtype
            found = self._roofs[key] = Roofline(self.ctx, s, self.shape, info, op_memo=ops)
        return found

    def _block(self, strategy: ShardedStrategy, mesh: Mesh, info: DeviceInfo) -> tuple[Any, ...]:
        """(block, embedding, head compute; block, embedding, head calls; units; activations)."""
        s = strategy
        key = self._key(s, mesh, info)
        found = self._blocks.get(key)
        if found is None:
            from parplan.model.transformer import block_activation_bytes

            def per_layer(recompute: str) -> float:
                return float(
                    block_activation_bytes(
                        self.shape,
                        microbatch=s.microbatch_size,
                        tp=s.tp,
                        sp=s.sequence_parallel,
                        cp=s.cp,
                        recompute=recompute,  # type: ignore[arg-type]
                        flash_attention=s.flash_attention,
                        layer=0,
                        kernels=s.kernels,
                        ep=mesh.ep,
                        capacity_factor=s.capacity_factor,
                    )
                )

            held = per_layer(s.recompute)
            working = 0.0
            if s.recompute == "full":
                working = max(working, per_layer("none"))
            elif s.recompute == "op":
                working = max(working, per_layer("none") - held)
            units = (
                embedding_unit(self.shape, s),
                block_unit(self.shape, s, mesh.ep, 0),
                head_unit(self.shape, s),
            )
            found = self._blocks[key] = (
                block_figures(self.ctx, s, mesh, info, roof=self._roofline(key, s, info)),
                chunk_calls(s, self.shape, mesh.ep),
                tuple(u.dense + u.expert for u in units),
                (held, working),
            )
        return found

    def build(self, mesh: Mesh, strategies: Sequence[ShardedStrategy]) -> Micro:
        """The figures of ``strategies`` (one per micro-batch key) on ``mesh``."""
        pp, v = mesh.pp, strategies[0].virtual_stages
        counts = np.asarray(split_layers(self.shape.layers, pp * v))
        stage_of, groups = self._groups(mesh, _CHUNK_AXES)
        chunk = np.arange(pp * v)
        chunk_stage = chunk % pp
        types, chunk_type = np.unique(
            np.stack([chunk == 0, chunk == pp * v - 1, counts, stage_of[chunk_stage]], axis=1),
            axis=0,
            return_inverse=True,
        )
        info = self.ctx.network.device(mesh.device({"pp": 0}))
        # keys alike but for the FSDP copies share one block key: what reads no more than it (the
        # calls, the memory-bound share, hops, micro-batches, activations, buffers) once per block key
        firsts: dict[tuple[Any, ...], int] = {}
        alike = np.asarray([firsts.setdefault(self._key(s, mesh, info), k) for k, s in enumerate(strategies)])
        _, block_of = np.unique(alike, return_inverse=True)  # each key's block key, in first-seen order
        reps = [strategies[k] for k in sorted(firsts.values())]
        comms = np.stack([self._memo_comms(s, mesh, info, types, groups) for s in reps])  # [B, T, 12]
        comms = comms[block_of]  # [K, T, 12]
        shares = np.asarray([self._memory_share(s, mesh, info) for s in reps])[block_of]  # [K]
        shares = np.broadcast_to(shares[:, None, None], (len(strategies), len(types), 1))
        compute = self._compute_sums(strategies, (reps, block_of), mesh, info, types)
        sums = np.concatenate([compute, comms, shares], axis=2)
        per_chunk = sums[:, chunk_type.reshape(-1)]  # [K, C, 18]
        grid = per_chunk.reshape(len(strategies), v, pp, -1).transpose(0, 2, 1, 3)  # [K, pp, v, 18]
        chunks = ChunkSums(*(grid[..., k] for k in range(grid.shape[-1])))
        micro = stage_micro(chunks, strategies[0].tp_comm_overlap)
        blocks_on_stage = counts.reshape(v, pp).sum(axis=0)
        hops, ms, activations, buffers = [], [], [], []
        pp_index, pp_groups = self._groups(mesh, ("pp",))
        pp_classes = sorted(set(pp_index.tolist()))  # the max over stages is the max over classes
        for s in reps:
            m = microbatches_per_pipeline(s, self.ctx.training.global_batch_size, mesh.dp)
            size = p2p_bytes(s, self.shape)
            hop = 0.0
            if pp > 1:
                call = CommCall("send_recv", size, "pp", True, "p2p")
                hop = max(self.seconds(call, pp_groups[c][0]) for c in pp_classes)
            hops.append(hop)
            ms.append(m)
            per_block, working = self._block(s, mesh, info)[3]
            activations.append(self.activations.of(s, pp, m, blocks_on_stage, per_block, working))
            view = _View(s, self.shape, mesh, size)
            buffers.append(microbatch_buffers(cast("ShardedLayout", view)))
        return Micro(
            micro=micro,
            first_backward_s=chunks.backward_s[..., 0],
            hop_s=np.asarray(hops)[block_of],
            microbatches=np.asarray(ms)[block_of],
            activations_bytes=np.stack(activations)[block_of],
            buffers_bytes=np.asarray(buffers)[block_of],
        )

    def _groups(self, mesh: Mesh, axes: tuple[str, ...]) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
        """:func:`stage_groups`, memoised per mesh shape when :attr:`meshes` laid the mesh out
        (its ranks are then the network's)."""
        shape = self.meshes.shape(mesh) if self.meshes is not None else None
        if shape is None:
            return stage_groups(self.clock, mesh, axes)
        key = (shape, axes)
        found = self._stage_groups.get(key)
        if found is None:
            found = self._stage_groups[key] = stage_groups(self.clock, mesh, axes, ranked=True)
        return found

    def _memo_comms(
        self,
        s: ShardedStrategy,
        mesh: Mesh,
        info: DeviceInfo,
        types: np.ndarray,
        groups: list[tuple[Any, ...]],
    ) -> np.ndarray:
        """:meth:`_comm_sums` memoised per chunk type (first, last, blocks, its class's groups): a
        type's sums do not depend on the other types beside it (padding adds zeros), nor on the
        FSDP mode, so keys alike but for it and structures alike but for dp share them."""
        block = self._key(s, mesh, info)
        whole = (block, types.tobytes(), tuple(groups))
        found = self._all_comms.get(whole)
        if found is None:
            keys = [(block, f, last, n, groups[c]) for f, last, n, c in types.tolist()]
            missing = [t for t, k in enumerate(keys) if k not in self._comms]
            if missing:
                for t, row in zip(
                    missing, self._comm_sums(s, mesh, info, types[missing], groups), strict=True
                ):
                    self._comms[keys[t]] = row
            found = self._all_comms[whole] = np.stack([self._comms[k] for k in keys])
        return found

    def _compute_sums(
        self,
        strategies: Sequence[ShardedStrategy],
        blocks: tuple[Sequence[ShardedStrategy], np.ndarray],
        mesh: Mesh,
        info: DeviceInfo,
        types: np.ndarray,
    ) -> np.ndarray:
        """``[K, T, 5]``: :class:`ChunkSums`' compute sums of each key's chunk types (first, last,
        blocks), every key at once: each sum is one ``np.add.accumulate`` along the chunk (zeros
        for the blocks a shorter chunk lacks) per block key (``blocks``: a key of each and each
        key's, :meth:`build`), FSDP2's copies and DeepSpeed's accumulation added per group of keys
        alike in what those read (:mod:`~parplan.plan.sharded.parts`)."""
        reps, block_of = blocks
        figures = np.asarray(
            [[*f, *e, *h, *params] for (f, e, h), _, params, _ in (self._block(s, mesh, info) for s in reps)]
        )  # [B, 12]: block f, b, r, a, ab; embedding f, b; head f, b; embedding, block, head params
        first, last, n = types[:, 0].astype(bool), types[:, 1].astype(bool), types[:, 2]
        on = np.arange(int(n.max()))[None, :] < n[:, None]  # [T, width]: the chunk's blocks
        zero = np.zeros((len(reps), len(types)))

        def ends(column: int, mask: np.ndarray) -> np.ndarray:
            return np.where(mask[None, :], figures[:, column, None], 0.0)

        starts = [ends(5, first), ends(6, first), zero, zero, zero, ends(9, first)]  # [B, T] each
        each = figures[:, [0, 1, 2, 3, 4, 10]].T  # [6, B]
        finish = [ends(7, last), ends(8, last), zero, zero, zero, ends(11, last)]
        middle = np.where(on[None, None], each[:, :, None, None], 0.0)  # [6, B, T, width]
        row = np.concatenate([np.stack(starts)[..., None], middle, np.stack(finish)[..., None]], axis=3)
        folded = np.add.accumulate(row, axis=3)[..., -1][:, block_of]  # [6, K, T]
        compute, units = list(folded[:5]), folded[5]
        spec = self.ctx.model_spec
        alike: dict[tuple[Any, ...], list[int]] = {}
        for k, s in enumerate(strategies):
            alike.setdefault((s.fsdp, s.dtype, s.framework), []).append(k)
        for rows in alike.values():
            s, part = strategies[rows[0]], units[rows]
            copy_f, copy_b = fsdp_copy_seconds(s, (UnitParams("chunk", cast(float, part), 0.0),), spec, info)
            compute[0][rows] = compute[0][rows] + copy_f
            compute[1][rows] = compute[1][rows] + copy_b + accumulation_seconds(s, cast(float, part), info)
        return np.stack(compute, axis=2)

    def _comm_sums(
        self,
        s: ShardedStrategy,
        mesh: Mesh,
        info: DeviceInfo,
        types: np.ndarray,
        groups: list[tuple[Any, ...]],
    ) -> np.ndarray:
        """``[T, 12]``: :class:`ChunkSums`' call sums of each chunk type (first, last, blocks,
        class), timed on its class's groups (the SM seconds: what the calls take of ``info``'s
        compute beside blocks of the block key's memory-bound share, as
        :meth:`~parplan.plan.sharded.clock.CollectiveClock.compute_share` counts them). A chunk's calls
        in order are the embedding's forward (first chunk), each block's forward, the head's
        forward and backward (last chunk), each block's backward, the embedding's backward: each
        type's sequence is gathered from a palette of its class's call figures (column 0 zeros,
        for what the type skips) and added left to right from 0.0 by one ``np.add.accumulate``
        for every type at once (zeros change no sum: ``x + 0.0 == x``)."""
        classes = sorted(set(types[:, 3].tolist()))
        palettes = [self._palette(s, mesh, info, groups[c]) for c in classes]
        palette = np.stack([p for p, _ in palettes])  # [classes, 12, 1 + calls]
        lengths = palettes[0][1]
        index = self._sequence_index(lengths, types)  # [T, L]
        position = np.searchsorted(np.asarray(classes), types[:, 3])
        values = palette[position[:, None], :, index]  # [T, L, 12]
        return np.asarray(np.add.accumulate(values, axis=1)[:, -1, :])

    def _palette(
        self, s: ShardedStrategy, mesh: Mesh, info: DeviceInfo, groups: tuple[Any, ...]
    ) -> tuple[np.ndarray, tuple[int, ...]]:
        """``[12, 1 + calls]``, a zero column then the six segments' calls (:meth:`_comm_sums`)
        timed on one class's ``groups``, and the segments' lengths; memoised on the block key."""
        key = (self._key(s, mesh, info), groups, info.name)
        found = self._palettes.get(key)
        if found is None:
            block, emb, head = self._block(s, mesh, info)[1]
            segments = (
                (emb.forward, True),
                (block.forward, True),
                (head.forward, True),
                (head.backward, False),
                (block.backward, False),
                (emb.backward, False),
            )
            share = self._memory_share(s, mesh, info)
            rows = [self._row(seq, forward, groups, info, share) for seq, forward in segments]
            found = self._palettes[key] = (
                np.concatenate([np.zeros((_COMM_FIELDS, 1)), *rows], axis=1),
                tuple(len(seq) for seq, _ in segments),
            )
        return found

    def _sequence_index(self, lengths: tuple[int, ...], types: np.ndarray) -> np.ndarray:
        """``[T, L]``: each chunk type's calls in order as palette columns (:meth:`_comm_sums`:
        the six segments' columns follow column 0 in order; the blocks' segments repeated once per
        block, zeros past the type's blocks and for the ends it lacks), memoised on the segments'
        lengths and the types."""
        key = (lengths, types[:, :3].tobytes())
        found = self._indices.get(key)
        if found is None:
            first, last, n = types[:, 0].astype(bool), types[:, 1].astype(bool), types[:, 2]
            width = int(n.max())
            on = np.arange(width)[None, :] < n[:, None]  # [T, width]: the chunk's blocks
            offsets = np.cumsum((1, *lengths))
            parts = [np.zeros((len(types), 1), dtype=np.intp)]
            for k, (length, start) in enumerate(zip(lengths, offsets[:-1], strict=True)):
                columns = np.arange(start, start + length)
                if k in (1, 4):  # a block's forward, a block's backward: once per block
                    mask = np.repeat(on, length, axis=1)
                    parts.append(np.where(mask, np.tile(columns, width)[None, :], 0))
                else:
                    mask = first if k in (0, 5) else last
                    parts.append(np.where(mask[:, None], columns[None, :], 0))
            found = self._indices[key] = np.concatenate(parts, axis=1)
        return found

    def _row(
        self,
        seq: tuple[CommCall, ...],
        forward: bool,
        groups: tuple[Any, ...],
        info: DeviceInfo,
        memory_share: float,
    ) -> np.ndarray:
        """``[12, len(seq)]``: each call's contribution to the call sums, timed on ``groups`` (one
        per axis of :data:`_CHUNK_AXES`) beside blocks of ``memory_share`` memory-bound seconds,
        memoised."""
        key = (seq, forward, groups, info.name, memory_share)
        found = self._rows.get(key)
        if found is None:
            axis_group = dict(zip(_CHUNK_AXES, groups, strict=True))
            out = np.zeros((_COMM_FIELDS, len(seq)))
            for j, c in enumerate(seq):
                t = self.seconds(c, axis_group[c.axis])
                if c.blocking:
                    out[0, j] = t
                    if forward:
                        out[1, j] = t
                    continue
                out[2 if forward else 3, j] = t
                if c.axis in ("tp", "cp"):
                    column = (0 if c.axis == "tp" else 2) + (0 if forward else 1)
                    out[4 + column, j] = t
                    channels = self.clock.channels(c, axis_group[c.axis])
                    moved = bus_bytes(c.collective, c.size_bytes, len(axis_group[c.axis]))
                    out[8 + column, j] = t * comm_compute_share(info, channels, t, moved, memory_share)
            found = self._rows[key] = out
        return found
