"""A slow, plain reference simulator with the engine's documented semantics, to test the engine.

One Python object per task and per flow, one full progressive filling per instant, no batching,
no regimes, no eager stream booking: every rule of :mod:`parplan.engine.simulate` written the
obvious way. Only for small graphs.
"""

from __future__ import annotations

import math

import numpy as np

from parplan.taskgraph import COMPUTE, MARKER, TaskGraph
from parplan.topology.network import Network

EPS = 1e-12


def reference_times(
    graph: TaskGraph, network: Network, gamma_s_per_byte: float | None = None
) -> tuple[list[float], list[float]]:
    """(start, end) of every task."""
    n = graph.num_tasks
    devs = graph.devices
    info = [network.device(d) for d in devs]
    gamma = [
        gamma_s_per_byte
        if gamma_s_per_byte is not None
        else (3.0 / i.memory_bandwidth_Bps if i.memory_bandwidth_Bps else 0.0)
        for i in info
    ]
    remaining = [len(graph.deps(t)) for t in range(n)]
    succ: list[list[int]] = [[] for _ in range(n)]
    for task in range(n):
        for dep in graph.deps(task):
            succ[int(dep)].append(task)
    comp_prio = graph.priority[graph.kind == COMPUTE]
    priority_mode = len(comp_prio) > 0 and comp_prio.min() != comp_prio.max()
    start = [math.nan] * n
    end = [math.nan] * n
    ready_at = [math.nan] * n
    compute_queue: list[list[int]] = [[] for _ in devs]
    compute_busy_until = [0.0] * len(devs)
    compute_running: list[int | None] = [None] * len(devs)
    reduce_queue: list[list[tuple[float, int]]] = [[] for _ in devs]
    reduce_running: list[int | None] = [None] * len(devs)
    reduce_until = [0.0] * len(devs)
    pending: list[tuple[float, int]] = []  # (start time, task) of flows in their latency
    active: dict[int, list[float]] = {}  # task -> [remaining bytes, rate]
    arrivals: list[int] = []
    t = 0.0

    def release(task: int) -> None:
        ready_at[task] = t
        kind = int(graph.kind[task])
        if kind == MARKER:
            start[task] = t
            finish(task)
        elif kind == COMPUTE:
            compute_queue[int(graph.device[task])].append(task)
        else:
            start[task] = t
            s, d = devs[int(graph.device[task])], devs[int(graph.dst[task])]
            if s == d:
                arrivals.append(task)
            else:
                pending.append((t + network.route(s, d)[1], task))

    def finish(task: int) -> None:
        end[task] = t
        for nxt in succ[task]:
            remaining[nxt] -= 1
            if remaining[nxt] == 0:
                release(nxt)

    def rates() -> None:
        flows = sorted(active)
        paths = {
            f: network.route(devs[int(graph.device[f])], devs[int(graph.dst[f])])[0].tolist() for f in flows
        }
        cap = {int(c): float(network.channel_bandwidth_Bps[c]) for f in flows for c in paths[f]}
        unfrozen = set(flows)
        while unfrozen:
            users: dict[int, int] = {}
            for f in unfrozen:
                for c in paths[f]:
                    users[c] = users.get(c, 0) + 1
            share = min(cap[c] / k for c, k in users.items())
            hit = {c for c, k in users.items() if cap[c] / k <= share * (1 + 1e-12)}
            frozen = {f for f in unfrozen if any(c in hit for c in paths[f])}
            for f in frozen:
                active[f][1] = share
                for c in paths[f]:
                    cap[c] -= share
            unfrozen -= frozen

    for task in [x for x in range(n) if remaining[x] == 0]:
        release(task)
    while True:
        changed = True
        while changed:
            changed = False
            for flow_start, task in sorted(pending):
                if flow_start <= t + EPS * max(t, 1e-9):
                    pending.remove((flow_start, task))
                    if graph.size_bytes[task] > 0:
                        active[task] = [float(graph.size_bytes[task]), 0.0]
                    else:
                        arrivals.append(task)
                    changed = True
            for task in sorted(arrivals):
                arrivals.remove(task)
                if graph.reduce[task]:
                    reduce_queue[int(graph.dst[task])].append((t, task))
                else:
                    finish(task)
                changed = True
            for d in range(len(devs)):
                running = compute_running[d]
                if running is not None and compute_busy_until[d] <= t + EPS * max(t, 1e-9):
                    compute_running[d] = None
                    finish(running)
                    changed = True
                if compute_running[d] is None and compute_queue[d]:
                    key = (
                        (lambda x: (int(graph.priority[x]), x))
                        if priority_mode
                        else (lambda x: (ready_at[x], x))
                    )
                    task = min(compute_queue[d], key=key)
                    compute_queue[d].remove(task)
                    secs = float(graph.seconds[task])
                    if math.isnan(secs):
                        secs = float(graph.flops[task]) / info[d].effective_flop_per_s
                    start[task] = t
                    compute_running[d] = task
                    compute_busy_until[d] = t + secs
                    changed = True
                red = reduce_running[d]
                if red is not None and reduce_until[d] <= t + EPS * max(t, 1e-9):
                    reduce_running[d] = None
                    finish(red)
                    changed = True
                if reduce_running[d] is None and reduce_queue[d]:
                    _, task = min(reduce_queue[d])
                    reduce_queue[d].remove(min(reduce_queue[d]))
                    reduce_running[d] = task
                    reduce_until[d] = t + gamma[d] * float(graph.size_bytes[task])
                    changed = True
        rates()
        candidates = [f + 0.0 for f, _ in pending]
        candidates += [t + rem / rate for rem, rate in active.values()]
        candidates += [compute_busy_until[d] for d in range(len(devs)) if compute_running[d] is not None]
        candidates += [reduce_until[d] for d in range(len(devs)) if reduce_running[d] is not None]
        if not candidates:
            break
        t_next = min(candidates)
        for task in sorted(active):
            rem, rate = active[task]
            rem -= rate * (t_next - t)
            if rem <= 1e-9 * float(graph.size_bytes[task]) or t + active[task][0] / rate <= t_next * (
                1 + EPS
            ):
                del active[task]
                arrivals.append(task)
            else:
                active[task][0] = rem
        t = t_next
    assert not np.isnan(end).any(), "reference: some task never ran"
    return start, end
