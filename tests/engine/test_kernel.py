"""The event kernel on its own: ordering at equal times, grouped pushes, the clock and its tie rule."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.engine.kernel import (
    ARRIVE,
    COMPUTE_DONE,
    DONE,
    START,
    TIE_ABS,
    TIE_REL,
    Handler,
    Kernel,
    horizon,
)

Log = list[tuple[object, float, object]]  # (kind or "clock", time, payload or count)


class ListClock:
    """A clock firing at given instants, recording when it fired."""

    def __init__(self, instants: list[float], kernel: Kernel, log: Log) -> None:
        self.instants = sorted(instants)
        self.kernel = kernel
        self.log = log

    def next_instant(self) -> float:
        return self.instants[0] if self.instants else math.inf

    def fire(self) -> None:
        due = [t for t in self.instants if t <= horizon(self.kernel.now)]
        self.instants = self.instants[len(due) :]
        self.log.append(("clock", self.kernel.now, len(due)))


def _recording(kernel: Kernel, log: Log) -> list[Handler]:
    """One handler per kind, logging (kind, time, payload)."""

    def handler(kind: int) -> Handler:
        return lambda payload: log.append((kind, kernel.now, payload))

    return [handler(k) for k in (DONE, ARRIVE, START, COMPUTE_DONE)]


def test_equal_times_come_out_by_kind_then_in_push_order() -> None:
    k = Kernel()
    log: Log = []
    k.push(1.0, START, "s1")
    k.push(1.0, DONE, "d1")
    k.push(0.5, COMPUTE_DONE, "c")
    k.push(1.0, ARRIVE, "a1")
    k.push(1.0, DONE, "d2")
    k.run(_recording(k, log), ListClock([], k, log))
    assert [p for _, _, p in log] == ["c", "d1", "d2", "a1", "s1"]
    assert k.now == 1.0
    assert k.num_events == 2  # two distinct instants


def test_handlers_may_push_events_at_the_current_instant() -> None:
    k = Kernel()
    log: Log = []
    handlers = _recording(k, log)

    def done(payload: object) -> None:
        handlers[DONE](payload)
        if payload == "first":
            k.push(k.now, ARRIVE, "pushed now")
            k.push(k.now + 1.0, DONE, "later")

    k.push(2.0, DONE, "first")
    k.run([done, *handlers[1:]], ListClock([], k, log))
    assert log == [(DONE, 2.0, "first"), (ARRIVE, 2.0, "pushed now"), (DONE, 3.0, "later")]
    assert k.num_events == 2


def test_push_grouped_makes_one_event_per_time_with_ids_in_order() -> None:
    k = Kernel()
    k.push_grouped(np.array([2.0, 1.0, 2.0, 1.0, 3.0]), np.array([9, 7, 4, 8, 1]), DONE)
    events = sorted(k.heap)
    assert [(t, kind) for t, kind, _, _ in events] == [(1.0, DONE), (2.0, DONE), (3.0, DONE)]
    assert [np.asarray(p).tolist() for _, _, _, p in events] == [[7, 8], [4, 9], [1]]
    one = Kernel()
    one.push_grouped(np.array([5.0, 5.0]), np.array([3, 2]), ARRIVE)
    assert len(one.heap) == 1 and one.heap[0][0] == 5.0


def test_the_clock_fires_first_and_ties_within_the_horizon_are_one_instant() -> None:
    k = Kernel()
    log: Log = []
    k.push(1.0, DONE, "d")
    near = 1.0 * (1 + TIE_REL / 2)  # within the horizon of 1.0: due at 1.0
    far = 1.0 * (1 + 10 * TIE_REL)  # beyond it: an instant of its own
    k.run(_recording(k, log), ListClock([near, 1.0, far], k, log))
    assert log == [("clock", 1.0, 2), (DONE, 1.0, "d"), ("clock", far, 1)]
    assert k.num_events == 2


def test_horizon_is_relative_with_an_absolute_floor() -> None:
    assert horizon(0.0) == TIE_ABS
    assert horizon(1e3) == 1e3 + 1e3 * TIE_REL


@settings(max_examples=50, deadline=None)
@given(
    events=st.lists(
        st.tuples(st.integers(0, 5).map(float), st.sampled_from([DONE, ARRIVE, START, COMPUTE_DONE])),
        max_size=30,
    )
)
def test_events_come_out_sorted_by_time_kind_and_sequence(events: list[tuple[float, int]]) -> None:
    k = Kernel()
    log: Log = []
    for seq, (t, kind) in enumerate(events):
        k.push(t, kind, seq)
    k.run(_recording(k, log), ListClock([], k, log))
    expected = sorted((t, kind, seq) for seq, (t, kind) in enumerate(events))
    assert [(t, kind, seq) for kind, t, seq in log] == expected
    assert k.num_events == len({t for t, _ in events})
