"""Chrome trace (Perfetto / chrome://tracing) of a simulation: one slice per task.

Layout:

- process 1, ``devices``: one thread per device of the graph, holding its COMPUTE tasks (a
  device's compute stream is serial, so its slices never overlap);
- process 2, ``links``: one thread per channel that carried traffic, holding each TRANSFER on the
  first channel of its route (the sender's outgoing link), from when it was issued to when its last
  byte arrived (so it includes the path latency). Flows share links, so slices on one link can
  overlap; complete events on one thread must nest, so overlapping transfers go to extra lanes of
  the same link, threads named ``"<link> #2"``, ``"<link> #3"``... A transfer between two ranks on
  one device goes on that device's thread.

Every COMPUTE and TRANSFER task gives exactly one complete (``"X"``) event; MARKER tasks take no time
and give none. Times are microseconds. A reducing transfer's args carry when its reduction ended.
The file is written with :func:`parplan.report.output.atomic_target`: to a temporary file next to
``path`` moved into place, so a reader never sees half a trace; a special file such as
``/dev/null`` is written into, never replaced, and a symbolic link is followed.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from parplan.engine.result import SimResult
from parplan.errors import ParplanError
from parplan.report.output import atomic_target
from parplan.taskgraph import COMPUTE, TRANSFER, TaskGraph
from parplan.topology.network import Network

DEVICES_PID = 1
LINKS_PID = 2
_US = 1e6


def write_chrome_trace(
    result: SimResult, graph: TaskGraph, network: Network, path: str | Path, *, max_events: int = 5_000_000
) -> int:
    """Write the trace of ``result`` (a run of ``graph`` on ``network``) to ``path``.

    Returns the number of task events written. Raises :class:`ParplanError` when the graph would
    give more than ``max_events`` events (such a file would not open in a viewer) or the file
    cannot be written.
    """
    timed = np.flatnonzero((graph.kind == COMPUTE) | (graph.kind == TRANSFER))
    if len(timed) > max_events:
        raise ParplanError(
            f"a trace of {len(timed)} tasks is too large to view (limit {max_events}); trace a smaller run"
        )
    if len(result.start_s) != graph.num_tasks:
        raise ParplanError("the result does not belong to this task graph")
    events, threads = _task_events(result, graph, network, timed)
    try:
        # A temporary file moved into place (so a reader never sees half a trace), written into
        # special files such as /dev/null instead, following symbolic links.
        with atomic_target(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
            out.write('{"displayTimeUnit": "ns", "otherData": ')
            json.dump({"makespan_s": result.makespan_s, "cluster": network.name}, out)
            out.write(', "traceEvents": [\n')
            first = True
            for event in _chain(_metadata(graph, threads), events):
                if not first:
                    out.write(",\n")
                out.write(json.dumps(event, separators=(",", ":")))
                first = False
            out.write("\n]}\n")
    except OSError as exc:
        raise ParplanError(f"cannot write trace {str(path)!r}: {exc.strerror or exc}") from None
    return len(events)


def _chain(*parts: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for part in parts:
        yield from part


def _task_events(
    result: SimResult, graph: TaskGraph, network: Network, timed: np.ndarray
) -> tuple[list[dict[str, Any]], dict[tuple[int, int], str]]:
    """The X events, and the name of every (pid, tid) thread they use."""
    threads: dict[tuple[int, int], str] = {(DEVICES_PID, d): name for d, name in enumerate(graph.devices)}
    events: list[dict[str, Any]] = []
    lanes: dict[int, list[tuple[float, int]]] = {}  # channel -> heap of (free from, lane)
    lane_count: dict[int, int] = {}
    num_channels = len(network.channel_names)
    kinds = graph.kind[timed]
    # Transfers in start order so that lanes are assigned greedily (interval partitioning).
    order = np.lexsort((timed, result.start_s[timed]))
    for task, kind in zip(timed[order].tolist(), kinds[order].tolist(), strict=True):
        start = float(result.start_s[task])
        dev = int(graph.device[task])
        args: dict[str, Any] = {"task": task}
        if kind == COMPUTE:
            end = float(result.end_s[task])
            pid, tid = DEVICES_PID, dev
        else:
            src, dst = graph.devices[dev], graph.devices[int(graph.dst[task])]
            end = float(result.arrive_s[task])
            args.update(src=src, dst=dst, bytes=float(graph.size_bytes[task]))
            if graph.reduce[task]:
                args["reduce_end_us"] = float(result.end_s[task]) * _US
            channels, _ = network.route(src, dst)
            if not len(channels):
                pid, tid = DEVICES_PID, dev
            else:
                channel = int(channels[0])
                heap = lanes.setdefault(channel, [])
                if heap and heap[0][0] <= start:
                    _, lane = heapq.heappop(heap)
                else:
                    lane = lane_count.get(channel, 0)
                    lane_count[channel] = lane + 1
                heapq.heappush(heap, (end, lane))
                pid, tid = LINKS_PID, channel + lane * num_channels
                name = network.channel_names[channel]
                threads[(pid, tid)] = name if lane == 0 else f"{name} #{lane + 1}"
        events.append(
            {
                "name": graph.labels[int(graph.label[task])] if graph.labels else "task",
                "cat": graph.categories[int(graph.category[task])] if graph.categories else "task",
                "ph": "X",
                "ts": start * _US,
                "dur": max(end - start, 0.0) * _US,
                "pid": pid,
                "tid": tid,
                "args": args,
            }
        )
    return events, threads


def _metadata(graph: TaskGraph, threads: dict[tuple[int, int], str]) -> list[dict[str, Any]]:
    meta: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": DEVICES_PID, "tid": 0, "args": {"name": "devices"}},
        {"name": "process_name", "ph": "M", "pid": LINKS_PID, "tid": 0, "args": {"name": "links"}},
    ]
    for (pid, tid), name in sorted(threads.items()):
        meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
        meta.append(
            {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}}
        )
    return meta
