"""Exact symmetric simulation: a run that a permutation of its devices maps onto itself, simulated
once per orbit (the quotient), with the network's symmetry checked, never assumed.

A *rotation* ``sigma`` is a permutation of a task graph's devices with every cycle of one length
``k`` (for a ring all-reduce on p ranks shifted by g: ``r -> r + g mod p``, ``k = p / g``). When
the whole run is invariant under it (the schedule maps onto itself, every device onto one alike,
every route onto a route alike), the max-min fair allocation, being unique, is invariant too: the
``k`` translates of every transfer have identical times, and so do the channels of every channel
orbit. A *quotient* graph holds one transfer per orbit (its representative: built by the
collective, e.g. :mod:`parplan.collectives.orbits`); the engine runs it with:

- **channel orbits** for channels: the cycles of the channel permutation ``pi`` that ``sigma``
  induces, read off the routes position by position (:func:`find_quotient`);
- per (route, channel orbit) a **weight**: how many flows of the route's orbit cross each channel
  of the channel orbit, ``k x (occurrences on the representative route) / |channel orbit|``; the
  allocator loads a channel orbit with ``weight`` flows per representative flow
  (:func:`~parplan.engine.allocator.max_min_rates`), so every channel sees exactly the flows it
  sees in the full run;
- **representative devices** for the reduction streams: a transfer reduces on its receiver's
  representative (each real device's stream sees one transfer per orbit, as in the full run).

The check (:func:`find_quotient`) routes every translate of every representative route (the full
run routes them all too) and builds ``pi`` from their position-by-position correspondence: it must
be a consistent, injective map that preserves bandwidth (line rate times link efficiency: what the
engine reads) and hardware class; translated routes must have the same latency; the devices of one
orbit the same compute rate, memory bandwidth and kind. If anything fails there is no quotient and
the caller simulates in full. Results are expanded back: every channel of an orbit gets its orbit's
bytes and busy time, every device its representative's busy time (:class:`OrbitRoutes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from parplan.engine.arrays import FloatArray, IdArray, IntArray
from parplan.engine.routes import LaneArray, RouteTable
from parplan.errors import SimulationError
from parplan.taskgraph import TRANSFER, TaskGraph
from parplan.topology.network import Network

RouteKey = tuple[int, int, int]
"""(source, destination, lane) of a representative transfer, as graph device indices."""


@dataclass(frozen=True, eq=False)
class Quotient:
    """A rotation of a run's devices that its network was checked to respect (see the module).

    ``image[d]`` is ``sigma(d)``; every cycle has ``orbit_size`` devices, ``device_rep[d]`` is the
    smallest device of ``d``'s cycle. ``channel_orbit[c]`` is network channel ``c``'s orbit id (-1
    for channels no translate crosses), ``orbit_channels[o]`` how many channels orbit ``o`` has.
    ``routes`` holds each representative route's network channels and latency by its key.
    """

    image: IntArray
    orbit_size: int
    device_rep: IntArray
    channel_orbit: IntArray
    orbit_channels: IntArray
    routes: dict[RouteKey, tuple[IntArray, float]]

    @property
    def num_orbits(self) -> int:
        """Channel orbits."""
        return len(self.orbit_channels)

    def summary(self) -> dict[str, int]:
        """What reports show: devices per orbit, representative devices, channel orbits."""
        return {
            "orbit_size": self.orbit_size,
            "representatives": len(self.image) // self.orbit_size,
            "channel_orbits": self.num_orbits,
        }


def _cycles(image: IntArray) -> tuple[int, IntArray, IntArray, list[list[int]]] | None:
    """Cycle length, each device's cycle and position in it, and the cycles of ``image`` (a
    permutation); None unless it is one with every cycle of the same length."""
    n = len(image)
    if sorted(image.tolist()) != list(range(n)):
        return None
    cycle_of = np.full(n, -1, dtype=np.int64)
    position = np.zeros(n, dtype=np.int64)
    cycles: list[list[int]] = []
    listed = image.tolist()
    for start in range(n):
        if cycle_of[start] >= 0:
            continue
        cycle = [start]
        nxt = listed[start]
        while nxt != start:
            cycle.append(nxt)
            nxt = listed[nxt]
        cycle_of[cycle] = len(cycles)
        position[cycle] = np.arange(len(cycle))
        cycles.append(cycle)
    k = len(cycles[0]) if cycles else 1
    if any(len(c) != k for c in cycles):
        return None
    return k, cycle_of, position, cycles


def _devices_alike(network: Network, devices: tuple[str, ...], image: IntArray) -> bool:
    """Whether every device is alike its image: compute rate, memory bandwidth, switch or not."""
    traits = []
    for name in devices:
        info = network.endpoint(name)
        traits.append((info.effective_flop_per_s, info.memory_bandwidth_Bps, info.switch))
    return all(traits[d] == traits[int(image[d])] for d in range(len(devices)))


def find_quotient(graph: TaskGraph, network: Network, image: IntArray) -> Quotient | None:
    """The quotient of ``graph`` (representative transfers) under the rotation ``image`` of its
    devices, when ``network`` respects it; None when any check fails (see the module docstring).
    The graph's own symmetry (that its transfers are representatives of orbits the rotation maps
    onto themselves) is its builder's to guarantee."""
    image = np.asarray(image, dtype=np.int64)
    devices = graph.devices
    if len(image) != len(devices):
        raise SimulationError(f"a rotation of {len(image)} devices for a graph of {len(devices)}")
    found = _cycles(image)
    if found is None or not _devices_alike(network, devices, image):
        return None
    k, cycle_of, position, cycles = found
    keys = _route_keys(graph)
    translated = _translated_routes(network, devices, keys, cycles, cycle_of, position, k)
    if translated is None:
        return None
    routes, froms, tos = translated
    orbits = _channel_orbits(network, froms, tos, k)
    if orbits is None:
        return None
    channel_orbit, orbit_channels = orbits
    rep = np.array([min(c) for c in cycles], dtype=np.int64)[cycle_of]
    return Quotient(image, k, rep, channel_orbit, orbit_channels, routes)


def _route_keys(graph: TaskGraph) -> list[RouteKey]:
    """The distinct (src, dst, lane) of the graph's transfers between two devices."""
    tr = np.flatnonzero((graph.kind == TRANSFER) & (graph.device != graph.dst))
    src = graph.device[tr].astype(np.int64)
    dst = graph.dst[tr].astype(np.int64)
    lane = np.zeros(len(tr), dtype=np.int64) if graph.lane is None else graph.lane[tr].astype(np.int64)
    if not len(tr):
        return []
    triples = np.unique(np.stack([src, dst, lane], axis=1), axis=0)
    return [(int(s), int(d), int(ln)) for s, d, ln in triples.tolist()]


def _translated_routes(
    network: Network,
    devices: tuple[str, ...],
    keys: list[RouteKey],
    cycles: list[list[int]],
    cycle_of: IntArray,
    position: IntArray,
    k: int,
) -> tuple[dict[RouteKey, tuple[IntArray, float]], IntArray, IntArray] | None:
    """Each key's route, and the channel pairs (translate j's channel, translate j+1's at the same
    position) of every translate; None when two translates differ in length or latency."""
    routes: dict[RouteKey, tuple[IntArray, float]] = {}
    froms: list[IntArray] = []
    tos: list[IntArray] = []
    for s, d, lane in keys:
        cs, cd = cycles[int(cycle_of[s])], cycles[int(cycle_of[d])]
        ps, pd = int(position[s]), int(position[d])
        rows: list[IntArray] = []
        first_latency = 0.0
        for j in range(k):
            a, b = devices[cs[(ps + j) % k]], devices[cd[(pd + j) % k]]
            channels, latency = network.lane_route(a, b, lane) if lane else network.route(a, b)
            if not len(channels):
                raise SimulationError(f"route from {a!r} to {b!r} crosses no link")
            if j == 0:
                first_latency = latency
                routes[(s, d, lane)] = (np.asarray(channels, dtype=np.int64), float(latency))
            elif latency != first_latency or len(channels) != len(rows[0]):
                return None
            rows.append(channels)
        table = np.asarray(rows, dtype=np.int64)
        froms.append(table.ravel())
        tos.append(np.roll(table, -1, axis=0).ravel())
    empty = np.zeros(0, dtype=np.int64)
    return routes, (np.concatenate(froms) if froms else empty), (np.concatenate(tos) if tos else empty)


def _channel_orbits(
    network: Network, froms: IntArray, tos: IntArray, k: int
) -> tuple[IntArray, IntArray] | None:
    """Orbit id per network channel (-1: unused) and channels per orbit, from the pairs
    ``froms -> tos`` of the channel permutation; None unless they form a consistent, injective
    map preserving bandwidth and hardware."""
    num_channels = len(network.channel_bandwidth_Bps)
    pairs = np.unique(froms * num_channels + tos)
    src, dst = pairs // num_channels, pairs % num_channels
    used = np.unique(src)
    if len(used) != len(pairs) or len(np.unique(dst)) != len(pairs):
        return None  # a channel sent to two, or two sent to one
    bw, hw = network.channel_bandwidth_Bps, network.channel_hardware
    if np.any(bw[src] != bw[dst]) or np.any(hw[src] != hw[dst]):
        return None
    if not np.array_equal(np.sort(dst), used):
        return None  # not closed (cannot happen for translates of whole cycles; checked anyway)
    nxt = np.searchsorted(used, dst)  # src is sorted (unique pairs sorted by src first)
    label = np.arange(len(used))
    span = 1
    while span < k:  # pointer jumping: the smallest channel of each cycle (length <= k)
        label = np.minimum(label, label[nxt])
        nxt = nxt[nxt]
        span *= 2
    label = np.minimum(label, label[nxt])
    ids, orbit = np.unique(label, return_inverse=True)
    channel_orbit = np.full(num_channels, -1, dtype=np.int64)
    channel_orbit[used] = orbit.ravel()
    return channel_orbit, np.bincount(orbit.ravel(), minlength=len(ids)).astype(np.int64)


class OrbitRoutes(RouteTable):
    """The route table of a quotient run: a route per representative route (one id per distinct
    channel list of a pair, as :class:`RouteTable` gives lanes), channels are channel orbits with
    each route's ``weights`` on them. Results expand back to network channels (:meth:`expand`)."""

    def __init__(self, network: Network, devices: tuple[str, ...], quotient: Quotient) -> None:
        # Not RouteTable.__init__: every route is known up front (no lookups, no dense table).
        self.network = network
        self.quotient = quotient
        self._network_bw = np.asarray(network.channel_bandwidth_Bps, dtype=np.float64)
        orbit = quotient.channel_orbit
        self.num_channels = quotient.num_orbits
        self.bandwidth_Bps = np.zeros(self.num_channels)
        self.bandwidth_Bps[orbit[orbit >= 0]] = self._network_bw[orbit >= 0]
        hw = np.asarray(network.channel_hardware, dtype=np.int64)
        keys = sorted(quotient.routes)
        span = max((lane for _, _, lane in keys), default=0) + 1
        self._num_dev = len(devices)
        self._span = span
        ids_by_path: dict[tuple[int, int, tuple[int, ...]], int] = {}
        rows: list[tuple[IntArray, FloatArray]] = []
        latency: list[float] = []
        narrowest: list[float] = []
        hardware: list[int] = []
        key_codes: list[int] = []
        key_ids: list[int] = []
        k = quotient.orbit_size
        for s, d, lane in keys:
            channels, lat = quotient.routes[(s, d, lane)]
            path = (s, d, tuple(channels.tolist()))
            rid = ids_by_path.get(path)
            if rid is None:
                rid = ids_by_path[path] = len(rows)
                orbits, occurrences = np.unique(orbit[channels], return_counts=True)
                rows.append((orbits, k * occurrences / quotient.orbit_channels[orbits]))
                latency.append(lat)
                narrowest.append(float(self._network_bw[channels].min()))
                hardware.append(int(hw[channels].max()))
            key_codes.append((s * self._num_dev + d) * span + lane)
            key_ids.append(rid)
        width = max((len(r[0]) for r in rows), default=1)
        self.channels = np.full((len(rows), width), self.num_channels, dtype=np.int64)
        self.weights = np.zeros((len(rows), width))
        for i, (orbits, weight) in enumerate(rows):
            self.channels[i, : len(orbits)] = orbits
            self.weights[i, : len(orbits)] = weight
        self.multi = np.asarray((self.weights > 1.0).any(axis=1), dtype=np.bool_)
        self.padded = bool(np.any(self.channels == self.num_channels))
        self.latency_s = np.array(latency, dtype=np.float64)
        self.narrowest_Bps = np.array(narrowest, dtype=np.float64)
        self.hardware = np.array(hardware, dtype=np.int64)
        order = np.argsort(key_codes)
        self._key_codes = np.asarray(key_codes, dtype=np.int64)[order]
        self._key_ids = np.asarray(key_ids, dtype=np.int64)[order]
        self._by_code = dict(zip(key_codes, key_ids, strict=True))

    @property
    def num_routes(self) -> int:
        """Representative routes."""
        return len(self.latency_s)

    @property
    def network_bandwidth_Bps(self) -> FloatArray:
        """Bandwidth of every network channel."""
        return self._network_bw

    def expand(self, per_channel: FloatArray) -> FloatArray:
        """A figure per channel orbit as the figure of every network channel of the orbit (0 on
        channels no route crosses)."""
        out = np.zeros(len(self._network_bw))
        used = self.quotient.channel_orbit >= 0
        out[used] = per_channel[self.quotient.channel_orbit[used]]
        return out

    def id_of(self, src: int, dst: int) -> int:
        """The plain route id of a representative transfer from ``src`` to ``dst``, else -1."""
        return self._id_by_code(src, dst, 0)

    def _id_by_code(self, src: int, dst: int, lane: int) -> int:
        rid = self._by_code.get((src * self._num_dev + dst) * self._span + lane)
        return -1 if rid is None else int(rid)

    def ids(self, src: IdArray, dst: IdArray, lane: LaneArray | None = None) -> IntArray:
        """Route ids of representative transfers (every one was routed by :func:`find_quotient`)."""
        if len(src) == 1:  # the usual batch: one representative
            rid = self._id_by_code(int(src[0]), int(dst[0]), 0 if lane is None else int(lane[0]))
            if rid >= 0:
                return np.array([rid], dtype=np.int64)
        codes = src.astype(np.int64) * self._num_dev + dst
        codes = codes * self._span + (0 if lane is None else lane.astype(np.int64))
        pos = np.minimum(np.searchsorted(self._key_codes, codes), len(self._key_codes) - 1)
        if not np.array_equal(self._key_codes[pos], codes):
            raise SimulationError("a transfer of a quotient graph on a route its quotient does not have")
        ids: IntArray = self._key_ids[pos]
        return ids


def expand_devices(per_device: FloatArray, quotient: Quotient) -> FloatArray:
    """A figure per device of a quotient run as every device's: its representative's."""
    out: FloatArray = per_device[quotient.device_rep]
    return out


def summary(quotient: Quotient, num_transfers: int) -> dict[str, Any]:
    """The ``symmetry`` entry of a quotient run's result meta: the orbit figures and how many
    transfers the full run has (``num_transfers`` representatives times the orbit size)."""
    return {**quotient.summary(), "transfers": num_transfers * quotient.orbit_size}
