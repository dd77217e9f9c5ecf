"""Routes by id: each (source, destination) pair the run uses, its channels, latency, narrowest link
and hardware (NVLink, PCIe or network: what NCCL's per-step latencies are indexed by).

Routes are asked of the network the first time a pair is used and get the next id. By id they
are rows of a padded channel matrix (padding is the dummy channel ``num_channels``, which has
infinite bandwidth and is never counted), a latency and a narrowest bandwidth, so the rest of the
engine works on route ids with array indexing. Ids are found by a dense (src, dst) table when the
network's device count allows, else by binary search in sorted keys.

Lanes. A transfer may name a lane (the channel of a collective step; see
:mod:`parplan.topology.routing`): where the network's router honours lanes, (src, dst, lane) is
routed on its own and gets an id of its own unless its channels are those of an id already known
for the pair. Transfers on lane 0, and every transfer on a network whose router ignores lanes, take
the plain (src, dst) route, so graphs without lanes see exactly the table above.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from parplan.engine.arrays import EMPTY_F, EMPTY_I, IdArray, IntArray
from parplan.errors import SimulationError
from parplan.topology.network import Network

LaneArray = npt.NDArray[np.int32] | IntArray
"""A lane per transfer (the task graph keeps int32)."""

# Largest (number of network devices)^2 for which route ids come from a dense table.
_DENSE_ROUTE_TABLE = 1 << 26


class RouteTable:
    """The routes of one run between the graph's devices, by id (new ones in (src, dst) order).

    >>> from parplan.topology.network import Network
    >>> import networkx as nx
    >>> g = nx.DiGraph()
    >>> for h in ("a", "b"):
    ...     g.add_node(h, kind="device", peak_flop_per_s=1e12, efficiency=1.0, memory_bytes=1e9)
    >>> g.add_edge("a", "b", bandwidth_Bps=1e9, latency_s=1e-6, channel=0)
    >>> g.add_edge("b", "a", bandwidth_Bps=2e9, latency_s=1e-6, channel=1)
    >>> routes = RouteTable(Network(g), ("a", "b"))
    >>> routes.ids(np.array([1, 0, 1]), np.array([0, 1, 0])).tolist()  # b->a, a->b, b->a
    [1, 0, 1]
    >>> routes.narrowest_Bps.tolist(), routes.latency_s.tolist()
    ([1000000000.0, 2000000000.0], [1e-06, 1e-06])
    """

    def __init__(self, network: Network, devices: tuple[str, ...]) -> None:
        self.network = network
        # Graph device index -> network endpoint index (devices, then reducing switches; raises
        # TopologyError for anything else).
        self.net_dev = np.array([network.endpoint_index(d) for d in devices], dtype=np.int64)
        self.num_net_dev = len(network.endpoints)
        self.bandwidth_Bps = np.asarray(network.channel_bandwidth_Bps, dtype=np.float64)
        self.num_channels = len(self.bandwidth_Bps)
        self._bw_ext = np.append(self.bandwidth_Bps, math.inf)
        dense = self.num_net_dev**2 <= _DENSE_ROUTE_TABLE
        self._table = np.zeros(self.num_net_dev**2 if dense else 0, dtype=np.int32)  # id + 1
        self._keys = EMPTY_I  # sparse lookup: keys src * num_net_dev + dst, sorted, and their ids
        self._key_ids = EMPTY_I
        self._channel_list: list[IntArray] = []
        self._latency_list: list[float] = []
        self._hw_ext = np.append(np.asarray(network.channel_hardware, dtype=np.int64), -1)
        self.channels = np.zeros((0, 1), dtype=np.int64)  # route id -> channels, padded
        self.latency_s = EMPTY_F
        self.narrowest_Bps = EMPTY_F
        self.hardware = EMPTY_I  # route id -> the largest hardware code it crosses (NVLink < PCIe < NET)
        self.padded = False  # some route is shorter than the channel matrix is wide
        self._lane_ids: dict[tuple[int, int], int] = {}  # (src * num_net_dev + dst, lane) -> id
        self._ids_by_path: dict[tuple[int, tuple[int, ...]], int] = {}  # (pair key, channels) -> id
        # Flows each flow stands for on each (route, channel) pair, shaped like ``channels``, and
        # the routes with a weight above 1: None here (every flow is itself); a symmetric run's
        # table of orbits sets them (:class:`parplan.engine.symmetry.OrbitRoutes`).
        self.weights: npt.NDArray[np.float64] | None = None
        self.multi: npt.NDArray[np.bool_] | None = None

    @property
    def num_routes(self) -> int:
        """Routes found so far."""
        return len(self._channel_list)

    @property
    def network_bandwidth_Bps(self) -> npt.NDArray[np.float64]:
        """Bandwidth of every network channel (the table's channels are the network's here)."""
        return self.bandwidth_Bps

    def expand(self, per_channel: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """A figure per table channel as a figure per network channel (here: the same array)."""
        return per_channel

    def id_of(self, src: int, dst: int) -> int:
        """The plain route id of graph devices ``src`` to ``dst`` when it is known, else -1: one
        transfer (the shared regime's usual batch) looked up by scalars, no numpy temporaries."""
        if not len(self._table):
            return -1
        key = self.net_dev.item(src) * self.num_net_dev + self.net_dev.item(dst)
        rid: int = self._table.item(key) - 1
        return rid

    def ids(self, src: IdArray, dst: IdArray, lane: LaneArray | None = None) -> IntArray:
        """Route ids for graph device pairs (on ``lane``: None or 0 is the plain route), asking the
        network for routes not seen before."""
        if len(src) == 1 and (lane is None or not lane[0]):
            rid = self.id_of(int(src[0]), int(dst[0]))
            if rid >= 0:
                return np.array([rid], dtype=np.int64)
        keys = self.net_dev[src] * self.num_net_dev + self.net_dev[dst]
        rids = self._lookup(keys)
        if rids is None:
            return self.ids(src, dst, lane)
        if lane is None or not self.network.lanes_differ:
            return rids
        on_lane = np.flatnonzero(lane)
        if len(on_lane):
            rids = rids.copy()
            rids[on_lane] = self._lane_lookup(keys[on_lane], rids[on_lane], lane[on_lane])
        return rids

    def _lane_lookup(self, keys: IntArray, plain: IntArray, lane: LaneArray) -> IntArray:
        """Ids of (pair key, lane > 0), routing the new ones; a lane route whose channels equal a
        known route of the pair shares its id."""
        span = int(lane.max()) + 1
        combined, first, inverse = np.unique(keys * span + lane, return_index=True, return_inverse=True)
        out = np.empty(len(combined), dtype=np.int64)
        names = self.network.devices
        found = self._lane_ids
        new: list[tuple[IntArray, float]] = []
        pairs = zip(keys[first].tolist(), plain[first].tolist(), lane[first].tolist(), strict=True)
        for i, (key, base, ln) in enumerate(pairs):
            rid = found.get((key, ln))
            if rid is None:
                self._ids_by_path.setdefault((key, tuple(self._channel_list[base].tolist())), base)
                s, d = divmod(key, self.num_net_dev)
                channels, latency = self.network.lane_route(names[s], names[d], int(ln))
                path_key = (key, tuple(channels.tolist()))
                rid = self._ids_by_path.get(path_key)
                if rid is None:
                    rid = len(self._channel_list) + len(new)
                    new.append((np.asarray(channels, dtype=np.int64), float(latency)))
                    self._ids_by_path[path_key] = rid
                found[(key, ln)] = rid
            out[i] = rid
        if new:
            self._append(new)
        ids: IntArray = out[inverse.ravel()]
        return ids

    def _lookup(self, keys: IntArray) -> IntArray | None:
        """Ids of ``keys``; when some are new, adds them and returns None."""
        if len(self._table):
            rids: IntArray = self._table[keys].astype(np.int64) - 1
            if not np.count_nonzero(rids < 0):
                return rids
            missing = np.unique(keys[rids < 0])
        elif len(self._keys):
            pos = np.minimum(np.searchsorted(self._keys, keys), len(self._keys) - 1)
            found = self._keys[pos] == keys
            if found.all():
                ids: IntArray = self._key_ids[pos]
                return ids
            missing = np.unique(keys[~found])
        elif not len(keys):
            return EMPTY_I
        else:
            missing = np.unique(keys)
        self._add(missing)
        return None

    def _add(self, keys: IntArray) -> None:
        names = self.network.endpoints
        first = len(self._channel_list)
        routes: list[tuple[IntArray, float]] = []
        for key in keys.tolist():
            s, d = divmod(key, self.num_net_dev)
            channels, latency = self.network.route(names[s], names[d])
            if not len(channels):
                raise SimulationError(f"route from {names[s]!r} to {names[d]!r} crosses no link")
            routes.append((np.asarray(channels, dtype=np.int64), float(latency)))
        new_ids = np.arange(first, first + len(routes), dtype=np.int64)
        if len(self._table):
            self._table[keys] = (new_ids + 1).astype(np.int32)
        else:
            all_keys = np.concatenate([self._keys, keys])
            all_ids = np.concatenate([self._key_ids, new_ids])
            order = np.argsort(all_keys, kind="stable")
            self._keys, self._key_ids = all_keys[order], all_ids[order]
        self._append(routes)

    def _append(self, routes: list[tuple[IntArray, float]]) -> None:
        """Give ``routes`` (channels, latency) the next ids and extend the route arrays."""
        first = len(self._channel_list)
        for channels, latency in routes:
            self._channel_list.append(channels)
            self._latency_list.append(latency)
        # Only the new rows are written row by row (rebuilding every row on each call made a run
        # that meets its p routes a few at a time quadratic in Python); old ones are copied whole.
        added = self._channel_list[first:]
        old = self.channels
        width = max(old.shape[1], *(len(c) for c in added))
        if width > old.shape[1]:
            old = np.pad(old, ((0, 0), (0, width - old.shape[1])), constant_values=self.num_channels)
        rows = np.full((len(added), width), self.num_channels, dtype=np.int64)
        for i, c in enumerate(added):
            rows[i, : len(c)] = c
        mat = np.concatenate([old, rows])
        self.channels = mat
        self.padded = bool(np.any(mat == self.num_channels))
        self.latency_s = np.array(self._latency_list, dtype=np.float64)
        self.narrowest_Bps = np.concatenate([self.narrowest_Bps, self._bw_ext[rows].min(axis=1)])
        self.hardware = np.concatenate([self.hardware, self._hw_ext[rows].max(axis=1)])
