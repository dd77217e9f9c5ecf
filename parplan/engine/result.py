"""What a simulation returns: the timeline of every task and per-device and per-channel figures.

A :class:`SimResult` is plain numpy arrays indexed like the task graph (tasks) and the network
(channels), so a 33-million-task collective costs a few arrays, not a Python object per task.
Collectives also get :class:`CollectiveStats` with the algorithm and bus bandwidth as nccl-tests
defines them (``algbw = n / t``, ``busbw = algbw x 2(p-1)/p``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def algorithm_bandwidth(size_bytes: float, time_s: float) -> float:
    """nccl-tests' algbw: the tensor size over the time, in bytes per second (inf for zero time)."""
    return size_bytes / time_s if time_s > 0 else float("inf")


def bus_bandwidth(size_bytes: float, time_s: float, num_ranks: int) -> float:
    """nccl-tests' busbw for all-reduce: ``algbw x 2(p-1)/p``, comparable to a link's speed.

    >>> bus_bandwidth(1e9, 1.0, 4)
    1500000000.0
    """
    if num_ranks <= 1:
        return 0.0
    return algorithm_bandwidth(size_bytes, time_s) * 2.0 * (num_ranks - 1) / num_ranks


@dataclass(frozen=True)
class CollectiveStats:
    """One collective's time and its nccl-tests bandwidth figures."""

    algorithm: str
    num_ranks: int
    size_bytes: float
    time_s: float

    @property
    def algbw_Bps(self) -> float:
        """Algorithm bandwidth: size / time."""
        return algorithm_bandwidth(self.size_bytes, self.time_s)

    @property
    def busbw_Bps(self) -> float:
        """Bus bandwidth: algbw x 2(p-1)/p."""
        return bus_bandwidth(self.size_bytes, self.time_s, self.num_ranks)


@dataclass(frozen=True)
class ChannelStat:
    """The figures of one channel (one direction of a full-duplex link, or a half-duplex link)."""

    index: int
    name: str
    bandwidth_Bps: float
    bytes: float
    busy_s: float
    utilisation: float


@dataclass(frozen=True, eq=False)
class SimResult:
    """The outcome of :func:`parplan.engine.simulate.simulate`.

    Per task (index = task id): ``start_s`` is when the task began (a compute task: when its stream
    started it; a transfer: when it was issued, i.e. its dependencies were done, so it includes the
    path latency; a marker: when it became ready), ``end_s`` when it finished (a reducing transfer:
    when the receiver finished the reduction), ``arrive_s`` when a transfer's last byte arrived
    (NaN for other kinds). Per graph device (``devices``): busy seconds of the compute stream and of
    the reduction stream. Per network channel: bytes carried, seconds with at least one flow, and
    the bandwidth it has.
    """

    makespan_s: float
    start_s: FloatArray
    end_s: FloatArray
    arrive_s: FloatArray
    devices: tuple[str, ...]
    compute_busy_s: FloatArray
    reduction_busy_s: FloatArray
    channel_names: tuple[str, ...]
    channel_bandwidth_Bps: FloatArray
    channel_bytes: FloatArray
    channel_busy_s: FloatArray
    num_events: int
    collective: CollectiveStats | None = None
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def channel_utilisation(self) -> FloatArray:
        """Average fraction of each channel's bandwidth used over the makespan (bytes / (bw x t))."""
        if self.makespan_s <= 0:
            return np.zeros_like(self.channel_bytes)
        return self.channel_bytes / (self.channel_bandwidth_Bps * self.makespan_s)

    def channel(self, index: int) -> ChannelStat:
        """The figures of one channel."""
        return ChannelStat(
            index=index,
            name=self.channel_names[index],
            bandwidth_Bps=float(self.channel_bandwidth_Bps[index]),
            bytes=float(self.channel_bytes[index]),
            busy_s=float(self.channel_busy_s[index]),
            utilisation=float(self.channel_utilisation[index]),
        )

    def busiest_channel(self) -> ChannelStat | None:
        """The channel with the highest utilisation (ties: the lowest index); None without traffic."""
        if not len(self.channel_bytes) or float(self.channel_bytes.max()) <= 0:
            return None
        return self.channel(int(np.argmax(self.channel_utilisation)))

    @property
    def algbw_Bps(self) -> float | None:
        """Algorithm bandwidth of the collective this graph holds, if it is one."""
        return None if self.collective is None else self.collective.algbw_Bps

    @property
    def busbw_Bps(self) -> float | None:
        """Bus bandwidth of the collective this graph holds, if it is one."""
        return None if self.collective is None else self.collective.busbw_Bps
