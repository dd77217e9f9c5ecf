"""What NCCL would detect on a set of placed ranks: the :class:`NcclSystem` its tuner reads.

NCCL's tuner (:mod:`parplan.collectives.nccl_tuner`) takes a system as NCCL's topology detection
sees it: GPU architecture, nodes and GPUs per node, NVLink count (or PCIe generation) of a GPU, NICs
per node and their speed, the PCIe path between GPU and NIC, NVSwitch / NVLS / SHARP. This module
reads all of it off the network: the devices' ``arch`` and groups (nodes), the classes and line
rates of the links at a device, the NIC switches of the ``hierarchical`` generator (``role: nic``),
and the cluster's declared :class:`~parplan.config.cluster.HardwareFeatures`.

NCCL counts NVLinks and prices each with its own per-link figure (20.6 GB/s on Hopper, not the
25 GB/s of the spec sheet), and a PCIe link by its generation; so a link's line rate is turned back
into what NCCL reads (links of 25 GB/s, 50 on Blackwell; PCIe x16 generations of 15.75 GB/s x 2^k).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from parplan.collectives.nccl_search import (
    NcclSystem,
    nic_bandwidth_GBps,
    nvlink_bandwidth_GBps,
    pci_bandwidth_GBps,
)
from parplan.config.cluster import NETWORK_CLASSES, HardwareFeatures
from parplan.errors import CollectiveError
from parplan.topology.network import Network

NVLINK_LINK_Bps = {"volta": 25e9, "turing": 25e9, "ampere": 25e9, "hopper": 25e9, "blackwell": 50e9}
"""Spec-sheet rate of one NVLink, per direction, per architecture (to count a GPU's links)."""
PCIE3_X16_Bps = 15.75e9
"""PCIe 3.0 x16 per direction; each later generation doubles it."""


def nccl_system(network: Network, devices: Sequence[str]) -> NcclSystem | None:
    """The system NCCL would see on ``devices`` (rank order), or ``None`` when they are not GPUs
    NCCL's model knows (no ``arch``), fewer than two, or nodes of different sizes."""
    if len(devices) < 2:
        return None
    network.check_devices(devices)  # raises for a name that is not a device
    # Two attributes of each device, read off the graph in one pass: a DeviceInfo record per
    # device of every group the search's collective clock meets was a third of a cold search's time.
    attrs = network.graph.nodes
    arch = attrs[devices[0]].get("arch")
    if arch is None:
        return None
    archs: set[object] = set()
    nodes: dict[str, list[str]] = {}
    for d in devices:
        info = attrs[d]
        archs.add(info.get("arch"))
        nodes.setdefault(info.get("group") or d, []).append(d)
    if len(archs) > 1:
        return None
    sizes = {len(v) for v in nodes.values()}
    if len(sizes) != 1:
        return None
    features = network.graph.graph.get("hardware") or HardwareFeatures()
    first = devices[0]
    intra_Bps, intra_class = _intra(network, first)
    nics, nic_Bps, nic_pci_Bps = _nics(network, next(iter(nodes.values())))
    try:
        return NcclSystem(
            arch,
            len(nodes),
            sizes.pop(),
            _intra_GBps(arch, intra_Bps, intra_class),
            intra_link="nvlink" if intra_class == "nvlink" else "pci",
            nvswitch=features.nvswitch and intra_class == "nvlink",
            nvls=features.nvls,
            nics_per_node=nics,
            nic_bandwidth_GBps=nic_bandwidth_GBps(nic_Bps * 8 / 1e9) if nic_Bps else 0.0,
            nic_pci_bandwidth_GBps=_pci_GBps(nic_pci_Bps) if nic_pci_Bps else None,
            collnet=features.sharp,
            cpu_vendor=features.cpu_vendor,
        )
    except CollectiveError:
        return None


def _intra(network: Network, device: str) -> tuple[float, str]:
    """A GPU's widest link that stays in the node: its line rate and class (NVLink before PCIe)."""
    best = (0.0, "pcie")
    for _, _, data in network.graph.out_edges(device, data=True):
        cls = data.get("link_class")
        if cls in NETWORK_CLASSES:
            continue
        key = (cls == "nvlink", float(data["bandwidth_Bps"]))
        if key > (best[1] == "nvlink", best[0]):
            best = (float(data["bandwidth_Bps"]), "nvlink" if cls == "nvlink" else "pcie")
    return best


def _intra_GBps(arch: str, line_rate_Bps: float, link_class: str) -> float:
    """What NCCL assigns to the intra-node link: its NVLinks x NCCL's per-link figure, or PCIe."""
    if link_class == "nvlink":
        links = max(1, round(line_rate_Bps / NVLINK_LINK_Bps[arch]))
        return nvlink_bandwidth_GBps(arch, links)  # type: ignore[arg-type]
    return _pci_GBps(line_rate_Bps)


def _pci_GBps(line_rate_Bps: float) -> float:
    """NCCL's figure for a PCIe x16 link of this line rate (generation 3 .. 5)."""
    generation = 3 + round(math.log2(max(line_rate_Bps, 1.0) / PCIE3_X16_Bps))
    return pci_bandwidth_GBps(min(max(generation, 3), 5))


def _nics(network: Network, node: Sequence[str]) -> tuple[int, float, float]:
    """NICs of one node, one NIC's line rate to the fabric, and the GPU-to-NIC link's line rate."""
    graph = network.graph
    nics: set[str] = set()
    pci_Bps = 0.0
    for d in node:
        for _, nic, data in graph.out_edges(d, data=True):
            if graph.nodes[nic].get("role") == "nic":
                nics.add(nic)
                if data.get("link_class") == "pcie":
                    pci_Bps = max(pci_Bps, float(data["bandwidth_Bps"]))
    nic_Bps = 0.0
    for nic in nics:
        for _, far, data in graph.out_edges(nic, data=True):
            if graph.nodes[far].get("kind") != "device":
                nic_Bps = max(nic_Bps, float(data["bandwidth_Bps"]))
    return len(nics), nic_Bps, pci_Bps
