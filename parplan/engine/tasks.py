"""The engine's window on a task graph: the columns it reads, checked once, and task readiness.

:class:`TaskView` is the only place the engine reads a :class:`~parplan.taskgraph.TaskGraph`: the
other parts see tasks as ids into its columns. A later representation of transfers inside the
engine (a collective step of identical transfers as one vector, compact dtypes) changes this view
and the parts that use it, not the plan packages that build task graphs.

:class:`Dependencies` counts each task's unfinished dependencies over a CSR list of successors
and says which tasks a batch of finished ones makes ready.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from parplan.engine.arrays import EMPTY_I, SMALL_BATCH, FloatArray, IntArray, smallest, sorted_copy
from parplan.errors import SimulationError
from parplan.taskgraph import COMPUTE, MARKER, TRANSFER, DepArray, IdArray, TaskGraph

_INT32_MAX = int(np.iinfo(np.int32).max)


def _count_dtype(counts: IntArray) -> type[np.signedinteger[Any]]:
    """The smallest of int8 / int16 / int32 that holds every count (an in-degree)."""
    most = int(counts.max()) if len(counts) else 0
    for dtype in (np.int8, np.int16):
        if most <= np.iinfo(dtype).max:
            return dtype
    return np.int32


_COLUMNS = (
    "kind",
    "device",
    "dst",
    "size_bytes",
    "seconds",
    "flops",
    "reduce",
    "priority",
    "protocol",
    "overhead_s",
    "max_rate_Bps",
)


@dataclass(frozen=True, eq=False)
class TaskView:
    """Task columns as the engine uses them (no copies): index ``i`` is task ``i``.

    ``device`` is the compute device or the transfer source, ``dst`` the transfer destination,
    both indices into ``devices``; ``seconds`` is NaN for compute given in ``flops``.
    """

    devices: tuple[str, ...]
    kind: npt.NDArray[np.int8]
    device: IdArray
    dst: IdArray
    size_bytes: FloatArray
    seconds: FloatArray
    flops: FloatArray
    reduce: npt.NDArray[np.bool_]
    priority: IntArray
    dep_offsets: DepArray
    dep_indices: DepArray
    protocol: npt.NDArray[np.int8]
    overhead_s: FloatArray
    max_rate_Bps: FloatArray
    lane: npt.NDArray[np.int32] | None = None  # None: every transfer on lane 0
    stream: npt.NDArray[np.int8] | None = None  # None: every compute task on the compute stream

    @classmethod
    def of(cls, graph: TaskGraph) -> TaskView:
        """The view of ``graph``; raises :class:`SimulationError` when the graph is malformed."""
        view = cls(
            graph.devices, graph.kind, graph.device, graph.dst, graph.size_bytes, graph.seconds,
            graph.flops, graph.reduce, graph.priority, graph.dep_offsets, graph.dep_indices,
            graph.protocol, graph.overhead_s, graph.max_rate_Bps, graph.lane, graph.stream,
        )  # fmt: skip
        view._check()
        return view

    @property
    def num_tasks(self) -> int:
        """Number of tasks of every kind."""
        return len(self.kind)

    @property
    def num_streams(self) -> int:
        """Serial streams per device for compute tasks: 1, or 2 when some task runs on the
        communication stream."""
        return 1 if self.stream is None else 2

    def stream_of(self, tasks: IntArray) -> IdArray:
        """The serial stream each compute task occupies: ``device + stream x devices``."""
        devs = self.device[tasks]
        if self.stream is None:
            return devs
        return (devs + self.stream[tasks].astype(np.int32) * len(self.devices)).astype(np.int32)

    @property
    def priority_mode(self) -> bool:
        """Whether compute tasks carry different priorities (then the lowest ready one runs first)."""
        prio = self.priority[self.kind == COMPUTE]
        return bool(len(prio) and prio.min() != prio.max())

    def _check(self) -> None:
        """Reject malformed graphs up front (min/max passes, no per-task masks in the common case)."""
        n = len(self.kind)
        for name in _COLUMNS:
            if len(getattr(self, name)) != n:
                raise SimulationError(
                    f"task graph column {name!r} has {len(getattr(self, name))} entries, want {n}"
                )
        if self.lane is not None and (len(self.lane) != n or (n and self.lane.min() < 0)):
            raise SimulationError("task graph lanes must be >= 0, one per task")
        if self.stream is not None and (
            len(self.stream) != n or (n and not 0 <= self.stream.min() <= self.stream.max() <= 1)
        ):
            raise SimulationError("task graph streams must be 0 (compute) or 1 (communication), one per task")
        offsets, indices = self.dep_offsets, self.dep_indices
        if len(offsets) != n + 1 or offsets[-1] != len(indices) or offsets[0] != 0:
            raise SimulationError("task graph dependency offsets do not match the dependency list")
        if not n:
            return
        if len(indices) and (indices.min() < 0 or indices.max() >= n):
            raise SimulationError("a task depends on a task id outside the graph")
        kinds = self.kind
        if kinds.min() < COMPUTE or kinds.max() > MARKER:
            raise SimulationError("unknown task kind in the task graph")
        num_dev = len(self.devices)
        if self.device.min() < 0 or self.device.max() >= num_dev:
            dev = self.device[kinds != MARKER]
            if len(dev) and (dev.min() < 0 or dev.max() >= num_dev):
                raise SimulationError("a compute or transfer task has no valid device")
        tr = None
        if self.dst.min() < 0 or self.dst.max() >= num_dev:
            tr = kinds == TRANSFER
            dst = self.dst[tr]
            if len(dst) and (dst.min() < 0 or dst.max() >= num_dev):
                raise SimulationError("a transfer has no valid destination device")
        size = self.size_bytes
        if not (size.min() >= 0 and math.isfinite(float(size.max()))):
            tr = kinds == TRANSFER if tr is None else tr
            bad = size[tr]
            if len(bad) and not (bad.min() >= 0 and math.isfinite(float(bad.max()))):
                raise SimulationError("a transfer has a negative or non-finite size")
        comp = kinds == COMPUTE
        if comp.any():
            secs = self.seconds[comp]
            given = ~np.isnan(secs)
            if np.any(secs[given] < 0) or np.any(np.isinf(secs[given])):
                raise SimulationError("a compute task has a negative or infinite duration")
            if np.any(self.flops[comp][~given] < 0):
                raise SimulationError("a compute task has negative FLOPs")


class Dependencies:
    """Unfinished dependencies per task, and the successor lists (CSR) that release tasks.

    >>> from parplan.taskgraph import TaskGraphBuilder
    >>> b = TaskGraphBuilder()
    >>> x, y = b.marker(), b.marker()
    >>> z = b.marker([x, y])
    >>> deps = Dependencies(TaskView.of(b.build()))
    >>> deps.roots().tolist(), deps.finish(np.array([x])).tolist(), deps.finish(np.array([y])).tolist()
    ([0, 1], [], [2])
    """

    def __init__(self, tasks: TaskView) -> None:
        n = tasks.num_tasks
        self.num_tasks = n
        self.num_done = 0
        dep_indices = tasks.dep_indices
        num_edges = len(dep_indices)
        indeg = np.diff(tasks.dep_offsets)
        # Unfinished dependencies in the smallest integer that holds the largest in-degree: one
        # byte per task in a collective, whose steps wait for one or two others.
        self.remaining: npt.NDArray[np.signedinteger[Any]] = indeg.astype(_count_dtype(indeg))
        del indeg
        # Compact: task ids in the successor list and its offsets are int32 where they fit (a ring
        # at p = 4096 has 33.5 M transfers, each a successor of one other).
        id_dtype = np.int32 if n <= _INT32_MAX else np.int64
        off_dtype = np.int32 if num_edges <= _INT32_MAX else np.int64
        self.succ_idx: npt.NDArray[np.signedinteger[Any]]
        if num_edges:
            owners: npt.NDArray[np.signedinteger[Any]]  # the task of each edge
            owners = np.repeat(np.arange(n, dtype=id_dtype), self.remaining)
            self.succ_idx = owners[np.argsort(dep_indices, kind="stable")]
            del owners
            counts = np.bincount(dep_indices, minlength=n)
        else:
            self.succ_idx = EMPTY_I
            counts = np.zeros(n, dtype=np.int64)
        self.succ_off: npt.NDArray[np.signedinteger[Any]] = np.zeros(n + 1, dtype=off_dtype)
        np.cumsum(counts, out=self.succ_off[1:])

    def roots(self) -> IntArray:
        """Tasks without dependencies, by id."""
        return np.flatnonzero(self.remaining == 0)

    def stuck(self, limit: int) -> list[int]:
        """Up to ``limit`` tasks still waiting for a dependency (after a run: a cycle's)."""
        waiting: list[int] = np.flatnonzero(self.remaining > 0)[:limit].tolist()
        return waiting

    def finish(self, tasks: IntArray) -> IntArray:
        """Count ``tasks`` done; return their successors whose last dependency this was, by id."""
        self.num_done += len(tasks)
        succ_off = self.succ_off
        if len(tasks) <= SMALL_BATCH:  # a scalar loop beats a dozen numpy calls on a few tasks
            succ_idx, remaining = self.succ_idx, self.remaining
            out = []
            for task in tasks.tolist():
                for nxt in succ_idx[succ_off[task] : succ_off[task + 1]].tolist():
                    left = remaining.item(nxt) - 1  # a Python int: cheaper than numpy scalar arithmetic
                    remaining[nxt] = left
                    if left == 0:
                        out.append(nxt)
            if not out:
                return EMPTY_I
            out.sort()
            return np.array(out, dtype=np.int64)
        starts = succ_off[tasks]
        counts = succ_off[tasks + 1] - starts
        total = int(np.add.reduce(counts))  # the ufunc: ndarray.sum's Python wrapper costs more
        if total == 0:
            return EMPTY_I
        if total == len(tasks) and smallest(counts) == 1:
            succ = self.succ_idx[starts]
        else:
            nz = counts > 0
            starts, counts = starts[nz].astype(np.int64), counts[nz]
            shift = (starts - (counts.cumsum() - counts)).repeat(counts)
            succ = self.succ_idx[shift + np.arange(total)]
        succ = sorted_copy(succ).astype(np.int64, copy=False)  # task ids leave as int64, like the rest
        if len(succ) > 1 and np.count_nonzero(succ[1:] == succ[:-1]):
            first = np.empty(len(succ), dtype=bool)
            first[0] = True
            np.not_equal(succ[1:], succ[:-1], out=first[1:])
            pos = first.nonzero()[0]
            uniq = succ[pos]
            self.remaining[uniq] -= np.diff(np.append(pos, len(succ))).astype(self.remaining.dtype)
            succ = uniq
        else:
            self.remaining[succ] -= 1
        ready: IntArray = succ[self.remaining[succ] == 0]
        return ready
