"""The flows on the network: transfers' bytes in motion, their rates, and the two regimes.

A transfer issued at ``t`` waits its route's latency, then its bytes cross every channel of the
route at one rate until the last byte is in. :class:`Flows` keeps the flows in reusable slots (a
free slot has task -1, rate 0 and finish inf), so that a batch starting or ending is a few
scatters, not a rebuild of every array; the flows hold the first slots (a release moves the last
flows into the holes), so that the per-instant work reads slices. It runs them in one of two regimes:

- *exclusive* (the common case in collectives): no two flows' active windows overlap on any
  channel, so each runs at its route's narrowest bandwidth and a batch's finish times follow in
  closed form when it is issued: a flow takes its slot at issue time with its start (issue +
  latency) and finish fixed, no event for the end of its latency, no rate recomputation.
  ``ch_until[c]`` is the last finish booked on channel ``c``; busy time is booked per route when
  a flow is issued. A window that would overlap another on a channel switches to
- *shared*: flows enter slots only when they start moving (a START event after the latency), and
  every instant that changes the set of moving flows (``dirty``) ends with one lookup of the
  max-min allocation by the number of moving flows per route (:mod:`parplan.engine.allocator`).
  The allocation in force since ``t_used`` accrues busy time on its channels. When no channel is
  shared any more the flows return to the exclusive regime.

Both regimes give the same times. Flows are the kernel's :class:`~parplan.engine.kernel.Clock`:
their next finish is the clock's next instant, and flows finishing within the kernel's tie
horizon of each other arrive together. A flow with a rate ceiling (``rate_cap_Bps``) moves at
most that fast in either regime.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from parplan.engine.allocator import Allocation, AllocationCache
from parplan.engine.arrays import (
    EMPTY_F,
    EMPTY_I,
    FloatArray,
    IntArray,
    TaskColumn,
    largest,
    min_max,
    runs,
    smallest,
    sorted_copy,
)
from parplan.engine.kernel import ARRIVE, START, Kernel
from parplan.engine.recorder import Recorder
from parplan.engine.routes import RouteTable

if TYPE_CHECKING:
    from parplan.engine.blocks import FlowLog


class Flows:
    """The run's flows. Flow ids are task ids; ``size_bytes[i]`` is flow ``i``'s size.

    :meth:`issue` takes transfers whose dependencies are done; the kernel hands START events to
    :meth:`activate`; flows whose last byte is in go to ``on_arrive`` (by clock firing, or by
    ARRIVE events for zero-byte ones). Bytes and busy time are booked on ``recorder``.
    """

    def __init__(
        self,
        kernel: Kernel,
        routes: RouteTable,
        recorder: Recorder,
        size_bytes: FloatArray | TaskColumn,
        on_arrive: Callable[[IntArray], None],
        *,
        sharing: bool,
        rate_cap_Bps: FloatArray | TaskColumn | None = None,
    ) -> None:
        self.kernel = kernel
        self.routes = routes
        self.rec = recorder
        self.size_bytes = size_bytes if isinstance(size_bytes, TaskColumn) else TaskColumn(size_bytes)
        self.on_arrive = on_arrive
        self.sharing = sharing
        # Per task, a ceiling on its rate (None: none).
        self.rate_cap_Bps = TaskColumn(rate_cap_Bps) if isinstance(rate_cap_Bps, np.ndarray) else rate_cap_Bps
        self.cache = AllocationCache(routes, recorder.channel_busy_s, sharing=sharing)
        # Slots: flow id (-1 when free), route id, start, bytes left at t_sync, rate, finish.
        self.s_task = EMPTY_I
        self.s_rid = EMPTY_I
        self.s_start = EMPTY_F
        self.s_rem = EMPTY_F
        self.s_rate = EMPTY_F
        self.s_finish = EMPTY_F
        self.n_live = 0  # flows hold slots 0 .. n_live - 1; the others are free
        self.next_finish = math.inf
        self.t_sync = 0.0
        self.exclusive = sharing
        self.dirty = False
        self.ch_until = np.full(routes.num_channels + 1, -math.inf)
        self.alloc: Allocation | None = None
        self.t_used = 0.0
        self.pending_starts = 0  # START events pushed and not yet handled
        self.log: FlowLog | None = None  # a recorded window's log (parplan.engine.replay)

    # -- the kernel's clock ------------------------------------------------------------------
    def next_instant(self) -> float:
        """The next finish, after a rate recomputation if the set of moving flows changed."""
        if self.dirty:
            self._recompute()
        return self.next_finish

    def fire(self) -> None:
        """Flows whose last byte is in (ties within the kernel's horizon are grouped) arrive now."""
        now = self.kernel.now
        done = (self.s_finish[: self.n_live] <= self.kernel.now_horizon).nonzero()[0]
        tasks = self.s_task[done]
        log = self.log
        if log is None:
            self._release(done)
        else:  # recording a window (parplan.engine.replay): the tie margins
            last_fired = 0.0
            if len(done):
                finish = self.s_finish[done]
                log.used(tasks, finish)
                last_fired = largest(finish)
            self._release(done)
            log.fired(last_fired, smallest(self.s_finish), now)
        if self.exclusive:
            self.next_finish = smallest(self.s_finish)
        else:
            self.dirty = True
        self.on_arrive(tasks)

    def flush(self) -> None:
        """Book every allocation's pending busy time on its channels (at the end of a run)."""
        self.cache.flush_busy()

    # -- flows entering ----------------------------------------------------------------------
    def issue(self, tasks: IntArray, rids: IntArray, delay_s: FloatArray | None = None) -> None:
        """Transfers ``tasks`` on routes ``rids`` are issued now; their bytes move after ``delay_s``
        (by default the routes' latency; the transport's per-message costs when the engine adds them)."""
        now = self.kernel.now
        lat = self.routes.latency_s[rids] if delay_s is None else delay_s
        if self.exclusive:
            # The flows take slots now, each starting after its latency; if any would overlap
            # another on a channel, _book switches to the shared regime.
            starts = now + lat
            if self.log is not None:
                self.log.sums(now, lat, starts)
            self._book(tasks, rids, starts)
            return
        if len(lat) == 1:  # one transfer (the usual batch of the shared regime)
            latency = float(lat[0])
            if latency == 0.0:
                self._activate(tasks, rids)
            else:
                self._push_start(self._after(latency), tasks, rids)
            return
        lo, hi = min_max(lat)
        if lo == hi:
            if lo == 0.0:
                self._activate(tasks, rids)
            else:
                self._push_start(self._after(lo), tasks, rids)
            return
        order = lat.argsort(kind="stable")
        l_sorted = lat[order]
        for a, b in runs(l_sorted):
            idx = sorted_copy(order[a:b])
            latency = float(l_sorted[a])
            if latency == 0.0:
                self._activate(tasks[idx], rids[idx])
            else:
                self._push_start(self._after(latency), tasks[idx], rids[idx])

    def _after(self, delay_s: float) -> float:
        """The instant ``delay_s`` from now (noted in a recorded window's log)."""
        now = self.kernel.now
        at = now + delay_s
        if self.log is not None:
            self.log.sums(now, delay_s, at)
        return at

    def activate(self, payload: tuple[IntArray, IntArray]) -> None:
        """START handler: these transfers' latency has elapsed; their bytes start moving now."""
        tasks, rids = payload
        self.pending_starts -= 1
        self._activate(tasks, rids)

    def _push_start(self, time: float, tasks: IntArray, rids: IntArray) -> None:
        self.pending_starts += 1
        self.kernel.push(time, START, (tasks, rids))

    def _activate(self, tasks: IntArray, rids: IntArray) -> None:
        now = self.kernel.now
        if self.exclusive:
            self._book(tasks, rids, np.full(len(tasks), now))
            return
        sizes = self.size_bytes.take(tasks)
        if len(tasks) == 1:  # the usual batch here: scalar checks and booking
            if sizes[0] <= 0:
                self.kernel.push(now, ARRIVE, tasks)
                return
            self.rec.route_bytes[rids[0]] += sizes[0]
            if self.log is not None:
                self.log.add_bytes(rids, sizes)
        else:
            zero = sizes <= 0
            if np.count_nonzero(zero):
                self.kernel.push(now, ARRIVE, tasks[zero])
                keep = ~zero
                tasks, rids, sizes = tasks[keep], rids[keep], sizes[keep]
                if not len(tasks):
                    return
            np.add.at(self.rec.route_bytes, rids, sizes)
            if self.log is not None:
                self.log.add_bytes(rids, sizes)
        # No _sync: rates change only in _recompute, which syncs first, and these slots' rate is 0.
        slots = self._take_slots(len(tasks))
        if len(tasks) == 1:  # scalar writes beat four slice assignments
            i = slots.start
            self.s_task[i] = tasks[0]
            self.s_rid[i] = rids[0]
            self.s_start[i] = now
            self.s_rem[i] = sizes[0]
        else:
            self.s_task[slots] = tasks
            self.s_rid[slots] = rids
            self.s_start[slots] = now
            self.s_rem[slots] = sizes
        self.dirty = True

    def _book(self, tasks: IntArray, rids: IntArray, starts: FloatArray) -> None:
        """Exclusive regime: give these transfers slots now, moving from ``starts`` at their
        narrowest bandwidth, unless a window would overlap another flow's on some channel (then
        the flows switch to the shared regime, which redoes these properly)."""
        sizes = self.size_bytes.take(tasks)
        zero = sizes <= 0
        if np.count_nonzero(zero):
            self.kernel.push_grouped(starts[zero], tasks[zero], ARRIVE)
            keep = ~zero
            tasks, rids, sizes, starts = tasks[keep], rids[keep], sizes[keep], starts[keep]
            if not len(tasks):
                return
        routes = self.routes
        width = routes.channels.shape[1]
        pc = routes.channels[rids].ravel()
        s_pairs = starts.repeat(width)  # the method: np.repeat's Python wrapper costs more
        if routes.padded:
            real = pc < routes.num_channels
            pc, s_pairs = pc[real], s_pairs[real]
        sorted_pc = sorted_copy(pc)
        clash = bool(np.count_nonzero(s_pairs < self.ch_until[pc])) or bool(
            np.count_nonzero(sorted_pc[1:] == sorted_pc[:-1])
        )
        if routes.multi is not None and not clash:  # an orbit whose translates share a channel
            clash = bool(np.count_nonzero(routes.multi[rids]))
        self._sync()
        np.add.at(self.rec.route_bytes, rids, sizes)
        if self.log is not None:
            self.log.add_bytes(rids, sizes)
        rate = routes.narrowest_Bps[rids]
        if self.rate_cap_Bps is not None:
            rate = np.minimum(rate, self.rate_cap_Bps.take(tasks))
        duration = sizes / rate
        finish = starts + duration
        if self.log is not None:
            self.log.finishes(tasks, starts, duration, finish, every=False)
        slots = self._take_slots(len(tasks))
        self.s_task[slots] = tasks
        self.s_rid[slots] = rids
        self.s_start[slots] = starts
        # Credit the time before the start so that _sync leaves exactly ``sizes`` at the start.
        self.s_rem[slots] = sizes + rate * (starts - self.kernel.now)
        self.s_rate[slots] = rate
        self.s_finish[slots] = finish
        np.add.at(self.rec.route_busy_s, rids, finish - starts)
        if self.log is not None:
            self.log.add_busy(rids, finish - starts)
        if clash:
            self._enter_shared()
            return
        self.ch_until[pc] = finish.repeat(width)[real] if routes.padded else finish.repeat(width)
        self.next_finish = min(self.next_finish, smallest(finish))

    # -- regimes -----------------------------------------------------------------------------
    def _enter_shared(self) -> None:
        """Switch to the shared regime now: flows not yet moving go back to START events, moving
        ones are counted on their channels, and busy time booked ahead is taken back."""
        now = self.kernel.now
        self.exclusive = False
        self.dirty = True
        live = self._by_task(np.arange(self.n_live))
        starts, finish, rids = self.s_start[live], self.s_finish[live], self.s_rid[live]
        if self.log is not None:
            self.log.used(self.s_task[live], finish)
        ahead = starts > now
        # Un-book the exclusive busy time after now (all of it for flows not yet moving).
        np.add.at(self.rec.route_busy_s, rids, -(finish - np.maximum(starts, now)))
        if self.log is not None:
            self.log.add_busy(rids, -(finish - np.maximum(starts, now)))
        self.ch_until.fill(-math.inf)
        self.alloc = None  # the moving flows' channels are booked from the recomputation on
        self.t_used = now
        pending = live[ahead]
        if not len(pending):
            return
        tasks, rids, starts = self.s_task[pending], self.s_rid[pending], self.s_start[pending]
        np.add.at(self.rec.route_bytes, rids, -self.size_bytes.take(tasks))
        if self.log is not None:
            self.log.add_bytes(rids, -self.size_bytes.take(tasks))
        self._release(pending)
        order = np.lexsort((tasks, starts))
        tasks, rids, starts = tasks[order], rids[order], starts[order]
        for a, b in runs(starts):
            self._push_start(float(starts[a]), tasks[a:b], rids[a:b])

    def _leave_shared(self, live: IntArray) -> None:
        """Back to the exclusive regime (no channel shared any more): close the channels' busy
        intervals now and book the rest of each moving flow per route."""
        self.exclusive = True
        self.alloc = None
        live = self._by_task(live)
        rids, finish = self.s_rid[live], self.s_finish[live]
        if self.log is not None:
            self.log.used(self.s_task[live], finish)
        np.add.at(self.rec.route_busy_s, rids, finish - self.kernel.now)
        if self.log is not None:
            self.log.add_busy(rids, finish - self.kernel.now)
        routes = self.routes
        width = routes.channels.shape[1]
        pc = routes.channels[rids].ravel()
        f_pairs = finish.repeat(width)
        if routes.padded:
            real = pc < routes.num_channels
            pc, f_pairs = pc[real], f_pairs[real]
        self.ch_until[pc] = f_pairs

    def _recompute(self) -> None:
        """Shared regime: max-min fair rates of the moving flows and their finish times, channel
        busy time up to now; back to the exclusive regime when no channel is shared any more."""
        self.dirty = False
        now = self.kernel.now
        self._sync()
        if self.alloc is not None:
            self.alloc.busy_s += now - self.t_used
            if self.log is not None:
                self.log.add_alloc(self.alloc, now - self.t_used)
        self.t_used = now
        n = self.n_live  # the moving flows are slots 0 .. n - 1: slices, not gathers
        if not n:
            self.next_finish = math.inf
            self.alloc = None
            if self.sharing:
                self._leave_shared(EMPTY_I)
            return
        rids = self.s_rid[:n]
        alloc = self.cache.get(rids)
        rate = self.s_rate[:n]
        if self.rate_cap_Bps is None:
            alloc.route_rate_Bps.take(rids, out=rate)
        else:
            rate[:] = np.minimum(alloc.route_rate_Bps[rids], self.rate_cap_Bps.take(self.s_task[:n]))
        finish = self.s_finish[:n]
        np.divide(self.s_rem[:n], rate, finish)  # finish = now + left, in place (addition commutes)
        if self.log is None:
            finish += now
        else:
            left_s = finish.copy()
            finish += now
            self.log.finishes(self.s_task[:n].copy(), now, left_s, finish.copy(), every=True)
        self.next_finish = smallest(self.s_finish)
        if alloc.shared or not self.sharing:
            self.alloc = alloc
        else:
            self._leave_shared(np.arange(n))

    def _sync(self) -> None:
        """Bring remaining bytes up to now before rates change (free slots have rate 0)."""
        now = self.kernel.now
        dt = now - self.t_sync
        if dt > 0 and len(self.s_rem):
            self.s_rem -= self.s_rate * dt
        self.t_sync = now

    # -- slots -------------------------------------------------------------------------------
    def _by_task(self, slots: IntArray) -> IntArray:
        """``slots`` in the order of their flows' task ids: what is booked per flow is summed in an
        order that does not depend on which slots the flows happened to take (so a window replayed
        from another slot layout adds the same bits: :mod:`parplan.engine.replay`)."""
        if len(slots) < 2:
            return slots
        ordered: IntArray = slots[self.s_task[slots].argsort(kind="stable")]
        return ordered

    def reset_slots(self, length: int) -> None:
        """Every slot free, ``length`` of them (a replayed window's end)."""
        self.s_task = np.full(length, -1, dtype=np.int64)
        self.s_rid = np.zeros(length, dtype=np.int64)
        self.s_start = np.zeros(length)
        self.s_rem = np.zeros(length)
        self.s_rate = np.zeros(length)
        self.s_finish = np.full(length, math.inf)
        self.n_live = 0

    def _release(self, slots: IntArray) -> None:
        """Free ``slots``; the flows in the last slots move into the holes, so that the moving
        flows stay slots 0 .. n_live - 1 (where a flow sits changes no figure: see :meth:`_by_task`)."""
        old = self.n_live
        new = self.n_live = old - len(slots)
        columns = (self.s_task, self.s_rid, self.s_start, self.s_rem, self.s_rate, self.s_finish)
        if len(slots) == 1:  # scalar moves beat the masks and scatters below
            i = int(slots[0])
            if i != new:
                for column in columns:
                    column[i] = column[new]
            self.s_task[new] = -1
            self.s_rate[new] = 0.0
            self.s_rem[new] = 0.0
            self.s_finish[new] = math.inf
            return
        if len(slots):
            gone = np.zeros(old, dtype=bool)
            gone[slots] = True
            holes = gone[:new].nonzero()[0]
            movers = new + (~gone[new:]).nonzero()[0]
            for column in columns:
                column[holes] = column[movers]
        self.s_task[new:old] = -1
        self.s_rate[new:old] = 0.0
        self.s_rem[new:old] = 0.0
        self.s_finish[new:old] = math.inf

    def _take_slots(self, k: int) -> slice:
        """``k`` free flow slots, the next ones after the moving flows' (growing the slot arrays
        when needed), as the slice of them."""
        old = len(self.s_task)
        if self.n_live + k > old:
            new = max(2 * old, old + k, 64)
            grow = new - old
            self.s_task = np.concatenate([self.s_task, np.full(grow, -1, dtype=np.int64)])
            self.s_rid = np.concatenate([self.s_rid, np.zeros(grow, dtype=np.int64)])
            self.s_start = np.concatenate([self.s_start, np.zeros(grow)])
            self.s_rem = np.concatenate([self.s_rem, np.zeros(grow)])
            self.s_rate = np.concatenate([self.s_rate, np.zeros(grow)])
            self.s_finish = np.concatenate([self.s_finish, np.full(grow, math.inf)])
        slots = slice(self.n_live, self.n_live + k)
        self.n_live += k
        return slots
