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
- **Messages**: on top of the path latency, a transfer pays its transport's per-message costs
  before its bytes move (LogGP's o on sender and receiver, a rendezvous round trip above the eager
  threshold, NCCL's per-step latency of its protocol, the plan's per-call overhead), and under
  ``nccl`` puts ``size / protocol efficiency`` bytes on the wire; links carry payload at their line
  rate times their class's efficiency. :mod:`~parplan.engine.transport` says exactly what is
  charged; the ``ideal`` transport charges none of it.
- **Markers** take no time.

Determinism: events live in a heap of ``(time, kind, sequence)``. At one instant, flows that finish
(within a relative 1e-12 of each other: one batch) come first, then events by kind (task ends,
arrivals, flow starts) and the order they were scheduled. Tasks released together, markers' cascade
included, reach their streams in task-id order. Identical inputs give identical results.

The parts, each in its own module with its own tests:

- :mod:`~parplan.engine.kernel`: the event heap, the current time, the tie rules;
- :mod:`~parplan.engine.flows`: the flows on the network in their two regimes (*exclusive*, where
  no two flows overlap on a channel and finish times follow in closed form when a flow is issued;
  *shared*, with a max-min recomputation at every instant that changes the moving flows), over
  :mod:`~parplan.engine.allocator` (progressive filling and its cache keyed by flows per route)
  and :mod:`~parplan.engine.routes` (route ids, channels, latencies);
- :mod:`~parplan.engine.recorder`: per-task times, per-link bytes and busy time, the result;
- :mod:`~parplan.engine.tasks`: the engine's only view of the task graph, and task readiness;
- :mod:`~parplan.engine.streams`: per-device compute and reduction streams;
- :mod:`~parplan.engine.symmetry`: a run simulated once per orbit of a rotation of its devices
  (``quotient``), exact where the network was checked to respect it;
- :mod:`~parplan.engine.replay` over :mod:`~parplan.engine.blocks`: a collective that repeats (a
  data-parallel bucket's all-reduce) simulated once and replayed bit for bit where that is
  provably exact; a run whose replayed window something met runs again with it simulated.

This module is the driver that wires them: tasks become ready, markers cascade, compute goes to
its stream, transfers to their routes and flows, arrivals to the reduction streams.

Speed: nothing loops over tasks in Python on the hot path, except batches of a few tasks, where a
scalar pass is cheaper than numpy's per-call cost. Tasks that finish at one instant are one numpy
batch: dependency counting over a CSR successor list, FIFO stream booking by a segmented
cumulative sum (a FIFO stream's start times are known on arrival), route ids from a dense
(src, dst) table, flows in reusable slots. Both flow regimes give the same times (tests/engine
check the engine against a plain one-object-per-task reference simulator on random graphs and
topologies).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from parplan.engine.arrays import IntArray, min_max, sorted_copy
from parplan.engine.flows import Flows
from parplan.engine.kernel import ARRIVE, COMPUTE_DONE, DONE, START, Handler, Kernel
from parplan.engine.recorder import Recorder
from parplan.engine.replay import ReplayConflict, Replays
from parplan.engine.result import SimResult
from parplan.engine.routes import RouteTable
from parplan.engine.streams import ComputeStreams, ReductionStreams, device_rates
from parplan.engine.symmetry import OrbitRoutes, Quotient, expand_devices, summary
from parplan.engine.tasks import Dependencies, TaskView
from parplan.engine.transport import MessagePricer
from parplan.errors import SimulationError
from parplan.taskgraph import COMPUTE, MARKER, TRANSFER, TaskGraph
from parplan.topology.network import Network


def simulate(
    graph: TaskGraph,
    network: Network,
    *,
    gamma_s_per_byte: float | None = None,
    link_sharing: bool = True,
    quotient: Quotient | None = None,
) -> SimResult:
    """Time ``graph`` on ``network``; see the module docstring for the exact semantics.

    ``gamma_s_per_byte`` overrides every device's reduction cost (seconds per byte).
    ``link_sharing=False`` gives every flow its route's narrowest bandwidth whatever else is on
    the wire (a contention-free what-if). With a ``quotient``
    (:func:`~parplan.engine.symmetry.find_quotient`), ``graph`` holds one representative transfer
    per orbit and the result is the full run's: makespan, per-channel bytes and busy time of every
    channel, per-device busy time; per-task times are the representatives' only, and ``meta``
    says so (``"symmetry"``). Raises :class:`SimulationError` for malformed graphs
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
    view = TaskView.of(graph)
    excluded: frozenset[int] = frozenset()
    while True:
        # Repeated collectives are replayed where that is exact; a replayed block that something
        # met is simulated in the next run (every transfer, after MAX_REPLAY_RUNS runs).
        replay = len(excluded) < MAX_REPLAY_RUNS
        engine = _Engine(
            view, network, gamma_s_per_byte, link_sharing, quotient, replay=replay, excluded=excluded
        )
        try:
            engine.run()
            break
        except ReplayConflict as conflict:
            excluded = excluded | {conflict.block}
    result = engine.result(graph.meta.get("collective"))
    if quotient is None:
        return result
    return replace(
        result,
        compute_busy_s=expand_devices(result.compute_busy_s, quotient),
        reduction_busy_s=expand_devices(result.reduction_busy_s, quotient),
        meta={**result.meta, "symmetry": summary(quotient, int(np.count_nonzero(graph.kind == TRANSFER)))},
    )


MAX_REPLAY_RUNS = 3
"""Runs with replay before a graph whose replayed blocks keep meeting other work is simulated in full."""


class _Engine:
    """One simulation run: the parts, and what happens to tasks as they become ready and end."""

    def __init__(
        self,
        tasks: TaskView,
        network: Network,
        gamma_s_per_byte: float | None,
        link_sharing: bool,
        quotient: Quotient | None = None,
        *,
        replay: bool = False,
        excluded: frozenset[int] = frozenset(),
    ) -> None:
        self.tasks = tasks
        self.kernel = Kernel()
        self.routes = (
            RouteTable(network, tasks.devices)
            if quotient is None
            else OrbitRoutes(network, tasks.devices, quotient)
        )
        flop_rate, gamma = device_rates(tasks, network, gamma_s_per_byte)
        self.deps = Dependencies(tasks)
        self.rec = Recorder(tasks.num_tasks, self.routes.num_channels)
        self.rec.grow_routes(self.routes.num_routes)
        self.compute = ComputeStreams(self.kernel, tasks, flop_rate, self.rec.start_s)
        receiver = None if quotient is None else quotient.device_rep
        self.reduction = ReductionStreams(self.kernel, tasks, gamma, receiver)
        self.pricer = MessagePricer(
            network.transport, self.routes, tasks.size_bytes, tasks.protocol, tasks.overhead_s
        )
        self.flows = Flows(
            self.kernel,
            self.routes,
            self.rec,
            self.pricer.wire_bytes(),
            self._arrive,
            sharing=link_sharing,
            rate_cap_Bps=self.pricer.rate_cap_Bps(tasks.max_rate_Bps),
        )
        self.replays: Replays | None = None
        if replay and quotient is None and Replays.wanted(tasks):
            replays = Replays(tasks, self.flows, self.rec, self.deps, self.reduction, excluded)
            if replays.active:
                self.replays = replays
                self.kernel.guard = replays.guard

    def run(self) -> None:
        """Release the tasks without dependencies and run the kernel until every task has ended."""
        roots = self.deps.roots()
        if len(roots):
            self._released(roots)
        by_kind: dict[int, Handler] = {
            DONE: self._complete,
            ARRIVE: self._arrive,
            START: self.flows.activate,
            COMPUTE_DONE: self._compute_done,
        }
        self.kernel.run([by_kind[k] for k in sorted(by_kind)], self.flows)
        n, done = self.tasks.num_tasks, self.deps.num_done
        if done != n:
            raise SimulationError(
                f"{n - done} of {n} tasks never ran (dependency cycle?); e.g. tasks {self.deps.stuck(5)}"
            )

    def result(self, collective: object) -> SimResult:
        """The result of the run (after :meth:`run`)."""
        self.flows.flush()
        return self.rec.result(
            kind=self.tasks.kind,
            devices=self.tasks.devices,
            routes=self.routes,
            compute_busy_s=self.compute.busy_s,
            reduction_busy_s=self.reduction.busy_s,
            num_events=self.kernel.num_events,
            collective=collective,
        )

    def _complete(self, tasks: IntArray) -> None:
        """Tasks end now; release their successors."""
        self.rec.end_s[tasks] = self.kernel.now
        if self.replays is not None:
            self.replays.completed(tasks)
        ready = self.deps.finish(tasks)
        if len(ready):
            self._released(ready)

    def _released(self, ready: IntArray) -> None:
        """Newly ready tasks start now. Markers end at once and release theirs in turn; the compute
        and transfer tasks released by the whole cascade are dispatched together, in task-id order,
        so that readiness ties on a stream go by task id."""
        now = self.kernel.now
        kind = self.tasks.kind
        if len(ready) == 1:  # the usual batch of a shared run: scalar reads, no cascade to sort
            task = int(ready[0])
            self.rec.start_s[task] = now
            k = kind[task]
            if k == TRANSFER:
                self._issue_transfers(ready)
                return
            if k == COMPUTE:
                self.compute.submit(ready)
                return
        else:
            self.rec.start_s[ready] = now
        kinds = kind[ready]
        lo, hi = min_max(kinds)
        if lo == hi and lo != MARKER:  # the common case: no cascade
            if lo == TRANSFER:
                self._issue_transfers(ready)
            else:
                self.compute.submit(ready)
            return
        work = [ready[kinds != MARKER]]
        markers = ready[kinds == MARKER]
        while len(markers):
            self.rec.end_s[markers] = now
            nxt = self.deps.finish(markers)
            self.rec.start_s[nxt] = now
            k = kind[nxt]
            work.append(nxt[k != MARKER])
            markers = nxt[k == MARKER]
        released = sorted_copy(np.concatenate(work))
        kinds = kind[released]
        tr = released[kinds == TRANSFER]
        if len(tr):
            self._issue_transfers(tr)
        comp = released[kinds == COMPUTE]
        if len(comp):
            self.compute.submit(comp)

    def _issue_transfers(self, tasks: IntArray) -> None:
        """Transfers become ready now: same-device ones arrive at once, others go on their routes
        (unless they start a block that is replayed: :mod:`parplan.engine.replay`)."""
        if self.replays is not None and self.replays.issue(tasks):
            return
        if len(tasks) == 1 and self.tasks.lane is None:  # one transfer (the usual batch): scalar reads
            task = tasks.item(0)
            sender, receiver = self.tasks.device.item(task), self.tasks.dst.item(task)
            if sender == receiver:
                self.kernel.push(self.kernel.now, ARRIVE, tasks)
                return
            rid = self.routes.id_of(sender, receiver)
            if rid >= 0:  # a known route: the recorder has its row already
                rids = np.array([rid], dtype=np.int64)
                self.flows.issue(tasks, rids, None if self.pricer.plain else self.pricer.delay_s(tasks, rids))
                return
        src = self.tasks.device[tasks]
        dst = self.tasks.dst[tasks]
        same = src == dst
        if bool(same[0]) if len(same) == 1 else np.count_nonzero(same):
            self.kernel.push(self.kernel.now, ARRIVE, tasks[same])
            keep = ~same
            tasks, src, dst = tasks[keep], src[keep], dst[keep]
            if not len(tasks):
                return
        lane = self.tasks.lane
        rids = self.routes.ids(src, dst, None if lane is None else lane[tasks])
        self.rec.grow_routes(self.routes.num_routes)
        self.flows.issue(tasks, rids, None if self.pricer.plain else self.pricer.delay_s(tasks, rids))

    def _arrive(self, tasks: IntArray) -> None:
        """Last byte in: plain transfers end now; reducing ones queue on the receiver's reduction stream."""
        self.rec.arrive_s[tasks] = self.kernel.now
        if self.replays is not None:
            self.replays.arrived(tasks)
        if len(tasks) == 1:  # one flow (the usual batch): a scalar read
            if self.tasks.reduce[int(tasks[0])]:
                self.reduction.submit(tasks)
            else:
                self._complete(tasks)
            return
        red = self.tasks.reduce[tasks]
        num_red = np.count_nonzero(red)
        if not num_red:
            self._complete(tasks if len(tasks) == 1 else sorted_copy(tasks))
            return
        if num_red < len(red):
            self._complete(sorted_copy(tasks[~red]))
            tasks = tasks[red]
        self.reduction.submit(tasks if len(tasks) == 1 else sorted_copy(tasks))

    def _compute_done(self, task: int) -> None:
        """Priority mode: a compute task ends; its stream starts the next (after its successors
        are released, so that they compete)."""
        d = self.compute.idle(task)
        self._complete(np.array([task], dtype=np.int64))
        self.compute.start_next(d)
