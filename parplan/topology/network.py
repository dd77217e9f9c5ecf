"""The communication graph: devices, switches and directed links, with cached deterministic routes.

A :class:`Network` wraps a :class:`~parplan.topology.graph.LinkGraph` (networkx ``DiGraph``'s
interface without networkx; a networkx ``DiGraph`` given instead is read into one) whose nodes
carry ``kind`` ("device" or "switch") and, for devices, their compute attributes; every directed
edge carries ``bandwidth_Bps`` (line rate), ``latency_s`` and ``channel``: the index of the
bandwidth resource it uses, and optionally ``efficiency`` (share of the line rate that carries
payload, default 1) and ``link_class``. Full-duplex links give each direction its own channel; a
half-duplex link's two directions share one. The engine shares bandwidth per channel, so
``channel_bandwidth_Bps`` (line rate x efficiency: what payload gets), ``channel_names`` and
``channel_hardware`` are what it reads (an edge's optional ``channel_name`` attribute names its
channel; otherwise ``"u->v"``).
``transport`` is the cluster's per-message cost profile
(:class:`~parplan.config.cluster.TransportCosts`; ``ideal`` unless given).

Endpoints: transfers run between *endpoints*, the devices and the switches able to reduce in the
network (:meth:`Network.switch_capabilities`: an NVSwitch when the cluster declares ``hardware:
{nvswitch: true, nvls: true}``, an InfiniBand switch when it declares ``sharp: true``, or any switch
whose node carries ``reduces: [nvls, sharp]``). Such a switch plays the switch rank of an NVLS or
CollNet schedule (:class:`~parplan.collectives.schedule.SwitchRank`): :meth:`Network.reducing_switch`
finds the one serving a set of devices, :attr:`Network.endpoints` lists devices first, then reducing
switches, and :meth:`Network.endpoint_index` / :meth:`Network.endpoint` accept both (a switch reads
as a device without compute or memory). :meth:`Network.device_index` still accepts devices only;
any other switch is refused as an endpoint with a message saying what it lacks.

Routing is pluggable (any :data:`Router`); the default, :func:`shortest_hop_route`, is the
deterministic rule of :mod:`parplan.topology.routing` and :func:`spread_route` its D-mod-k variant.
Routes may be asked for on a *lane* (a collective's channel): :func:`spread_route` takes the lanes
of one pair through its equally good paths in turn (a GPU's several NICs, see
:mod:`parplan.topology.routing`); other routers give every lane the lane-0 route.
The graph must not be changed once a ``Network`` wraps it: routes and tables are cached.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from parplan.config.cluster import NETWORK_CLASSES, HardwareFeatures, TransportCosts
from parplan.errors import TopologyError
from parplan.topology.graph import LinkGraph, as_link_graph
from parplan.topology.routing import RoutingTables, TieBreak

if TYPE_CHECKING:
    import networkx as nx

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

HW_NVLINK, HW_PCIE, HW_NET = 0, 1, 2
"""Hardware codes of channels (NCCL's NVLINK / PCI / NET): a route's is the largest it crosses.
Links without a class count as NET (they are assumed to leave the node)."""

Router = Callable[["Network", str, str], list[str]]
"""A routing function: the node path from one device to another (both ends included)."""


@dataclass(frozen=True)
class DeviceInfo:
    """What the engine and the plans need to know about one device."""

    name: str
    peak_flop_per_s: float
    efficiency: float
    speed_factor: float
    memory_bytes: float
    memory_bandwidth_Bps: float | None
    group: str | None
    arch: str | None = None
    switch: bool = False
    """A reducing switch standing in as an endpoint (no compute, no memory; reduces in flight)."""
    peak_flop_per_s_by_dtype: tuple[tuple[str, float], ...] = ()
    """Dense peak per dtype for the per-kernel roofline (empty: ``peak_flop_per_s`` for every dtype)."""
    matmul_max_efficiency: float | None = None
    """Share of the peak large GEMMs reach (None: the roofline's default)."""
    matmul_half_flops: float | None = None
    """GEMM size (``2 m n k``) that reaches half of ``matmul_max_efficiency`` (None: the default)."""
    sm_count: int | None = None
    """Streaming multiprocessors, for wave quantisation of GEMM tiles (None: not modelled)."""
    device_type: str | None = None
    """The catalog entry the device was described by (``H100-SXM``), if any."""
    tdp_watts: float | None = None
    """Board power the datasheet's peaks hold at (None: not known)."""
    power_limit_watts: float | None = None
    """A power cap the device runs under (None: its TDP)."""

    @property
    def effective_flop_per_s(self) -> float:
        """Sustained training throughput: peak x efficiency x speed factor."""
        return self.peak_flop_per_s * self.efficiency * self.speed_factor

    def peak_for(self, dtype: str) -> float | None:
        """Dense peak FLOP/s for ``dtype``: from the per-dtype table, else ``peak_flop_per_s`` when
        the device has no table; ``None`` when the table lacks the dtype."""
        if not self.peak_flop_per_s_by_dtype:
            return self.peak_flop_per_s
        return dict(self.peak_flop_per_s_by_dtype).get(dtype)


class Network:
    """A cluster as a graph, with link arrays and cached routes for the engine."""

    def __init__(
        self,
        graph: LinkGraph | nx.DiGraph,
        name: str = "cluster",
        router: Router | None = None,
        transport: TransportCosts | None = None,
    ) -> None:
        graph = as_link_graph(graph)
        self.graph: LinkGraph = graph
        self.name = name
        self.transport = transport or TransportCosts("ideal")
        self.devices: tuple[str, ...] = tuple(
            n for n, d in graph.nodes(data=True) if d.get("kind") == "device"
        )
        if not self.devices:
            raise TopologyError(f"cluster {name!r} has no devices")
        self._device_index = {d: i for i, d in enumerate(self.devices)}
        self._capabilities = {
            str(n): caps
            for n, d in graph.nodes(data=True)
            if d.get("kind") == "switch" and (caps := _switch_capabilities(graph, n))
        }
        self.endpoints: tuple[str, ...] = self.devices + tuple(self._capabilities)
        """Devices, then the switches able to reduce: every name a transfer may start or end at."""
        self._endpoint_index = {e: i for i, e in enumerate(self.endpoints)}
        channels: dict[int, tuple[float, str, int]] = {}
        for u, v, data in graph.edges(data=True):
            ch = int(data["channel"])
            label = str(data.get("channel_name", f"{u}->{v}"))
            rate = float(data["bandwidth_Bps"]) * float(data.get("efficiency", 1.0))
            channels.setdefault(ch, (rate, label, _hardware(data.get("link_class"))))
        if sorted(channels) != list(range(len(channels))):
            raise TopologyError("link channels must be numbered 0..C-1")
        self.channel_bandwidth_Bps = np.array(
            [channels[c][0] for c in range(len(channels))], dtype=np.float64
        )
        self.channel_names: tuple[str, ...] = tuple(channels[c][1] for c in range(len(channels)))
        self.channel_hardware = np.array([channels[c][2] for c in range(len(channels))], dtype=np.int64)
        self._router: Router = router or shortest_hop_route
        self._route_cache: dict[tuple[str, str], tuple[IntArray, float]] = {}
        self._lane_cache: dict[tuple[str, str, int], tuple[IntArray, float]] = {}
        self._routing_tables: dict[str, RoutingTables] = {}
        self._networkx: nx.DiGraph | None = None

    # -- devices ---------------------------------------------------------------------------------
    def device_index(self, name: str) -> int:
        """Position of a device in :attr:`devices`; raises :class:`TopologyError` if unknown."""
        try:
            return self._device_index[name]
        except KeyError:
            what = "a switch, not a device" if name in self.graph else "not in it"
            raise TopologyError(f"unknown device {name!r} in cluster {self.name!r}: {what}") from None

    def check_devices(self, names: Sequence[str]) -> None:
        """Raise :meth:`device_index`'s :class:`TopologyError` for the first of ``names`` that is
        not a device (a group of hundreds checked in one C-level pass)."""
        if not all(map(self._device_index.__contains__, names)):
            for name in names:
                self.device_index(name)

    def endpoint_index(self, name: str) -> int:
        """Position of a device or reducing switch in :attr:`endpoints` (devices keep their
        :meth:`device_index`); raises :class:`TopologyError` for anything else."""
        index = self._endpoint_index.get(name)
        if index is None:
            if self.graph.nodes.get(name, {}).get("kind") == "switch":
                raise TopologyError(
                    f"switch {name!r} of cluster {self.name!r} cannot reduce, so it cannot be a "
                    "transfer endpoint: declare hardware: {nvswitch: true, nvls: true} (an NVSwitch) "
                    "or hardware: {sharp: true} (an InfiniBand switch) in the cluster file"
                )
            self.device_index(name)
        return self._endpoint_index[name]

    def endpoint(self, name: str) -> DeviceInfo:
        """A device's attributes, or a reducing switch's: no compute, no memory (``switch=True``)."""
        if name in self._device_index:
            return self.device(name)
        self.endpoint_index(name)
        return DeviceInfo(name, 0.0, 1.0, 1.0, 0.0, None, self.graph.nodes[name].get("group"), switch=True)

    def switch_capabilities(self, name: str) -> frozenset[str]:
        """What switch ``name`` can do in a schedule's loop (``nvls``, ``sharp``; empty: nothing)."""
        return self._capabilities.get(name, frozenset())

    def reducing_switch(self, capability: str, devices: Sequence[str]) -> str:
        """The switch with ``capability`` that serves ``devices``: for ``nvls`` the NVSwitch every
        one of them links to directly, for ``sharp`` the capable switch fewest hops from them all
        (first in graph order on ties). Raises :class:`TopologyError` saying what is missing."""
        for d in devices:
            self.device_index(d)
        candidates = [n for n, caps in self._capabilities.items() if capability in caps]
        if capability == "nvls":
            found = [c for c in candidates if all(self.graph.has_edge(d, c) for d in devices)]
        else:
            hops = {c: sum(len(self.path(d, c)) for d in devices) for c in candidates}
            found = sorted(candidates, key=lambda c: hops[c])[:1]
        if not found:
            need = "{nvswitch: true, nvls: true}" if capability == "nvls" else "{sharp: true}"
            raise TopologyError(
                f"no switch of cluster {self.name!r} can reduce ({capability}) for devices "
                f"{list(devices)[:4]}{'...' if len(devices) > 4 else ''}: the cluster file must declare "
                f"hardware: {need} on a switch those devices reach"
            )
        return found[0]

    def device(self, name: str) -> DeviceInfo:
        """Compute attributes of a device."""
        self.device_index(name)
        d = self.graph.nodes[name]
        return DeviceInfo(
            name=name,
            peak_flop_per_s=float(d["peak_flop_per_s"]),
            efficiency=float(d["efficiency"]),
            speed_factor=float(d.get("speed_factor", 1.0)),
            memory_bytes=float(d["memory_bytes"]),
            memory_bandwidth_Bps=d.get("memory_bandwidth_Bps"),
            group=d.get("group"),
            arch=d.get("arch"),
            peak_flop_per_s_by_dtype=d.get("peak_flop_per_s_by_dtype", ()),
            matmul_max_efficiency=d.get("matmul_max_efficiency"),
            matmul_half_flops=d.get("matmul_half_flops"),
            sm_count=d.get("sm_count"),
            device_type=d.get("device_type"),
            tdp_watts=d.get("tdp_watts"),
            power_limit_watts=d.get("power_limit_watts"),
        )

    def groups(self) -> dict[str, list[str]]:
        """Devices by group (node), in device order; ungrouped devices form their own group."""
        out: dict[str, list[str]] = {}
        for dev in self.devices:
            out.setdefault(self.graph.nodes[dev].get("group") or dev, []).append(dev)
        return out

    # -- routes ----------------------------------------------------------------------------------
    def route(self, src: str, dst: str) -> tuple[IntArray, float]:
        """Channels a transfer from ``src`` to ``dst`` crosses, and the path's total latency (cached)."""
        key = (src, dst)
        hit = self._route_cache.get(key)
        if hit is not None:
            return hit
        if src == dst:
            result: tuple[IntArray, float] = (np.zeros(0, dtype=np.int64), 0.0)
        else:
            path = self._router(self, src, dst)
            edges = [self.graph.edges[u, v] for u, v in pairwise(path)]
            result = (
                np.array([int(e["channel"]) for e in edges], dtype=np.int64),
                float(sum(float(e["latency_s"]) for e in edges)),
            )
        self._route_cache[key] = result
        return result

    def path(self, src: str, dst: str) -> list[str]:
        """The node path of a route, for display."""
        return [src] if src == dst else self._router(self, src, dst)

    @property
    def lanes_differ(self) -> bool:
        """Whether routes on different lanes may differ (the router honours lanes)."""
        return self._router is spread_route

    def lane_route(self, src: str, dst: str, lane: int) -> tuple[IntArray, float]:
        """Like :meth:`route` on ``lane`` (lane 0, or a router without lanes: :meth:`route`)."""
        if lane == 0 or src == dst or not self.lanes_differ:
            return self.route(src, dst)
        key = (src, dst, lane)
        hit = self._lane_cache.get(key)
        if hit is None:
            path = [str(n) for n in self.routing_tables("spread").path(src, dst, lane)]
            edges = [self.graph.edges[u, v] for u, v in pairwise(path)]
            hit = (
                np.array([int(e["channel"]) for e in edges], dtype=np.int64),
                float(sum(float(e["latency_s"]) for e in edges)),
            )
            self._lane_cache[key] = hit
        return hit

    def lane_path(self, src: str, dst: str, lane: int) -> list[str]:
        """The node path of a route on ``lane``, for display."""
        if lane == 0 or src == dst or not self.lanes_differ:
            return self.path(src, dst)
        return [str(n) for n in self.routing_tables("spread").path(src, dst, lane)]

    def routes(
        self, srcs: Sequence[str] | IntArray, dsts: Sequence[str] | IntArray
    ) -> tuple[IntArray, IntArray, FloatArray]:
        """Routes of many transfers at once: ``(offsets, channels, latency_s)``.

        ``srcs`` and ``dsts`` are device names or indices into :attr:`devices`, pairwise. Transfer
        ``i`` crosses ``channels[offsets[i]:offsets[i + 1]]`` (CSR) and its path latency is
        ``latency_s[i]``. Each distinct pair is routed once and cached like :meth:`route`.
        """
        src_names = self._names(srcs)
        dst_names = self._names(dsts)
        if len(src_names) != len(dst_names):
            raise TopologyError(f"routes: {len(src_names)} sources but {len(dst_names)} destinations")
        n = len(src_names)
        offsets = np.zeros(n + 1, dtype=np.int64)
        latency = np.zeros(n, dtype=np.float64)
        parts: list[IntArray] = []
        for i, (s, d) in enumerate(zip(src_names, dst_names, strict=True)):
            channels, latency[i] = self.route(s, d)
            offsets[i + 1] = offsets[i] + len(channels)
            parts.append(channels)
        flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        return offsets, flat.astype(np.int64, copy=False), latency

    def _names(self, items: Sequence[str] | IntArray) -> list[str]:
        if isinstance(items, np.ndarray):
            if items.dtype.kind not in "iu":
                raise TopologyError("routes: device arrays must hold integer device indices")
            bad = items[(items < 0) | (items >= len(self.devices))]
            if bad.size:
                raise TopologyError(f"device index {int(bad[0])} out of range 0..{len(self.devices) - 1}")
            return [self.devices[i] for i in items.tolist()]
        return [str(x) for x in items]

    def to_networkx(self) -> nx.DiGraph:
        """The graph as a networkx ``DiGraph`` (built on first use, importing networkx; cached)."""
        if self._networkx is None:
            self._networkx = self.graph.to_networkx()
        return self._networkx

    def routing_tables(self, tie_break: TieBreak = "first") -> RoutingTables:
        """The cached next-hop tables of this network under a tie-break rule (built on first use)."""
        tables = self._routing_tables.get(tie_break)
        if tables is None:
            tables = RoutingTables(self.graph, tie_break, name=self.name)
            self._routing_tables[tie_break] = tables
        return tables


def _switch_capabilities(graph: LinkGraph, name: str) -> frozenset[str]:
    """What a switch node can reduce as (see the module docstring): its ``reduces`` attribute if
    set, else ``nvls`` for an NVSwitch of a cluster with NVLS (linked to devices by NVLink only) and
    ``sharp`` for an InfiniBand switch of a cluster with SHARP (no devices, InfiniBand links only)."""
    node = graph.nodes[name]
    if node.get("reduces") is not None:
        return frozenset(str(c) for c in node["reduces"])
    features = graph.graph.get("hardware")
    if not isinstance(features, HardwareFeatures) or node.get("role") == "nic":
        return frozenset()
    edges = list(graph.out_edges(name, data=True))
    to_devices = [d.get("link_class") for _, v, d in edges if graph.nodes[v].get("kind") == "device"]
    out: set[str] = set()
    if features.nvswitch and features.nvls and to_devices and set(to_devices) == {"nvlink"}:
        out.add("nvls")
    classes = {d.get("link_class") for *_, d in edges}
    if features.sharp and edges and not to_devices and classes == {"infiniband"}:
        out.add("sharp")
    return frozenset(out)


def _hardware(link_class: object) -> int:
    """The hardware code of a link class (see :data:`HW_NET`)."""
    if link_class == "nvlink":
        return HW_NVLINK
    if link_class == "pcie":
        return HW_PCIE
    if link_class is None or link_class in NETWORK_CLASSES:
        return HW_NET
    raise TopologyError(f"unknown link class {link_class!r}")


def shortest_hop_route(net: Network, src: str, dst: str) -> list[str]:
    """Fewest hops, then lowest total latency; ties go to the first neighbour by insertion order.

    The default router: destination-based and ECMP-free (see :mod:`parplan.topology.routing`).
    """
    return [str(n) for n in net.routing_tables("first").path(src, dst)]


def spread_route(net: Network, src: str, dst: str) -> list[str]:
    """Like :func:`shortest_hop_route`, but equal next hops are chosen by destination index mod
    their count (D-mod-k), which spreads fat-tree up-paths over aggregation and core switches."""
    return [str(n) for n in net.routing_tables("spread").path(src, dst)]


def networkx_route(net: Network, src: str, dst: str) -> list[str]:
    """A plain networkx Dijkstra on ``1 + latency`` weights: slow, with networkx's own tie-breaking.

    Kept as a simple pluggable alternative and a cross-check of hop counts and latencies (the one
    router that imports networkx, on first use).
    """
    import networkx as nx

    g = net.to_networkx()
    for end in (src, dst):
        if end not in g:
            raise TopologyError(f"unknown device {end!r} in cluster {net.name!r}")
    try:
        path: list[str] = nx.shortest_path(
            g, src, dst, weight=lambda u, v, d: 1.0 + float(d["latency_s"]) * 1e-3
        )
    except nx.NetworkXNoPath:
        raise TopologyError(f"no route from {src!r} to {dst!r} in cluster {net.name!r}") from None
    return path
