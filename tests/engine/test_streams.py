"""Per-device streams on their own: FIFO booking against a plain loop, rates, priorities, reductions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.engine.kernel import DONE, Kernel
from parplan.engine.streams import ComputeStreams, ReductionStreams, device_rates, fifo_book
from parplan.engine.tasks import TaskView
from parplan.errors import SimulationError
from parplan.taskgraph import TaskGraphBuilder
from tests.engine.nets import PEAK, switch_network


@settings(max_examples=60, deadline=None)
@given(
    devs=st.lists(st.integers(0, 3), min_size=1, max_size=20),
    data=st.data(),
    now=st.floats(0, 5),
)
def test_fifo_booking_is_a_plain_queue_per_device(devs: list[int], data: st.DataObject, now: float) -> None:
    durs = data.draw(st.lists(st.floats(0, 2), min_size=len(devs), max_size=len(devs)))
    free0 = data.draw(st.lists(st.floats(0, 10), min_size=4, max_size=4))
    tasks = np.arange(len(devs), dtype=np.int64) * 3  # in task order
    free, busy = np.array(free0), np.zeros(4)
    starts, ends = fifo_book(free, busy, tasks, np.array(devs, dtype=np.int64), np.array(durs), now)
    plain_free, plain_busy = [max(f, now) for f in free0], [0.0] * 4
    for i, (d, dur) in enumerate(zip(devs, durs, strict=True)):
        assert starts[i] == pytest.approx(plain_free[d], rel=1e-12, abs=1e-12)
        assert ends[i] == pytest.approx(plain_free[d] + dur, rel=1e-12, abs=1e-12)
        plain_free[d] += dur
        plain_busy[d] += dur
    for d in set(devs):
        assert free[d] == pytest.approx(plain_free[d], rel=1e-12, abs=1e-12)
    assert busy.tolist() == pytest.approx(plain_busy, rel=1e-12, abs=1e-12)


def test_device_rates_default_gamma_from_memory_bandwidth() -> None:
    net = switch_network(2, memory_bandwidth_Bps=2e12)
    tasks = TaskView.of(TaskGraphBuilder(["h1", "h0"]).build())
    flop_rate, gamma = device_rates(tasks, net, None)
    assert flop_rate.tolist() == [PEAK * 0.5] * 2
    assert gamma.tolist() == [3.0 / 2e12] * 2
    assert device_rates(tasks, switch_network(2), None)[1].tolist() == [0.0, 0.0]
    assert device_rates(tasks, net, 1e-9)[1].tolist() == [1e-9, 1e-9]
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(SimulationError, match="gamma_s_per_byte"):
            device_rates(tasks, net, bad)


def _run_compute(builder: TaskGraphBuilder, flop_rate: float = PEAK) -> tuple[list[float], list[float]]:
    """Submit every task of the graph at 0 on ComputeStreams; returns (start, end) per task."""
    tasks = TaskView.of(builder.build())
    kernel = Kernel()
    start = np.full(tasks.num_tasks, np.nan)
    end = np.full(tasks.num_tasks, np.nan)
    streams = ComputeStreams(kernel, tasks, np.full(len(tasks.devices), flop_rate), start)

    def done(ids: np.ndarray) -> None:
        end[ids] = kernel.now

    def compute_done(task: int) -> None:
        d = streams.idle(task)
        end[task] = kernel.now
        streams.start_next(d)

    streams.submit(np.arange(tasks.num_tasks, dtype=np.int64))
    kernel.run([done, done, done, compute_done], _Idle())
    return start.tolist(), end.tolist()


class _Idle:
    def next_instant(self) -> float:
        return math.inf

    def fire(self) -> None:
        raise AssertionError


def test_compute_runs_fifo_and_converts_flops() -> None:
    b = TaskGraphBuilder()
    b.compute("a", 1.0)
    b.compute_flops("a", 2 * PEAK)
    b.compute("b", 0.5)
    start, end = _run_compute(b)
    assert start == [0.0, 1.0, 0.0] and end == [1.0, 3.0, 0.5]
    b = TaskGraphBuilder()
    b.compute_flops("a", 1.0)
    with pytest.raises(SimulationError, match="no compute rate"):
        _run_compute(b, flop_rate=0.0)


def test_priority_mode_picks_the_lowest_priority_among_ready_tasks() -> None:
    b = TaskGraphBuilder()
    b.compute("a", 1.0, priority=5)
    b.compute("a", 1.0, priority=3)
    b.compute("a", 1.0, priority=1)
    b.compute("b", 1.0, priority=9)
    start, end = _run_compute(b)  # all ready at 0
    assert start == [2.0, 1.0, 0.0, 0.0]
    assert end == [3.0, 2.0, 1.0, 1.0]


def test_reductions_queue_on_the_receiver() -> None:
    b = TaskGraphBuilder(["a", "b", "c"])
    b.transfer("a", "c", 100.0, reduce=True)
    b.transfer("b", "c", 300.0, reduce=True)
    b.transfer("c", "a", 100.0, reduce=True)
    tasks = TaskView.of(b.build())
    kernel = Kernel()
    streams = ReductionStreams(kernel, tasks, np.array([1e-3, 1e-3, 1e-2]))
    streams.submit(np.array([0, 1, 2], dtype=np.int64))
    events = sorted((t, kind, np.asarray(p).tolist()) for t, kind, _, p in kernel.heap)
    # c reduces a's 100 bytes, then b's 300, at 10 ms per byte; a reduces c's 100 at 1 ms per byte.
    assert events == [
        (pytest.approx(0.1), DONE, [2]),
        (pytest.approx(1.0), DONE, [0]),
        (pytest.approx(4.0), DONE, [1]),
    ]
    assert streams.busy_s.tolist() == pytest.approx([0.1, 0.0, 4.0])
