"""What NCCL's tuner sees of a system (:class:`NcclSystem`), and a model of NCCL's topology search.

NCCL's tuner (:mod:`parplan.collectives.nccl_tuner`) never looks at the hardware directly: it reads
the channel count and the per-channel intra- and inter-node bandwidth (``bwIntra``, ``bwInter``)
that the topology search (NCCL 2.30.7 src/graph/search.cc ``ncclTopoCompute``) settled on for each
algorithm's graph. :func:`graph_bandwidths` models that search:

1. **Pass 1**: start at the highest speed of the architecture's list that a single path can carry
   (GPU to GPU on one node, GPU to NIC across nodes); pack as many channels as the links hold at that
   speed; stop when the channels reach the graph's maximum or use all of a GPU's bandwidth; else try
   lower speeds while they stay above 0.49 of the best found, keeping the largest
   ``channels x speed`` (NVLS: the most channels).
2. **Duplication** (``ncclTopoDupChannels``): on NVLink-class speeds (>= 25 GB/s per channel; on
   sm90+ only if >= 50 GB/s or at most 4 channels) the channels are doubled and the speed halved.
3. **Pass 2**: rings try higher speeds keeping the channel count; trees and CollNet raise
   ``bwIntra`` up to twice ``bwInter`` (a 2-node tree moves twice the NIC rate inside the node);
   NVLS raises ``bwInter`` up to twice ``bwIntra``.

Simplifications, each documented where it applies: a GPU's links are one budget per direction
(``intra_bandwidth_GBps``, NCCL's ``getTotalBw``) plus one widest single path
(``intra_path_bandwidth_GBps``), instead of a graph walked link by link; a channel crossing nodes
enters at one GPU and leaves at another, so it loads (ppn-1)/ppn of a GPU's NVLink budget on average;
NICs are interchangeable; the search's retries with other path types, cross-NIC rings and
``sameChannels = 0`` are not modelled (they find the same bandwidth on the systems described here);
trees use the balanced pattern except with one GPU per node, where NCCL forces the plain tree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, Literal, get_args

from parplan.collectives.nccl_tables import (
    COMPUTE_CAPABILITY,
    MAX_CHANNELS,
    MAX_DIRECT_HEADS,
    PCI_LANE_CODE,
    TABLE_ROW,
    Algorithm,
    Arch,
    NVLINK_GBps,
    SPEEDS_INTER_GBps,
    SPEEDS_INTRA_GBps,
)
from parplan.errors import CollectiveError

IntraLink = Literal["nvlink", "pci"]
#: How the NIC hangs off the GPU, in NCCL's path types: same PCIe switch (``pix``), several switches
#: (``pxb``), through another GPU's NVLink (``pxn``), through the CPU's host bridge (``phb``) or
#: across CPU sockets (``sys``).
NicPath = Literal["pix", "pxb", "pxn", "phb", "sys"]
NIC_PATH_ORDER: Final[dict[str, int]] = {"pix": 0, "pxb": 1, "pxn": 2, "phb": 3, "sys": 4}
CpuVendor = Literal["intel", "amd", "other"]
CpuArch = Literal["x86", "power", "arm"]
Pattern = Literal["ring", "balanced_tree", "tree", "collnet_chain", "collnet_direct", "nvls"]

_EPS: Final = 1e-9
_SEARCH_KEEP_RATIO: Final = 0.49  # pass 1 tries lower speeds while above this share of the best
_FALLBACK_GBps: Final = 0.1  # NCCL's "falling back to simple order" graph: 1 channel at 0.1


def nvlink_bandwidth_GBps(arch: Arch, links: int) -> float:
    """Bandwidth NCCL assigns to ``links`` NVLinks of a GPU of ``arch`` (one direction).

    >>> round(nvlink_bandwidth_GBps("hopper", 18), 1)
    370.8
    """
    return NVLINK_GBps[arch] * links


def pci_bandwidth_GBps(generation: int, width: int = 16) -> float:
    """Bandwidth NCCL assigns to a PCIe link: ``width * lane code / 80``.

    >>> pci_bandwidth_GBps(3), pci_bandwidth_GBps(4), pci_bandwidth_GBps(5)
    (12.0, 24.0, 48.0)
    """
    if generation not in PCI_LANE_CODE:
        raise CollectiveError(f"unknown PCIe generation {generation}; known: {sorted(PCI_LANE_CODE)}")
    return width * PCI_LANE_CODE[generation] / 80.0


def nic_bandwidth_GBps(gbit_per_s: float) -> float:
    """A NIC's line rate as NCCL reads it (``speed Mb/s / 8000``): 200 Gbit/s is 25 GB/s."""
    return gbit_per_s / 8.0


@dataclass(frozen=True)
class NcclSystem:
    """Everything of a system that NCCL's tuner reads, from spec sheets.

    ``intra_bandwidth_GBps`` is one GPU's total intra-node bandwidth in one direction (the sum of its
    NVLinks, or its PCIe link); ``intra_path_bandwidth_GBps`` the widest single GPU-to-GPU path
    (defaults to the total, right for NVSwitch and PCIe; a V100 mesh with 2 NVLinks per pair has 40 of
    120). ``nic_bandwidth_GBps`` is one NIC's rate, ``nic_pci_bandwidth_GBps`` the PCIe path between a
    GPU and its NIC (defaults to the NIC rate). ``nvls`` says the NVSwitch can reduce (NVLink SHARP);
    ``collnet`` that the network can (InfiniBand SHARP) and that NCCL_COLLNET_ENABLE is on.
    ``net_overhead_us`` overrides the CPU vendor's per-step network overhead (NCCL_NET_OVERHEAD).
    """

    arch: Arch
    n_nodes: int
    ranks_per_node: int
    intra_bandwidth_GBps: float
    intra_link: IntraLink = "nvlink"
    intra_path_bandwidth_GBps: float | None = None
    nvswitch: bool = False
    nvls: bool = False
    nics_per_node: int = 0
    nic_bandwidth_GBps: float = 0.0
    nic_pci_bandwidth_GBps: float | None = None
    nic_path: NicPath = "pxb"
    collnet: bool = False
    cpu_vendor: CpuVendor = "intel"
    cpu_arch: CpuArch = "x86"
    net_latency_us: float = 0.0
    net_overhead_us: float | None = None

    def __post_init__(self) -> None:
        for field, value, valid in (
            ("arch", self.arch, get_args(Arch)),
            ("intra_link", self.intra_link, get_args(IntraLink)),
            ("nic_path", self.nic_path, get_args(NicPath)),
            ("cpu_vendor", self.cpu_vendor, get_args(CpuVendor)),
            ("cpu_arch", self.cpu_arch, get_args(CpuArch)),
        ):
            if value not in valid:
                raise CollectiveError(f"NcclSystem.{field}: {value!r} is not one of {', '.join(valid)}")
        problems = self._problems()
        if problems:
            raise CollectiveError("NcclSystem: " + "; ".join(problems))

    def _problems(self) -> list[str]:
        """Every inconsistency of the description, in words."""
        problems = []
        if self.n_nodes < 1 or self.ranks_per_node < 1 or self.n_ranks < 2:
            problems.append("needs n_nodes >= 1, ranks_per_node >= 1 and at least 2 ranks")
        if self.intra_bandwidth_GBps <= 0:
            problems.append("intra_bandwidth_GBps must be > 0")
        if self.intra_path_bandwidth_GBps is not None and not (
            0 < self.intra_path_bandwidth_GBps <= self.intra_bandwidth_GBps
        ):
            problems.append("intra_path_bandwidth_GBps must be > 0 and <= intra_bandwidth_GBps")
        if self.n_nodes > 1 and (self.nics_per_node < 1 or self.nic_bandwidth_GBps <= 0):
            problems.append("several nodes need nics_per_node >= 1 and nic_bandwidth_GBps > 0")
        if self.nic_pci_bandwidth_GBps is not None and self.nic_pci_bandwidth_GBps <= 0:
            problems.append("nic_pci_bandwidth_GBps must be > 0")
        if self.nvswitch and self.intra_link != "nvlink":
            problems.append("an NVSwitch needs intra_link 'nvlink'")
        if self.nvls and not (self.nvswitch and self.compute_capability >= 90):
            problems.append("NVLS needs an NVSwitch and a Hopper or newer GPU")
        if self.net_latency_us < 0 or (self.net_overhead_us is not None and self.net_overhead_us < 0):
            problems.append("latencies must be >= 0")
        return problems

    @property
    def n_ranks(self) -> int:
        """Ranks in the communicator, one per GPU."""
        return self.n_nodes * self.ranks_per_node

    @property
    def compute_capability(self) -> int:
        """The GPU's compute capability as NCCL writes it (70, 75, 80, 90, 100)."""
        return COMPUTE_CAPABILITY[self.arch]

    @property
    def table_row(self) -> int:
        """Row of the per-architecture tables (NCCL's compCapIndex)."""
        return TABLE_ROW[self.arch]

    @property
    def node_column(self) -> int:
        """Column of the per-node-count tables: 0 for one node, 1 for two, 2 for more."""
        return min(self.n_nodes, 3) - 1

    @property
    def intra_path_GBps(self) -> float:
        """Widest single GPU-to-GPU path inside a node."""
        return self.intra_path_bandwidth_GBps or self.intra_bandwidth_GBps

    @property
    def net_path_GBps(self) -> float:
        """Bandwidth of the path from a GPU to its NIC: the NIC or the PCIe between them."""
        pci = self.nic_pci_bandwidth_GBps or self.nic_bandwidth_GBps
        return min(self.nic_bandwidth_GBps, pci)


@dataclass(frozen=True)
class GraphBandwidths:
    """What the topology search settled on for one algorithm's graph.

    ``n_channels`` is 0 when the graph could not be built (no NVLS or CollNet hardware).
    """

    pattern: Pattern
    n_channels: int
    bw_intra_GBps: float
    bw_inter_GBps: float


def _speeds(system: NcclSystem) -> tuple[float, ...]:
    """The speed list the search walks: intra-node on one node, inter-node otherwise."""
    cc = system.compute_capability
    key = "sm100" if cc >= 100 else "sm90" if cc >= 90 else "pre_hopper"
    return (SPEEDS_INTRA_GBps if system.n_nodes == 1 else SPEEDS_INTER_GBps)[key]


def _fit(
    system: NcclSystem, pattern: Pattern, max_channels: int, intra_GBps: float, inter_GBps: float
) -> int:
    """How many channels of ``pattern`` the links carry at these per-channel speeds (0: none)."""
    ppn, limit = system.ranks_per_node, max_channels
    total = system.intra_bandwidth_GBps
    if ppn > 1:
        heads_twice = 2.0 if pattern == "nvls" else 1.0  # an NVLS head moves its share twice
        if heads_twice * intra_GBps > system.intra_path_GBps + _EPS:
            return 0
        if pattern == "nvls":  # every GPU pulls every channel, the channel's head twice
            limit = min(limit, math.floor(total / intra_GBps + _EPS) - 1)
        elif system.n_nodes == 1:
            limit = min(limit, math.floor(total / intra_GBps + _EPS))
        else:  # entry and exit GPUs of a channel use the NIC on one side
            limit = min(limit, math.floor(total / (intra_GBps * (ppn - 1) / ppn) + _EPS))
    if system.n_nodes > 1:
        if inter_GBps > system.net_path_GBps + _EPS:
            return 0
        limit = min(limit, system.nics_per_node * math.floor(system.net_path_GBps / inter_GBps + _EPS))
    return max(limit, 0)


def _better(pattern: Pattern, ppn: int, new: GraphBandwidths, ref: GraphBandwidths | None) -> bool:
    """NCCL's ncclTopoCompareGraphs: more bandwidth wins; for NVLS, more channels first."""
    if ref is None:
        return True
    if pattern == "nvls":
        more_heads = ref.n_channels < new.n_channels <= ppn
        return more_heads or new.n_channels * new.bw_inter_GBps > ref.n_channels * ref.bw_inter_GBps
    return new.n_channels * new.bw_intra_GBps > ref.n_channels * ref.bw_intra_GBps


def _pass_one(
    system: NcclSystem, pattern: Pattern, min_channels: int, max_channels: int
) -> GraphBandwidths | None:
    """Highest speed that fits, then lower speeds while they stay above 0.49 of the best."""
    speeds, total = _speeds(system), system.intra_bandwidth_GBps
    max_path = system.intra_path_GBps if system.n_nodes == 1 else system.net_path_GBps
    ppn = system.ranks_per_node
    start_total = total * ppn / (ppn - 1) if pattern != "ring" and ppn > 1 else total
    i = 0
    while (speeds[i] > max_path or speeds[i] * min_channels > start_total) and i < len(speeds) - 1:
        i += 1
    best: GraphBandwidths | None = None
    while True:
        n = _fit(system, pattern, max_channels, speeds[i], speeds[i])
        found = GraphBandwidths(pattern, n, speeds[i], speeds[i])
        if n >= max(min_channels, 1) and _better(pattern, ppn, found, best):
            best = found
            if n == max_channels:
                return best
        if best is not None and best.n_channels * best.bw_inter_GBps >= total:
            return best
        if i < len(speeds) - 1 and (best is None or speeds[i + 1] / best.bw_inter_GBps > _SEARCH_KEEP_RATIO):
            i += 1
            continue
        return best


def _duplicate(graph: GraphBandwidths, compute_capability: int, max_channels: int) -> GraphBandwidths:
    """ncclTopoDupChannels: double the channels at half the speed on fast (NVLink-class) graphs."""
    bw = graph.bw_intra_GBps
    if graph.pattern == "nvls" or bw < 25.0:
        return graph
    if compute_capability > 80 and bw < 50.0 and graph.n_channels > 4:
        return graph
    doubled = min(graph.n_channels * 2, max_channels)
    split = -(-doubled // graph.n_channels)
    return GraphBandwidths(graph.pattern, doubled, bw / split, graph.bw_inter_GBps / split)


def _pass_two(system: NcclSystem, graph: GraphBandwidths, max_channels: int) -> GraphBandwidths:
    """Try faster channels without losing any: rings both speeds, trees bwIntra, NVLS bwInter."""
    speeds, n = _speeds(system), graph.n_channels
    i = 0
    while speeds[i] > graph.bw_inter_GBps and i < len(speeds) - 1:
        i += 1
    if graph.pattern == "ring":
        for speed in reversed(speeds[:i]):
            fits = _fit(system, "ring", max_channels, speed, speed)
            if fits >= n and fits * speed > graph.n_channels * graph.bw_intra_GBps:
                graph = GraphBandwidths("ring", fits, speed, speed)
        return graph
    raise_inter = graph.pattern == "nvls"
    trial = speeds[i]
    while i > 0:
        current = graph.bw_inter_GBps if raise_inter else graph.bw_intra_GBps
        other = graph.bw_intra_GBps if raise_inter else graph.bw_inter_GBps
        if trial != current or trial >= 2 * other:
            break
        i -= 1
        trial = speeds[i]
        intra, inter = (other, trial) if raise_inter else (trial, other)
        if _fit(system, graph.pattern, max_channels, intra, inter) >= n:
            graph = GraphBandwidths(graph.pattern, n, intra, inter)
    return graph


@lru_cache(maxsize=4096)
def _search(system: NcclSystem, pattern: Pattern, min_channels: int, max_channels: int) -> GraphBandwidths:
    """The whole search for one graph: pass 1, duplication, pass 2."""
    best = _pass_one(system, pattern, min_channels, max_channels)
    if best is None:
        if pattern in ("nvls", "collnet_direct", "collnet_chain"):
            return GraphBandwidths(pattern, 0, 0.0, 0.0)
        return GraphBandwidths(pattern, 1, _FALLBACK_GBps, _FALLBACK_GBps)
    best = _duplicate(best, system.compute_capability, max_channels)
    return _pass_two(system, best, max_channels)


def graph_bandwidths(system: NcclSystem, algorithm: Algorithm) -> GraphBandwidths:
    """Channels and per-channel bandwidths NCCL's search gives ``algorithm``'s graph on ``system``.

    Ring and PAT share the ring graph; trees and CollNet Chain search for as many channels as the
    ring has; NVLS and NVLS Tree share the NVLS graph (one head per GPU at most); CollNet Direct has
    at most 8 heads. Graphs of hardware the system lacks have 0 channels.

    >>> h100 = NcclSystem("hopper", 1, 4, nvlink_bandwidth_GBps("hopper", 18), nvswitch=True, nvls=True)
    >>> graph_bandwidths(h100, "ring")
    GraphBandwidths(pattern='ring', n_channels=12, bw_intra_GBps=30.0, bw_inter_GBps=30.0)
    """
    ring = _search(system, "ring", 1, MAX_CHANNELS)
    ppn = system.ranks_per_node
    if algorithm in ("ring", "pat"):
        return ring
    if algorithm == "tree":
        return _search(system, "tree" if ppn == 1 else "balanced_tree", ring.n_channels, ring.n_channels)
    if algorithm in ("nvls", "nvls_tree"):
        if not system.nvls or ppn < 2:
            return GraphBandwidths("nvls", 0, 0.0, 0.0)
        return _search(system, "nvls", 1, ppn)
    if not system.collnet or system.n_nodes < 2:
        pattern: Pattern = "collnet_chain" if algorithm == "collnet_chain" else "collnet_direct"
        return GraphBandwidths(pattern, 0, 0.0, 0.0)
    if algorithm == "collnet_chain":
        return _search(system, "collnet_chain", ring.n_channels, ring.n_channels)
    return _search(system, "collnet_direct", 1, min(MAX_DIRECT_HEADS, ppn))
