"""Small hand-built networks for engine tests (independent of the topology builders)."""

from __future__ import annotations

import networkx as nx

from parplan.topology.network import Network

PEAK = 100e12
MEMORY = 80e9


def _add_device(
    g: nx.DiGraph, name: str, memory_bandwidth_Bps: float | None = None, group: str | None = None
) -> None:
    g.add_node(
        name,
        kind="device",
        peak_flop_per_s=PEAK,
        efficiency=0.5,
        speed_factor=1.0,
        memory_bytes=MEMORY,
        memory_bandwidth_Bps=memory_bandwidth_Bps,
        group=group,
    )


class _Links:
    def __init__(self, g: nx.DiGraph) -> None:
        self.g = g
        self.next_channel = 0

    def duplex(self, a: str, b: str, bandwidth_Bps: float, latency_s: float) -> None:
        for u, v in ((a, b), (b, a)):
            self.g.add_edge(u, v, bandwidth_Bps=bandwidth_Bps, latency_s=latency_s, channel=self.next_channel)
            self.next_channel += 1

    def half_duplex(self, a: str, b: str, bandwidth_Bps: float, latency_s: float) -> None:
        for u, v in ((a, b), (b, a)):
            self.g.add_edge(u, v, bandwidth_Bps=bandwidth_Bps, latency_s=latency_s, channel=self.next_channel)
        self.next_channel += 1


def switch_network(
    hosts: int,
    bandwidth_Bps: float = 10e9,
    latency_s: float = 1e-6,
    memory_bandwidth_Bps: float | None = None,
) -> Network:
    """``hosts`` devices h0.. each with one full-duplex link to switch sw0."""
    g = nx.DiGraph()
    for i in range(hosts):
        _add_device(g, f"h{i}", memory_bandwidth_Bps)
    g.add_node("sw0", kind="switch")
    links = _Links(g)
    for i in range(hosts):
        links.duplex(f"h{i}", "sw0", bandwidth_Bps, latency_s)
    return Network(g, name="switch")


def full_mesh_network(
    hosts: int,
    bandwidth_Bps: float = 10e9,
    latency_s: float = 1e-6,
    memory_bandwidth_Bps: float | None = None,
) -> Network:
    """Every pair of devices directly linked, full duplex."""
    g = nx.DiGraph()
    for i in range(hosts):
        _add_device(g, f"h{i}", memory_bandwidth_Bps)
    links = _Links(g)
    for i in range(hosts):
        for j in range(i + 1, hosts):
            links.duplex(f"h{i}", f"h{j}", bandwidth_Bps, latency_s)
    return Network(g, name="mesh", router=_direct)


def _direct(net: Network, src: str, dst: str) -> list[str]:
    """Every pair is linked: the route is the link."""
    return [src, dst]


def chain_network(bandwidths_Bps: list[float], latencies_s: list[float]) -> Network:
    """Devices d0 .. dN in a line, link i joining d_i and d_{i+1} (for path tests)."""
    g = nx.DiGraph()
    for i in range(len(bandwidths_Bps) + 1):
        _add_device(g, f"d{i}")
    links = _Links(g)
    for i, (bw, lat) in enumerate(zip(bandwidths_Bps, latencies_s, strict=True)):
        links.duplex(f"d{i}", f"d{i + 1}", bw, lat)
    return Network(g, name="chain")


def leaf_spine_network(
    hosts: int, hosts_per_leaf: int, spines: int, bandwidth_Bps: float = 10e9, latency_s: float = 1e-6
) -> Network:
    """A two-level fat tree: leaves of ``hosts_per_leaf`` hosts, every leaf linked to every spine."""
    g = nx.DiGraph()
    for i in range(hosts):
        _add_device(g, f"h{i}")
    leaves = (hosts + hosts_per_leaf - 1) // hosts_per_leaf
    for leaf in range(leaves):
        g.add_node(f"leaf{leaf}", kind="switch")
    for s in range(spines):
        g.add_node(f"spine{s}", kind="switch")
    links = _Links(g)
    for i in range(hosts):
        links.duplex(f"h{i}", f"leaf{i // hosts_per_leaf}", bandwidth_Bps, latency_s)
    for leaf in range(leaves):
        for s in range(spines):
            links.duplex(f"leaf{leaf}", f"spine{s}", bandwidth_Bps, latency_s)
    return Network(g, name="leaf_spine")
