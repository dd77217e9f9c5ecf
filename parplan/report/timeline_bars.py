"""A simulated step read as bars for a Gantt chart: per device, when it computes, communicates or idles.

Used by the HTML report (:mod:`parplan.report.html`). Each device's lane over ``[0, makespan]``
is split three ways, so the three kinds never overlap and together cover the step:

- **compute**: the union of the device's compute tasks;
- **communication**: the union of the transfers the device sends or receives (from issue to the
  last byte's arrival), minus its compute (communication hidden under compute shows as compute);
- **idle**: the rest.

Gaps shorter than :data:`MERGE_FRACTION` of the step (invisible at any zoom a page offers) are
closed, which keeps a page of a long step small. Only the first ``max_devices`` devices get a
lane. The busiest links (:func:`busiest_links`) are the channels ranked by utilisation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from parplan.taskgraph import COMPUTE, TRANSFER

if TYPE_CHECKING:
    from parplan.api.results import PlanResult

Intervals = list[tuple[float, float]]

MERGE_FRACTION = 1e-4
"""Gaps below this fraction of the step are closed when drawing (a 10,000-pixel-wide chart's pixel)."""

KINDS = ("compute", "communication", "idle")
"""The three kinds of bar, in drawing order."""


@dataclass(frozen=True)
class DeviceLanes:
    """Bars per device: ``bars[kind]`` is a list of ``(device index, start_s, end_s)``."""

    devices: tuple[str, ...]
    makespan_s: float
    bars: dict[str, list[tuple[int, float, float]]]
    devices_left_out: int


@dataclass(frozen=True)
class LinkLoad:
    """One channel's traffic over the step."""

    name: str
    utilisation: float
    size_bytes: float
    busy_s: float
    bandwidth_Bps: float


def _union(starts: npt.NDArray[np.float64], ends: npt.NDArray[np.float64], gap_s: float) -> Intervals:
    """Merge intervals that overlap or are separated by at most ``gap_s``; empty ones are dropped."""
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return []
    order = np.lexsort((ends, starts))
    merged: Intervals = []
    cur_s, cur_e = float(starts[order[0]]), float(ends[order[0]])
    for s, e in zip(starts[order[1:]].tolist(), ends[order[1:]].tolist(), strict=True):
        if s <= cur_e + gap_s:
            cur_e = max(cur_e, e)
        else:
            merged.append((cur_s, cur_e))
            cur_s, cur_e = s, e
    merged.append((cur_s, cur_e))
    return merged


def _subtract(base: Intervals, cut: Intervals) -> Intervals:
    """``base`` minus ``cut`` (both sorted and disjoint)."""
    out: Intervals = []
    j = 0
    for s, e in base:
        while j < len(cut) and cut[j][1] <= s:
            j += 1
        k, cur = j, s
        while k < len(cut) and cut[k][0] < e:
            if cut[k][0] > cur:
                out.append((cur, cut[k][0]))
            cur = max(cur, cut[k][1])
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


def device_lanes(result: PlanResult, *, max_devices: int = 32) -> DeviceLanes | None:
    """The Gantt bars of a simulated plan, or None when its timeline was not kept (e.g. evaluated
    in another process)."""
    graph, sim = result.graph, result.sim
    if graph is None or sim is None:
        return None
    step = float(sim.makespan_s)
    gap = step * MERGE_FRACTION
    devices = tuple(graph.devices[:max_devices])
    is_compute = graph.kind == COMPUTE
    is_transfer = graph.kind == TRANSFER
    arrive = np.where(np.isnan(sim.arrive_s), sim.end_s, sim.arrive_s)
    bars: dict[str, list[tuple[int, float, float]]] = {kind: [] for kind in KINDS}
    for d in range(len(devices)):
        mine = is_compute & (graph.device == d)
        compute = _union(sim.start_s[mine], sim.end_s[mine], gap)
        touching = is_transfer & ((graph.device == d) | (graph.dst == d))
        comm = _subtract(_union(sim.start_s[touching], arrive[touching], gap), compute)
        busy = _union(
            np.array([s for s, _ in compute + comm], dtype=np.float64),
            np.array([e for _, e in compute + comm], dtype=np.float64),
            0.0,
        )
        idle = _subtract([(0.0, step)], busy) if step > 0 else []
        for kind, intervals in zip(KINDS, (compute, comm, idle), strict=True):
            bars[kind].extend((d, s, e) for s, e in intervals)
    return DeviceLanes(devices, step, bars, len(graph.devices) - len(devices))


def busiest_links(result: PlanResult, *, top: int = 8) -> list[LinkLoad]:
    """The ``top`` channels by utilisation (ties: network order) that carried traffic; empty when
    the timeline was not kept or nothing was sent."""
    sim = result.sim
    if sim is None or not len(sim.channel_bytes):
        return []
    used = np.flatnonzero(sim.channel_bytes > 0)
    util = sim.channel_utilisation
    order = used[np.lexsort((used, -util[used]))][:top]
    return [
        LinkLoad(
            name=sim.channel_names[i],
            utilisation=float(util[i]),
            size_bytes=float(sim.channel_bytes[i]),
            busy_s=float(sim.channel_busy_s[i]),
            bandwidth_Bps=float(sim.channel_bandwidth_Bps[i]),
        )
        for i in order.tolist()
    ]
