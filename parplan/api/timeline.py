"""Reading a simulated timeline: how a unit's time splits on its critical device, the pipeline
bubble, and how long each group of all-reduces is in flight.

How the step time is split (all on one *critical device*, so the three parts add up to the step):

- ``step_time_s``: the simulated makespan of one unit (step, round or generation).
- **Critical device**: the device whose compute stream is busy longest (the most loaded one: the
  straggler of a data-parallel step, the heaviest stage of a pipeline); ties go to the device whose
  last compute task ends latest, then to the earlier device.
- ``compute_s``: that device's compute-stream busy time.
- ``exposed_comm_s``: the part of the rest of the step that communication holds the device up.
  Each idle gap of its stream (before a compute task, and after its last one until the step ends)
  is explained by walking back from what ends the gap (the compute task; for the last gap, the task
  that ends the step) through the dependency that finished last, then that task's, and so on: the
  chain of work the device was waiting for. Time on that chain spent in transfers is exposed
  communication; time spent in other devices' compute is idle. A transfer lasts from its issue (so
  path latency counts) to its end (including the receiver's reduction).
- ``idle_s``: ``step_time_s - compute_s - exposed_comm_s``: waiting for other devices' compute (the
  pipeline bubble, stragglers, a server waiting for clients).
- ``hidden_comm_s``: time during the device's compute when some transfer of the step is in flight,
  i.e. communication the plan overlaps with that device's work.
- ``bubble_fraction`` (pipelines and 2-D plans): over the devices that run pipeline stages,
  ``1 - mean(forward + backward busy time) / span``, ``span`` being from the first forward's start
  to the last backward's end; ``(s - 1) / (m + s - 1)`` for uniform stages and free communication.
  When activation transfers dominate, waiting for them counts here too (the bottleneck line then
  names the link).

Throughput is ``samples_per_step / step_time_s`` (``tokens_per_s`` multiplies by the sequence length
when the training settings or the model generator give one). Collectives are reported per group
(all buckets of one all-reduce group together): total bytes, the time any of their transfers is in
flight, and the nccl-tests ``algbw = bytes / time`` and ``busbw = algbw x 2(p - 1)/p`` over that
time. ``run_time_s`` is the unit time times ``training.steps`` for step plans, or the expander's
``graph.meta["run_time_s"]`` (federated rounds, PBT generations simulated one by one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from parplan.api.results import CollectiveSummary
from parplan.taskgraph import COMM_STREAM, COMPUTE, TRANSFER, TaskGraph

if TYPE_CHECKING:
    from parplan.engine.result import SimResult
    from parplan.plan.base import PlanWork

FloatArray = npt.NDArray[np.float64]

_ROUNDING_REL = 1e-9
"""Idle time below this fraction of the step is rounding in ``step - compute - exposed``."""


@dataclass(frozen=True)
class TimeSplit:
    """The critical device and how its step divides into compute, exposed communication and idle."""

    device: str
    compute_s: float
    exposed_comm_s: float
    idle_s: float
    hidden_comm_s: float


REPLAYED_COMM_CATEGORIES = frozenset({"tp", "cp", "ep", "comm", "fsdp", "dp"})
"""Categories of compute tasks that stand for collectives a plan timed once and replays (a sharded
plan's TP/CP/EP/FSDP calls): communication in the split, like tasks on the communication stream."""


def replayed_comm(g: TaskGraph) -> npt.NDArray[np.bool_]:
    """Compute tasks that are communication: on a communication stream, or of a replayed category."""
    cats = [i for i, c in enumerate(g.categories) if c in REPLAYED_COMM_CATEGORIES]
    mask: npt.NDArray[np.bool_] = (g.kind == COMPUTE) & np.isin(g.category, cats)
    if g.stream is not None:
        mask |= (g.kind == COMPUTE) & (g.stream == COMM_STREAM)
    return mask


def time_split(g: TaskGraph, sim: SimResult) -> TimeSplit:
    """Split the step on the critical device (rules in the module docstring; a sharded plan's
    replayed collectives, :func:`replayed_comm`, count as communication, not compute)."""
    step = float(sim.makespan_s)
    start, end = sim.start_s, sim.end_s
    comm_tasks = replayed_comm(g)
    is_compute = (g.kind == COMPUTE) & ~comm_tasks
    is_transfer = ((g.kind == TRANSFER) | comm_tasks) & (end > start)
    transfer_iv = _union(start[is_transfer], end[is_transfer])
    if not is_compute.any():
        exposed = _measure(_clip(transfer_iv, 0.0, step))
        return TimeSplit(
            device=g.devices[0] if g.devices else "",
            compute_s=0.0,
            exposed_comm_s=exposed,
            idle_s=max(0.0, step - exposed),
            hidden_comm_s=0.0,
        )
    busy = np.zeros(len(g.devices))
    last_end = np.full(len(g.devices), -np.inf)
    cdev = g.device[is_compute]
    np.add.at(busy, cdev, end[is_compute] - start[is_compute])
    np.maximum.at(last_end, cdev, end[is_compute])
    has = np.zeros(len(g.devices), dtype=bool)
    has[cdev] = True
    candidates = np.flatnonzero(has)
    top = busy[candidates].max()
    near = candidates[busy[candidates] >= top * (1 - 1e-9) - 1e-15]
    dev = int(near[np.argmax(last_end[near])])
    tasks = np.flatnonzero(is_compute & (g.device == dev))
    tasks = tasks[np.lexsort((tasks, start[tasks]))]
    compute_iv = np.stack([start[tasks], end[tasks]], axis=1)
    compute = float(np.sum(end[tasks] - start[tasks]))
    exposed = 0.0
    cursor = 0.0
    for t in tasks:
        if float(start[t]) > cursor:
            exposed += _critical_comm(g, sim, int(t), cursor, float(start[t]))
        cursor = max(cursor, float(end[t]))
    if step > cursor:
        sink = int(np.flatnonzero(end >= step)[0])
        exposed += _critical_comm(g, sim, sink, cursor, step, include_self=True)
    hidden = _overlap(transfer_iv, compute_iv)
    idle = step - compute - exposed
    if idle < _ROUNDING_REL * step:  # what is left is float rounding of the sums, not idle time
        idle = 0.0
    return TimeSplit(
        device=g.devices[dev], compute_s=compute, exposed_comm_s=exposed, idle_s=idle, hidden_comm_s=hidden
    )


def _critical_comm(
    g: TaskGraph, sim: SimResult, task: int, lo: float, hi: float, *, include_self: bool = False
) -> float:
    """Seconds of communication on the chain of tasks that held ``task`` up, within ``[lo, hi]``.

    From ``task`` walk back through the dependency that finished last (the one it waited for), then
    that task's, and so on, until the chain reaches ``lo``. Along the chain, transfer intervals are
    communication; compute intervals and waits for a busy stream are other devices' work (idle for
    the device being explained). ``include_self`` counts ``task``'s own interval too (for the sink of
    the step, which ends the window).
    """
    start, end = sim.start_s, sim.end_s
    kind = np.where(replayed_comm(g), TRANSFER, g.kind)
    offsets, indices = g.dep_offsets, g.dep_indices
    comm = 0.0
    if include_self and kind[task] == TRANSFER:
        comm += max(0.0, min(float(end[task]), hi) - max(float(start[task]), lo))
    x = task
    t_cur = float(start[x])
    while t_cur > lo:
        deps = indices[offsets[x] : offsets[x + 1]]
        if len(deps) == 0:
            break
        ends = end[deps]
        best = int(deps[int(np.argmax(ends))])
        if float(end[best]) <= lo:
            break
        if kind[best] == TRANSFER:
            comm += max(0.0, min(float(end[best]), hi, t_cur) - max(float(start[best]), lo))
        x = best
        t_cur = min(t_cur, float(start[x]))
    return comm


def bubble_fraction(g: TaskGraph, sim: SimResult) -> float | None:
    """Idle share of the pipeline span on the devices running forward/backward (module docstring)."""
    cats = [i for i, c in enumerate(g.categories) if c in ("forward", "backward")]
    mask = (g.kind == COMPUTE) & np.isin(g.category, cats)
    if not mask.any():
        return None
    start, end = sim.start_s[mask], sim.end_s[mask]
    span = float(end.max() - start.min())
    if span <= 0:
        return 0.0
    devs = g.device[mask]
    busy = np.bincount(devs, weights=end - start)
    used = np.unique(devs)
    return float(max(0.0, 1.0 - busy[used].mean() / span))


def summarize_collectives(work: PlanWork, g: TaskGraph, sim: SimResult) -> tuple[CollectiveSummary, ...]:
    """All-reduces grouped by label prefix (``"allreduce n0.d3 bucket4"`` -> ``"allreduce n0.d3"``)."""
    groups: dict[str, list[Any]] = {}
    for info in work.collectives:
        groups.setdefault(info.label.rsplit(" bucket", 1)[0], []).append(info)
    out = []
    for label, infos in groups.items():
        idx = np.concatenate([np.arange(i.first_task, i.last_task) for i in infos])
        tr = idx[g.kind[idx] == TRANSFER]
        starts, ends = sim.start_s[tr], sim.end_s[tr]
        out.append(
            CollectiveSummary(
                label=label,
                algorithm=infos[0].algorithm,
                num_ranks=infos[0].num_ranks,
                count=len(infos),
                size_bytes=float(sum(i.size_bytes for i in infos)),
                time_s=_measure(_union(starts, ends)),
            )
        )
    return tuple(out)


# -- interval helpers ---------------------------------------------------------------------------
def _union(starts: FloatArray, ends: FloatArray) -> FloatArray:
    """Disjoint sorted intervals covering ``[starts[i], ends[i])``, as an (k, 2) array."""
    if len(starts) == 0:
        return np.zeros((0, 2))
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    running = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > running[:-1]
    idx = np.flatnonzero(new)
    merged_end = np.maximum.reduceat(e, idx)
    return np.stack([s[idx], merged_end], axis=1)


def _clip(iv: FloatArray, lo: float, hi: float) -> FloatArray:
    if len(iv) == 0:
        return iv
    out = np.stack([np.maximum(iv[:, 0], lo), np.minimum(iv[:, 1], hi)], axis=1)
    return out[out[:, 1] > out[:, 0]]


def _measure(iv: FloatArray) -> float:
    return float(np.sum(iv[:, 1] - iv[:, 0])) if len(iv) else 0.0


def _overlap(a: FloatArray, b: FloatArray) -> float:
    """Total length of the intersection of two sets of disjoint sorted intervals."""
    if len(a) == 0 or len(b) == 0:
        return 0.0
    total = 0.0
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i, 0], b[j, 0])
        hi = min(a[i, 1], b[j, 1])
        if hi > lo:
            total += hi - lo
        if a[i, 1] < b[j, 1]:
            i += 1
        else:
            j += 1
    return float(total)
