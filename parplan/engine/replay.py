"""Exact replay of repeated collectives: a block of transfers simulated once, replayed bit for bit.

A data-parallel step all-reduces its buckets one after another, each on an otherwise idle network
while backward compute (which does not touch the network) goes on. Buckets of one size run the
same schedule on the same devices, so their transfers do the same thing again, shifted in time.
This module simulates the first such *block* (a run of consecutive transfer tasks: one lowered
collective) in full while it records what the run did to the engine's state, and lays the
recording down again at the start of each later block with the same content, instead of
simulating it: the events of a bucket's all-reduce become one per exit.

**Why it is exact, not approximate.** Inside a window the engine only adds relative quantities to
absolute times (``now + latency``, ``now + bytes / rate``), subtracts absolute times from one
another (``now - t_sync``), and compares. When both windows lie in one binade ``[2^e, 2^(e+1))``
(one grid of spacing ``u``) and their starts differ by an even multiple of ``u``, every such
operation gives the recorded result shifted by exactly that difference (differences are exact by
Sterbenz's lemma, sums round to the same grid point, and ties to even fall alike). An odd number
of ulps apart, sums still round alike unless the exact sum was a tie (halfway between two grid
points, where round-half-even goes to the other neighbour): a recording notes every absolute
time it computes (:meth:`~parplan.engine.blocks.FlowLog.sums`, by TwoSum's exact error) and may
be laid down at an odd shift when none was a tie and all stay in the binade there. The one
operation that is not shift-invariant is the kernel's tie horizon (``t + t x 1e-12``): the
recording keeps its margins (how far a fired flow's finish was above ``now``, how far any
unfired one was), and a window is replayed only where both stay on their side of the horizon at
the new time. Accumulators (bytes and busy seconds per route, per allocation, per reduction
stream) get the recorded increments in the recorded order, so their sums have the same bits.

**The checks** (:meth:`Replays.issue`): the block's entry transfers are issued in one batch and
are all it has with outside dependencies (so the block depends on nothing outside that is still
to come); the network is idle and in the state it was in when the recording started (regime,
flow slots, reduction streams free, every allocation the recording used still cached); the
window's times satisfy the binade, parity and horizon conditions above. While a replayed window
runs, anything from outside that would have met it in the full run raises
:class:`ReplayConflict`: a transfer issued, an event at the instant of one of the block's exits,
or an event within the tie horizon of the block's flows finishing; :func:`~parplan.engine.simulate.simulate`
then runs the whole graph again without replay. A recording is kept only if its own window was
clean in the same sense. ``PARPLAN_FULL_SIMULATION=1`` turns replay off (with the orbit quotient
of :mod:`~parplan.engine.symmetry`); ``PARPLAN_NO_REPLAY=1`` turns off replay alone.
"""

from __future__ import annotations

import math
import os
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from parplan.engine.arrays import EMPTY_I, FloatArray, IntArray, min_max
from parplan.engine.blocks import MIN_BLOCK_TRANSFERS, FlowLog, compact_log, exit_mask, find_blocks, is_entry
from parplan.engine.kernel import DONE, horizon
from parplan.errors import SimulationError
from parplan.taskgraph import TRANSFER

if TYPE_CHECKING:
    from parplan.engine.flows import Flows
    from parplan.engine.recorder import Recorder
    from parplan.engine.streams import ReductionStreams
    from parplan.engine.tasks import Dependencies, TaskView

FULL_SIMULATION_ENV = "PARPLAN_FULL_SIMULATION"
NO_REPLAY_ENV = "PARPLAN_NO_REPLAY"


class ReplayConflict(SimulationError):
    """Something from outside would have met the replayed window of block ``block``; the caller
    runs again with that block simulated. Never leaves :func:`~parplan.engine.simulate.simulate`."""

    def __init__(self, message: str, block: int) -> None:
        super().__init__(message)
        self.block = block


@dataclass
class _Recording:
    """A window being recorded."""

    block: int
    t0: float
    slots_in: bytes
    regime_in: tuple[bool, bool]
    flushes: int
    log: FlowLog
    exit_mask: npt.NDArray[np.bool_]
    lo: int = 0  # the block's tasks, as Python ints for the hooks' scalar checks
    hi: int = 0
    exits: list[tuple[float, IntArray]] = field(default_factory=list)
    steps: list[tuple[float, float]] = field(default_factory=list)
    done: int = 0


@dataclass
class _Memo:
    """A recorded window, relative to its start."""

    t0: float
    span_s: float
    slots_in: bytes
    regime: tuple[bool, bool]
    slots_out: int  # the number of flow slots at the end (every one free)
    start_rel: FloatArray
    arrive_rel: FloatArray
    end_rel: FloatArray
    log: FlowLog
    exits: list[tuple[float, IntArray]]  # the completions that release outside tasks, in order
    num_exit_tasks: int
    pre_succ: IntArray  # outside successors (relative) counted down at once: not their last dependency
    step_rel: FloatArray
    clock_rel: FloatArray
    reduce_devs: IntArray
    flushes: int  # the allocation cache's flushes when it was recorded
    tie_free: bool  # no absolute time of the window was a rounding tie: odd shifts replay too
    sum_max_rel: float  # the latest absolute time the window computed, relative to its start


class Replays:
    """Recording and replaying the repeated blocks of one run (see the module docstring)."""

    def __init__(
        self,
        tasks: TaskView,
        flows: Flows,
        rec: Recorder,
        deps: Dependencies,
        reduction: ReductionStreams,
        excluded: frozenset[int] = frozenset(),
    ) -> None:
        self.tasks = tasks
        self.flows = flows
        self.kernel = flows.kernel
        self.rec = rec
        self.deps = deps
        self.reduction = reduction
        self.lo, self.hi, self.keys, changes = find_blocks(tasks, deps)
        self.block_of = np.full(tasks.num_tasks, -1, dtype=np.int64)
        for i, (a, b) in enumerate(zip(self.lo.tolist(), self.hi.tolist(), strict=True)):
            self.block_of[a:b] = i
        self.seen = np.zeros(len(self.lo), dtype=bool)  # a block's first transfers were issued
        self.seen[sorted(excluded)] = True  # simulated in full: a replay of theirs met something
        self.seen[changes] = True
        self.memos: dict[bytes, list[_Memo]] = {}
        self.recording: _Recording | None = None
        self.guard_hi = -math.inf  # a replayed window runs until then
        self._guard: _Memo | None = None
        self._guard_blk = -1
        self._guard_t0 = 0.0
        self._exit_times: set[float] = set()
        self.num_replayed = 0

    @staticmethod
    def wanted(tasks: TaskView) -> bool:
        """Whether a run of ``tasks`` may replay at all (a cheap test before :func:`find_blocks`)."""
        if any(os.environ.get(name, "") not in ("", "0") for name in (FULL_SIMULATION_ENV, NO_REPLAY_ENV)):
            return False
        return int(np.count_nonzero(tasks.kind == TRANSFER)) >= 2 * MIN_BLOCK_TRANSFERS

    @property
    def active(self) -> bool:
        """Whether the graph has blocks worth recording."""
        return len(self.lo) > 0

    # -- the engine's hooks --------------------------------------------------------------------
    def issue(self, tasks: IntArray) -> bool:
        """Transfers ``tasks`` are issued now. Returns True when they were a block's entry and the
        block was replayed (the caller issues nothing); may start a recording; raises
        :class:`ReplayConflict` when they would meet a replayed window."""
        now = self.kernel.now
        if now <= self.guard_hi:
            raise ReplayConflict("a transfer issued while a replayed block runs", self._guard_blk)
        rec = self.recording
        if rec is not None:  # tasks come sorted: the first and last tell whether all are the block's
            if not (rec.lo <= int(tasks[0]) and int(tasks[-1]) < rec.hi):
                rec.log.clean = False  # another transfer meets the recorded window
            return False
        blk = int(self.block_of[int(tasks[0])])
        if blk < 0 or self.seen[blk]:
            return False
        self.seen[blk] = True
        if not is_entry(self.tasks, self.deps, int(self.lo[blk]), int(self.hi[blk]), tasks):
            return False
        memo = self._match(blk, now)
        if memo is not None:
            self._replay(blk, memo, now)
            return True
        key = self.keys[blk]
        if len(self.memos.get(key, ())) < 4 and any(
            not self.seen[j] and self.keys[j] == key for j in range(blk + 1, len(self.keys))
        ):  # a later block may replay what is recorded now
            self._start(blk, now)
        return False

    def arrived(self, tasks: IntArray) -> None:
        """Transfers ``tasks`` arrive now: an outside arrival meets a replayed window (its
        reduction would queue behind the block's) or spoils a recorded one."""
        if self.kernel.now <= self.guard_hi:
            raise ReplayConflict("a transfer arrived while a replayed block runs", self._guard_blk)
        rec = self.recording
        if rec is None:
            return
        first, last = (int(tasks[0]),) * 2 if len(tasks) == 1 else min_max(tasks)
        if not (rec.lo <= first and last < rec.hi):
            rec.log.clean = False

    def completed(self, tasks: IntArray) -> None:
        """Recording: tasks end now (the exits among them are what the rest of the graph sees)."""
        rec = self.recording
        if rec is None:
            return
        lo, hi = rec.lo, rec.hi
        first, last = int(tasks[0]), int(tasks[-1])  # tasks come sorted
        if last < lo or first >= hi:
            return
        inside = tasks if lo <= first and last < hi else tasks[(tasks >= lo) & (tasks < hi)]
        rec.done += len(inside)
        exits = inside[rec.exit_mask[inside - lo]]
        if len(exits):
            rec.exits.append((self.kernel.now - rec.t0, exits - lo))

    def watch(self, t: float, t_clock: float) -> None:
        """Kernel step hook while recording: the step about to happen at ``t`` (the flows' clock
        at ``t_clock``); ends the recording once its block is done."""
        rec = self.recording
        assert rec is not None
        if rec.done == rec.hi - rec.lo:
            self._finish(rec)
            return
        fired = t_clock <= self.kernel.now_horizon  # horizon(t): the kernel has it
        if fired and t_clock != t:
            # The clock fires early, at a heap event's instant within its tie horizon: fine when
            # the event is the block's own (the margin is checked at the new time), not otherwise.
            if self._own_event(rec.block):
                rec.log.fired_max_s = max(rec.log.fired_max_s, t_clock - t)
            else:
                rec.log.clean = False
        elif not fired and t_clock < math.inf:
            rec.log.unfired_min_s = min(rec.log.unfired_min_s, t_clock - t)
        rec.steps.append((t - rec.t0, t_clock - rec.t0))

    def _own_event(self, blk: int) -> bool:
        """Whether the event on top of the heap concerns only the block's tasks."""
        payload = self.kernel.heap[0][3]
        tasks = payload[0] if isinstance(payload, tuple) else payload
        if not isinstance(tasks, np.ndarray) or not len(tasks):
            return False
        return bool(self.lo[blk] <= tasks.min() and tasks.max() < self.hi[blk])

    def guard(self, time: float) -> None:
        """Kernel push hook while a replayed window runs: an event from outside at ``time``."""
        memo = self._guard
        if memo is None or time > self.guard_hi:
            return
        if time in self._exit_times:
            raise ReplayConflict("an outside event at the instant of a replayed exit", self._guard_blk)
        t0 = self._guard_t0
        rel = time - t0
        i = bisect_left(memo.step_rel, rel)
        if i < len(memo.step_rel) and memo.step_rel[i] == rel:
            return
        if i < len(memo.clock_rel):
            gap = (t0 + memo.clock_rel[i]) - time
            if gap <= horizon(time) - time + 4.0 * math.ulp(time):
                raise ReplayConflict(
                    "an outside event within the tie horizon of a replayed flow", self._guard_blk
                )

    # -- recording -----------------------------------------------------------------------------
    def _start(self, blk: int, now: float) -> None:
        flows = self.flows
        lo, hi = int(self.lo[blk]), int(self.hi[blk])
        receivers = self.tasks.dst[lo:hi][self.tasks.reduce[lo:hi]]
        if not self._idle() or (len(receivers) and float(self.reduction.free[receivers].max()) > now):
            return  # the window would start behind other work: not one to lay down elsewhere
        log = FlowLog()
        self.recording = _Recording(
            blk, now, self._slot_state(), (flows.exclusive, flows.sharing), flows.cache.flushes, log,
            exit_mask(self.deps, int(self.lo[blk]), int(self.hi[blk])), int(self.lo[blk]), int(self.hi[blk]),
        )  # fmt: skip
        flows.log = log
        self.reduction.log = log
        self.kernel.watch = self.watch

    def _finish(self, rec: _Recording) -> None:
        """The recorded block is done and the network idle again: keep the window if it was clean."""
        flows = self.flows
        self.recording = None
        flows.log = None
        self.reduction.log = None
        self.kernel.watch = None
        end = self.kernel.now
        ok = (
            rec.log.clean
            and flows.cache.flushes == rec.flushes
            and self._idle()
            and (flows.exclusive, flows.sharing) == rec.regime_in
            and _same_binade(rec.t0, end)
        )
        if not ok:
            return
        lo, hi = int(self.lo[rec.block]), int(self.hi[rec.block])
        exits, num_exit_tasks, pre_succ = self._releases(rec)
        steps = np.array(rec.steps, dtype=np.float64).reshape(-1, 2)
        reduce_devs = self.tasks.dst[lo:hi][self.tasks.reduce[lo:hi]].astype(np.int64)
        memo = _Memo(
            t0=rec.t0,
            span_s=end - rec.t0,
            slots_in=rec.slots_in,
            regime=rec.regime_in,
            slots_out=len(flows.s_task),
            start_rel=self.rec.start_s[lo:hi] - rec.t0,
            arrive_rel=self.rec.arrive_s[lo:hi] - rec.t0,
            end_rel=self.rec.end_s[lo:hi] - rec.t0,
            log=rec.log,
            exits=exits,
            num_exit_tasks=num_exit_tasks,
            pre_succ=pre_succ,
            step_rel=steps[:, 0].copy(),
            clock_rel=steps[:, 1].copy(),
            reduce_devs=np.unique(reduce_devs),
            flushes=rec.flushes,
            tie_free=not rec.log.ties and _same_binade(rec.t0, max(rec.log.sum_max_s, end)),
            sum_max_rel=max(rec.log.sum_max_s, end) - rec.t0,
        )
        compact_log(memo.log)
        self.memos.setdefault(self.keys[rec.block], []).append(memo)

    def _releases(self, rec: _Recording) -> tuple[list[tuple[float, IntArray]], int, IntArray]:
        """Of the recorded completions of tasks with successors outside the block, those that
        were the last dependency of some outside task (they are replayed as events, in their
        calls, so outside tasks are released in the same batches), and the outside successors of
        the others (counted down when the window is laid down)."""
        lo = int(self.lo[rec.block])
        if not rec.exits:
            return [], 0, EMPTY_I
        rel_task = np.concatenate([t for _, t in rec.exits])
        task = rel_task + lo
        call = np.repeat(np.arange(len(rec.exits)), [len(t) for _, t in rec.exits])
        s_off = self.deps.succ_off
        first = s_off[task].astype(np.int64)
        counts = s_off[task + 1].astype(np.int64) - first
        pos = np.repeat(first - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))
        succ = self.deps.succ_idx[pos].astype(np.int64)
        owner, owner_call = np.repeat(task, counts), np.repeat(call, counts)
        out = (succ < lo) | (succ >= int(self.hi[rec.block]))
        succ, owner, owner_call = succ[out], owner[out], owner_call[out]
        last = np.zeros(int(succ.max()) + 1 if len(succ) else 0, dtype=np.int64)
        np.maximum.at(last, succ, owner_call)
        releases = np.zeros(int(self.hi[rec.block]) - lo, dtype=bool)
        releases[owner[owner_call == last[succ]] - lo] = True
        keep = releases[rel_task]
        kept_tasks = rel_task[keep]  # each call's releasing tasks in order, the calls one after another
        ends = np.bincount(call[keep], minlength=len(rec.exits)).cumsum().tolist()
        spans = zip(rec.exits, [0, *ends[:-1]], ends, strict=True)
        kept = [(rel, kept_tasks[a:b]) for (rel, _), a, b in spans if b > a]
        return kept, int(np.count_nonzero(releases)), succ[~releases[owner - lo]] - lo

    # -- replaying -----------------------------------------------------------------------------
    def _match(self, blk: int, now: float) -> _Memo | None:
        memos = self.memos.get(self.keys[blk])
        if not memos or not self._idle():
            return None
        regime = (self.flows.exclusive, self.flows.sharing)
        for memo in memos:
            if memo.regime == regime and self._fits(memo, now):
                return memo
        return None

    def _fits(self, memo: _Memo, t0: float) -> bool:
        """The binade, parity and horizon conditions, free reduction streams, cached allocations."""
        end = t0 + memo.span_s
        if not (_same_binade(t0, end) and math.frexp(t0)[1] == math.frexp(memo.t0)[1]):
            return False
        u = math.ulp(t0)
        if ((t0 - memo.t0) / u) % 2.0 != 0.0 and not (
            memo.tie_free and _same_binade(t0, t0 + memo.sum_max_rel)
        ):  # an odd shift: exact only where no sum was a tie and every sum stays in the binade
            return False
        taus = [horizon(t) - t for t in (t0, end, memo.t0, memo.t0 + memo.span_s)]
        slack = 4.0 * u
        if memo.log.fired_max_s > min(taus) - slack or memo.log.unfired_min_s <= max(taus) + slack:
            return False
        if len(memo.reduce_devs) and float(self.reduction.free[memo.reduce_devs].max()) > t0:
            return False
        if self.flows.cache.flushes != memo.flushes:  # the recording's allocations are gone
            return False
        pending = [e[0] for e in self.kernel.heap if e[0] <= end]
        self._arm(memo, t0)
        try:
            for time in pending:
                self.guard(time)
        except ReplayConflict:
            self._disarm()
            return False
        self._disarm()
        return True

    def _replay(self, blk: int, memo: _Memo, t0: float) -> None:
        """Lay ``memo`` down from ``t0``: task times, accumulators in order, the exits as events."""
        lo, hi = int(self.lo[blk]), int(self.hi[blk])
        rec = self.rec
        rec.start_s[lo:hi] = t0 + memo.start_rel
        rec.arrive_s[lo:hi] = t0 + memo.arrive_rel
        rec.end_s[lo:hi] = t0 + memo.end_rel
        log = memo.log
        for rids, values in log.route_bytes:
            np.add.at(rec.route_bytes, rids, values)
        for rids, values in log.route_busy:
            np.add.at(rec.route_busy_s, rids, values)
        for alloc, seconds in log.alloc_busy:
            alloc.busy_s += seconds
        for devs, durations in log.reduce_busy:
            np.add.at(self.reduction.busy_s, devs, durations)
        deps = self.deps
        deps.remaining[lo:hi] = 0  # never released again: exits' successors inside the block stay put
        deps.num_done += (hi - lo) - memo.num_exit_tasks
        if len(memo.pre_succ):
            np.subtract.at(deps.remaining, memo.pre_succ + lo, 1)
        for rel, exits in memo.exits:
            self.kernel.push(t0 + rel, DONE, exits + lo)
        self.flows.reset_slots(memo.slots_out)
        self._arm(memo, t0, blk)
        self.num_replayed += 1

    def _arm(self, memo: _Memo, t0: float, blk: int = -1) -> None:
        self._guard = memo
        self._guard_blk = blk
        self._guard_t0 = t0
        self.guard_hi = t0 + memo.span_s
        self._exit_times = {t0 + rel for rel, _ in memo.exits}
        self.kernel.guard_until = self.guard_hi

    def _disarm(self) -> None:
        self._guard = None
        self.guard_hi = -math.inf
        self.kernel.guard_until = -math.inf

    # -- helpers -------------------------------------------------------------------------------
    def _idle(self) -> bool:
        """No flow in the network nor waiting to start, nothing pending."""
        f = self.flows
        return f.n_live == 0 and not f.dirty and f.pending_starts == 0 and f.alloc is None

    def _slot_state(self) -> bytes:
        f = self.flows
        return len(f.s_task).to_bytes(8, "little")  # idle: every slot free, the layout is the length


def _same_binade(a: float, b: float) -> bool:
    """Both positive, normal and in one ``[2^e, 2^(e+1))``: one grid of floats covers them."""
    return a > 1e-300 and math.isfinite(b) and math.frexp(a)[1] == math.frexp(b)[1]
