"""A model of NCCL's tuner: the time NCCL predicts for each algorithm and protocol, and its choice.

Follows NCCL 2.30.7 (src/graph/tuning.cc ``ncclTopoTuneModel`` / ``ncclTopoGetAlgoTime``,
src/enqueue.cc ``topoGetAlgoInfo``); the constants live in :mod:`parplan.collectives.nccl_tables`,
the topology search that sets channels and per-channel bandwidth in
:mod:`parplan.collectives.nccl_search`, the latency model in :mod:`parplan.collectives.nccl_latency`.
Pure: these four modules import only the standard library and parplan.errors. What a choice reads
of a system whatever the size is worked out once per system while the system lives
(:func:`_entries`).

NCCL's time for one call of ``n`` bytes is ``latency + n / (1000 * algbw)`` microseconds:

- **latency**: a base per (algorithm, protocol) plus per-step hardware latencies (NVLink, PCI, network)
  composed per algorithm: a ring pays every one of its 2(p-1) steps, a tree twice its depth, NVLS one
  switch step. Across nodes a ring step costs at least the CPU's network overhead, and a multi-node
  Ring/Simple all-reduce is 1.4x slower once every rank's piece of a channel is >= 64 bytes (1.9x before
  sm80: the "plateau").
- **bandwidth**: channels x per-channel bandwidth = bus bandwidth, trimmed per protocol (LL carries
  half, LL128 92%, trees 92% and per-channel ceilings), converted to algorithm bandwidth (rings and
  NVLS by nRanks/nsteps, trees and CollNet by 1/2: they move the data up and down) and, for Tree
  all-reduce, scaled by a correction factor per power of two between 64 B and 256 MiB.

:func:`select` computes every (algorithm, protocol), keeps the fastest enabled one (ties to NCCL's
enum order) and then reduces channels and threads for small messages as NCCL does before launching.
Where older NCCL releases differ (the published tables ran 2.8 to 2.29) the tables module says so.

>>> from parplan.collectives.nccl_search import nvlink_bandwidth_GBps
>>> h100x4 = NcclSystem("hopper", 1, 4, nvlink_bandwidth_GBps("hopper", 18), nvswitch=True, nvls=True)
>>> choice = select(h100x4, "all_reduce", 2**28)
>>> choice.algorithm, choice.protocol, round(choice.time_us)
('ring', 'simple', 1147)
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, TypeVar

from parplan.collectives import nccl_tables as t
from parplan.collectives.nccl_latency import latency_us, log2_floor
from parplan.collectives.nccl_search import GraphBandwidths, NcclSystem, graph_bandwidths
from parplan.collectives.nccl_tables import (
    ALGORITHMS,
    COLLECTIVES,
    PROTOCOLS,
    Algorithm,
    Collective,
    Protocol,
)
from parplan.errors import CollectiveError

__all__ = [
    "ALGORITHMS",
    "COLLECTIVES",
    "PROTOCOLS",
    "GraphBandwidths",
    "NcclCandidate",
    "NcclChoice",
    "NcclSystem",
    "algo_time_us",
    "algorithm_bandwidth_GBps",
    "bus_bandwidth_GBps",
    "graph_bandwidths",
    "latency_us",
    "ll128_enabled",
    "parse_restriction",
    "runtime_channels",
    "select",
    "unavailable_reason",
]

#: Collectives each algorithm implements (broadcast and reduce only run on rings).
SUPPORTED: Final[dict[Algorithm, frozenset[Collective]]] = {
    "tree": frozenset({"all_reduce"}),
    "ring": frozenset(COLLECTIVES),
    "collnet_direct": frozenset({"all_reduce", "all_gather", "reduce_scatter"}),
    "collnet_chain": frozenset({"all_reduce"}),
    "nvls": frozenset({"all_reduce", "all_gather", "reduce_scatter"}),
    "nvls_tree": frozenset({"all_reduce"}),
    "pat": frozenset({"all_gather", "reduce_scatter"}),
}
SIMPLE_ONLY: Final[frozenset[Algorithm]] = frozenset(
    {"collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"}
)


@dataclass(frozen=True)
class NcclCandidate:
    """One (algorithm, protocol) of the tuner's table: its predicted time, or why it is off."""

    algorithm: Algorithm
    protocol: Protocol
    time_us: float | None
    reason: str = ""

    @property
    def enabled(self) -> bool:
        """Whether the tuner could pick this entry."""
        return self.time_us is not None


@dataclass(frozen=True)
class NcclChoice:
    """What NCCL would run for one call: algorithm, protocol, runtime channels and threads, time."""

    collective: Collective
    n_bytes: int
    algorithm: Algorithm
    protocol: Protocol
    channels: int
    threads: int
    time_us: float
    candidates: tuple[NcclCandidate, ...]


def _ll_max_GBps(system: NcclSystem) -> float:
    """LL's ceiling: the GPU's row on one node, the host CPU's (Intel/other 0, AMD 1) across nodes."""
    row = system.table_row if system.n_nodes == 1 else (1 if system.cpu_vendor == "amd" else 0)
    return t.LL_MAX_GBps[row][system.node_column]


def _per_channel_GBps(
    system: NcclSystem, collective: Collective, algorithm: Algorithm, graph: GraphBandwidths
) -> float:
    """One channel's bandwidth before protocol refinements.

    ``bwIntra`` on up to two nodes and for CollNet, ``bwInter`` beyond. NVLS reduces inside the
    switch at ``nvlsEfficiency`` of NVLink, one channel short (the head's), twice for all-reduce (its
    reduce and broadcast halves overlap) and (ppn-1)/ppn otherwise, bound by the network. On one node
    there is no network, and this model does not apply the notes' ``min(..., bwInter)`` there. That
    is a reading, not a quoted line: a one-node NVLS graph's ``bwInter`` is whatever the search's
    pass 2 left (60 GB/s on sm90 in this model). Applied, it would change nothing on 8 H100 (59.5 <
    60 per channel) but cap 4 and 6 H100 at 240 and 360 GB/s bus bandwidth instead of 306 and 425:
    times 52-57% and 14-23% above the published NVLS runs, against 20-23% and 2-4% unbounded.
    """
    nodes, ppn, n_ch = system.n_nodes, system.ranks_per_node, graph.n_channels
    if algorithm in ("nvls", "nvls_tree"):
        share = 2.0 if collective == "all_reduce" else (ppn - 1) / ppn
        intra = graph.bw_intra_GBps * t.NVLS_EFFICIENCY[system.table_row] * (n_ch - 1) / n_ch * share
        if algorithm == "nvls":
            return min(intra, graph.bw_inter_GBps) if nodes > 1 else intra
        inter = graph.bw_inter_GBps * (2.0 if nodes <= 2 else 1.0)
        return min(intra, inter, t.PER_CHANNEL_MAX_NVLS_TREE_GBps[system.table_row][system.node_column])
    if algorithm == "collnet_direct" and collective in ("all_gather", "reduce_scatter"):
        return ppn * min(graph.bw_intra_GBps, t.COLLNET_DIRECT_GATHER_INTER_FACTOR * graph.bw_inter_GBps)
    if nodes <= 2 or algorithm.startswith("collnet"):
        return graph.bw_intra_GBps
    return graph.bw_inter_GBps


def bus_bandwidth_GBps(
    system: NcclSystem,
    collective: Collective,
    algorithm: Algorithm,
    protocol: Protocol,
    graph: GraphBandwidths | None = None,
) -> float:
    """Channels x per-channel bandwidth with NCCL's protocol refinements (GB/s, bus bandwidth).

    ``graph`` defaults to the search's (:func:`graph_bandwidths`); pass one to model another.
    """
    graph = graph or graph_bandwidths(system, algorithm)
    n_ch = graph.n_channels
    if n_ch < 1:
        return 0.0
    row, col = system.table_row, system.node_column
    bus = n_ch * _per_channel_GBps(system, collective, algorithm, graph)
    if algorithm == "ring" and protocol == "ll":
        bus = min(_ll_max_GBps(system), t.RING_LL_FACTOR * bus)
    elif algorithm == "ring" and protocol == "ll128":
        bus = min(t.LL128_FACTOR * bus, n_ch * t.PER_CHANNEL_MAX_RING_LL128_GBps[row][col])
    elif algorithm == "tree":
        bus = min(t.TREE_FACTOR * bus, n_ch * t.PER_CHANNEL_MAX_TREE_GBps[row][col])
        if protocol == "ll":
            bus = min(bus / t.TREE_LL_DIVISOR, _ll_max_GBps(system))
        elif protocol == "ll128":
            factor = t.TREE_LL128_FACTOR_ONE_NODE if system.n_nodes == 1 else t.TREE_LL128_FACTOR_MULTI_NODE
            bus = min(bus * factor, n_ch * t.PER_CHANNEL_MAX_TREE_LL128_GBps[row][col])
        if graph.pattern == "tree":  # all NIC traffic through one GPU
            bus *= t.SIMPLE_TREE_PATTERN_FACTOR
    elif algorithm == "pat":
        bus *= t.PAT_FACTOR
    elif algorithm == "collnet_direct" and collective == "all_reduce":
        gpus_per_head = system.ranks_per_node / n_ch  # needs a NIC per GPU for full speed
        bus /= gpus_per_head - (gpus_per_head - 1) / 2
        if system.compute_capability >= 90:
            bus *= t.COLLNET_DIRECT_SM90_FACTOR
    return bus


def _n_steps(system: NcclSystem, collective: Collective) -> int:
    """Ring steps of a collective: 2(p-1) for all-reduce, p-1 for gathers/scatters, p otherwise."""
    n = system.n_ranks
    if collective == "all_reduce":
        return 2 * (n - 1)
    return n - 1 if collective in ("all_gather", "reduce_scatter") else n


def algorithm_bandwidth_GBps(
    system: NcclSystem,
    collective: Collective,
    algorithm: Algorithm,
    protocol: Protocol,
    graph: GraphBandwidths | None = None,
) -> float:
    """NCCL's algorithm bandwidth (``comm->bandwidths``), before the tree correction, in GB/s.

    Rings and NVLS convert bus to algorithm bandwidth by nRanks/nsteps, every other algorithm by 1/2
    (tree and CollNet move the whole buffer up and then down); all-gather and reduce-scatter on
    anything but a ring are not converted.
    """
    bus = bus_bandwidth_GBps(system, collective, algorithm, protocol, graph)
    if algorithm != "ring" and collective in ("all_gather", "reduce_scatter"):
        return bus
    if algorithm in ("ring", "nvls", "nvls_tree"):
        return bus * system.n_ranks / _n_steps(system, collective)
    return bus * 0.5


def runtime_channels(
    system: NcclSystem, algorithm: Algorithm, protocol: Protocol, n_bytes: int
) -> tuple[int, int]:
    """Channels and threads per channel NCCL launches for ``n_bytes`` (enqueue.cc channel tuning).

    Below ``channels x threads x threshold`` bytes NCCL drops channels one by one, then halves the
    threads; NVLS always runs its own 16 channels. The prediction itself keeps every channel: NCCL
    decides on the algorithm first. CollNet Direct's head-aware variant is modelled as the plain loop.
    """
    if algorithm in ("nvls", "nvls_tree"):
        return t.NVLS_CHANNELS, t.MAX_THREADS_NVLS_COLLNET
    n_ch = graph_bandwidths(system, algorithm).n_channels
    if algorithm.startswith("collnet"):
        threads = t.MAX_THREADS_NVLS_COLLNET
    elif algorithm == "ring" and protocol == "simple":
        ring = graph_bandwidths(system, "ring")
        few = ring.bw_intra_GBps * ring.n_channels <= t.PCI_BW_GBps
        threads = t.RING_SIMPLE_FEW_THREADS if few else t.MAX_THREADS["simple"]
    else:
        threads = t.MAX_THREADS[protocol]
    threshold = t.THREAD_THRESHOLD_BYTES[protocol]
    if algorithm == "ring" and protocol == "ll":
        threshold *= system.n_ranks
    while n_bytes < n_ch * threads * threshold:
        if n_ch >= 2:
            n_ch -= 1
        elif threads % 128 == 0:
            threads //= 2
        else:
            break
    return n_ch, threads


def ll128_enabled(system: NcclSystem) -> bool:
    """LL128 is on by default only where NCCL tested it: sm70/80/90/100, NVLink (or NVLink through
    one GPU) inside the node, and a NIC no further than a PCIe switch tree (PXN on Hopper+)."""
    if system.compute_capability not in (70, 80, 90, 100):
        return False
    if system.ranks_per_node > 1 and system.intra_link != "nvlink":
        return False
    if system.n_nodes == 1:
        return True
    order = ("pix", "pxb", "pxn", "phb", "sys")
    worst = "pxn" if system.compute_capability >= 90 else "pxb"
    return order.index(system.nic_path) <= order.index(worst)


def unavailable_reason(
    system: NcclSystem, collective: Collective, algorithm: Algorithm, protocol: Protocol
) -> str:
    """Why NCCL never runs this (collective, algorithm, protocol) on ``system``; "" when it may."""
    nodes, ppn = system.n_nodes, system.ranks_per_node
    if collective not in SUPPORTED[algorithm]:
        return f"{algorithm} does not implement {collective}"
    if algorithm in SIMPLE_ONLY and protocol != "simple":
        return f"{algorithm} runs Simple only"
    if protocol == "ll128" and not ll128_enabled(system):
        return "LL128 is off on this GPU / path"
    if algorithm in ("nvls", "nvls_tree") and not system.nvls:
        return "NVLS needs an NVSwitch that reduces (Hopper+)"
    if algorithm == "nvls" and nodes > 1 and not system.collnet:
        return "NVLS across nodes needs CollNet"
    if algorithm == "nvls_tree" and nodes == 1:
        return "NVLS Tree is off on one node"
    if algorithm.startswith("collnet") and (not system.collnet or nodes == 1):
        return "CollNet needs a SHARP fabric across nodes"
    if algorithm == "collnet_direct" and (not system.nvswitch or ppn > 8):
        return "CollNet Direct needs an NVSwitch and at most 8 GPUs per node"
    if algorithm == "pat" and (ppn != 1 or nodes == 1):
        return "PAT runs with one GPU per node only"
    if algorithm_bandwidth_GBps(system, collective, algorithm, protocol) <= 0:
        return "the topology search found no channel for it"
    return ""


def algo_time_us(
    system: NcclSystem,
    collective: Collective,
    algorithm: Algorithm,
    protocol: Protocol,
    n_bytes: int,
    n_channels: int | None = None,
) -> float:
    """NCCL's predicted time (ncclTopoGetAlgoTime) of one call of ``n_bytes``, in microseconds.

    ``n_channels`` replaces the search's channel count (bandwidth scales with it). Raises
    :class:`~parplan.errors.CollectiveError` for an entry NCCL never runs on this system.
    """
    if n_bytes < 0:
        raise CollectiveError(f"n_bytes must be >= 0, got {n_bytes}")
    reason = unavailable_reason(system, collective, algorithm, protocol)
    if reason:
        raise CollectiveError(f"{collective} {algorithm}/{protocol} is not available: {reason}")
    graph = graph_bandwidths(system, algorithm)
    if n_channels is not None:
        if n_channels < 1:
            raise CollectiveError(f"n_channels must be >= 1, got {n_channels}")
        graph = dataclasses.replace(graph, n_channels=n_channels)
    bw = algorithm_bandwidth_GBps(system, collective, algorithm, protocol, graph)
    lat = latency_us(system, collective, algorithm, protocol)
    return _time_us(system, collective, algorithm, protocol, n_bytes, graph, bw, lat)


def _time_us(
    system: NcclSystem,
    collective: Collective,
    algorithm: Algorithm,
    protocol: Protocol,
    n_bytes: int,
    graph: GraphBandwidths,
    bw: float,
    lat: float,
) -> float:
    """:func:`algo_time_us` of an available entry from what does not depend on the size: its
    ``graph``, its algorithm bandwidth ``bw`` on it and its latency ``lat``."""
    log_size = log2_floor(n_bytes >> 6)
    correction = t.TREE_CORRECTION[protocol]
    if algorithm == "tree" and collective == "all_reduce" and 0 <= log_size < len(correction):
        bw *= correction[log_size]
    plateau = algorithm == "ring" and protocol == "simple" and collective == "all_reduce"
    per_rank_channel_bytes = n_bytes // (graph.n_channels * system.n_ranks)
    if plateau and system.n_nodes > 1 and per_rank_channel_bytes >= t.RING_PLATEAU_MIN_BYTES:
        lat *= t.RING_PLATEAU_FACTOR[1 if system.compute_capability >= 80 else 0]
    return lat + n_bytes / (1000.0 * bw)


_Name = TypeVar("_Name", bound=str)


def parse_restriction(
    spec: str | Iterable[str] | None, valid: tuple[_Name, ...], what: str
) -> frozenset[_Name]:
    """The entries an NCCL_ALGO / NCCL_PROTO-style restriction enables.

    ``None`` enables all; a string is NCCL's syntax (``"Ring,Tree"``, ``"^LL128"`` disables);
    names are case-insensitive and may drop underscores (``CollnetChain``, ``NVLSTree``).

    >>> sorted(parse_restriction("^ll128", PROTOCOLS, "protocol"))
    ['ll', 'simple']
    """
    if spec is None:
        return frozenset(valid)
    exclude = False
    if isinstance(spec, str):
        text = spec.strip()
        exclude = text.startswith("^")
        names = [part for part in text.lstrip("^").split(",") if part.strip()]
    else:
        names = list(spec)
    lookup = {v.replace("_", ""): v for v in valid}
    chosen = set()
    for name in names:
        key = name.strip().lower().replace("_", "").replace("-", "")
        if key not in lookup:
            raise CollectiveError(f"unknown NCCL {what} {name!r}; valid: {', '.join(valid)}")
        chosen.add(lookup[key])
    return frozenset(v for v in valid if (v in chosen) != exclude)


_Entry = tuple[Algorithm, Protocol, str, GraphBandwidths, float, float]
_ENTRIES: weakref.WeakKeyDictionary[
    NcclSystem, dict[tuple[str, frozenset[Algorithm], frozenset[Protocol]], tuple[_Entry, ...]]
] = weakref.WeakKeyDictionary()
"""Per system (while it lives): :func:`_entries`."""


def _entries(
    system: NcclSystem,
    collective: Collective,
    allowed_algos: frozenset[Algorithm],
    allowed_protos: frozenset[Protocol],
) -> tuple[_Entry, ...]:
    """What :func:`select` reads of each (algorithm, protocol) in NCCL's order whatever the size:
    why it is off ("" when on), its graph, its algorithm bandwidth on it and its latency (those of
    :func:`algo_time_us`), worked out once per system, collective and restriction, not per size."""
    memo = _ENTRIES.setdefault(system, {})
    key = (collective, allowed_algos, allowed_protos)
    found = memo.get(key)
    if found is None:
        entries: list[_Entry] = []
        for algorithm in ALGORITHMS:
            graph = graph_bandwidths(system, algorithm)
            for protocol in PROTOCOLS:
                reason = unavailable_reason(system, collective, algorithm, protocol)
                if not reason and algorithm not in allowed_algos:
                    reason = "disabled by the algorithm restriction (NCCL_ALGO)"
                if not reason and protocol not in allowed_protos:
                    reason = "disabled by the protocol restriction (NCCL_PROTO)"
                bw = lat = 0.0
                if not reason:
                    bw = algorithm_bandwidth_GBps(system, collective, algorithm, protocol, graph)
                    lat = latency_us(system, collective, algorithm, protocol)
                entries.append((algorithm, protocol, reason, graph, bw, lat))
        found = memo[key] = tuple(entries)
    return found


def select(
    system: NcclSystem,
    collective: Collective,
    n_bytes: int,
    *,
    algorithms: str | Iterable[str] | None = None,
    protocols: str | Iterable[str] | None = None,
) -> NcclChoice:
    """What NCCL's tuner picks for one call of ``n_bytes``, with the whole table it chose from.

    ``algorithms`` / ``protocols`` restrict the choice as NCCL_ALGO / NCCL_PROTO do: they only
    enable or disable entries, the times stay NCCL's model. Raises
    :class:`~parplan.errors.CollectiveError` when nothing is left to run.
    """
    if collective not in COLLECTIVES:
        raise CollectiveError(f"unknown collective {collective!r}; valid: {', '.join(COLLECTIVES)}")
    allowed_algos = parse_restriction(algorithms, ALGORITHMS, "algorithm")
    allowed_protos = parse_restriction(protocols, PROTOCOLS, "protocol")
    table: list[NcclCandidate] = []
    for algorithm, protocol, reason, graph, bw, lat in _entries(
        system, collective, allowed_algos, allowed_protos
    ):
        time = None if reason else _time_us(system, collective, algorithm, protocol, n_bytes, graph, bw, lat)
        table.append(NcclCandidate(algorithm, protocol, time, reason))
    best: NcclCandidate | None = None
    for candidate in table:  # strict <: ties go to the earlier entry, as in NCCL's scan
        if candidate.time_us is not None and (best is None or candidate.time_us < (best.time_us or math.inf)):
            best = candidate
    if best is None or best.time_us is None:
        raise CollectiveError(f"no NCCL algorithm/protocol is enabled for {collective} on this system")
    channels, threads = runtime_channels(system, best.algorithm, best.protocol, n_bytes)
    return NcclChoice(
        collective, n_bytes, best.algorithm, best.protocol, channels, threads, best.time_us, tuple(table)
    )
