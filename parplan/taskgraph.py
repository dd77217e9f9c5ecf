"""The task graph: compute and transfer work with dependencies, the engine's only input.

Strategies and collectives both produce task graphs, so one engine times everything. Tasks are
appended through :class:`TaskGraphBuilder` (one call per task, or a whole block of arrays at once
for large collectives) and frozen into a :class:`TaskGraph` of numpy arrays.

Kinds of task:

- ``COMPUTE``: occupies ``device``'s compute stream for ``seconds`` (already converted from FLOPs
  by the caller, or use :meth:`TaskGraphBuilder.compute_flops` and let the engine convert with the
  device's peak x efficiency x speed factor).
- ``TRANSFER``: moves ``size_bytes`` from ``device`` (source) to ``dst`` over the routed path; when
  ``reduce`` is set, the receiver then adds it into its buffer, costing gamma x bytes on the
  receiver's reduction stream.
  A transfer may carry a ``protocol`` (NCCL's LL / LL128 / Simple, :data:`PROTOCOLS`; -1: none),
  which sets the bytes on the wire and the per-step latency the transport charges, and
  ``overhead_s``: a fixed delay before its bytes move that the plan charges (a collective call's
  software and launch cost on its first messages), and ``max_rate_Bps``: the fastest its payload
  can move whatever the links allow (an NCCL channel's thread block has a throughput of its own).
  ``lane`` (None: all 0) names the channel of a collective step: where the network has several
  equally good paths between two devices (a GPU with several NICs), lanes take different ones.
- ``MARKER``: takes no time; joins dependencies (e.g. "bucket 3 ready").

A compute task runs on its device's compute stream (``stream`` 0) or on its *communication stream*
(:data:`COMM_STREAM`): a second serial stream per device for collectives the plan has already timed
(a sharded plan's TP or CP calls of one representative rank, lowered once with the engine's own
rules and replayed as a task of that duration), so they overlap the device's compute as NCCL's
stream does. ``stream`` is a :func:`constant` 0 in every graph that does not use it.

``label`` indexes ``labels`` (a string table) and ``category`` indexes ``categories`` (e.g.
"forward", "backward", "optimizer", "allreduce", "activation", "p2p") so reports can split time by
kind without a Python object per task.

Columns are compact: device, destination, category and label ids are int32 (``build`` refuses a
graph with more), kinds and protocols int8. A column the graph does not use (the compute columns
of a transfer-only graph, a protocol or rate ceiling no transfer has) is a :func:`constant`, a
zero-stride view that takes no memory and reads like any other column.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from parplan.errors import SimulationError

COMPUTE, TRANSFER, MARKER = 0, 1, 2

COMPUTE_STREAM, COMM_STREAM = 0, 1
"""The ``stream`` of a compute task: the device's compute stream, or its communication stream."""

PROTOCOLS = ("ll", "ll128", "simple")
"""NCCL's protocols by the code a transfer's ``protocol`` column holds (-1: no protocol); a code
plus :data:`TREE_STEP` marks a step of a tree, which NCCL times with its tree latencies."""
NO_PROTOCOL = -1
TREE_STEP = len(PROTOCOLS)

IntArray = npt.NDArray[np.int64]
IdArray = npt.NDArray[np.int32]
LabelArray = npt.NDArray[np.int8] | IdArray
"""Label ids: int32 from the builder; a collective's graph shares its schedule's int8 phases."""
DepArray = npt.NDArray[np.int32] | npt.NDArray[np.int64]
"""Task ids of dependencies and their offsets: int64 from the builder, int32 when shared with a
collective schedule (which stores them compactly)."""
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, eq=False)
class TaskGraph:
    """Frozen task arrays; index ``i`` is task ``i``. Devices are indices into ``devices``."""

    devices: tuple[str, ...]
    kind: npt.NDArray[np.int8]
    device: IdArray  # compute device, or transfer source
    dst: IdArray  # transfer destination (-1 otherwise)
    size_bytes: FloatArray  # transfer bytes (0 otherwise)
    seconds: FloatArray  # compute seconds (NaN when given as flops)
    flops: FloatArray  # compute FLOPs (0 when given as seconds)
    reduce: BoolArray  # transfer reduces into the receiver
    priority: IntArray  # lower runs first among ready tasks on a compute stream
    category: IdArray
    label: LabelArray
    protocol: npt.NDArray[np.int8]  # index into PROTOCOLS, -1 for none
    overhead_s: FloatArray  # fixed delay a transfer pays before its bytes move (0 otherwise)
    max_rate_Bps: FloatArray  # payload rate ceiling of a transfer (inf: the links decide)
    dep_offsets: DepArray
    dep_indices: DepArray
    categories: tuple[str, ...]
    labels: tuple[str, ...]
    meta: dict[str, object] = field(default_factory=dict)
    lane: npt.NDArray[np.int32] | None = None  # transfer lane (route choice); None: every lane 0
    stream: npt.NDArray[np.int8] | None = None  # compute task's stream (COMM_STREAM); None: all 0

    @property
    def num_tasks(self) -> int:
        """Number of tasks of every kind."""
        return len(self.kind)

    def deps(self, task: int) -> DepArray:
        """The tasks that must finish before ``task`` starts."""
        return self.dep_indices[self.dep_offsets[task] : self.dep_offsets[task + 1]]


class TaskGraphBuilder:
    """Accumulates tasks; ``build()`` freezes them. Dependencies must point at earlier tasks."""

    def __init__(self, devices: list[str] | tuple[str, ...] | None = None) -> None:
        self._device_index: dict[str, int] = {}
        self.devices: list[str] = []
        for d in devices or ():
            self.device_id(d)
        self._cat_index: dict[str, int] = {}
        self._label_index: dict[str, int] = {}
        self._chunks: list[dict[str, np.ndarray]] = []
        self._dep_chunks: list[tuple[IntArray, IntArray]] = []  # (counts, flat indices)
        self._rows: list[dict[str, object]] = []  # tasks added one by one: their non-default columns
        self._row_deps: list[list[int]] = []
        self.num_tasks = 0

    def device_id(self, name: str) -> int:
        """Index of a device, registering it on first use."""
        idx = self._device_index.get(name)
        if idx is None:
            idx = self._device_index[name] = len(self.devices)
            self.devices.append(name)
        return idx

    def category_id(self, name: str) -> int:
        """Index of a category name (registered on first use)."""
        return self._cat_index.setdefault(name, len(self._cat_index))

    def label_id(self, name: str) -> int:
        """Index of a label string (registered on first use)."""
        return self._label_index.setdefault(name, len(self._label_index))

    def _add(self, deps: list[int] | tuple[int, ...], **cols: object) -> int:
        task = self.num_tasks
        for d in deps:
            if not 0 <= d < task:
                raise SimulationError(f"task {task} depends on {d}, which is not an earlier task")
        self._rows.append(cols)
        self._row_deps.append(list(deps))
        self.num_tasks += 1
        return task

    def compute(
        self,
        device: str,
        seconds: float,
        deps: list[int] | tuple[int, ...] = (),
        *,
        category: str = "compute",
        label: str = "",
        priority: int = 0,
        stream: int = COMPUTE_STREAM,
    ) -> int:
        """A compute task of known duration on ``device``'s compute stream (or, with
        ``stream=COMM_STREAM``, its communication stream); returns its id."""
        if stream not in (COMPUTE_STREAM, COMM_STREAM):
            raise SimulationError(f"unknown stream {stream}; valid: {COMPUTE_STREAM}, {COMM_STREAM}")
        return self._add(
            deps,
            kind=COMPUTE,
            device=self.device_id(device),
            seconds=float(seconds),
            category=self.category_id(category),
            label=self.label_id(label or category),
            priority=priority,
            stream=stream,
        )

    def compute_flops(
        self,
        device: str,
        flops: float,
        deps: list[int] | tuple[int, ...] = (),
        *,
        category: str = "compute",
        label: str = "",
        priority: int = 0,
    ) -> int:
        """A compute task given in FLOPs; the engine divides by the device's effective rate."""
        return self._add(
            deps,
            kind=COMPUTE,
            device=self.device_id(device),
            seconds=float("nan"),
            flops=float(flops),
            category=self.category_id(category),
            label=self.label_id(label or category),
            priority=priority,
        )

    def transfer(
        self,
        src: str,
        dst: str,
        size_bytes: float,
        deps: list[int] | tuple[int, ...] = (),
        *,
        reduce: bool = False,
        category: str = "transfer",
        label: str = "",
        protocol: int = NO_PROTOCOL,
        overhead_s: float = 0.0,
        max_rate_Bps: float = float("inf"),
    ) -> int:
        """A point-to-point transfer; returns its id."""
        return self._add(
            deps,
            kind=TRANSFER,
            device=self.device_id(src),
            dst=self.device_id(dst),
            size_bytes=float(size_bytes),
            reduce=reduce,
            protocol=protocol,
            overhead_s=float(overhead_s),
            max_rate_Bps=float(max_rate_Bps),
            category=self.category_id(category),
            label=self.label_id(label or category),
        )

    def marker(self, deps: list[int] | tuple[int, ...] = (), *, label: str = "marker") -> int:
        """A zero-time join point; returns its id."""
        return self._add(deps, kind=MARKER, category=self.category_id("marker"), label=self.label_id(label))

    def _flush_rows(self) -> None:
        if not self._row_deps:
            return
        rows = self._rows
        chunk: dict[str, np.ndarray] = {
            k: _column(k, [row.get(k, default) for row in rows]) for k, default in _DEFAULTS.items()
        }
        counts = np.fromiter((len(d) for d in self._row_deps), dtype=np.int64, count=len(self._row_deps))
        flat = np.fromiter((x for d in self._row_deps for x in d), dtype=np.int64, count=int(counts.sum()))
        self._chunks.append(chunk)
        self._dep_chunks.append((counts, flat))
        self._rows = []
        self._row_deps = []

    def add_block(
        self,
        columns: dict[str, np.ndarray],
        dep_offsets: IntArray,
        dep_indices: IntArray,
    ) -> int:
        """Append many tasks at once; returns the id of the first.

        ``columns`` holds arrays for any of the task columns (missing ones take defaults; ``device``
        and ``dst`` are device indices from :meth:`device_id`, ``category`` and ``label`` ids from
        :meth:`category_id` / :meth:`label_id`). ``dep_indices`` are absolute task ids, already offset.
        """
        self._flush_rows()
        first = self.num_tasks
        n = len(dep_offsets) - 1
        chunk: dict[str, np.ndarray] = {}
        for k in _COLUMNS:
            if k in columns:
                chunk[k] = _column(k, columns[k])
                if len(chunk[k]) != n:
                    raise SimulationError(f"block column {k!r} has {len(chunk[k])} entries, want {n}")
            else:
                chunk[k] = _repeated(_DEFAULT_ONES[k], n)
        # Array methods and count_nonzero, not np.diff/np.repeat/np.any: their Python wrappers cost
        # more than the work on the few-task blocks a plan appends by the thousand.
        offsets = np.asarray(dep_offsets, dtype=np.int64)
        counts: IntArray = offsets[1:] - offsets[:-1]
        flat: IntArray = np.asarray(dep_indices, dtype=np.int64)
        if len(flat) and (
            flat.item(flat.argmin()) < 0
            or np.count_nonzero(flat >= np.arange(first, first + n, dtype=np.int64).repeat(counts))
        ):
            raise SimulationError("a block task depends on a task that is not earlier")
        self._chunks.append(chunk)
        self._dep_chunks.append((counts, flat))
        self.num_tasks += n
        return first

    def build(self, meta: dict[str, object] | None = None) -> TaskGraph:
        """Freeze the tasks into a :class:`TaskGraph`."""
        self._flush_rows()
        if len(self.devices) > _ID_MAX or len(self._cat_index) > _ID_MAX or len(self._label_index) > _ID_MAX:
            raise SimulationError(f"a task graph holds at most {_ID_MAX} devices, categories and labels")
        if self._chunks:
            cols = {k: _concatenate(k, [c[k] for c in self._chunks]) for k in _COLUMNS}
            counts = np.concatenate([c for c, _ in self._dep_chunks])
            flat = np.concatenate([f for _, f in self._dep_chunks])
        else:
            cols = {k: constant(0, _DEFAULTS[k], _DTYPES[k]) for k in _COLUMNS}
            counts = np.zeros(0, dtype=np.int64)
            flat = np.zeros(0, dtype=np.int64)
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return TaskGraph(
            devices=tuple(self.devices),
            kind=cols["kind"],
            device=cols["device"],
            dst=cols["dst"],
            size_bytes=cols["size_bytes"],
            seconds=cols["seconds"],
            flops=cols["flops"],
            reduce=cols["reduce"],
            priority=cols["priority"],
            category=cols["category"],
            label=cols["label"],
            protocol=cols["protocol"],
            overhead_s=cols["overhead_s"],
            max_rate_Bps=cols["max_rate_Bps"],
            dep_offsets=offsets,
            dep_indices=flat,
            categories=tuple(self._cat_index),
            labels=tuple(self._label_index),
            meta=dict(meta or {}),
            lane=cols["lane"] if np.count_nonzero(cols["lane"]) else None,
            stream=cols["stream"] if np.count_nonzero(cols["stream"]) else None,
        )


_ID_MAX = int(np.iinfo(np.int32).max)
"""Device, category and label ids (and ``dst``) are int32: a graph never has more of them."""


def constant(n: int, value: object, dtype: type) -> np.ndarray:
    """A read-only column of ``n`` equal values that takes no memory (a zero-stride view), for the
    columns a graph does not use: the compute columns of a transfer-only graph, protocol and rate
    ceiling of transfers without them. Read exactly like a full column."""
    return _repeated(_constant_one(value, dtype), n)


def _constant_one(value: object, dtype: type) -> np.ndarray:
    """The read-only one-element array of ``value`` that :func:`constant` columns view."""
    key = (dtype, type(value), repr(value) if isinstance(value, float) else value)  # -0.0 and nan apart
    one = _CONSTANT_ONES.get(key)
    if one is None:
        one = np.array([value], dtype=dtype)
        one.flags.writeable = False
        if len(_CONSTANT_ONES) < 1024:
            _CONSTANT_ONES[key] = one
    return one


def _repeated(one: np.ndarray, n: int) -> np.ndarray:
    """``n`` times the read-only one-element array ``one``, as a zero-stride view of it; the views
    are kept by length (blocks of one size recur: every bucket of a size lowers alike), each
    holding its ``one`` alive, so that ``id(one)`` names it while the view is kept."""
    key = (id(one), n)
    view = _VIEWS.get(key)
    if view is None:
        view = np.ndarray((n,), dtype=one.dtype, buffer=one, strides=(0,))  # read-only, as ``one`` is
        if len(_VIEWS) >= 4096:
            _VIEWS.clear()
        _VIEWS[key] = view
    return view


_VIEWS: dict[tuple[int, int], np.ndarray] = {}


_CONSTANT_ONES: dict[tuple[type, type, object], np.ndarray] = {}
"""The one read-only element each :func:`constant` of a value and dtype views (building the view
with ``np.ndarray`` costs a third of ``np.broadcast_to``; task-graph blocks ask for many)."""


def _is_constant(column: np.ndarray) -> bool:
    """Whether ``column`` is a :func:`constant` (a zero-stride view)."""
    return column.ndim == 1 and column.strides[0] == 0


def _column(name: str, values: object) -> np.ndarray:
    """``values`` as column ``name``'s dtype; a :class:`SimulationError` when integers would not
    fit it (ids are int32), instead of numpy's silent wrap-around."""
    target = np.dtype(_DTYPES[name])
    arr = np.asarray(values)
    if arr.dtype != target and arr.dtype.kind in "iu" and target.kind == "i" and len(arr):
        info = np.iinfo(target.name)
        lo, hi = int(arr.min()), int(arr.max())
        if lo < info.min or hi > info.max:
            raise SimulationError(f"task column {name!r} holds {lo}..{hi}, beyond {target.name}")
    return np.asarray(arr, dtype=target)


def _concatenate(name: str, chunks: list[np.ndarray]) -> np.ndarray:
    """One column from its chunks; stays a :func:`constant` when every chunk is the same constant
    (e.g. ``flops`` of a transfer-only graph)."""
    if all(_is_constant(c) for c in chunks):
        values = {c[0].item() for c in chunks if len(c)}
        if len(values) <= 1:
            value = values.pop() if values else _DEFAULTS[name]
            return constant(sum(len(c) for c in chunks), value, _DTYPES[name])
    return np.concatenate(chunks)


_COLUMNS = (
    "kind",
    "device",
    "dst",
    "size_bytes",
    "seconds",
    "flops",
    "reduce",
    "priority",
    "category",
    "label",
    "protocol",
    "overhead_s",
    "max_rate_Bps",
    "lane",
    "stream",
)
_DTYPES: dict[str, type] = {
    "kind": np.int8,
    "device": np.int32,
    "dst": np.int32,
    "size_bytes": np.float64,
    "seconds": np.float64,
    "flops": np.float64,
    "reduce": np.bool_,
    "priority": np.int64,
    "category": np.int32,
    "label": np.int32,
    "protocol": np.int8,
    "overhead_s": np.float64,
    "max_rate_Bps": np.float64,
    "lane": np.int32,
    "stream": np.int8,
}
_DEFAULTS: dict[str, object] = {
    "kind": MARKER,
    "device": -1,
    "dst": -1,
    "size_bytes": 0.0,
    "seconds": 0.0,
    "flops": 0.0,
    "reduce": False,
    "priority": 0,
    "category": 0,
    "label": 0,
    "protocol": NO_PROTOCOL,
    "overhead_s": 0.0,
    "max_rate_Bps": float("inf"),
    "lane": 0,
    "stream": COMPUTE_STREAM,
}

_DEFAULT_ONES: dict[str, np.ndarray] = {k: _constant_one(_DEFAULTS[k], _DTYPES[k]) for k in _COLUMNS}
"""Each column's default as the one read-only element its :func:`constant` columns view (blocks
leave most columns out: a lowered collective sets 9 of 15, a marker block 3)."""
