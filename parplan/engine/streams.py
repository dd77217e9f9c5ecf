"""Per-device serial streams: the compute stream, the communication stream (compute tasks a plan
has put there: collectives it timed beforehand) and the reduction stream of every device.

A FIFO stream's start times are known when tasks arrive (every earlier arrival is already
booked), so a batch is booked at once by a segmented cumulative sum (:func:`fifo_book`) and its
ends go on the event heap. In priority mode (compute tasks with different priorities) a compute
stream instead picks the lowest priority among its ready tasks whenever it becomes idle.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

import numpy as np

from parplan.engine.arrays import FloatArray, IdArray, IntArray, sorted_copy
from parplan.engine.kernel import COMPUTE_DONE, DONE, Kernel
from parplan.engine.tasks import TaskView
from parplan.errors import SimulationError
from parplan.topology.network import Network

if TYPE_CHECKING:
    from parplan.engine.blocks import FlowLog


def device_rates(
    tasks: TaskView, network: Network, gamma_s_per_byte: float | None
) -> tuple[FloatArray, FloatArray]:
    """Per graph device: effective FLOP/s, and reduction cost in seconds per byte (``gamma``).

    ``gamma`` is ``gamma_s_per_byte`` when given, else ``3 / memory_bandwidth_Bps`` (read two
    operands, write one) when the device has a memory bandwidth, else 0; always 0 on a reducing
    switch (NVLS, SHARP: it reduces in flight, at line rate).
    """
    num_dev = len(tasks.devices)
    flop_rate = np.empty(num_dev, dtype=np.float64)
    gamma = np.empty(num_dev, dtype=np.float64)
    for i, name in enumerate(tasks.devices):
        info = network.endpoint(name)
        flop_rate[i] = info.effective_flop_per_s
        if info.switch:
            gamma[i] = 0.0
        elif gamma_s_per_byte is not None:
            gamma[i] = gamma_s_per_byte
        elif info.memory_bandwidth_Bps:
            gamma[i] = 3.0 / float(info.memory_bandwidth_Bps)
        else:
            gamma[i] = 0.0
    if gamma_s_per_byte is not None and not (math.isfinite(gamma_s_per_byte) and gamma_s_per_byte >= 0):
        raise SimulationError(f"gamma_s_per_byte must be finite and >= 0, got {gamma_s_per_byte}")
    return flop_rate, gamma


def fifo_book_one(
    free: FloatArray, busy: FloatArray, d: int, dur_s: float, now: float, log: FlowLog | None = None
) -> tuple[float, float]:
    """:func:`fifo_book` of one task on stream ``d`` in Python floats (the same IEEE operations):
    its start and end.

    >>> free, busy = np.array([2.0]), np.zeros(1)
    >>> fifo_book_one(free, busy, 0, 1.5, 1.0), free.tolist(), busy.tolist()
    ((2.0, 3.5), [3.5], [1.5])
    """
    s = max(now, free.item(d))
    e = s + dur_s
    if log is not None:
        log.sums(s, dur_s, e)
    free[d] = e
    busy[d] += dur_s
    return s, e


def fifo_book(
    free: FloatArray,
    busy: FloatArray,
    tasks: IntArray,
    devs: IdArray,
    durs: FloatArray,
    now: float,
    log: FlowLog | None = None,
) -> tuple[FloatArray, FloatArray]:
    """FIFO-schedule ``tasks`` (arriving ``now``, in task order) on per-device serial streams.

    ``free[d]`` is when device ``d``'s stream is next free and ``busy[d]`` its busy seconds; both
    are updated. Returns start and end times aligned with ``tasks``; ties go by task id. A
    recorded window's ``log`` notes the absolute times it computes (:meth:`FlowLog.sums`).

    >>> free, busy = np.zeros(2), np.zeros(2)
    >>> s, e = fifo_book(free, busy, np.array([0, 1, 2]), np.array([0, 0, 1]), np.array([1.0, 2.0, 4.0]), 0.0)
    >>> s.tolist(), e.tolist(), free.tolist()
    ([0.0, 1.0, 0.0], [1.0, 3.0, 4.0], [3.0, 4.0])
    """
    if len(tasks) == 1:
        s, e = fifo_book_one(free, busy, int(devs[0]), float(durs[0]), now, log)
        return np.array([s]), np.array([e])
    np.add.at(busy, devs, durs)
    d_sorted = sorted_copy(devs)
    if not np.count_nonzero(d_sorted[1:] == d_sorted[:-1]):  # one task per device: no queueing among them
        s_arr = np.maximum(free[devs], now)
        e_arr = s_arr + durs
        if log is not None:
            log.sums(s_arr, durs, e_arr)
        free[devs] = e_arr
        return s_arr, e_arr
    order = np.lexsort((tasks, devs))  # FIFO within a device: ties by task id
    d_sorted = devs[order]
    dur_sorted = durs[order]
    first = np.empty(len(order), dtype=bool)
    first[0] = True
    np.not_equal(d_sorted[1:], d_sorted[:-1], out=first[1:])
    seg = first.cumsum() - 1
    csum = dur_sorted.cumsum()
    seg_base = (csum - dur_sorted)[first]
    base = np.maximum(free[d_sorted], now)
    queued = base + (csum - dur_sorted)
    s_sorted = queued - seg_base[seg]
    e_sorted = s_sorted + dur_sorted
    if log is not None:
        log.sums(base, csum - dur_sorted, queued)
        log.sums(queued, -seg_base[seg], s_sorted)
        log.sums(s_sorted, dur_sorted, e_sorted)
    last = np.append(first[1:], True)
    free[d_sorted[last]] = e_sorted[last]
    s_arr = np.empty(len(order))
    e_arr = np.empty(len(order))
    s_arr[order] = s_sorted
    e_arr[order] = e_sorted
    return s_arr, e_arr


class ComputeStreams:
    """Every device's compute stream (and communication stream, when the graph uses one): FIFO by
    readiness, or by priority in priority mode. Streams are numbered ``device + stream x devices``
    (:meth:`TaskView.stream_of`); :attr:`busy_s` is the compute streams' busy time,
    :attr:`comm_busy_s` the communication streams'.

    Started tasks get their start time in ``start_s``; their ends go on the kernel's heap (as DONE
    events, or one COMPUTE_DONE per task in priority mode, whose handler calls :meth:`idle`, then
    completes the task, then calls :meth:`start_next`).
    """

    def __init__(
        self, kernel: Kernel, tasks: TaskView, flop_rate_per_s: FloatArray, start_s: FloatArray
    ) -> None:
        num_dev = len(tasks.devices)
        num = num_dev * tasks.num_streams
        self.num_devices = num_dev
        self.kernel = kernel
        self.tasks = tasks
        self.flop_rate_per_s = flop_rate_per_s
        self.start_s = start_s
        self.free = np.zeros(num)
        self.stream_busy_s = np.zeros(num)
        self.priority_mode = tasks.priority_mode
        self.queue: list[list[tuple[int, int]]] = [[] for _ in range(num)]
        self.running = np.zeros(num, dtype=bool)

    @property
    def busy_s(self) -> FloatArray:
        """Busy seconds of every device's compute stream."""
        return self.stream_busy_s[: self.num_devices]

    @property
    def comm_busy_s(self) -> FloatArray:
        """Busy seconds of every device's communication stream (zeros when the graph has none)."""
        if len(self.stream_busy_s) == self.num_devices:
            return np.zeros(self.num_devices)
        return self.stream_busy_s[self.num_devices :]

    def durations(self, tasks: IntArray) -> FloatArray:
        """Seconds of each compute task (FLOPs over the device's effective rate where not given)."""
        secs = self.tasks.seconds[tasks]
        missing = np.isnan(secs)
        if missing.any():
            devs = self.tasks.device[tasks[missing]]
            rate = self.flop_rate_per_s[devs]
            if np.any(rate <= 0):
                raise SimulationError("a compute task is given in FLOPs on a device with no compute rate")
            secs = secs.copy()
            secs[missing] = self.tasks.flops[tasks[missing]] / rate
        return secs

    def submit(self, tasks: IntArray) -> None:
        """``tasks`` (sorted by id) are ready now."""
        if self.priority_mode:
            self._submit_priority(tasks)
            return
        devs = self.tasks.stream_of(tasks)
        durs = self.durations(tasks)
        starts, ends = fifo_book(self.free, self.stream_busy_s, tasks, devs, durs, self.kernel.now)
        self.start_s[tasks] = starts
        self.kernel.push_grouped(ends, tasks, DONE)

    def _submit_priority(self, tasks: IntArray) -> None:
        prio = self.tasks.priority[tasks].tolist()
        devs = self.tasks.stream_of(tasks).tolist()
        for task, p, d in zip(tasks.tolist(), prio, devs, strict=True):
            heapq.heappush(self.queue[d], (p, task))
        for d in sorted(set(devs)):
            self.start_next(d)

    def start_next(self, d: int) -> None:
        """Priority mode: stream ``d``, if idle, starts its lowest-priority ready task."""
        if self.running[d] or not self.queue[d]:
            return
        _, task = heapq.heappop(self.queue[d])
        dur = float(self.durations(np.array([task], dtype=np.int64))[0])
        self.running[d] = True
        now = self.kernel.now
        self.start_s[task] = now
        self.stream_busy_s[d] += dur
        self.kernel.push(now + dur, COMPUTE_DONE, task)

    def idle(self, task: int) -> int:
        """Priority mode: ``task`` has ended; its stream is idle. Returns the stream."""
        d = int(self.tasks.stream_of(np.array([task], dtype=np.int64))[0])
        self.running[d] = False
        return d


class ReductionStreams:
    """Every device's reduction stream: received bytes cost ``gamma x bytes`` each, FIFO.

    ``receiver[d]`` (None: ``d``) is the stream that reduces what arrives at device ``d``: in a
    symmetric run, ``d``'s representative (:mod:`parplan.engine.symmetry`).
    """

    def __init__(
        self, kernel: Kernel, tasks: TaskView, gamma_s_per_byte: FloatArray, receiver: IntArray | None = None
    ) -> None:
        self.kernel = kernel
        self.tasks = tasks
        self.gamma_s_per_byte = gamma_s_per_byte
        self.receiver = receiver
        self.free = np.zeros(len(tasks.devices))
        self.busy_s = np.zeros(len(tasks.devices))
        self.log: FlowLog | None = None  # a recorded window's log (parplan.engine.replay)

    def submit(self, tasks: IntArray) -> None:
        """Reducing transfers ``tasks`` (sorted by id) have arrived now; they end when reduced."""
        if len(tasks) == 1:  # one arrival (the usual batch of a shared run): scalar reads
            task = tasks.item(0)
            dev = self.tasks.dst.item(task)
            if self.receiver is not None:
                dev = self.receiver.item(dev)
            dur = self.gamma_s_per_byte.item(dev) * self.tasks.size_bytes.item(task)
            if self.log is not None:
                self.log.add_reduce(np.array([dev]), np.array([dur]))
            _, end = fifo_book_one(self.free, self.busy_s, dev, dur, self.kernel.now, self.log)
            self.kernel.push(end, DONE, tasks)
            return
        devs = self.tasks.dst[tasks] if self.receiver is None else self.receiver[self.tasks.dst[tasks]]
        durs = self.gamma_s_per_byte[devs] * self.tasks.size_bytes[tasks]
        if self.log is not None:
            self.log.add_reduce(devs, durs)
        _, ends = fifo_book(self.free, self.busy_s, tasks, devs, durs, self.kernel.now, self.log)
        self.kernel.push_grouped(ends, tasks, DONE)
