"""Blocks of transfers that a run may replay (:mod:`parplan.engine.replay`), and the log a recorded
window keeps.

A *block* is a run of consecutive transfer tasks in the task graph: a lowered collective (a data-
parallel bucket's all-reduce is one). :func:`find_blocks` finds the blocks whose content occurs
more than once, by a digest of every column the engine reads and of their dependencies and
successors relative to the block. :class:`FlowLog` is what a recorded window did to the run's
accumulators, in order, how close it came to the kernel's tie horizon and whether any absolute
time it computed was a rounding tie: the flows, the reduction streams and the kernel write to it
while a window is recorded. :func:`is_entry` and :func:`exit_mask` say how a block meets the rest
of the graph.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from parplan.engine.arrays import EMPTY_F, EMPTY_I, FloatArray, IdArray, IntArray, largest
from parplan.taskgraph import MARKER, TRANSFER

if TYPE_CHECKING:
    from parplan.engine.allocator import Allocation
    from parplan.engine.tasks import Dependencies, TaskView

MIN_BLOCK_TRANSFERS = 64
"""Blocks smaller than this are simulated as they come: recording them would cost more than it saves."""


def find_blocks(tasks: TaskView, deps: Dependencies) -> tuple[IntArray, IntArray, list[bytes], list[int]]:
    """Runs of at least :data:`MIN_BLOCK_TRANSFERS` consecutive transfer tasks whose content occurs
    more than once: their first ids, their ends (exclusive), a digest of each one's content
    (every column the engine reads, dependencies relative to the block, outside ones as -1, and
    successors relative to the block's first task, outside ones too), and the blocks that the
    next run of transfers does not repeat (a different collective follows: in a data-parallel
    step the last bucket of one size, which the next bucket often meets; simulated at once,
    rather than replayed, met and run again)."""
    is_tr = np.concatenate([[False], tasks.kind == TRANSFER, [False]])
    edges = np.flatnonzero(is_tr[1:] != is_tr[:-1])
    lo, hi = edges[0::2].astype(np.int64), edges[1::2].astype(np.int64)
    sizes = (hi - lo).tolist()
    repeated = {n for n, c in Counter(sizes).items() if n >= MIN_BLOCK_TRANSFERS and c > 1}
    keys = [  # only runs whose length repeats can repeat: one collective alone costs no digest
        _digest(tasks, deps, a, b) if b - a in repeated else b""
        for a, b in zip(lo.tolist(), hi.tolist(), strict=True)
    ]
    counts = Counter(keys)
    keep = [i for i, k in enumerate(keys) if k and counts[k] > 1]
    changes = [j for j, i in enumerate(keep) if i + 1 < len(keys) and keys[i + 1] != keys[i]]
    return lo[keep], hi[keep], [keys[i] for i in keep], changes


def _digest(tasks: TaskView, dependencies: Dependencies, a: int, b: int) -> bytes:
    s_off = dependencies.succ_off
    succ = np.asarray(dependencies.succ_idx[int(s_off[a]) : int(s_off[b])], dtype=np.int64) - a
    off = tasks.dep_offsets
    deps = np.asarray(tasks.dep_indices[int(off[a]) : int(off[b])], dtype=np.int64) - a
    deps[(deps < 0) | (deps >= b - a)] = -1
    h = hashlib.blake2b(digest_size=16)
    columns = [
        tasks.device[a:b], tasks.dst[a:b], tasks.size_bytes[a:b], tasks.reduce[a:b], tasks.protocol[a:b],
        tasks.overhead_s[a:b], tasks.max_rate_Bps[a:b], np.diff(off[a : b + 1]), deps,
        np.diff(np.asarray(s_off[a : b + 1], dtype=np.int64)), succ,
    ]  # fmt: skip
    if tasks.lane is not None:
        columns.append(tasks.lane[a:b])
    for column in columns:
        h.update(np.ascontiguousarray(column).tobytes())
        h.update(b"|")
    return h.digest()


@dataclass
class FlowLog:
    """What one recorded window did to the engine's accumulators, in order, and its tie margins."""

    route_bytes: list[tuple[IntArray, FloatArray]] = field(default_factory=list)
    route_busy: list[tuple[IntArray, FloatArray]] = field(default_factory=list)
    alloc_busy: list[tuple[Allocation, float]] = field(default_factory=list)
    reduce_busy: list[tuple[IdArray, FloatArray]] = field(default_factory=list)
    fired_max_s: float = 0.0  # largest finish - now of a flow fired early by the tie horizon
    unfired_min_s: float = math.inf  # smallest finish - now of a flow (or clock) left for later
    clean: bool = True
    ties: bool = False  # some absolute time the window used was a rounding tie (:meth:`sums`)
    sum_max_s: float = -math.inf  # the latest absolute time the window used
    tied: set[int] = field(default_factory=set)  # flows whose finish time, not yet read, was a tie
    # The last finish times of every moving flow (tasks, a, b, s), not yet checked for ties: most
    # are superseded by the next rate change before any is read, so they are checked when read.
    pending: tuple[IntArray, float | FloatArray, FloatArray, FloatArray] | None = None

    # The arrays logged are fresh ones the engine does not write to again: kept, not copied.
    def add_bytes(self, rids: IntArray, values: FloatArray) -> None:
        self.route_bytes.append((rids, values))

    def add_busy(self, rids: IntArray, values: FloatArray) -> None:
        self.route_busy.append((rids, values))

    def add_alloc(self, alloc: Allocation, seconds: float) -> None:
        self.alloc_busy.append((alloc, seconds))

    def add_reduce(self, devs: IdArray, seconds: FloatArray) -> None:
        self.reduce_busy.append((devs, seconds))

    def sums(self, a: float | FloatArray, b: float | FloatArray, s: float | FloatArray) -> None:
        """The window computed absolute times ``s = a + b`` (rounded; ``a`` absolute, ``b`` a
        duration) that it uses as they are (event times): note whether any exact sum lay halfway
        between two floats. Without such a tie, ``a + b`` shifted by any whole number of ulps of
        a binade that holds ``a`` and ``s`` rounds to ``s`` shifted alike, so the window may be
        laid down an odd number of ulps away (with ties, round-half-even may round the other way)."""
        if self.ties:  # already known: no odd shift for this window
            return
        if isinstance(s, float):
            bb = s - a
            err = float((a - (s - bb)) + (b - bb))  # TwoSum: the exact rounding error, a float
            ulp = math.ulp(s)
            below = err < 0.0 and math.frexp(s)[0] == 0.5  # s = 2^k: the floats below are twice as dense
            self.ties = self.ties or (err != 0.0 and (2.0 if not below else 4.0) * abs(err) == ulp)
            self.sum_max_s = max(self.sum_max_s, s)
        elif len(s):
            self.ties = self.ties or bool(np.count_nonzero(_ties(a, b, s)))
            self.sum_max_s = max(self.sum_max_s, largest(s))

    def finishes(
        self, tasks: IntArray, a: float | FloatArray, b: FloatArray, s: FloatArray, *, every: bool
    ) -> None:
        """Finish times ``s = a + b`` of flows ``tasks`` (``every``: of all moving flows, replacing
        what was noted before), which a later rate change may supersede unread: a tie among them
        matters only if the flow fires at it or it is read (:meth:`used`)."""
        if self.ties:
            return
        if every:  # checked when first read (:meth:`used`): the same set, most never computed
            self.tied = set()
            self.pending = (tasks, a, b, s)
        else:
            self.tied.update(tasks[_ties(a, b, s)].tolist())

    def used(self, tasks: IntArray, finish_s: FloatArray) -> None:
        """The finish times ``finish_s`` of flows ``tasks`` are read (they fire, or are booked)."""
        if self.ties or not len(tasks):
            return
        pending_tie = self.pending is not None and self._pending_tie(tasks)
        if pending_tie or (self.tied and not self.tied.isdisjoint(tasks.tolist())):
            self.ties = True
        latest = largest(finish_s)
        if latest > self.sum_max_s:
            self.sum_max_s = latest

    def _pending_tie(self, tasks: IntArray) -> bool:
        """Whether a pending finish time of one of ``tasks`` was a tie (one task: a scalar check
        of its entry, the same arithmetic; more: the whole pending set is checked and noted)."""
        assert self.pending is not None
        every, a, b, s = self.pending
        if len(tasks) == 1 and isinstance(a, float):
            hit = (every == tasks[0]).nonzero()[0]
            return bool(len(hit)) and _tie(a, float(b[hit[0]]), float(s[hit[0]]))
        self.pending = None
        self.tied.update(every[_ties(a, b, s)].tolist())
        return False

    def fired(self, last_fired_s: float, next_left_s: float, now: float) -> None:
        """Flows fired at ``now``, the last finishing at ``last_fired_s`` (within the tie
        horizon), the first left for later at ``next_left_s``: note both margins."""
        self.fired_max_s = max(self.fired_max_s, last_fired_s - now)
        if next_left_s < math.inf:
            self.unfired_min_s = min(self.unfired_min_s, next_left_s - now)


def _tie(a: float, b: float, s: float) -> bool:
    """:func:`_ties` of one sum, in Python floats (the same IEEE operations)."""
    bb = s - a
    err = (a - (s - bb)) + (b - bb)
    twice = 2.0 * abs(err)
    ulp = math.ulp(abs(s))
    return twice == ulp or (err < 0.0 and 2.0 * twice == ulp and math.frexp(s)[0] == 0.5)


def _ties(a: float | FloatArray, b: float | FloatArray, s: FloatArray) -> npt.NDArray[np.bool_]:
    """Where the exact ``a + b`` lay halfway between two floats (so that ``s``, its rounding, went
    to the even one): TwoSum's exact error is half the spacing of the floats around ``s`` (a
    quarter of ``s``'s ulp when ``s`` is a power of 2 and the exact sum lay below it)."""
    bb = s - a
    err = (a - (s - bb)) + (b - bb)
    twice = 2.0 * np.abs(err)
    ulp = np.spacing(np.abs(s))
    tie: npt.NDArray[np.bool_] = twice == ulp
    quarter = (err < 0.0) & (2.0 * twice == ulp)
    if np.count_nonzero(quarter):
        tie |= quarter & (np.frexp(s)[0] == 0.5)
    return tie


def compact_log(log: FlowLog) -> None:
    """Concatenate each ordered list of array increments into one (np.add.at applies them in
    order, so one call adds what the many did, in the same order)."""
    for name in ("route_bytes", "route_busy", "reduce_busy"):
        parts: list[tuple[IntArray, FloatArray]] = getattr(log, name)
        if len(parts) > 1:
            ids = np.concatenate([p[0] for p in parts]) if parts else EMPTY_I
            values = np.concatenate([p[1] for p in parts]) if parts else EMPTY_F
            setattr(log, name, [(ids, values)])


def is_entry(tasks: TaskView, deps: Dependencies, lo: int, hi: int, issued: IntArray) -> bool:
    """Whether transfers ``issued`` are exactly the roots of block ``lo:hi`` (its transfers with
    no dependency inside it) while every outside dependency of its other transfers is a marker
    already done: then nothing outside the block decides its timing from now on."""
    off = tasks.dep_offsets
    counts = np.asarray(off[lo + 1 : hi + 1], dtype=np.int64) - np.asarray(off[lo:hi], dtype=np.int64)
    dep = np.asarray(tasks.dep_indices[int(off[lo]) : int(off[hi])], dtype=np.int64)
    owner = np.repeat(np.arange(lo, hi), counts)
    inside = (dep >= lo) & (dep < hi)
    has_inside = np.zeros(hi - lo, dtype=bool)
    has_inside[owner[inside] - lo] = True
    roots = np.flatnonzero(~has_inside) + lo
    if len(issued) != len(roots) or not np.array_equal(issued, roots):
        return False
    outside = np.unique(dep[~inside & has_inside[owner - lo]])
    return bool(np.all(tasks.kind[outside] == MARKER)) and not bool(np.count_nonzero(deps.remaining[outside]))


def exit_mask(deps: Dependencies, lo: int, hi: int) -> npt.NDArray[np.bool_]:
    """Per task of block ``lo:hi``: whether it has a successor outside the block."""
    off = deps.succ_off
    succ = np.asarray(deps.succ_idx[int(off[lo]) : int(off[hi])])
    counts = np.asarray(off[lo + 1 : hi + 1], dtype=np.int64) - np.asarray(off[lo:hi], dtype=np.int64)
    owner = np.repeat(np.arange(lo, hi), counts)
    mask = np.zeros(hi - lo, dtype=bool)
    mask[owner[(succ < lo) | (succ >= hi)] - lo] = True
    return mask
