"""The event kernel: a heap of timed events, the current time, and the engine's tie rules.

An event is ``(time, kind, sequence, payload)``. At equal times events come out by kind (smaller
first, see the kinds below), then in the order they were pushed (``sequence``), so identical inputs
give identical runs (SimPy's ``core.py`` orders its heap the same way). Payloads are opaque to the
kernel: each kind has a handler, given to :meth:`Kernel.run`.

Besides the heap, a run follows one :class:`Clock` whose next instant is not known in advance and
may move: the flows on the network, whose finish times change whenever their rates do. At each
step the kernel asks the clock for its next instant, advances to the earlier of it and the heap's
top, lets the clock fire first when it is due, then hands every heap event due by then to its
handler. Instants within a relative ``TIE_REL`` of each other are one instant for the clock
(:func:`horizon`): flows that finish that close together finish in one batch.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from parplan.engine.arrays import FloatArray, IntArray, min_max, runs

# Event kinds of the engine; at equal times they come out in this order.
DONE = 0  # payload: task ids that end now
ARRIVE = 1  # payload: transfer task ids whose last byte arrives now
START = 2  # payload: (task ids, route ids) whose latency has elapsed: their flows start
COMPUTE_DONE = 3  # priority mode only; payload: one compute task id

# Clock instants within this relative distance (or absolute, near zero) of now are due now.
TIE_REL = 1e-12
TIE_ABS = 1e-18

Handler = Callable[[Any], None]


def horizon(t: float) -> float:
    """The latest instant that counts as ``t`` for the clock (one batch of finishing flows).

    >>> horizon(1.0) - 1.0 < 1e-11
    True
    """
    return t + max(t * TIE_REL, TIE_ABS)


class Clock(Protocol):
    """Instants outside the heap, which may move until they are due (flows' finish times)."""

    def next_instant(self) -> float:
        """The next instant (inf when idle), after settling what changed at the current time."""
        ...

    def fire(self) -> None:
        """Handle what is due at the kernel's current time (within :func:`horizon` of it)."""
        ...


class Kernel:
    """The event heap and the current time of one run.

    >>> k = Kernel()
    >>> k.push(2.0, DONE, "b"); k.push(1.0, ARRIVE, "a"); k.push(2.0, DONE, "c")
    >>> seen = []
    >>> k.run([seen.append, seen.append], _Idle())
    >>> seen, k.now, k.num_events
    (['a', 'b', 'c'], 2.0, 2)
    """

    def __init__(self) -> None:
        self.now = 0.0
        self.now_horizon = horizon(0.0)  # horizon(now), set with each step's instant
        self.heap: list[tuple[float, int, int, object]] = []
        self.seq = 0
        self.num_events = 0  # distinct instants the run stopped at
        # Replay hooks (parplan.engine.replay): events pushed at or before ``guard_until`` go to
        # ``guard`` first; ``watch`` sees each step's instant and the clock's before it happens.
        self.guard_until = -math.inf
        self.guard: Callable[[float], None] | None = None
        self.watch: Callable[[float, float], None] | None = None

    def push(self, time: float, kind: int, payload: object) -> None:
        """Schedule ``payload`` for its ``kind``'s handler at ``time``."""
        if time <= self.guard_until and self.guard is not None:
            self.guard(time)
        heapq.heappush(self.heap, (time, kind, self.seq, payload))
        self.seq += 1

    def push_grouped(self, times: FloatArray, ids: IntArray, kind: int) -> None:
        """One event per distinct time in ``times``, each holding its ``ids`` in increasing order."""
        if len(times) == 1:
            self.push(float(times[0]), kind, ids)
            return
        lo, hi = min_max(times)
        if lo == hi:
            self.push(float(times[0]), kind, ids)
            return
        order = np.lexsort((ids, times))
        t_sorted = times[order]
        for a, b in runs(t_sorted):
            self.push(float(t_sorted[a]), kind, ids[order[a:b]])

    def run(self, handlers: Sequence[Handler], clock: Clock) -> None:
        """Advance instant by instant until neither the heap nor the clock has anything left."""
        heap = self.heap
        next_instant, fire, pop = clock.next_instant, clock.fire, heapq.heappop
        while True:
            t_clock = next_instant()
            t = heap[0][0] if heap and heap[0][0] < t_clock else t_clock
            self.now_horizon = now_horizon = t + max(t * TIE_REL, TIE_ABS)  # horizon(t), inlined
            if self.watch is not None:
                self.watch(t, t_clock)
            if t == math.inf:
                return
            self.now = t
            self.num_events += 1
            if t_clock <= now_horizon:
                fire()
            while heap and heap[0][0] <= t:
                _, kind, _, payload = pop(heap)
                handlers[kind](payload)


class _Idle:
    """A clock that never fires (for the doctest)."""

    def next_instant(self) -> float:
        return math.inf

    def fire(self) -> None:  # pragma: no cover - never due
        raise AssertionError("an idle clock never fires")
