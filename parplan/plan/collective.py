"""Lowering a collective :class:`~parplan.collectives.schedule.Schedule` into task-graph work.

Each schedule step becomes one TRANSFER task (rank ``src``'s device to rank ``dst``'s device,
``length x element_bytes`` bytes, reducing when the step reduces), appended as one numpy block, with
the step's dependencies offset to task ids. Around them:

- optional per-rank *ready* markers when ``rank_deps`` is given: rank ``r``'s contribution is ready
  once ``rank_deps[r]`` (and the collective-wide ``deps``) are done. A step waits for the ready
  marker of every rank whose own data it reads: its sender, and its receiver when it reduces. The
  marker is attached only where no direct dependency already implies it (a dependency that itself
  reads the same rank's data), so a ring gets one edge per rank and step, not a quadratic fan-in.
- per-rank *done* markers: rank ``r`` is done when every step into ``r`` is done (it holds its
  result); the marker depends only on the steps into ``r`` that no other step into ``r`` depends on.
  Every step goes into some rank, so the rank markers together cover the whole collective.
- one collective-wide ``done`` marker joining the rank markers.

Without ``rank_deps``, the collective-wide ``deps`` go on the steps that have no dependency of their
own (every other step depends on those transitively).

Switch ranks (NVLS, CollNet: :class:`~parplan.collectives.schedule.SwitchRank`) are placed by the
``network``: each goes to :meth:`~parplan.topology.network.Network.reducing_switch`, the switch with
its capability serving the devices of the ranks it serves, and becomes a task-graph device after
the ranks' devices. A cluster without such a switch is refused with a :class:`CollectiveError`
saying what its file must declare. Switch ranks get no ready or done markers: they hold no data of
their own, and every step out of a switch depends on the steps into it.

A lowered collective may carry an NCCL ``protocol`` (every transfer gets it: the engine prices its
wire bytes and per-step latency, from NCCL's tree table for a tree's steps), a per-channel payload
rate ceiling ``max_rate_Bps`` (NCCL's per-channel bandwidth for the algorithm and protocol) and a
per-call cost (:func:`~parplan.plan.collective_run.call_overhead_s`: the transport's call latency
plus, under ``nccl``, the protocol's base latency), paid once per call: it is the ``overhead_s`` of
the steps without dependencies, the ones every other step waits for. What a call runs at a size
(NCCL's pick for ``auto``) is :mod:`parplan.plan.collective_run`'s.

A schedule whose ``meta["lane"]`` holds a lane per step (the channel of a ring step) passes it on
as the transfers' ``lane`` column: the engine routes each lane on its own where the network has
several equally good paths (a GPU with several NICs).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from parplan.collectives._build import merge_csr
from parplan.collectives.schedule import Schedule
from parplan.errors import CollectiveError, PlanError, TopologyError
from parplan.taskgraph import (
    MARKER,
    NO_PROTOCOL,
    PROTOCOLS,
    TRANSFER,
    TREE_STEP,
    TaskGraph,
    TaskGraphBuilder,
    constant,
)
from parplan.topology.network import Network

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class CollectiveTasks:
    """Where a lowered collective sits in the task graph.

    ``first_task`` .. ``first_task + num_steps - 1`` are the transfers, in schedule step order;
    ``rank_ready`` (empty without ``rank_deps``) and ``rank_done`` are marker ids per rank and
    ``done`` is the marker that ends the collective.
    """

    first_task: int
    num_steps: int
    rank_ready: tuple[int, ...]
    rank_done: tuple[int, ...]
    done: int

    def step_task(self, step: int) -> int:
        """The task id of schedule step ``step``."""
        return self.first_task + step


def lower_schedule(
    builder: TaskGraphBuilder,
    schedule: Schedule,
    devices: Sequence[str],
    *,
    element_bytes: float,
    deps: Sequence[int] = (),
    rank_deps: Sequence[Sequence[int]] | None = None,
    category: str = "allreduce",
    label: str | None = None,
    protocol: str | None = None,
    call_overhead_s: float = 0.0,
    max_rate_Bps: float = float("inf"),
    network: Network | None = None,
) -> CollectiveTasks:
    """Append ``schedule`` on ``devices`` (rank ``r`` on ``devices[r]``) to ``builder``.

    Labels are ``"{label}:{phase}"`` per schedule phase (label defaults to the algorithm name).
    ``network`` places the schedule's switch ranks (needed only when it has some).
    Raises :class:`PlanError` when the devices do not match the ranks or a dependency is invalid,
    :class:`CollectiveError` when no switch of the cluster can play a switch rank.
    """
    p = schedule.num_ranks
    devices = endpoint_devices(schedule, devices, network, element_bytes)
    if rank_deps is not None and len(rank_deps) != p:
        raise PlanError(f"rank_deps has {len(rank_deps)} entries for {p} ranks")
    existing = builder.num_tasks
    for d in [*deps, *(x for r in rank_deps or () for x in r)]:
        if not 0 <= d < existing:
            raise PlanError(f"collective dependency {d} is not an existing task")

    dev_ids = np.array([builder.device_id(d) for d in devices], dtype=np.int32)
    base_label = label or schedule.algorithm
    phase_labels = np.array(
        [builder.label_id(f"{base_label}:{name}") for name in schedule.phase_names], dtype=np.int32
    )
    cat = builder.category_id(category)
    n = schedule.num_steps
    src, dst, red = schedule.src, schedule.dst, schedule.reduce
    counts = schedule.dep_counts
    dep_idx = schedule.dep_indices.astype(np.int64)  # task ids may pass int32 in a large plan

    rank_ready, extra_counts, extra_flat = _outside_edges(builder, schedule, deps, rank_deps, base_label)
    first = builder.num_tasks
    # The outside deps come first in each step's list, then the schedule's own (offset to task ids).
    if len(extra_flat):
        total_counts, flat = merge_csr(extra_counts, extra_flat, counts, dep_idx + first)
    else:
        total_counts, flat = counts, dep_idx + first
    del dep_idx
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(total_counts, out=offsets[1:])
    columns: dict[str, np.ndarray] = {
        "kind": constant(n, TRANSFER, np.int8),
        "device": dev_ids[src],
        "dst": dev_ids[dst],
        "size_bytes": schedule.length * float(element_bytes),
        "reduce": red,
        "category": constant(n, cat, np.int32),
        "label": phase_labels[schedule.phase],
        **_message_columns(schedule, protocol, call_overhead_s, max_rate_Bps),
    }
    lanes = step_lanes(schedule)
    if lanes is not None:
        columns["lane"] = lanes
    builder.add_block(columns, offsets, flat)

    done_counts, done_flat = _done_edges(schedule, first)  # rank done markers, then the done marker
    labels = np.repeat(
        [builder.label_id(f"{base_label}:rank done"), builder.label_id(f"{base_label}:done")], [p, 1]
    )
    done_flat = np.concatenate([done_flat, np.arange(builder.num_tasks, builder.num_tasks + p)])
    *rank_done, done = _add_markers(builder, np.append(done_counts, p), done_flat, labels)
    return CollectiveTasks(
        first_task=first, num_steps=n, rank_ready=rank_ready, rank_done=tuple(rank_done), done=done
    )


def collective_taskgraph(
    schedule: Schedule,
    devices: Sequence[str],
    element_bytes: float,
    *,
    protocol: str | None = None,
    call_overhead_s: float = 0.0,
    max_rate_Bps: float = float("inf"),
    network: Network | None = None,
) -> TaskGraph:
    """A task graph of just ``schedule``'s steps on ``devices``; its meta says what collective it is.

    Task ``i`` is step ``i`` (rank ``r`` on ``devices[r]``; labels ``"{algorithm}:{phase}"``). There
    are no markers: the collective's time is the makespan. Built straight into the frozen arrays,
    sharing the schedule's arrays where their dtype already matches (read-only by convention),
    because a ring at p = 4096 has 33 million steps and every extra pass over them costs a
    noticeable fraction of a second: the int32 ranks are the int32 device ids as they are, the
    int8 phases the labels, and constant columns (kind, compute columns, a protocol or rate
    ceiling not given) are :func:`~parplan.taskgraph.constant` views that take no memory. ``protocol``,
    ``call_overhead_s`` and ``network`` as in :func:`lower_schedule`.
    """
    p = schedule.num_ranks
    message = _message_columns(schedule, protocol, call_overhead_s, max_rate_Bps)
    devices = endpoint_devices(schedule, devices, network, element_bytes)
    n = schedule.num_steps
    algorithm = schedule.algorithm
    return TaskGraph(
        devices=tuple(devices),  # device index == rank (switch ranks after the ranks)
        kind=constant(n, TRANSFER, np.int8),
        device=schedule.src,  # int32 like the graph's ids: shared, not copied
        dst=schedule.dst,
        size_bytes=np.multiply(schedule.length, float(element_bytes), dtype=np.float64),
        seconds=constant(n, 0.0, np.float64),
        flops=constant(n, 0.0, np.float64),
        reduce=schedule.reduce,
        priority=constant(n, 0, np.int64),
        category=constant(n, 0, np.int32),
        label=schedule.phase,  # phase i is label i: shared, not copied
        protocol=message.get("protocol", constant(n, NO_PROTOCOL, np.int8)),
        overhead_s=message.get("overhead_s", constant(n, 0.0, np.float64)),
        max_rate_Bps=message.get("max_rate_Bps", constant(n, float("inf"), np.float64)),
        dep_offsets=schedule.dep_offsets,
        dep_indices=schedule.dep_indices,
        categories=(category_name(schedule),),
        labels=tuple(f"{algorithm}:{name}" for name in schedule.phase_names),
        lane=step_lanes(schedule),
        meta={
            "collective": {
                "algorithm": algorithm,
                "kind": schedule.collective,
                "ranks": p,
                "size_bytes": schedule.num_elements * float(element_bytes),
                **({"protocol": protocol} if protocol else {}),
            }
        },
    )


def step_lanes(schedule: Schedule) -> np.ndarray | None:
    """The schedule's lane per step (``meta["lane"]``) as int32, or None when it has none or all
    are 0."""
    lanes = schedule.meta.get("lane")
    if lanes is None:
        return None
    column = np.asarray(lanes, dtype=np.int32)
    if len(column) != schedule.num_steps:
        raise PlanError(f"schedule lanes: {len(column)} for {schedule.num_steps} steps")
    return column if np.count_nonzero(column) else None


def _message_columns(
    schedule: Schedule, protocol: str | None, call_overhead_s: float, max_rate_Bps: float
) -> dict[str, np.ndarray]:
    """The ``protocol``, ``overhead_s`` and ``max_rate_Bps`` columns of a lowered schedule (none
    when unused)."""
    n = schedule.num_steps
    columns: dict[str, np.ndarray] = {}
    if protocol is not None:
        if protocol not in PROTOCOLS:
            raise PlanError(f"unknown protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")
        code = PROTOCOLS.index(protocol) + (TREE_STEP if "tree" in schedule.algorithm else 0)
        columns["protocol"] = constant(n, code, np.int8)
    if max_rate_Bps != float("inf"):
        if not max_rate_Bps > 0:
            raise PlanError(f"max_rate_Bps must be > 0, got {max_rate_Bps}")
        columns["max_rate_Bps"] = constant(n, float(max_rate_Bps), np.float64)
    if call_overhead_s:
        columns["overhead_s"] = np.where(np.diff(schedule.dep_offsets) == 0, float(call_overhead_s), 0.0)
    return columns


def category_name(schedule: Schedule) -> str:
    """The task category of a collective: its kind without underscores (``allreduce``, ``allgather``)."""
    return schedule.collective.replace("_", "")


def _outside_edges(
    builder: TaskGraphBuilder,
    schedule: Schedule,
    deps: Sequence[int],
    rank_deps: Sequence[Sequence[int]] | None,
    base_label: str,
) -> tuple[tuple[int, ...], IntArray, IntArray]:
    """The per-rank ready markers (appended now, empty without ``rank_deps``) and, per step, the
    outside dependencies it takes as CSR ``(counts, flat)``: ready markers as :func:`_ready_edges`
    says, or without ``rank_deps`` the collective-wide ``deps`` on the steps with no dependency."""
    n = schedule.num_steps
    if rank_deps is not None:
        labels = np.array([builder.label_id(f"{base_label}:rank{r} ready") for r in range(len(rank_deps))])
        waits = [[*deps, *r_deps] for r_deps in rank_deps]
        flat_waits = np.fromiter((d for w in waits for d in w), dtype=np.int64)
        rank_ready = tuple(_add_markers(builder, np.array([len(w) for w in waits]), flat_waits, labels))
        counts, flat = _ready_edges(schedule, np.asarray(rank_ready, dtype=np.int64))
        return rank_ready, counts, flat
    counts = np.zeros(n, dtype=np.int64)
    if not deps:
        return (), counts, np.zeros(0, dtype=np.int64)
    roots = np.diff(schedule.dep_offsets) == 0
    counts[roots] = len(deps)
    return (), counts, np.tile(np.asarray(list(deps), dtype=np.int64), int(roots.sum()))


def _ready_edges(schedule: Schedule, ready: IntArray) -> tuple[IntArray, IntArray]:
    """Per step, the ready markers it must wait for (sender's; receiver's when reducing): the
    counts and, in step order, the ranks whose marker each waits for (:func:`_edges`) as marker ids."""
    edges = _edges(schedule)
    flat: IntArray = ready[edges.ready_ranks]
    return edges.ready_counts, flat


def _done_edges(schedule: Schedule, first: int) -> tuple[IntArray, IntArray]:
    """Per rank, the steps its done marker depends on (as task ids, grouped by rank; :func:`_edges`)."""
    edges = _edges(schedule)
    grouped: IntArray = edges.done_steps + first
    return edges.done_counts, grouped


@dataclass(frozen=True)
class _Edges:
    """The ready and done edges of a schedule, relative to it (every bucket of a size lowers the
    same schedule object: they are found once, :data:`_EDGES`)."""

    ready_counts: IntArray  # per step, how many ready markers it waits for (0 to 2)
    ready_ranks: IntArray  # the ranks of those markers, step by step (sender's first)
    done_counts: IntArray  # per rank, the steps its done marker waits for
    done_steps: IntArray  # those steps, grouped by rank, ascending within a rank


_EDGES: weakref.WeakKeyDictionary[Schedule, _Edges] = weakref.WeakKeyDictionary()
"""The edges of the schedules lowered while they live (a schedule is read-only by convention)."""


def _edges(schedule: Schedule) -> _Edges:
    """The ready and done edges of ``schedule``, found once per schedule object.

    Ready: a step reads rank r's own data when r sends it or r reduces into it ("r-reading"). It
    needs r's ready marker unless one of its direct dependencies is itself r-reading (which, by
    induction in step order, already waits for that marker). Done: rank r is done when every step
    into r is done (it holds its result); it suffices to wait for the steps into r that no other
    step into r depends on.
    """
    found = _EDGES.get(schedule)
    if found is not None:
        return found
    src, dst, red = schedule.src, schedule.dst, schedule.reduce
    p, n = schedule.num_ranks, schedule.num_steps
    dep = schedule.dep_indices
    counts = np.diff(schedule.dep_offsets)
    edge_step = np.repeat(np.arange(n, dtype=np.int64), counts)
    # For edge (step i -> dep j): does j read rank src[i] / rank dst[i]?
    reads_src = (src[dep] == src[edge_step]) | (red[dep] & (dst[dep] == src[edge_step]))
    reads_dst = (src[dep] == dst[edge_step]) | (red[dep] & (dst[dep] == dst[edge_step]))
    covered_src = np.zeros(n, dtype=bool)
    covered_dst = np.zeros(n, dtype=bool)
    covered_src[edge_step[reads_src]] = True
    covered_dst[edge_step[reads_dst]] = True
    need_src = ~covered_src & (src < p)  # switch ranks have no ready marker
    need_dst = red & ~covered_dst & (dst != src) & (dst < p)
    # Per step: sender's marker first, then receiver's.
    pairs = np.stack([np.where(need_src, src, -1), np.where(need_dst, dst, -1)], axis=1).ravel()
    covered = np.zeros(n, dtype=bool)
    if len(dep):
        covered[dep[dst[dep] == np.repeat(dst, counts)]] = True
    steps = np.flatnonzero(~covered & (dst < p))  # a switch rank has no result to wait for
    ranks = dst[steps]
    # Group by rank with a stable sort (radix sort for 16-bit keys), steps ascending within a rank.
    key = ranks.astype(np.int16) if p <= np.iinfo(np.int16).max else ranks
    order = np.argsort(key, kind="stable")
    found = _EDGES[schedule] = _Edges(
        ready_counts=need_src.astype(np.int64) + need_dst.astype(np.int64),
        ready_ranks=pairs[pairs >= 0].astype(np.int64),
        done_counts=np.bincount(ranks, minlength=p).astype(np.int64),
        done_steps=steps[order],
    )
    return found


def _add_markers(builder: TaskGraphBuilder, counts: IntArray, flat: IntArray, labels: IntArray) -> list[int]:
    """Append one marker per entry of ``counts`` with the given CSR deps and label ids, as one
    block (cheaper than a builder row each); returns their ids."""
    m = len(counts)
    offsets = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    first = builder.add_block(
        {
            "kind": constant(m, MARKER, np.int8),
            "category": constant(m, builder.category_id("marker"), np.int32),
            "label": labels.astype(np.int32),
        },
        offsets,
        flat,
    )
    return list(range(first, first + m))


def endpoint_devices(
    schedule: Schedule, devices: Sequence[str], network: Network | None, element_bytes: float = 1.0
) -> list[str]:
    """The task-graph devices of ``schedule``: ``devices`` for its ranks, then the switch of the
    ``network`` that plays each switch rank. A :class:`PlanError` unless there is one distinct
    device per rank and ``element_bytes > 0``; a :class:`CollectiveError` when the cluster has no
    switch able to play a switch rank."""
    p = schedule.num_ranks
    if len(devices) != p:
        raise PlanError(f"{schedule.algorithm} has {p} ranks but {len(devices)} devices were given")
    if len(set(devices)) != len(devices):
        raise PlanError("a collective needs a distinct device per rank")
    if not element_bytes > 0:
        raise PlanError(f"element_bytes must be > 0, got {element_bytes}")
    out = list(devices)
    if not schedule.switches:
        return out
    if network is None:
        raise PlanError(f"{schedule.algorithm} puts a switch in the loop: lowering it needs the network")
    for switch in schedule.switches:
        try:
            out.append(network.reducing_switch(switch.capability, [devices[r] for r in switch.serves]))
        except TopologyError as exc:
            raise CollectiveError(f"{schedule.algorithm} cannot run here: {exc}") from None
    if len(set(out)) != len(out):
        raise CollectiveError(f"{schedule.algorithm}: two switch ranks fall on one switch")
    return out
