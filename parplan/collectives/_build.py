"""Shared machinery of the schedule builders: a step buffer, CSR helpers, empty-step removal and
the size checks (rank groups are in :mod:`parplan.collectives.groups`).

Builders append steps in a topological order (every dependency an earlier step) through
:class:`StepBuffer`, one at a time (``add``) or as whole numpy blocks (``add_block``), and freeze
them into a :class:`~parplan.collectives.schedule.Schedule`. Steps that move zero elements (chunks
are empty when the tensor has fewer elements than chunks) are dropped at that point: they carry no
data, so no step's data depends on them and their dependency edges go with them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from parplan.collectives.schedule import _STEP_MAX, STEP_DTYPES, IntArray, Schedule, StepArray
from parplan.errors import CollectiveError

AnyIntArray = npt.NDArray[np.integer[Any]]

_COLUMNS = ("src", "dst", "offset", "length", "reduce", "phase")
_DTYPES: dict[str, type] = {k: STEP_DTYPES[k] for k in _COLUMNS}


def check_sizes(num_ranks: int, num_elements: int) -> None:
    """Reject impossible collective sizes with a :class:`CollectiveError`."""
    if num_ranks < 1:
        raise CollectiveError(f"a collective needs at least one rank, got num_ranks={num_ranks}")
    if num_elements < 0:
        raise CollectiveError(f"num_elements must be >= 0, got {num_elements}")


def ragged_arange(counts: IntArray) -> IntArray:
    """``[0..c0-1, 0..c1-1, ...]`` for the non-negative ``counts``."""
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    out: IntArray = np.arange(total, dtype=np.int64) - np.repeat(starts, counts)
    return out


def merge_csr(
    counts_a: IntArray, flat_a: IntArray, counts_b: IntArray, flat_b: IntArray
) -> tuple[IntArray, IntArray]:
    """Per-row concatenation of two CSR lists with the same number of rows (a's entries first)."""
    counts = counts_a + counts_b
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    flat = np.empty(int(offsets[-1]), dtype=np.int64)
    flat[np.repeat(offsets[:-1], counts_a) + ragged_arange(counts_a)] = flat_a
    flat[np.repeat(offsets[:-1] + counts_a, counts_b) + ragged_arange(counts_b)] = flat_b
    return counts, flat


class StepBuffer:
    """Accumulates steps and their dependencies; :meth:`build` freezes them into a Schedule."""

    def __init__(self) -> None:
        self._blocks: list[dict[str, np.ndarray]] = []
        self._dep_blocks: list[tuple[IntArray, IntArray]] = []
        self._rows: dict[str, list[int | bool]] = {k: [] for k in _COLUMNS}
        self._row_counts: list[int] = []
        self._row_deps: list[int] = []
        self.num_steps = 0

    def add(
        self, src: int, dst: int, offset: int, length: int, reduce: bool, phase: int, deps: Iterable[int] = ()
    ) -> int:
        """Append one step; returns its index. ``deps`` must be earlier steps."""
        before = len(self._row_deps)
        self._row_deps.extend(deps)
        self._row_counts.append(len(self._row_deps) - before)
        for key, value in zip(_COLUMNS, (src, dst, offset, length, reduce, phase), strict=True):
            self._rows[key].append(value)
        self.num_steps += 1
        return self.num_steps - 1

    def _flush(self) -> None:
        if not self._row_counts:
            return
        self._blocks.append({k: np.asarray(v, dtype=_DTYPES[k]) for k, v in self._rows.items()})
        self._dep_blocks.append(
            (np.asarray(self._row_counts, dtype=np.int64), np.asarray(self._row_deps, dtype=np.int64))
        )
        self._rows = {k: [] for k in _COLUMNS}
        self._row_counts = []
        self._row_deps = []

    def add_block(
        self, columns: dict[str, np.ndarray], dep_counts: IntArray, dep_indices: AnyIntArray
    ) -> int:
        """Append many steps at once; ``dep_indices`` are absolute step indices. Returns the first."""
        self._flush()
        first = self.num_steps
        size = len(dep_counts)
        block: dict[str, np.ndarray] = {k: np.asarray(columns[k], dtype=_DTYPES[k]) for k in _COLUMNS}
        for k, arr in block.items():
            if len(arr) != size:
                raise ValueError(f"block column {k!r} has {len(arr)} entries, want {size}")
        self._blocks.append(block)
        self._dep_blocks.append(
            (np.asarray(dep_counts, dtype=np.int64), np.asarray(dep_indices, dtype=np.int64))
        )
        self.num_steps += size
        return first

    def build(
        self,
        *,
        algorithm: str,
        collective: str,
        num_ranks: int,
        num_elements: int,
        phase_names: Sequence[str],
        root: int | None = None,
        meta: dict[str, object] | None = None,
        step_meta: dict[str, np.ndarray] | None = None,
    ) -> Schedule:
        """Freeze into a Schedule, dropping zero-length steps.

        ``step_meta`` holds optional per-step arrays (e.g. which tree a step belongs to); they are
        filtered like the steps and stored in ``meta``.
        """
        self._flush()
        if self._blocks:
            cols = {k: np.concatenate([b[k] for b in self._blocks]) for k in _COLUMNS}
            counts = np.concatenate([c for c, _ in self._dep_blocks])
            flat = np.concatenate([f for _, f in self._dep_blocks])
        else:
            cols = {k: np.zeros(0, dtype=_DTYPES[k]) for k in _COLUMNS}
            counts = np.zeros(0, dtype=np.int64)
            flat = np.zeros(0, dtype=np.int64)
        return make_schedule(
            cols,
            counts,
            flat,
            algorithm=algorithm,
            collective=collective,
            num_ranks=num_ranks,
            num_elements=num_elements,
            phase_names=phase_names,
            root=root,
            meta=meta,
            step_meta=step_meta,
        )


def _offsets(counts: AnyIntArray, num_edges: int) -> StepArray:
    """CSR offsets of ``counts`` (one more entry), written once in the schedule's int32 when
    ``num_edges`` fits (no 64-bit copy of the column at 33 M steps), else int64 (which
    :class:`~parplan.collectives.schedule.Schedule` then refuses, naming the limit)."""
    offsets: StepArray
    if num_edges <= _STEP_MAX:
        offsets = np.zeros(len(counts) + 1, dtype=np.int32)
    else:
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, dtype=offsets.dtype, out=offsets[1:])
    return offsets


def make_schedule(
    cols: dict[str, np.ndarray],
    dep_counts: AnyIntArray,
    dep_indices: StepArray,
    *,
    algorithm: str,
    collective: str,
    num_ranks: int,
    num_elements: int,
    phase_names: Sequence[str],
    root: int | None = None,
    meta: dict[str, object] | None = None,
    step_meta: dict[str, np.ndarray] | None = None,
) -> Schedule:
    """A Schedule from column arrays and CSR dependency counts, without zero-length steps."""
    meta = dict(meta or {})
    step_meta = dict(step_meta or {})
    empty = cols["length"] == 0
    if empty.any():
        keep = ~empty
        new_index = np.cumsum(keep, dtype=np.int64) - 1
        step_of = np.repeat(np.arange(len(dep_counts), dtype=np.int64), dep_counts)
        kept_edge = keep[step_of] & keep[dep_indices]
        dep_indices = new_index[dep_indices[kept_edge]]
        dep_counts = np.bincount(new_index[step_of[kept_edge]], minlength=int(keep.sum()))
        cols = {k: v[keep] for k, v in cols.items()}
        step_meta = {k: v[keep] for k, v in step_meta.items()}
    meta.update(step_meta)
    dep_offsets = _offsets(dep_counts, len(dep_indices))
    return Schedule(
        algorithm=algorithm,
        collective=collective,
        num_ranks=num_ranks,
        num_elements=num_elements,
        src=cols["src"],
        dst=cols["dst"],
        offset=cols["offset"],
        length=cols["length"],
        reduce=cols["reduce"],
        dep_offsets=dep_offsets,
        dep_indices=dep_indices,
        phase=cols["phase"],
        phase_names=tuple(phase_names),
        root=root,
        meta=meta,
    )


class WriteLog:
    """Which steps wrote which element ranges of each rank, to find the live writers of a range.

    The live writers of ``[lo, hi)`` on a rank are the steps whose writes still make up part of
    its value there: the last overwrite of each element and every reduction into it since. They
    are exactly the dependencies a step sending that range needs. Small builders (trees,
    halving-doubling) use this; the ring derives its dependencies arithmetically.
    """

    def __init__(self, num_ranks: int) -> None:
        self._records: list[list[tuple[int, int, int, bool]]] = [[] for _ in range(num_ranks)]

    def write(self, rank: int, step: int, lo: int, hi: int, reduce: bool) -> None:
        """Record that ``step`` reduced into (or overwrote) ``rank``'s elements ``[lo, hi)``."""
        if hi > lo:
            self._records[rank].append((step, lo, hi, reduce))

    def live(self, rank: int, lo: int, hi: int) -> list[int]:
        """The live writers of ``rank``'s ``[lo, hi)``, oldest first."""
        uncovered = [(lo, hi)] if hi > lo else []
        found: list[int] = []
        for step, a, b, reduce in reversed(self._records[rank]):
            if not uncovered:
                break
            if any(a < y and x < b for x, y in uncovered):
                found.append(step)
                if not reduce:
                    uncovered = [
                        part
                        for x, y in uncovered
                        for part in ((x, min(y, a)), (max(x, b), y))
                        if part[1] > part[0]
                    ]
        return found[::-1]
