"""NCCL's per-call latency model (``comm->latencies`` in src/graph/tuning.cc): a base per
(algorithm, protocol) plus per-step hardware latencies (NVLink, PCI, network) composed per
algorithm; :func:`~parplan.collectives.nccl_tuner.algo_time_us` adds the bandwidth term. Apart
from :mod:`parplan.collectives.nccl_tuner` (which re-exports :func:`latency_us`) so that module
stays near the size limit; pure like it.
"""

from __future__ import annotations

from parplan.collectives import nccl_tables as t
from parplan.collectives.nccl_search import NcclSystem
from parplan.collectives.nccl_tables import (
    BASE_LATENCY_US,
    HW_LATENCY_US,
    PROTOCOLS,
    Algorithm,
    Collective,
    Hardware,
    Protocol,
)


def log2_floor(value: int) -> int:
    """floor(log2(value)) for value >= 1, -1 for 0 (NCCL's log2Down)."""
    return value.bit_length() - 1


def _hw_latency_us(system: NcclSystem, hw: Hardware, algorithm: Algorithm, protocol: Protocol) -> float:
    """One step's hardware latency; on POWER hosts PCI Tree/Simple costs what PCI Ring/Simple does."""
    p = PROTOCOLS.index(protocol)
    if system.cpu_arch == "power" and hw == "pci" and algorithm == "tree" and protocol == "simple":
        algorithm = "ring"
    return HW_LATENCY_US[hw][algorithm][p]


def net_overhead_us(system: NcclSystem, protocol: Protocol) -> float:
    """CPU cost of one network step (0 on one node), tripled for Simple."""
    if system.n_nodes == 1:
        return 0.0
    base = system.net_overhead_us
    if base is None:
        base = t.NET_OVERHEAD_US[system.cpu_vendor]
    return base * (t.NET_OVERHEAD_SIMPLE_FACTOR if protocol == "simple" else 1.0)


def _ring_latency_us(
    system: NcclSystem,
    collective: Collective,
    protocol: Protocol,
    intra_us: float,
    inter_us: float,
    intra_hw: Hardware,
) -> float:
    """Ring: every step pays its hop; broadcast and reduce pipeline to one step's latency."""
    base = BASE_LATENCY_US["ring"][PROTOCOLS.index(protocol)]
    n, nodes = system.n_ranks, system.n_nodes
    if collective in ("broadcast", "reduce"):  # the search keeps sameChannels on every system here
        return base + _hw_latency_us(system, intra_hw if nodes == 1 else "net", "ring", protocol)
    all_reduce = collective == "all_reduce"
    n_steps = 2 * (n - 1) if all_reduce else n - 1
    n_inter = 0 if nodes == 1 else (2 * (nodes - 1) if all_reduce else nodes - 1)
    intra_us = max(intra_us, net_overhead_us(system, protocol))
    return base + (n_steps - n_inter) * intra_us + n_inter * inter_us


def latency_us(system: NcclSystem, collective: Collective, algorithm: Algorithm, protocol: Protocol) -> float:
    """NCCL's per-call latency (``comm->latencies``) before the plateau factor, in microseconds.

    Intra-node steps use NVLink latencies when the GPUs talk over NVLink, PCI ones otherwise (and with
    one GPU per node); inter-node steps the network's, the tree's network latency with one GPU per
    node, plus the NIC's own latency (twice for Simple: the flush).
    """
    p = PROTOCOLS.index(protocol)
    nodes, ppn, n = system.n_nodes, system.ranks_per_node, system.n_ranks
    intra_hw: Hardware = "nvlink" if system.intra_link == "nvlink" and ppn > 1 else "pci"
    intra = _hw_latency_us(system, intra_hw, algorithm, protocol)
    inter = HW_LATENCY_US["net"]["tree" if ppn == 1 else algorithm][p]
    inter += system.net_latency_us * (2 if protocol == "simple" else 1)
    base = BASE_LATENCY_US[algorithm][p]
    depth = log2_floor(nodes)
    if algorithm == "ring":
        return _ring_latency_us(system, collective, protocol, intra, inter, intra_hw)
    if algorithm == "tree":
        return base + 2 * ((ppn - 1) * intra + depth * inter)
    if algorithm == "collnet_direct":
        return base + 2 * (min(1, ppn - 1) * intra + (ppn - 1) * t.COLLNET_DIRECT_ARITY_LATENCY_US) + inter
    if algorithm == "collnet_chain":
        return base + 2 * (ppn - 1) * intra + inter
    if algorithm == "nvls":
        return intra + (inter if nodes > 1 else 0.0)
    if algorithm == "nvls_tree":
        return base + intra + 2 * depth * inter
    # PAT (all-gather / reduce-scatter, one GPU per node): the composition is not in the notes; this is
    # tuning.cc's since NCCL 2.23: base + log-depth share of the network latency + a linear part.
    return base + depth * (inter / 3.5) + n * 2.8
