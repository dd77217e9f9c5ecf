"""The discrete-event engine: a task graph on a network, flows sharing channels max-min fairly.

Semantics (the cost model of ../shared/DESIGN.md made precise):

- **Compute**: one serial stream per device. A COMPUTE task occupies its device's stream for
  ``seconds`` (or ``flops / (peak x efficiency x speed_factor)`` when ``seconds`` is NaN). Ready
  tasks run in readiness order, ties by task id; when the graph gives compute tasks different
  ``priority`` values, the lowest priority among the ready tasks runs first instead.
- **Transfers**: a transfer issued at ``t`` (all its dependencies done) waits its path's latency
  (the sum of the link latencies on the route), then its bytes flow over every channel of the route
  from ``t + latency`` on: latency is a pure delay *before* the bandwidth phase (alpha is the
  start-up cost of a message). Store-and-forward is not modelled: a flow crosses all its channels
  at once at one rate, so a two-hop path costs ``latency_1 + latency_2 + bytes / min(bandwidth)``.
  Concurrent flows share every channel max-min fairly (progressive filling); rates are recomputed
  whenever a flow starts or ends. A transfer between two ranks on the same device is free (the data
  is already in that device's memory).
- **Reductions**: a transfer with ``reduce`` set is followed by ``gamma x bytes`` on the receiver's
  *reduction stream*, a serial FIFO stream per device distinct from its compute stream (so a
  centralized root serialises its p - 1 reductions). ``gamma`` defaults per device to
  ``3 / memory_bandwidth_Bps`` (read two operands, write one) when the device has a memory
  bandwidth, else 0; ``gamma_s_per_byte`` overrides it for every device. The task ends when its
  reduction ends.
- **Markers** take no time.

Determinism: events live in a heap of ``(time, kind, sequence)``. At one instant, flows that finish
(within a relative 1e-12 of each other: one batch) come first, then events by kind (task ends,
arrivals, flow starts) and the order they were scheduled. Tasks released together, markers' cascade
included, reach their streams in task-id order. Identical inputs give identical results.

Speed: nothing loops over tasks in Python on the hot path, except batches of a few tasks, where a
scalar pass is cheaper than numpy's per-call cost. Tasks that finish at one instant are one numpy
batch: dependency counting over a CSR successor list, FIFO stream booking by a segmented
cumulative sum (a FIFO stream's start times are known on arrival), route ids from a dense
(src, dst) table, flows in reusable slots. Flows are handled in two regimes:

- *exclusive* (the common case in collectives): no two flows' active windows overlap on any
  channel, so each runs at its route's narrowest bandwidth and a batch's finish times follow in
  closed form when it is issued: a flow takes its slot at issue time with its start (issue +
  latency) and finish fixed, no event for the end of its latency, no rate recomputation. A window
  that would overlap another on a channel switches the engine to
- *shared*: flows enter slots only when they start moving (a START event after the latency),
  and every instant that changes the set of moving flows ends with one max-min recomputation.
  Flows on one route get one rate, so the allocation is a function of the number of moving
  flows per route; it is memoised on that count vector (a collective in steady state revisits
  few of them: the 8-channel rings of sample_configs/scenarios/dp-algorithms.yaml make 92,000
  recomputations of 7,000 distinct states). On a miss, routes that share no channel with another
  route (each its own connected component of the flow-channel graph) split their narrowest
  channel evenly, and progressive filling, vectorised over the routes x channels incidence with
  ``np.bincount``, rates the rest. Channel busy time accrues per allocation while it is in
  force and is booked on its channels at the end. When no channel is shared any more the
  engine returns to the exclusive regime.

Both regimes give the same times (tests/engine check the engine against a plain one-object-per-task
reference simulator on random graphs and topologies).
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt

from parplan.engine.result import CollectiveStats, SimResult
from parplan.errors import SimulationError
from parplan.taskgraph import COMPUTE, MARKER, TRANSFER, TaskGraph
from parplan.topology.network import Network

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

# Event kinds; at equal times they come out in this order.
_EV_DONE = 0  # payload: task ids that end now
_EV_ARRIVE = 1  # payload: transfer task ids whose last byte arrives now
_EV_START = 2  # payload: (task ids, route ids) whose latency has elapsed: their flows start
_EV_COMPUTE_DONE = 3  # priority mode only; payload: one compute task id

# Flows finishing within this relative distance of the earliest one finish together with it.
_TIE_REL = 1e-12
_TIE_ABS = 1e-18
# Channels whose fair share is within this factor of the smallest saturate together.
_SHARE_REL = 1e-12
# Allocation cache keys list the count of every route id up to the largest in use while that
# is this short, else only the routes in use.
_DENSE_KEY_ROUTES = 512
# Memoised allocations (keys: moving flows' route ids and counts) are dropped past this size.
_ALLOC_CACHE_BYTES = 64 << 20
# Batches of at most this many tasks take scalar paths (numpy's per-call cost dominates there).
_SMALL_BATCH = 8
# Largest (number of network devices)^2 for which route ids come from a dense table.
_DENSE_ROUTE_TABLE = 1 << 26

_EMPTY_I = np.zeros(0, dtype=np.int64)
_EMPTY_F = np.zeros(0, dtype=np.float64)


def _min_max(values: npt.NDArray[np.generic]) -> tuple[float, float]:
    """Smallest and largest of a non-empty array; a Python pass on short ones, where two numpy
    reductions would cost more than the work."""
    if len(values) <= _SMALL_BATCH:
        listed = values.tolist()
        return min(listed), max(listed)
    return values.min().item(), values.max().item()


@dataclass
class _Allocation:
    """The shared regime's allocation for one multiset of moving flows' routes (its cache key).

    ``route_rate_Bps[r]`` is the rate of each flow on route id ``r``; ``channels`` are the channels
    in use; ``shared`` tells whether any channel carries two flows or more. ``busy_s`` is the time
    this allocation has been in force and not yet booked on its channels (see _flush_busy).
    """

    key: bytes
    route_rate_Bps: FloatArray
    channels: IntArray
    shared: bool
    busy_s: float = 0.0

    @property
    def nbytes(self) -> int:
        """Memory held, roughly: the arrays, the key and ~500 bytes of Python objects."""
        return len(self.key) + self.route_rate_Bps.nbytes + self.channels.nbytes + 500


@dataclass(frozen=True)
class _Routes:
    """Routes seen so far, by key ``src * num_devices + dst`` (network device indices), sorted."""

    keys: IntArray
    ids: IntArray


def simulate(
    graph: TaskGraph,
    network: Network,
    *,
    gamma_s_per_byte: float | None = None,
    link_sharing: bool = True,
) -> SimResult:
    """Time ``graph`` on ``network``; see the module docstring for the exact semantics.

    ``gamma_s_per_byte`` overrides every device's reduction cost (seconds per byte).
    ``link_sharing=False`` gives every flow its route's narrowest bandwidth whatever else is on
    the wire (a contention-free what-if). Raises :class:`SimulationError` for malformed graphs
    and dependency cycles, :class:`TopologyError` for devices the network does not have.

    >>> import networkx as nx
    >>> from parplan.taskgraph import TaskGraphBuilder
    >>> g = nx.DiGraph()
    >>> for h in ("a", "b"):
    ...     g.add_node(h, kind="device", peak_flop_per_s=1e12, efficiency=1.0, memory_bytes=1e9)
    >>> g.add_edge("a", "b", bandwidth_Bps=1e9, latency_s=1e-6, channel=0)
    >>> g.add_edge("b", "a", bandwidth_Bps=1e9, latency_s=1e-6, channel=1)
    >>> b = TaskGraphBuilder()
    >>> c = b.compute_flops("a", 1e12)
    >>> t = b.transfer("a", "b", 1e9, [c])
    >>> round(simulate(b.build(), Network(g)).makespan_s, 9)
    2.000001
    """
    return _Engine(graph, network, gamma_s_per_byte, link_sharing).run()


class _Engine:
    """One simulation run; all state lives in numpy arrays sized by tasks, devices or channels."""

    def __init__(
        self, graph: TaskGraph, network: Network, gamma_s_per_byte: float | None, link_sharing: bool
    ) -> None:
        self.g = graph
        self.net = network
        self.sharing = link_sharing
        n = graph.num_tasks
        self.n = n
        self._check_graph()

        # Devices of the graph -> network devices and their rates.
        num_dev = len(graph.devices)
        self.net_dev = np.array([network.device_index(d) for d in graph.devices], dtype=np.int64)
        self.flop_rate = np.empty(num_dev, dtype=np.float64)
        self.gamma = np.empty(num_dev, dtype=np.float64)
        for i, name in enumerate(graph.devices):
            info = network.device(name)
            self.flop_rate[i] = info.effective_flop_per_s
            if gamma_s_per_byte is not None:
                self.gamma[i] = gamma_s_per_byte
            elif info.memory_bandwidth_Bps:
                self.gamma[i] = 3.0 / float(info.memory_bandwidth_Bps)
            else:
                self.gamma[i] = 0.0
        if gamma_s_per_byte is not None and not (math.isfinite(gamma_s_per_byte) and gamma_s_per_byte >= 0):
            raise SimulationError(f"gamma_s_per_byte must be finite and >= 0, got {gamma_s_per_byte}")

        # Successor lists (CSR), the transpose of the dependency lists.
        indeg = np.diff(graph.dep_offsets)
        self.remaining = indeg.astype(np.int32)
        if len(graph.dep_indices):
            order = np.argsort(graph.dep_indices, kind="stable")
            self.succ_idx = np.repeat(np.arange(n, dtype=np.int64), indeg)[order]
            counts = np.bincount(graph.dep_indices, minlength=n)
        else:
            self.succ_idx = _EMPTY_I
            counts = np.zeros(n, dtype=np.int64)
        self.succ_off = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=self.succ_off[1:])

        # Every task gets a start and an end before run() returns (or it raises), so these need
        # no initialisation; np.empty leaves the pages untouched until the engine writes them.
        self.start = np.empty(n)
        self.end = np.empty(n)
        self.arrive = np.empty(n)
        self.num_done = 0

        # Streams.
        self.compute_free = np.zeros(num_dev)
        self.reduce_free = np.zeros(num_dev)
        self.compute_busy = np.zeros(num_dev)
        self.reduce_busy = np.zeros(num_dev)
        compute_prio = graph.priority[graph.kind == COMPUTE]
        self.priority_mode = bool(len(compute_prio) and compute_prio.min() != compute_prio.max())
        self.prio_queue: list[list[tuple[int, int]]] = [[] for _ in range(num_dev)]
        self.prio_running = np.zeros(num_dev, dtype=bool)

        # Routes by id: a padded matrix of channels (padding = the dummy channel ``num_ch``, which
        # has infinite bandwidth and is never counted), latency and narrowest bandwidth. Route ids
        # are found by a dense (src, dst) table when the device count allows, else by sorted keys.
        self.num_net_dev = len(network.devices)
        self.bw = np.asarray(network.channel_bandwidth_Bps, dtype=np.float64)
        self.num_ch = len(self.bw)
        self.bw_ext = np.append(self.bw, math.inf)
        dense = self.num_net_dev**2 <= _DENSE_ROUTE_TABLE
        self.route_table = np.zeros(self.num_net_dev**2 if dense else 0, dtype=np.int32)  # id + 1
        self.routes = _Routes(_EMPTY_I, _EMPTY_I)
        self.route_ch_list: list[IntArray] = []
        self.route_lat_list: list[float] = []
        self.route_mat = np.zeros((0, 1), dtype=np.int64)
        self.route_lat = _EMPTY_F
        self.route_minbw = _EMPTY_F

        # Active flows live in slots (a free slot has task -1, rate 0 and finish inf), so that a
        # batch starting or ending is a few scatters, not a rebuild of every array.
        self.s_task = _EMPTY_I
        self.s_rid = _EMPTY_I
        self.s_start = _EMPTY_F
        self.s_rem = _EMPTY_F
        self.s_rate = _EMPTY_F
        self.s_finish = _EMPTY_F
        self.free_slots = _EMPTY_I
        self.n_free = 0
        self.next_finish = math.inf
        self.t_sync = 0.0
        # Two regimes (see the module docstring): "exclusive" while no two flows' windows
        # overlap on a channel, "shared" otherwise. Exclusive: each flow runs at its route's
        # narrowest bandwidth from its start (issue + latency) to a finish fixed when it is issued,
        # ch_until[c] is the last finish booked on channel c, and busy time is booked per route
        # when a flow is issued. Shared: flows are in slots only while moving (START events);
        # whenever the set changes (dirty) the allocation (rates, channels in use) is looked up
        # by the number of moving flows per route, and the channels in use since the last change
        # (those of alloc, in force since t_used) are booked busy up to now.
        self.exclusive = link_sharing
        self.dirty = False
        self.ch_until = np.full(self.num_ch + 1, -math.inf)
        self.route_bytes = _EMPTY_F  # bytes per route id; spread over channels at the end
        self.route_busy = _EMPTY_F  # exclusive-regime busy seconds per route id, likewise
        self.ch_busy = np.zeros(self.num_ch + 1)
        self.alloc: _Allocation | None = None
        self.t_used = 0.0
        self.padded = False  # some route is shorter than the route matrix is wide
        self.alloc_cache: dict[bytes, _Allocation] = {}
        self.alloc_cache_bytes = 0

        self.now = 0.0
        self.heap: list[tuple[float, int, int, object]] = []
        self.seq = 0
        self.num_events = 0

    # -- validation --------------------------------------------------------------------------
    def _check_graph(self) -> None:
        """Reject malformed graphs up front (min/max passes, no per-task masks in the common case)."""
        g = self.g
        n = self.n
        for name in ("kind", "device", "dst", "size_bytes", "seconds", "flops", "reduce", "priority"):
            if len(getattr(g, name)) != n:
                raise SimulationError(
                    f"task graph column {name!r} has {len(getattr(g, name))} entries, want {n}"
                )
        if len(g.dep_offsets) != n + 1 or g.dep_offsets[-1] != len(g.dep_indices) or g.dep_offsets[0] != 0:
            raise SimulationError("task graph dependency offsets do not match the dependency list")
        if not n:
            return
        if len(g.dep_indices) and (g.dep_indices.min() < 0 or g.dep_indices.max() >= n):
            raise SimulationError("a task depends on a task id outside the graph")
        kinds = g.kind
        if kinds.min() < COMPUTE or kinds.max() > MARKER:
            raise SimulationError("unknown task kind in the task graph")
        num_dev = len(g.devices)
        if g.device.min() < 0 or g.device.max() >= num_dev:
            dev = g.device[kinds != MARKER]
            if len(dev) and (dev.min() < 0 or dev.max() >= num_dev):
                raise SimulationError("a compute or transfer task has no valid device")
        tr = None
        if g.dst.min() < 0 or g.dst.max() >= num_dev:
            tr = kinds == TRANSFER
            dst = g.dst[tr]
            if len(dst) and (dst.min() < 0 or dst.max() >= num_dev):
                raise SimulationError("a transfer has no valid destination device")
        size = g.size_bytes
        if not (size.min() >= 0 and math.isfinite(float(size.max()))):
            tr = kinds == TRANSFER if tr is None else tr
            bad = size[tr]
            if len(bad) and not (bad.min() >= 0 and math.isfinite(float(bad.max()))):
                raise SimulationError("a transfer has a negative or non-finite size")
        comp = kinds == COMPUTE
        if comp.any():
            secs = g.seconds[comp]
            given = ~np.isnan(secs)
            if np.any(secs[given] < 0) or np.any(np.isinf(secs[given])):
                raise SimulationError("a compute task has a negative or infinite duration")
            if np.any(g.flops[comp][~given] < 0):
                raise SimulationError("a compute task has negative FLOPs")

    # -- event heap --------------------------------------------------------------------------
    def _push(self, time: float, kind: int, payload: object) -> None:
        heapq.heappush(self.heap, (time, kind, self.seq, payload))
        self.seq += 1

    def _push_grouped(self, times: FloatArray, tasks: IntArray, kind: int) -> None:
        """One event per distinct time, each holding its tasks in task-id order."""
        lo, hi = _min_max(times)
        if lo == hi:
            self._push(float(times[0]), kind, tasks)
            return
        order = np.lexsort((tasks, times))
        t_sorted = times[order]
        cuts = np.flatnonzero(t_sorted[1:] != t_sorted[:-1]) + 1
        bounds = [0, *cuts.tolist(), len(order)]
        for a, b in itertools.pairwise(bounds):
            self._push(float(t_sorted[a]), kind, tasks[order[a:b]])

    # -- main loop ---------------------------------------------------------------------------
    def run(self) -> SimResult:
        roots = np.flatnonzero(self.remaining == 0)
        if len(roots):
            self._released(roots)
        heap = self.heap
        while True:
            if self.dirty:
                self._recompute()
            t_heap = heap[0][0] if heap else math.inf
            t = min(t_heap, self.next_finish)
            if t == math.inf:
                break
            self.now = t
            self.num_events += 1
            if self.next_finish <= t + max(t * _TIE_REL, _TIE_ABS):
                self._finish_flows()
            while heap and heap[0][0] <= t:
                _, kind, _, payload = heapq.heappop(heap)
                if kind == _EV_DONE:
                    self._complete(cast(IntArray, payload))
                elif kind == _EV_ARRIVE:
                    self._arrive(cast(IntArray, payload))
                elif kind == _EV_START:
                    tasks, rids = cast(tuple[IntArray, IntArray], payload)
                    self._activate(tasks, rids, t)
                else:
                    self._compute_done_priority(cast(int, payload))
        if self.num_done != self.n:
            stuck = np.flatnonzero(self.remaining > 0)[:5].tolist()
            raise SimulationError(
                f"{self.n - self.num_done} of {self.n} tasks never ran (dependency cycle?);"
                f" e.g. tasks {stuck}"
            )
        return self._result()

    # -- dependencies ------------------------------------------------------------------------
    def _complete(self, tasks: IntArray) -> None:
        """Tasks end now; release their successors."""
        self.end[tasks] = self.now
        self.num_done += len(tasks)
        ready = self._newly_ready(tasks)
        if len(ready):
            self._released(ready)

    def _newly_ready(self, tasks: IntArray) -> IntArray:
        """Successors of ``tasks`` whose last dependency this was, sorted by id."""
        succ_off = self.succ_off
        if len(tasks) <= _SMALL_BATCH:  # a scalar loop beats a dozen numpy calls on a few tasks
            succ_idx, remaining = self.succ_idx, self.remaining
            out = []
            for task in tasks.tolist():
                for nxt in succ_idx[succ_off[task] : succ_off[task + 1]].tolist():
                    left = remaining[nxt] - 1
                    remaining[nxt] = left
                    if left == 0:
                        out.append(nxt)
            if not out:
                return _EMPTY_I
            out.sort()
            return np.array(out, dtype=np.int64)
        starts = succ_off[tasks]
        counts = succ_off[tasks + 1] - starts
        total = int(counts.sum())
        if total == 0:
            return _EMPTY_I
        if total == len(tasks) and counts.min() == 1:
            succ = self.succ_idx[starts]
        else:
            nz = counts > 0
            starts, counts = starts[nz], counts[nz]
            shift = np.repeat(starts - (np.cumsum(counts) - counts), counts)
            succ = self.succ_idx[shift + np.arange(total)]
        succ = np.sort(succ)
        if len(succ) > 1 and np.count_nonzero(succ[1:] == succ[:-1]):
            first = np.empty(len(succ), dtype=bool)
            first[0] = True
            np.not_equal(succ[1:], succ[:-1], out=first[1:])
            pos = np.flatnonzero(first)
            uniq = succ[pos]
            self.remaining[uniq] -= np.diff(np.append(pos, len(succ))).astype(np.int32)
            succ = uniq
        else:
            self.remaining[succ] -= 1
        ready: IntArray = succ[self.remaining[succ] == 0]
        return ready

    def _released(self, ready: IntArray) -> None:
        """Newly ready tasks start now. Markers end at once and release theirs in turn; the compute
        and transfer tasks released by the whole cascade are dispatched together, in task-id order,
        so that readiness ties on a stream go by task id."""
        self.start[ready] = self.now
        kinds = self.g.kind[ready]
        lo, hi = _min_max(kinds)
        if lo == hi and lo != MARKER:  # the common case: no cascade
            if lo == TRANSFER:
                self._issue_transfers(ready)
            else:
                self._submit_compute(ready)
            return
        work = [ready[kinds != MARKER]]
        markers = ready[kinds == MARKER]
        while len(markers):
            self.end[markers] = self.now
            self.num_done += len(markers)
            nxt = self._newly_ready(markers)
            self.start[nxt] = self.now
            k = self.g.kind[nxt]
            work.append(nxt[k != MARKER])
            markers = nxt[k == MARKER]
        released = np.sort(np.concatenate(work))
        kinds = self.g.kind[released]
        tr = released[kinds == TRANSFER]
        if len(tr):
            self._issue_transfers(tr)
        comp = released[kinds == COMPUTE]
        if len(comp):
            self._submit_compute(comp)

    # -- streams -----------------------------------------------------------------------------
    def _stream(
        self, free: FloatArray, busy: FloatArray, tasks: IntArray, devs: IntArray, durs: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        """FIFO-schedule ``tasks`` (arriving now, in task order) on per-device serial streams.

        Returns start and end times aligned with ``tasks``. Eager: a FIFO stream's start times are
        known at arrival, since every earlier arrival is already booked.
        """
        now = self.now
        if len(tasks) == 1:
            d = int(devs[0])
            s = max(now, float(free[d]))
            e = s + float(durs[0])
            free[d] = e
            busy[d] += float(durs[0])
            return np.array([s]), np.array([e])
        np.add.at(busy, devs, durs)
        d_sorted = np.sort(devs)
        if not np.count_nonzero(d_sorted[1:] == d_sorted[:-1]):  # one task per device: no queueing among them
            s_arr = np.maximum(free[devs], now)
            e_arr = s_arr + durs
            free[devs] = e_arr
            return s_arr, e_arr
        order = np.lexsort((tasks, devs))  # FIFO within a device: ties by task id
        d_sorted = devs[order]
        dur_sorted = durs[order]
        first = np.empty(len(order), dtype=bool)
        first[0] = True
        np.not_equal(d_sorted[1:], d_sorted[:-1], out=first[1:])
        seg = np.cumsum(first) - 1
        csum = np.cumsum(dur_sorted)
        seg_base = (csum - dur_sorted)[first]
        base = np.maximum(free[d_sorted], now)
        s_sorted = base + (csum - dur_sorted) - seg_base[seg]
        e_sorted = s_sorted + dur_sorted
        last = np.append(first[1:], True)
        free[d_sorted[last]] = e_sorted[last]
        s_arr = np.empty(len(order))
        e_arr = np.empty(len(order))
        s_arr[order] = s_sorted
        e_arr[order] = e_sorted
        return s_arr, e_arr

    def _compute_durations(self, tasks: IntArray) -> FloatArray:
        secs = self.g.seconds[tasks]
        missing = np.isnan(secs)
        if missing.any():
            devs = self.g.device[tasks[missing]]
            rate = self.flop_rate[devs]
            if np.any(rate <= 0):
                raise SimulationError("a compute task is given in FLOPs on a device with no compute rate")
            secs = secs.copy()
            secs[missing] = self.g.flops[tasks[missing]] / rate
        return secs

    def _submit_compute(self, tasks: IntArray) -> None:
        if self.priority_mode:
            self._submit_compute_priority(tasks)
            return
        devs = self.g.device[tasks]
        durs = self._compute_durations(tasks)
        starts, ends = self._stream(self.compute_free, self.compute_busy, tasks, devs, durs)
        self.start[tasks] = starts
        self._push_grouped(ends, tasks, _EV_DONE)

    def _submit_compute_priority(self, tasks: IntArray) -> None:
        prio = self.g.priority[tasks].tolist()
        devs = self.g.device[tasks].tolist()
        for task, p, d in zip(tasks.tolist(), prio, devs, strict=True):
            heapq.heappush(self.prio_queue[d], (p, task))
        for d in sorted(set(devs)):
            self._start_next_priority(d)

    def _start_next_priority(self, d: int) -> None:
        if self.prio_running[d] or not self.prio_queue[d]:
            return
        _, task = heapq.heappop(self.prio_queue[d])
        dur = float(self._compute_durations(np.array([task], dtype=np.int64))[0])
        self.prio_running[d] = True
        self.start[task] = self.now
        self.compute_busy[d] += dur
        self._push(self.now + dur, _EV_COMPUTE_DONE, task)

    def _compute_done_priority(self, task: int) -> None:
        d = int(self.g.device[task])
        self.prio_running[d] = False
        self._complete(np.array([task], dtype=np.int64))
        self._start_next_priority(d)

    # -- transfers ---------------------------------------------------------------------------
    def _route_ids(self, src: IntArray, dst: IntArray) -> IntArray:
        """Route ids for network device pairs, computing routes not seen before."""
        keys = src * self.num_net_dev + dst
        if len(self.route_table):
            rids: IntArray = self.route_table[keys].astype(np.int64) - 1
            if not np.count_nonzero(rids < 0):
                return rids
            missing = np.unique(keys[rids < 0])
        else:
            r = self.routes
            if len(r.keys):
                pos = np.minimum(np.searchsorted(r.keys, keys), len(r.keys) - 1)
                found = r.keys[pos] == keys
                if found.all():
                    ids: IntArray = r.ids[pos]
                    return ids
                missing = np.unique(keys[~found])
            else:
                missing = np.unique(keys)
        self._add_routes(missing)
        return self._route_ids(src, dst)

    def _add_routes(self, keys: IntArray) -> None:
        names = self.net.devices
        first = len(self.route_ch_list)
        for key in keys.tolist():
            s, d = divmod(key, self.num_net_dev)
            channels, latency = self.net.route(names[s], names[d])
            if not len(channels):
                raise SimulationError(f"route from {names[s]!r} to {names[d]!r} crosses no link")
            self.route_ch_list.append(np.asarray(channels, dtype=np.int64))
            self.route_lat_list.append(float(latency))
        new_ids = np.arange(first, len(self.route_ch_list), dtype=np.int64)
        if len(self.route_table):
            self.route_table[keys] = (new_ids + 1).astype(np.int32)
        else:
            all_keys = np.concatenate([self.routes.keys, keys])
            all_ids = np.concatenate([self.routes.ids, new_ids])
            order = np.argsort(all_keys, kind="stable")
            self.routes = _Routes(all_keys[order], all_ids[order])
        width = max(len(c) for c in self.route_ch_list)
        mat = np.full((len(self.route_ch_list), width), self.num_ch, dtype=np.int64)
        for i, c in enumerate(self.route_ch_list):
            mat[i, : len(c)] = c
        self.route_mat = mat
        self.padded = bool(np.any(mat == self.num_ch))
        self.route_lat = np.array(self.route_lat_list, dtype=np.float64)
        self.route_minbw = self.bw_ext[mat].min(axis=1)
        self.route_bytes = np.concatenate([self.route_bytes, np.zeros(len(mat) - len(self.route_bytes))])
        self.route_busy = np.concatenate([self.route_busy, np.zeros(len(mat) - len(self.route_busy))])

    def _issue_transfers(self, tasks: IntArray) -> None:
        """Transfers become ready now: same-device ones arrive at once, others wait their latency."""
        g = self.g
        src = g.device[tasks]
        dst = g.dst[tasks]
        same = src == dst
        if np.count_nonzero(same):
            self._push(self.now, _EV_ARRIVE, tasks[same])
            keep = ~same
            tasks, src, dst = tasks[keep], src[keep], dst[keep]
            if not len(tasks):
                return
        rids = self._route_ids(self.net_dev[src], self.net_dev[dst])
        lat = self.route_lat[rids]
        if self.exclusive:
            # The flows take slots now, each starting after its latency; if any would overlap
            # another on a channel, _book switches to the shared regime.
            self._book(tasks, rids, self.now + lat)
            return
        lo, hi = _min_max(lat)
        if lo == hi:
            if lo == 0.0:
                self._activate(tasks, rids, self.now)
            else:
                self._push(self.now + lo, _EV_START, (tasks, rids))
            return
        order = np.argsort(lat, kind="stable")
        l_sorted = lat[order]
        cuts = np.flatnonzero(l_sorted[1:] != l_sorted[:-1]) + 1
        bounds = [0, *cuts.tolist(), len(order)]
        for a, b in itertools.pairwise(bounds):
            idx = np.sort(order[a:b])
            latency = float(l_sorted[a])
            if latency == 0.0:
                self._activate(tasks[idx], rids[idx], self.now)
            else:
                self._push(self.now + latency, _EV_START, (tasks[idx], rids[idx]))

    def _sync(self) -> None:
        """Bring remaining bytes up to now before rates change (free slots have rate 0)."""
        dt = self.now - self.t_sync
        if dt > 0 and len(self.s_rem):
            self.s_rem -= self.s_rate * dt
        self.t_sync = self.now

    def _book(self, tasks: IntArray, rids: IntArray, starts: FloatArray) -> None:
        """Exclusive regime: give these transfers slots now, moving from ``starts`` at their
        narrowest bandwidth, unless a window would overlap another flow's on some channel (then
        the engine switches to the shared regime, which redoes these properly)."""
        sizes = self.g.size_bytes[tasks]
        zero = sizes <= 0
        if zero.any():
            self._push_grouped(starts[zero], tasks[zero], _EV_ARRIVE)
            keep = ~zero
            tasks, rids, sizes, starts = tasks[keep], rids[keep], sizes[keep], starts[keep]
            if not len(tasks):
                return
        width = self.route_mat.shape[1]
        pc = self.route_mat[rids].ravel()
        s_pairs = np.repeat(starts, width)
        if self.padded:
            real = pc < self.num_ch
            pc, s_pairs = pc[real], s_pairs[real]
        sorted_pc = np.sort(pc)
        clash = bool((s_pairs < self.ch_until[pc]).any()) or bool((sorted_pc[1:] == sorted_pc[:-1]).any())
        self._sync()
        np.add.at(self.route_bytes, rids, sizes)
        rate = self.route_minbw[rids]
        finish = starts + sizes / rate
        slots = self._alloc(len(tasks))
        self.s_task[slots] = tasks
        self.s_rid[slots] = rids
        self.s_start[slots] = starts
        # Credit the time before the start so that _sync leaves exactly ``sizes`` at the start.
        self.s_rem[slots] = sizes + rate * (starts - self.now)
        self.s_rate[slots] = rate
        self.s_finish[slots] = finish
        np.add.at(self.route_busy, rids, finish - starts)
        if clash:
            self._enter_shared()
            return
        self.ch_until[pc] = np.repeat(finish, width)[real] if self.padded else np.repeat(finish, width)
        self.next_finish = min(self.next_finish, float(finish.min()))

    def _enter_shared(self) -> None:
        """Switch to the shared regime now: flows not yet moving go back to START events, moving
        ones are counted on their channels, and busy time booked ahead is taken back."""
        self.exclusive = False
        self.dirty = True
        live = np.flatnonzero(self.s_task >= 0)
        starts, finish, rids = self.s_start[live], self.s_finish[live], self.s_rid[live]
        ahead = starts > self.now
        # Un-book the exclusive busy time after now (all of it for flows not yet moving).
        np.add.at(self.route_busy, rids, -(finish - np.maximum(starts, self.now)))
        self.ch_until.fill(-math.inf)
        self.alloc = None  # the moving flows' channels are booked from the recomputation on
        self.t_used = self.now
        pending = live[ahead]
        if not len(pending):
            return
        tasks, rids, starts = self.s_task[pending], self.s_rid[pending], self.s_start[pending]
        np.add.at(self.route_bytes, rids, -self.g.size_bytes[tasks])
        self._release(pending)
        order = np.lexsort((tasks, starts))
        tasks, rids, starts = tasks[order], rids[order], starts[order]
        cuts = np.flatnonzero(starts[1:] != starts[:-1]) + 1
        bounds = [0, *cuts.tolist(), len(order)]
        for a, b in itertools.pairwise(bounds):
            self._push(float(starts[a]), _EV_START, (tasks[a:b], rids[a:b]))

    def _leave_shared(self, live: IntArray) -> None:
        """Back to the exclusive regime (no channel shared any more): close the channels' busy
        intervals now and book the rest of each moving flow per route."""
        self.exclusive = True
        self.alloc = None
        rids, finish = self.s_rid[live], self.s_finish[live]
        np.add.at(self.route_busy, rids, finish - self.now)
        width = self.route_mat.shape[1]
        pc = self.route_mat[rids].ravel()
        f_pairs = np.repeat(finish, width)
        if self.padded:
            real = pc < self.num_ch
            pc, f_pairs = pc[real], f_pairs[real]
        self.ch_until[pc] = f_pairs

    def _activate(self, tasks: IntArray, rids: IntArray, start: float) -> None:
        """Shared regime: these transfers' bytes start flowing now (zero-byte ones arrive now)."""
        if self.exclusive:
            self._book(tasks, rids, np.full(len(tasks), start))
            return
        sizes = self.g.size_bytes[tasks]
        zero = sizes <= 0
        if np.count_nonzero(zero):
            self._push(self.now, _EV_ARRIVE, tasks[zero])
            keep = ~zero
            tasks, rids, sizes = tasks[keep], rids[keep], sizes[keep]
            if not len(tasks):
                return
        # No _sync: rates change only in _recompute, which syncs first, and these slots' rate is 0.
        np.add.at(self.route_bytes, rids, sizes)
        slots = self._alloc(len(tasks))
        self.s_task[slots] = tasks
        self.s_rid[slots] = rids
        self.s_start[slots] = self.now
        self.s_rem[slots] = sizes
        self.dirty = True

    def _release(self, slots: IntArray) -> None:
        self.s_task[slots] = -1
        self.s_rate[slots] = 0.0
        self.s_rem[slots] = 0.0
        self.s_finish[slots] = math.inf
        self.free_slots[self.n_free : self.n_free + len(slots)] = slots
        self.n_free += len(slots)

    def _alloc(self, k: int) -> IntArray:
        """``k`` free flow slots (growing the slot arrays when needed)."""
        if k > self.n_free:
            old = len(self.s_task)
            new = max(2 * old, old + k, 64)
            grow = new - old
            self.s_task = np.concatenate([self.s_task, np.full(grow, -1, dtype=np.int64)])
            self.s_rid = np.concatenate([self.s_rid, np.zeros(grow, dtype=np.int64)])
            self.s_start = np.concatenate([self.s_start, np.zeros(grow)])
            self.s_rem = np.concatenate([self.s_rem, np.zeros(grow)])
            self.s_rate = np.concatenate([self.s_rate, np.zeros(grow)])
            self.s_finish = np.concatenate([self.s_finish, np.full(grow, math.inf)])
            stack = np.empty(new, dtype=np.int64)
            stack[: self.n_free] = self.free_slots[: self.n_free]
            stack[self.n_free : self.n_free + grow] = np.arange(new - 1, old - 1, -1)
            self.free_slots = stack
            self.n_free += grow
        self.n_free -= k
        slots: IntArray = self.free_slots[self.n_free : self.n_free + k]
        return slots.copy()

    def _finish_flows(self) -> None:
        """Flows whose last byte is in (ties within a relative 1e-12 are grouped) arrive now."""
        t = self.now
        done = (self.s_finish <= t + max(t * _TIE_REL, _TIE_ABS)).nonzero()[0]
        tasks = self.s_task[done]
        if self.exclusive:
            self._release(done)
            self.next_finish = float(self.s_finish.min())
        else:
            self._release(done)
            self.dirty = True
        self._arrive(tasks)

    def _recompute(self) -> None:
        """Shared regime: max-min fair rates of the moving flows and their finish times, channel
        busy time up to now; back to the exclusive regime when no channel is shared any more."""
        self.dirty = False
        now = self.now
        self._sync()
        if self.alloc is not None:
            self.alloc.busy_s += now - self.t_used
        self.t_used = now
        live = (self.s_task >= 0).nonzero()[0]
        if not len(live):
            self.next_finish = math.inf
            self.alloc = None
            if self.sharing:
                self._leave_shared(live)
            return
        rids = self.s_rid[live]
        alloc = self._allocation(rids)
        rate = alloc.route_rate_Bps[rids]
        self.s_rate[live] = rate
        self.s_finish[live] = now + self.s_rem[live] / rate
        self.next_finish = float(self.s_finish.min())
        if alloc.shared or not self.sharing:
            self.alloc = alloc
        else:
            self._leave_shared(live)

    def _allocation(self, rids: IntArray) -> _Allocation:
        """The allocation for moving flows on routes ``rids``, memoised on the count per route.

        Flows on one route cross the same channels, so progressive filling freezes them together
        at one rate: the allocation is a function of how many flows each route carries, which in
        a collective's steady state takes few distinct values (the ring of dp-algorithms.yaml:
        7,000 distinct states in 92,000 recomputations). The key is the count per route id up to
        the largest one in use, or b"s" + ids + counts when that is long; the two cannot collide
        (their lengths are multiples of 8 and odd respectively). The cache is emptied when it
        would outgrow ``_ALLOC_CACHE_BYTES``.
        """
        per_route = np.bincount(rids)
        if len(per_route) <= _DENSE_KEY_ROUTES:
            key = per_route.tobytes()
        else:
            routes = per_route.nonzero()[0]
            key = b"s" + routes.tobytes() + per_route[routes].tobytes()
        alloc = self.alloc_cache.get(key)
        if alloc is not None:
            return alloc
        routes = per_route.nonzero()[0]
        rate, channels, shared = self._allocate(routes, per_route[routes])
        route_rate = np.zeros(len(per_route))
        route_rate[routes] = rate
        alloc = _Allocation(key, route_rate, channels, shared)
        if self.alloc_cache_bytes + alloc.nbytes > _ALLOC_CACHE_BYTES:
            # The allocation in force has had its time booked by now and is about to be replaced
            # (so every allocation with time to book is in the cache, for _flush_busy).
            self._flush_busy()
            self.alloc_cache.clear()
            self.alloc_cache_bytes = 0
        self.alloc_cache[key] = alloc
        self.alloc_cache_bytes += alloc.nbytes
        return alloc

    def _flush_busy(self) -> None:
        """Book the time each cached allocation was in force on its channels."""
        for alloc in self.alloc_cache.values():
            if alloc.busy_s:
                self.ch_busy[alloc.channels] += alloc.busy_s
                alloc.busy_s = 0.0

    def _allocate(self, routes: IntArray, counts: IntArray) -> tuple[FloatArray, IntArray, bool]:
        """Progressive filling over routes carrying ``counts`` flows each: raise every unfrozen
        flow's rate together until a channel saturates, freeze the flows crossing it, repeat.
        Without link sharing (or when no channel is shared) each flow gets its narrowest link."""
        nr = len(routes)
        pairs = self.route_mat[routes]
        pc = pairs.ravel()
        real = pc < self.num_ch
        used, pcl = np.unique(pc[real], return_inverse=True)
        nu = len(used)
        pr = np.repeat(np.arange(nr), pairs.shape[1])[real]
        weight = counts[pr].astype(np.float64)  # flows of each (route, channel) pair
        n_on = np.bincount(pcl, weights=weight, minlength=nu)
        shared = bool(n_on.max() >= 2)
        if not shared or not self.sharing:
            return self.route_minbw[routes], used, shared
        # A route that shares none of its channels with another route is a component of its
        # own: its flows split its narrowest channel evenly (what filling would give it).
        rate = np.empty(nr)
        crowded = np.bincount(pcl, minlength=nu)[pcl] > 1  # pairs on a channel other routes use
        alone = np.bincount(pr[crowded], minlength=nr) == 0
        if alone.any():
            rate[alone] = self.route_minbw[routes[alone]] / counts[alone]
            if not rate[alone].min() > 0:
                raise SimulationError("progressive filling found a channel with no capacity left")
            if alone.all():
                return rate, used, shared
        # Each round: the smallest fair share among channels with unfrozen flows saturates its
        # channels; their flows freeze at it. Channels without unfrozen flows (those of lone
        # routes from the start) get an infinite capacity, so that they drop out of the minimum.
        cap = self.bw[used].copy()
        unfrozen = ~alone
        if alone.any():
            alone_pair = alone[pr]
            cap[pcl[alone_pair]] = math.inf
            n_on[pcl[alone_pair]] = 1.0
            keep = ~alone_pair
            pr, pcl, weight = pr[keep], pcl[keep], weight[keep]
        while True:
            share = cap / n_on
            m = float(share.min())
            if not m > 0:
                raise SimulationError("progressive filling found a channel with no capacity left")
            hit = np.zeros(nr, dtype=bool)
            hit[pr[(share <= m * (1.0 + _SHARE_REL))[pcl]]] = True
            hit &= unfrozen
            rate[hit] = m
            unfrozen ^= hit
            if not unfrozen.any():
                return rate, used, shared
            pair_hit = hit[pr]
            frozen_flows = np.bincount(pcl[pair_hit], weights=weight[pair_hit], minlength=nu)
            cap -= frozen_flows * m
            n_on -= frozen_flows
            np.maximum(cap, 0.0, out=cap)
            done = n_on <= 0.0
            cap[done] = math.inf
            n_on[done] = 1.0

    def _arrive(self, tasks: IntArray) -> None:
        """Last byte in: plain transfers end now; reducing ones queue on the receiver's reduction stream."""
        self.arrive[tasks] = self.now
        red = self.g.reduce[tasks]
        num_red = np.count_nonzero(red)
        if not num_red:
            self._complete(np.sort(tasks))
            return
        if num_red < len(red):
            self._complete(np.sort(tasks[~red]))
            tasks = tasks[red]
        tasks = np.sort(tasks)
        devs = self.g.dst[tasks]
        durs = self.gamma[devs] * self.g.size_bytes[tasks]
        _, ends = self._stream(self.reduce_free, self.reduce_busy, tasks, devs, durs)
        self._push_grouped(ends, tasks, _EV_DONE)

    # -- result ------------------------------------------------------------------------------
    def _channel_busy(self) -> FloatArray:
        self._flush_busy()
        out = self.ch_busy.copy()
        if len(self.route_busy):
            np.add.at(out, self.route_mat.ravel(), np.repeat(self.route_busy, self.route_mat.shape[1]))
        busy: FloatArray = out[: self.num_ch]
        return busy

    def _channel_bytes(self) -> FloatArray:
        out = np.zeros(self.num_ch + 1)
        if len(self.route_bytes):
            np.add.at(out, self.route_mat.ravel(), np.repeat(self.route_bytes, self.route_mat.shape[1]))
        channel_bytes: FloatArray = out[: self.num_ch]
        return channel_bytes

    def _result(self) -> SimResult:
        makespan = float(self.end.max()) if self.n else 0.0
        not_transfer = self.g.kind != TRANSFER
        if not_transfer.any():
            self.arrive[not_transfer] = np.nan
        collective = None
        info = self.g.meta.get("collective")
        if isinstance(info, dict):
            collective = CollectiveStats(
                algorithm=str(info.get("algorithm", "")),
                num_ranks=int(info.get("ranks", 0)),
                size_bytes=float(info.get("size_bytes", 0.0)),
                time_s=makespan,
            )
        return SimResult(
            makespan_s=makespan,
            start_s=self.start,
            end_s=self.end,
            arrive_s=self.arrive,
            devices=self.g.devices,
            compute_busy_s=self.compute_busy,
            reduction_busy_s=self.reduce_busy,
            channel_names=self.net.channel_names,
            channel_bandwidth_Bps=self.bw,
            channel_bytes=self._channel_bytes(),
            channel_busy_s=self._channel_busy(),
            num_events=self.num_events,
            collective=collective,
        )
