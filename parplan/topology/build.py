"""Build the communication graph of a cluster spec.

:func:`build_network` lays down the generator's nodes and links first, then the explicit devices,
switches and links (which may name generated nodes), numbers the bandwidth channels, checks the
result and wraps it in a :class:`~parplan.topology.network.Network`.

Names follow the generator docstrings in :mod:`parplan.config.cluster`; the switches the docstrings
leave open are named here:

- ``switch``: hosts ``h0 ..``, switch ``sw0``.
- ``ring``: hosts ``h0 ..``; with two hosts the ring is one link, not two parallel ones.
- ``torus2d``: hosts ``h{i}_{j}`` (``i < x``, ``j < y``, row-major); a dimension of size 2 gives one
  link between the pair, a dimension of size 1 none.
- ``fat_tree``: hosts ``h0 ..`` (host ``h`` sits on edge switch ``(h // (k/2)) mod (k/2)`` of pod
  ``h // (k/2)^2``), edge switches ``pod{p}.edge{e}``, aggregation switches ``pod{p}.agg{a}``, core
  switches ``core{c}``; aggregation switch ``a`` of every pod links to cores ``a*k/2 .. a*k/2+k/2-1``.
  Host links use ``link``, switch-to-switch links ``uplink`` (default ``link``). With fewer
  ``hosts`` every switch is still built.
- ``hierarchical``: devices ``n{i}.d{j}`` (group ``n{i}``), node switch ``n{i}.sw``, NICs
  ``n{i}.nic{r}``, fabric switch ``fabric`` (or, with ``fabric: rails``, rail switches ``rail{r}``
  holding NIC r of every node, joined by a switch ``spine``). Without a ``pcie`` link and with no
  NIC shared, a device reaches its NICs directly: the hop has the NIC's bandwidth and no latency of
  its own. Devices sharing a NIC need a ``pcie`` link; traffic between them takes the node switch
  whenever ``intra`` is the wider link, whatever the latencies (routes are widest first, see
  :mod:`.routing`). A device that owns several NICs sends to each destination through one of them,
  chosen by the destination (D-mod-k, the default router of such a cluster): the engine routes a
  transfer by its (source, destination) pair, and a task graph has no channel to route by, so a
  route per destination is the finest spreading it can express, and it is what a NIC's
  destination-hashed queue pairs do. Traffic to many peers (all-to-all, halving-doubling, trees)
  spreads over every NIC; a ring channel, which sends to one peer, uses one NIC of its device.
  On rails, cross-node traffic between devices of one local rank crosses its rail switch only;
  other pairs take NVLink to the peer on the destination's rail when that is no slower (NCCL's PXN)
  or climb to the spine.

Nodes carry ``kind`` ("device" or "switch") and ``role`` ("host", "switch", "edge", "aggregation",
"core", "node_switch", "nic", "fabric", or "device"/"switch" for explicit ones); devices carry the
compute attributes of :class:`~parplan.topology.network.DeviceInfo`. Each direction of a link is an
edge with ``bandwidth_Bps`` (the line rate), ``latency_s``, ``channel``, ``channel_name``,
``link_class`` (or ``None``) and ``efficiency`` (the share of the line rate payload gets).
Channels are numbered in the order links are laid down: a full-duplex link ``a``-``b`` takes
channel ``c`` for ``a->b`` and ``c+1`` for ``b->a``; a half-duplex link takes one channel, named
``a<->b``, for both directions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from parplan.config.cluster import (
    ClusterSpec,
    DeviceTemplate,
    FatTreeGenerator,
    HierarchicalGenerator,
    LinkTemplate,
    RingGenerator,
    SwitchGenerator,
    Torus2DGenerator,
    TransportCosts,
    TransportSpec,
    default_transport,
)
from parplan.config.units import LIMITS
from parplan.errors import TopologyError
from parplan.topology.graph import LinkGraph
from parplan.topology.network import Network, Router, shortest_hop_route, spread_route

_MAX_NAMES = 8


def _roofline(template: DeviceTemplate) -> dict[str, Any]:
    """The per-kernel roofline's device attributes, only those the template gives (so a device
    without them keeps the graph it had)."""
    out: dict[str, Any] = {}
    if template.peak_flop_per_s_by_dtype:
        out["peak_flop_per_s_by_dtype"] = tuple(
            (dtype, float(peak)) for dtype, peak in sorted(template.peak_flop_per_s_by_dtype.items())
        )
    if template.matmul_efficiency is not None:
        out["matmul_max_efficiency"] = float(template.matmul_efficiency.max)
        out["matmul_half_flops"] = float(template.matmul_efficiency.half_at_flops)
    if template.sm_count is not None:
        out["sm_count"] = template.sm_count
    for watts in ("tdp_watts", "power_limit_watts"):
        if getattr(template, watts) is not None:
            out[watts] = float(getattr(template, watts))
    if template.device_type is not None:
        out["device_type"] = template.device_type
    return out


class _Builder:
    """Accumulates nodes and links in order, rejecting duplicates as it goes."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.graph = LinkGraph()
        self.next_channel = 0
        self.link_pairs: set[frozenset[str]] = set()
        self.origin: dict[str, str] = {}

    def device(self, name: str, template: DeviceTemplate, group: str | None, role: str, origin: str) -> None:
        self._claim(name, origin)
        self.graph.add_node(
            name,
            kind="device",
            role=role,
            peak_flop_per_s=float(template.peak_flop_per_s),
            efficiency=float(template.efficiency),
            speed_factor=float(template.speed_factor),
            memory_bytes=float(template.memory_bytes),
            memory_bandwidth_Bps=(
                None if template.memory_bandwidth_Bps is None else float(template.memory_bandwidth_Bps)
            ),
            group=group,
            arch=template.arch,
            **_roofline(template),
        )

    def switch(self, name: str, role: str, origin: str) -> None:
        self._claim(name, origin)
        self.graph.add_node(name, kind="switch", role=role)

    def _claim(self, name: str, origin: str) -> None:
        if name in self.origin:
            raise TopologyError(
                f"cluster {self.cluster!r}: name {name!r} is used by the {self.origin[name]} "
                f"and by the {origin}"
            )
        self.origin[name] = origin

    def link(self, a: str, b: str, template: LinkTemplate, what: str = "link") -> None:
        for end in (a, b):
            if end not in self.graph:
                raise TopologyError(
                    f"cluster {self.cluster!r}: {what} {a} - {b} names unknown device or switch {end!r}"
                )
        if a == b:
            raise TopologyError(f"cluster {self.cluster!r}: {what} {a} - {b} links a node to itself")
        pair = frozenset((a, b))
        if pair in self.link_pairs:
            raise TopologyError(
                f"cluster {self.cluster!r}: {what} {a} - {b} is given twice; parallel links are not "
                "supported, give one link with the combined bandwidth"
            )
        self.link_pairs.add(pair)
        bandwidth_Bps = float(template.bandwidth_Bps)
        latency_s = float(template.latency_s)
        if template.full_duplex:
            ab, ba = self.next_channel, self.next_channel + 1
            self.next_channel += 2
            names = (f"{a}->{b}", f"{b}->{a}")
        else:
            ab = ba = self.next_channel
            self.next_channel += 1
            names = (f"{a}<->{b}", f"{a}<->{b}")
        for (u, v), ch, label in (((a, b), ab, names[0]), ((b, a), ba, names[1])):
            self.graph.add_edge(
                u,
                v,
                bandwidth_Bps=bandwidth_Bps,
                latency_s=latency_s,
                channel=ch,
                channel_name=label,
                full_duplex=bool(template.full_duplex),
                link_class=template.link_class,
                efficiency=template.achievable_efficiency,
            )


def build_network(spec: ClusterSpec, router: Router | None = None) -> Network:
    """The :class:`Network` of a cluster spec: generator first, then explicit extras.

    Raises :class:`TopologyError` for a cluster beyond the supported sizes (checked first, from the
    spec's arithmetic, so a spec made without validation cannot exhaust memory either), a link naming
    an unknown endpoint, a name used twice, a link given twice or looping on one node, a device
    without links in a cluster of several devices, or devices that cannot reach each other (naming
    them).
    """
    try:
        spec.size().check()
    except ValueError as exc:
        raise TopologyError(f"cluster {spec.name!r}: {exc}") from None
    b = _Builder(spec.name)
    gen = spec.generator
    if isinstance(gen, SwitchGenerator):
        _switch(b, gen)
    elif isinstance(gen, RingGenerator):
        _ring(b, gen)
    elif isinstance(gen, Torus2DGenerator):
        _torus2d(b, gen)
    elif isinstance(gen, FatTreeGenerator):
        _fat_tree(b, gen)
    elif isinstance(gen, HierarchicalGenerator):
        _hierarchical(b, gen)
    for d in spec.devices:
        b.device(d.name, d, d.group, "device", "explicit device list")
    for s in spec.switches:
        b.switch(s.name, "switch", "explicit switch list")
    for link in spec.links:
        b.link(link.a, link.b, link, what="link")
    _check_connected(b.graph, spec.name)
    b.graph.graph["hardware"] = spec.hardware
    if router is None:
        router = default_router(spec)
    return Network(b.graph, name=spec.name, router=router, transport=cluster_transport(spec, b.graph))


def cluster_transport(spec: ClusterSpec, graph: LinkGraph) -> TransportCosts:
    """The cluster's transport: the file's, else the default its link classes imply."""
    if spec.transport is not None:
        return spec.transport.resolved()
    classes = {str(c) for _, _, c in graph.edges(data="link_class") if c}
    return TransportSpec(kind=default_transport(classes)).resolved()


def default_router(spec: ClusterSpec) -> Router:
    """The router a cluster asks for: D-mod-k on fat trees and on hierarchical clusters whose
    devices own several NICs (or when asked), else first shortest path.

    With first-shortest-path routing every inter-pod flow of a fat tree climbs through the first
    aggregation and core switch, which turns a full-bisection fabric into a 1:k/2 oversubscribed
    one; D-mod-k spreads the up-paths like the deterministic routing InfiniBand subnet managers use.
    On a device with k NICs it picks the NIC by destination (destination index mod k), so a
    device's traffic to different peers leaves through different NICs (see :func:`_hierarchical`).
    """
    gen = spec.generator
    fat_tree = isinstance(gen, FatTreeGenerator)
    multi_nic = isinstance(gen, HierarchicalGenerator) and gen.nics_per_device_owned > 1
    dmodk = spec.routing == "dmodk" or (spec.routing == "auto" and (fat_tree or multi_nic))
    return spread_route if dmodk else shortest_hop_route


def _switch(b: _Builder, gen: SwitchGenerator) -> None:
    origin = "switch generator"
    for i in range(gen.hosts):
        b.device(f"h{i}", gen.device, None, "host", origin)
    b.switch("sw0", "switch", origin)
    for i in range(gen.hosts):
        b.link(f"h{i}", "sw0", gen.host_links.get(f"h{i}", gen.link))


def _ring(b: _Builder, gen: RingGenerator) -> None:
    origin = "ring generator"
    for i in range(gen.hosts):
        b.device(f"h{i}", gen.device, None, "host", origin)
    _pairs_once(b, ((f"h{i}", f"h{(i + 1) % gen.hosts}") for i in range(gen.hosts)), gen.link)


def _torus2d(b: _Builder, gen: Torus2DGenerator) -> None:
    origin = "torus2d generator"
    for i in range(gen.x):
        for j in range(gen.y):
            b.device(f"h{i}_{j}", gen.device, None, "host", origin)

    def neighbours() -> Iterable[tuple[str, str]]:
        for i in range(gen.x):
            for j in range(gen.y):
                yield f"h{i}_{j}", f"h{(i + 1) % gen.x}_{j}"
                yield f"h{i}_{j}", f"h{i}_{(j + 1) % gen.y}"

    _pairs_once(b, neighbours(), gen.link)


def _pairs_once(b: _Builder, pairs: Iterable[tuple[str, str]], template: LinkTemplate) -> None:
    """Link each unordered pair once, skipping self-pairs (wrap-around of a size-1 or size-2 ring)."""
    seen: set[frozenset[str]] = set()
    for u, v in pairs:
        key = frozenset((u, v))
        if u != v and key not in seen:
            seen.add(key)
            b.link(u, v, template)


def _fat_tree(b: _Builder, gen: FatTreeGenerator) -> None:
    origin = "fat_tree generator"
    half = gen.k // 2
    hosts = gen.k**3 // 4 if gen.hosts is None else gen.hosts
    uplink = gen.uplink or gen.link
    for h in range(hosts):
        b.device(f"h{h}", gen.device, None, "host", origin)
    for p in range(gen.k):
        for e in range(half):
            b.switch(f"pod{p}.edge{e}", "edge", origin)
        for a in range(half):
            b.switch(f"pod{p}.agg{a}", "aggregation", origin)
    for c in range(half * half):
        b.switch(f"core{c}", "core", origin)
    for h in range(hosts):
        edge = f"pod{h // (half * half)}.edge{(h // half) % half}"
        b.link(f"h{h}", edge, gen.host_links.get(f"h{h}", gen.link))
    for p in range(gen.k):
        for e in range(half):
            for a in range(half):
                b.link(f"pod{p}.edge{e}", f"pod{p}.agg{a}", uplink)
    for p in range(gen.k):
        for a in range(half):
            for c in range(half):
                b.link(f"pod{p}.agg{a}", f"core{a * half + c}", uplink)


def _hierarchical(b: _Builder, gen: HierarchicalGenerator) -> None:
    origin = "hierarchical generator"
    pcie = gen.pcie
    if pcie is None:
        if gen.nics_per_node < gen.devices_per_node:
            raise TopologyError(
                f"cluster {b.cluster!r}: hierarchical generator with {gen.devices_per_node} devices "
                f"sharing {gen.nics_per_node} NIC(s) per node needs a 'pcie' link from device to NIC"
            )
        pcie = LinkTemplate(
            bandwidth_Bps=gen.nic.bandwidth_Bps, latency_s=0.0, full_duplex=gen.nic.full_duplex
        )
    owned = gen.nics_per_device_owned
    for i in range(gen.nodes):
        for j in range(gen.devices_per_node):
            b.device(f"n{i}.d{j}", gen.device, f"n{i}", "device", origin)
        b.switch(f"n{i}.sw", "node_switch", origin)
        for r in range(gen.nics_per_node):
            b.switch(f"n{i}.nic{r}", "nic", origin)
    if gen.fabric == "rails":
        for r in range(gen.nics_per_node):
            b.switch(f"rail{r}", "rail", origin)
        b.switch("spine", "spine", origin)
    else:
        b.switch("fabric", "fabric", origin)
    for i in range(gen.nodes):
        for j in range(gen.devices_per_node):
            b.link(f"n{i}.d{j}", f"n{i}.sw", gen.intra)
        for j in range(gen.devices_per_node):
            if owned > 1:  # device j owns NICs j*owned .. j*owned + owned - 1
                for r in range(j * owned, (j + 1) * owned):
                    b.link(f"n{i}.d{j}", f"n{i}.nic{r}", pcie)
            else:
                b.link(f"n{i}.d{j}", f"n{i}.nic{j % gen.nics_per_node}", pcie)
        for r in range(gen.nics_per_node):
            b.link(f"n{i}.nic{r}", f"rail{r}" if gen.fabric == "rails" else "fabric", gen.nic)
    if gen.fabric == "rails":
        # non-blocking by default: every node's rail NIC at full rate, within what a spec accepts
        spine = gen.spine or LinkTemplate(
            bandwidth_Bps=min(gen.nic.bandwidth_Bps * gen.nodes, LIMITS["bandwidth"].maximum),
            latency_s=gen.nic.latency_s,
            full_duplex=gen.nic.full_duplex,
        )
        for r in range(gen.nics_per_node):
            b.link(f"rail{r}", "spine", spine)


def _check_connected(graph: LinkGraph, cluster: str) -> None:
    devices = [n for n, d in graph.nodes(data=True) if d.get("kind") == "device"]
    if len(devices) <= 1:
        return
    lonely = [d for d in devices if graph.degree(d) == 0]
    if lonely:
        raise TopologyError(
            f"cluster {cluster!r}: device(s) {_names(lonely)} have no links "
            f"(a cluster of {len(devices)} devices must connect them)"
        )
    component: dict[str, int] = {}
    for cid, comp in enumerate(graph.weakly_connected_components()):
        component.update((n, cid) for n in comp)
    by_component: dict[int, list[str]] = {}
    for d in devices:  # device order, so parts are listed by their first device
        by_component.setdefault(component[d], []).append(d)
    parts = list(by_component.values())
    if len(parts) > 1:
        described = "; ".join(_names(p) for p in parts)
        raise TopologyError(
            f"cluster {cluster!r}: devices are split into {len(parts)} unconnected parts: {described}"
        )


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:_MAX_NAMES])
    more = len(names) - _MAX_NAMES
    return f"[{shown}{f', ... {more} more' if more > 0 else ''}]"
