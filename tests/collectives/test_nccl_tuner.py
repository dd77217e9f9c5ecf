"""The model of NCCL's tuner: every formula piece against hand-computed values from NCCL 2.30.7's
constants, the choices published nccl-tests runs report, and invariants over random systems."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.collectives.nccl_search import (
    GraphBandwidths,
    NcclSystem,
    graph_bandwidths,
    nic_bandwidth_GBps,
    nvlink_bandwidth_GBps,
    pci_bandwidth_GBps,
)
from parplan.collectives.nccl_tables import ALGORITHMS, COLLECTIVES, PROTOCOLS, TREE_CORRECTION
from parplan.collectives.nccl_tuner import (
    algo_time_us,
    algorithm_bandwidth_GBps,
    bus_bandwidth_GBps,
    latency_us,
    ll128_enabled,
    parse_restriction,
    runtime_channels,
    select,
    unavailable_reason,
)
from parplan.errors import CollectiveError

H100_NVLINK = 18 * 20.6
A100_NVLINK = 12 * 20.0
MiB, GiB = 1 << 20, 1 << 30


def h100_box(gpus: int) -> NcclSystem:
    """A slice of one HGX H100: NVSwitch with NVLink SHARP."""
    return NcclSystem("hopper", 1, gpus, H100_NVLINK, nvswitch=True, nvls=True)


def h100_nodes(nodes: int, collnet: bool = False) -> NcclSystem:
    """HGX H100 nodes with 8x NDR 400 Gbit/s behind PCIe Gen5."""
    return NcclSystem(
        "hopper",
        nodes,
        8,
        H100_NVLINK,
        nvswitch=True,
        nvls=True,
        nics_per_node=8,
        nic_bandwidth_GBps=50.0,
        nic_pci_bandwidth_GBps=48.0,
        collnet=collnet,
    )


def a100_nodes(nodes: int, nics: int = 8, collnet: bool = False, cpu: str = "intel") -> NcclSystem:
    """HGX A100 nodes with HDR 200 Gbit/s NICs behind PCIe Gen4."""
    return NcclSystem(
        "ampere",
        nodes,
        8,
        A100_NVLINK,
        nvswitch=True,
        nics_per_node=nics,
        nic_bandwidth_GBps=25.0,
        nic_pci_bandwidth_GBps=24.0,
        collnet=collnet,
        cpu_vendor=cpu,  # type: ignore[arg-type]
    )


def v100_nodes(nodes: int) -> NcclSystem:
    """4 V100 SXM2, 2 NVLinks between each pair, 2x EDR 100 Gbit/s behind PCIe Gen3."""
    return NcclSystem(
        "volta",
        nodes,
        4,
        120.0,
        intra_path_bandwidth_GBps=40.0,
        nics_per_node=2,
        nic_bandwidth_GBps=12.5,
        nic_pci_bandwidth_GBps=12.0,
    )


def one_gpu_nodes(nodes: int, **kwargs: object) -> NcclSystem:
    """One A100 per node, one HDR NIC."""
    return NcclSystem(
        "ampere",
        nodes,
        1,
        24.0,
        intra_link="pci",
        nics_per_node=1,
        nic_bandwidth_GBps=25.0,
        nic_pci_bandwidth_GBps=24.0,
        **kwargs,  # type: ignore[arg-type]
    )


# --- spec-sheet helpers -----------------------------------------------------------------------------


def test_link_bandwidths_as_nccl_reads_them() -> None:
    assert nvlink_bandwidth_GBps("hopper", 18) == pytest.approx(370.8)
    assert nvlink_bandwidth_GBps("blackwell", 18) == pytest.approx(721.8)
    assert nvlink_bandwidth_GBps("ampere", 12) == 240.0
    assert (pci_bandwidth_GBps(3), pci_bandwidth_GBps(4), pci_bandwidth_GBps(5, 8)) == (12.0, 24.0, 24.0)
    assert nic_bandwidth_GBps(400) == 50.0
    with pytest.raises(CollectiveError, match="PCIe generation"):
        pci_bandwidth_GBps(9)


# --- the topology search ----------------------------------------------------------------------------


def test_nvswitch_ring_fills_the_links_then_duplicates() -> None:
    # sm90 intra speeds start at 60: floor(370.8 / 60) = 6 channels; 60 >= 50 so NCCL doubles them.
    assert graph_bandwidths(h100_box(4), "ring") == GraphBandwidths("ring", 12, 30.0, 30.0)
    # Trees search for as many channels as the ring: 12 only fit at 30.
    assert graph_bandwidths(h100_box(4), "tree") == GraphBandwidths("balanced_tree", 12, 30.0, 30.0)
    # Ampere: 40 x 6 = 240 uses the whole GPU; duplicated to 12 x 20.
    a100 = NcclSystem("ampere", 1, 8, A100_NVLINK, nvswitch=True)
    assert graph_bandwidths(a100, "ring") == GraphBandwidths("ring", 12, 20.0, 20.0)


def test_nvls_heads_one_per_gpu() -> None:
    # A head moves its share twice: (heads + 1) x speed <= 370.8.
    assert graph_bandwidths(h100_box(4), "nvls") == GraphBandwidths("nvls", 4, 60.0, 60.0)
    # Pass 2 raises bwInter up to the top speed (no network bounds it on one node).
    assert graph_bandwidths(h100_box(6), "nvls") == GraphBandwidths("nvls", 6, 50.0, 60.0)
    assert graph_bandwidths(h100_box(8), "nvls") == GraphBandwidths("nvls", 8, 40.0, 60.0)
    # Pass 2 raises bwInter towards the NIC (48 behind PCIe Gen5) across nodes.
    assert graph_bandwidths(h100_nodes(2), "nvls_tree") == GraphBandwidths("nvls", 8, 40.0, 48.0)


def test_inter_node_search_is_bound_by_the_nics() -> None:
    # 8 NICs at 48 GB/s, no duplication on sm90 below 50 GB/s with more than 4 channels.
    assert graph_bandwidths(h100_nodes(2), "ring") == GraphBandwidths("ring", 8, 48.0, 48.0)
    # 2 EDR NICs behind Gen3 (12): 2 channels at 12; the tree doubles bwIntra on 2 nodes.
    assert graph_bandwidths(v100_nodes(2), "ring") == GraphBandwidths("ring", 2, 12.0, 12.0)
    assert graph_bandwidths(v100_nodes(2), "tree") == GraphBandwidths("balanced_tree", 2, 24.0, 12.0)
    # 8 channels at 48 do not fit 240 GB/s of NVLink (8 x 48 x 7/8 > 240): bwIntra stops at 30.
    assert graph_bandwidths(a100_nodes(16), "tree") == GraphBandwidths("balanced_tree", 8, 30.0, 24.0)


def test_one_gpu_per_node_uses_the_plain_tree_and_missing_hardware_has_no_channels() -> None:
    assert graph_bandwidths(one_gpu_nodes(4), "tree").pattern == "tree"
    assert graph_bandwidths(a100_nodes(2), "nvls").n_channels == 0
    assert graph_bandwidths(a100_nodes(2), "collnet_chain").n_channels == 0
    tiny = dataclasses.replace(one_gpu_nodes(2), nic_bandwidth_GBps=0.05)
    assert graph_bandwidths(tiny, "ring") == GraphBandwidths("ring", 1, 0.1, 0.1)  # NCCL's fallback


# --- latency ----------------------------------------------------------------------------------------


def test_ring_latency_one_node() -> None:
    s = h100_box(4)  # 2(p-1) = 6 NVLink steps
    assert latency_us(s, "all_reduce", "ring", "ll") == pytest.approx(6.6 + 6 * 0.6)
    assert latency_us(s, "all_reduce", "ring", "ll128") == pytest.approx(14.0 + 6 * 1.9)
    assert latency_us(s, "all_reduce", "ring", "simple") == pytest.approx(8.4 + 6 * 3.4)
    assert latency_us(s, "all_gather", "ring", "simple") == pytest.approx(8.4 + 3 * 3.4)
    assert latency_us(s, "broadcast", "ring", "simple") == pytest.approx(8.4 + 3.4)


def test_ring_latency_across_nodes_pays_the_net_overhead() -> None:
    # 16 ranks: 30 steps, 2 of them inter-node; intra steps cost at least the CPU's net overhead.
    s = h100_nodes(2)
    assert latency_us(s, "all_reduce", "ring", "ll") == pytest.approx(6.6 + 28 * 1.0 + 2 * 2.7)
    assert latency_us(s, "all_reduce", "ring", "simple") == pytest.approx(8.4 + 28 * 3.4 + 2 * 14.0)
    amd = dataclasses.replace(s, cpu_vendor="amd")  # 2 us x 3 for Simple > 3.4
    assert latency_us(amd, "all_reduce", "ring", "simple") == pytest.approx(8.4 + 28 * 6.0 + 2 * 14.0)
    slow = dataclasses.replace(s, net_overhead_us=5.0)
    assert latency_us(slow, "all_reduce", "ring", "ll") == pytest.approx(6.6 + 28 * 5.0 + 2 * 2.7)
    assert latency_us(s, "broadcast", "ring", "simple") == pytest.approx(8.4 + 14.0)


def test_one_gpu_per_node_uses_the_tree_net_latency_and_the_nic_latency_flushes() -> None:
    s = one_gpu_nodes(4)  # 6 steps, all inter-node, at NET Tree/LL latency 5.0
    assert latency_us(s, "all_reduce", "ring", "ll") == pytest.approx(6.6 + 6 * 5.0)
    s = dataclasses.replace(one_gpu_nodes(2), net_latency_us=1.0)  # Simple adds it twice
    assert latency_us(s, "all_reduce", "ring", "simple") == pytest.approx(8.4 + 2 * (14.0 + 2.0))
    assert latency_us(s, "all_reduce", "ring", "ll") == pytest.approx(6.6 + 2 * (5.0 + 1.0))


def test_tree_nvls_collnet_pat_latencies() -> None:
    assert latency_us(h100_nodes(2), "all_reduce", "tree", "ll") == pytest.approx(6.8 + 2 * (7 * 0.6 + 5.0))
    assert latency_us(a100_nodes(16), "all_reduce", "tree", "simple") == pytest.approx(
        8.4 + 2 * (7 * 4.0 + 4 * 14.0)
    )
    assert latency_us(h100_box(8), "all_reduce", "nvls", "simple") == pytest.approx(25.0)
    assert latency_us(h100_nodes(8, True), "all_reduce", "nvls", "simple") == pytest.approx(25.0 + 18.0)
    assert latency_us(h100_nodes(2), "all_reduce", "nvls_tree", "simple") == pytest.approx(25.0 + 2 * 20.9)
    sharp = h100_nodes(8, True)
    assert latency_us(sharp, "all_reduce", "collnet_direct", "simple") == pytest.approx(
        2 * (3.7 + 7 * 0.4) + 31.0
    )
    assert latency_us(sharp, "all_reduce", "collnet_chain", "simple") == pytest.approx(2 * 7 * 2.8 + 30.0)
    # PAT: 8 + log2(nodes) x interLat / 3.5 + 2.8 per rank; one GPU per node reads NET Tree (14).
    assert latency_us(one_gpu_nodes(8), "all_gather", "pat", "simple") == pytest.approx(
        8.0 + 3 * 14.0 / 3.5 + 8 * 2.8
    )


def test_power_hosts_price_pci_tree_like_ring() -> None:
    pci = NcclSystem("ampere", 1, 4, 24.0, intra_link="pci")
    power = dataclasses.replace(pci, cpu_arch="power")
    assert latency_us(pci, "all_reduce", "tree", "simple") == pytest.approx(8.4 + 2 * 3 * 4.0)
    assert latency_us(power, "all_reduce", "tree", "simple") == pytest.approx(8.4 + 2 * 3 * 5.7)


# --- bandwidth --------------------------------------------------------------------------------------


def test_ring_bandwidth_per_protocol() -> None:
    s = h100_box(4)  # 12 channels x 30 = 360 bus; algbw = bus x 4 / 6
    assert bus_bandwidth_GBps(s, "all_reduce", "ring", "simple") == pytest.approx(360.0)
    assert algorithm_bandwidth_GBps(s, "all_reduce", "ring", "simple") == pytest.approx(240.0)
    assert bus_bandwidth_GBps(s, "all_reduce", "ring", "ll") == pytest.approx(141.0)  # min(llMax, 180)
    assert bus_bandwidth_GBps(s, "all_reduce", "ring", "ll128") == pytest.approx(0.92 * 360)
    assert algorithm_bandwidth_GBps(s, "all_gather", "ring", "simple") == pytest.approx(360 * 4 / 3)
    assert algorithm_bandwidth_GBps(s, "broadcast", "ring", "simple") == pytest.approx(360.0)


def test_ll_ceiling_across_nodes_follows_the_cpu() -> None:
    intel, amd = a100_nodes(2), a100_nodes(2, cpu="amd")
    bus = 8 * 24.0  # 8 channels at 24 on 2 nodes
    assert bus_bandwidth_GBps(intel, "all_reduce", "ring", "ll") == pytest.approx(min(39.0, bus / 2))
    assert bus_bandwidth_GBps(amd, "all_reduce", "ring", "ll") == pytest.approx(22.5)
    assert bus_bandwidth_GBps(a100_nodes(4), "all_reduce", "ring", "ll") == pytest.approx(20.4)


def test_tree_bandwidth_per_protocol_and_pattern() -> None:
    s = h100_box(4)
    simple = min(0.92 * 360, 12 * 38.7)
    assert bus_bandwidth_GBps(s, "all_reduce", "tree", "simple") == pytest.approx(simple)
    assert algorithm_bandwidth_GBps(s, "all_reduce", "tree", "simple") == pytest.approx(simple / 2)
    assert bus_bandwidth_GBps(s, "all_reduce", "tree", "ll") == pytest.approx(simple / 3.8)
    assert bus_bandwidth_GBps(s, "all_reduce", "tree", "ll128") == pytest.approx(simple * 7 / 9)
    # Per-channel ceilings: Hopper 2 nodes 41.4 for Simple.
    assert bus_bandwidth_GBps(h100_nodes(2), "all_reduce", "tree", "simple") == pytest.approx(8 * 41.4)
    plain = GraphBandwidths("tree", 12, 30.0, 30.0)  # all NIC traffic through one GPU: x0.85
    assert bus_bandwidth_GBps(s, "all_reduce", "tree", "simple", plain) == pytest.approx(0.85 * simple)


def test_nvls_bandwidth() -> None:
    # 8 heads at 40: 40 x 0.85 x 7/8 x 2 per channel = 59.5; bus 476, algbw x 8/14.
    s = h100_box(8)
    assert bus_bandwidth_GBps(s, "all_reduce", "nvls", "simple") == pytest.approx(476.0)
    assert algorithm_bandwidth_GBps(s, "all_reduce", "nvls", "simple") == pytest.approx(272.0)
    gather = 8 * 40 * 0.85 * 7 / 8 * 7 / 8  # (ppn-1)/ppn instead of 2, and not converted
    assert algorithm_bandwidth_GBps(s, "all_gather", "nvls", "simple") == pytest.approx(gather)
    # NVLS Tree on 2 nodes: min(59.5, 2 x 48, perChMaxNVLSTree 57.7) per channel.
    assert bus_bandwidth_GBps(h100_nodes(2), "all_reduce", "nvls_tree", "simple") == pytest.approx(8 * 57.7)
    # NVLS across nodes (with CollNet) is bound by bwInter = 48.
    assert bus_bandwidth_GBps(h100_nodes(8, True), "all_reduce", "nvls", "simple") == pytest.approx(8 * 48.0)


def test_collnet_and_pat_bandwidth() -> None:
    sharp = h100_nodes(8, True)
    half = GraphBandwidths("collnet_direct", 4, 48.0, 48.0)  # 2 GPUs per head: f = 2 - 1/2
    assert bus_bandwidth_GBps(sharp, "all_reduce", "collnet_direct", "simple", half) == pytest.approx(
        4 * 48 / 1.5 * 0.85
    )
    assert algorithm_bandwidth_GBps(sharp, "all_gather", "collnet_direct", "simple", half) == pytest.approx(
        4 * 8 * min(48.0, 0.9 * 48.0)
    )
    assert algorithm_bandwidth_GBps(sharp, "all_reduce", "collnet_chain", "simple") == pytest.approx(
        8 * 48 * 0.5
    )
    s = one_gpu_nodes(8)  # 1 channel at 24, x0.75, not converted
    assert algorithm_bandwidth_GBps(s, "all_gather", "pat", "simple") == pytest.approx(24 * 0.75)


def test_time_tree_correction_and_ring_plateau() -> None:
    s = h100_box(4)
    lat, bw = 8.4 + 2 * 3 * 4.0, 0.92 * 360 / 2
    n = 256 * MiB  # log2(n / 64) = 22: Simple factor 0.9; 512 MiB is past the table
    assert TREE_CORRECTION["simple"][22] == 0.9
    assert algo_time_us(s, "all_reduce", "tree", "simple", n) == pytest.approx(lat + n / (1000 * bw * 0.9))
    assert algo_time_us(s, "all_reduce", "tree", "simple", 2 * n) == pytest.approx(lat + 2 * n / (1000 * bw))
    m = h100_nodes(2)  # 8 channels x 16 ranks x 64 B = 8192 B: the plateau starts there
    base = 8.4 + 28 * 3.4 + 2 * 14.0
    algbw = 8 * 48 * 16 / 30
    assert algo_time_us(m, "all_reduce", "ring", "simple", 8191) == pytest.approx(
        base + 8191 / (1000 * algbw)
    )
    assert algo_time_us(m, "all_reduce", "ring", "simple", 8192) == pytest.approx(
        1.4 * base + 8192 / (1000 * algbw)
    )
    v = v100_nodes(2)  # before sm80 the plateau is 1.9x
    assert algo_time_us(v, "all_reduce", "ring", "simple", GiB) - GiB / (1000 * 24 * 8 / 14) == pytest.approx(
        1.9 * latency_us(v, "all_reduce", "ring", "simple")
    )


def test_time_with_fewer_channels_and_errors() -> None:
    s = h100_box(4)
    assert algo_time_us(s, "all_reduce", "ring", "simple", GiB, n_channels=6) == pytest.approx(
        28.8 + GiB / (1000 * 120.0)
    )
    with pytest.raises(CollectiveError, match="not available"):
        algo_time_us(a100_nodes(1), "all_reduce", "nvls", "simple", GiB)
    with pytest.raises(CollectiveError, match="n_bytes"):
        algo_time_us(s, "all_reduce", "ring", "simple", -1)
    with pytest.raises(CollectiveError, match="n_channels"):
        algo_time_us(s, "all_reduce", "ring", "simple", 1, n_channels=0)


# --- enablement -------------------------------------------------------------------------------------


def test_ll128_only_where_nccl_enables_it() -> None:
    assert ll128_enabled(h100_box(4)) and ll128_enabled(v100_nodes(2))
    assert not ll128_enabled(NcclSystem("turing", 1, 2, 12.0, intra_link="pci"))
    assert not ll128_enabled(NcclSystem("ampere", 1, 4, 24.0, intra_link="pci"))
    assert ll128_enabled(dataclasses.replace(h100_nodes(2), nic_path="pxn"))
    assert not ll128_enabled(dataclasses.replace(a100_nodes(2), nic_path="pxn"))
    assert not ll128_enabled(dataclasses.replace(h100_nodes(2), nic_path="phb"))
    assert ll128_enabled(one_gpu_nodes(2))  # one GPU per node: no intra path at all


@pytest.mark.parametrize(
    ("system", "collective", "algorithm", "protocol", "words"),
    [
        (h100_box(4), "all_reduce", "nvls", "ll", "Simple only"),
        (a100_nodes(1), "all_reduce", "nvls", "simple", "NVSwitch"),
        (h100_nodes(2), "all_reduce", "nvls", "simple", "needs CollNet"),
        (h100_box(4), "all_reduce", "nvls_tree", "simple", "off on one node"),
        (h100_nodes(2), "all_reduce", "collnet_chain", "simple", "SHARP"),
        (
            dataclasses.replace(v100_nodes(2), collnet=True),
            "all_reduce",
            "collnet_direct",
            "simple",
            "NVSwitch",
        ),
        (h100_nodes(2), "all_gather", "pat", "simple", "one GPU per node"),
        (h100_box(4), "broadcast", "tree", "ll", "does not implement"),
        (h100_box(4), "all_reduce", "pat", "simple", "does not implement"),
        (NcclSystem("turing", 1, 2, 12.0, intra_link="pci"), "all_reduce", "ring", "ll128", "LL128"),
    ],
)
def test_unavailable_entries_say_why(
    system: NcclSystem, collective: str, algorithm: str, protocol: str, words: str
) -> None:
    assert words in unavailable_reason(system, collective, algorithm, protocol)  # type: ignore[arg-type]


def test_available_entries() -> None:
    assert unavailable_reason(one_gpu_nodes(4), "reduce_scatter", "pat", "simple") == ""
    assert unavailable_reason(h100_nodes(8, True), "all_reduce", "nvls", "simple") == ""
    assert unavailable_reason(h100_nodes(8, True), "all_gather", "collnet_direct", "simple") == ""


# --- the choices published runs report -------------------------------------------------------------

SIZES_256M_8G = [256 * MiB << k for k in range(6)]


def test_four_h100_pick_ring_simple_from_256_mb() -> None:
    for n in SIZES_256M_8G:
        choice = select(h100_box(4), "all_reduce", n)
        assert (choice.algorithm, choice.protocol) == ("ring", "simple")


def test_six_h100_pick_nvls_and_two_pick_ring() -> None:
    for n in SIZES_256M_8G:
        assert select(h100_box(6), "all_reduce", n).algorithm == "nvls"
        assert select(h100_box(2), "all_reduce", n).algorithm == "ring"
    assert select(h100_box(2), "all_reduce", GiB).protocol == "simple"
    assert select(h100_box(8), "all_reduce", GiB).algorithm == "nvls"  # Azure ND H100 v5


@pytest.mark.parametrize(
    "system",
    [
        h100_box(4),
        h100_box(8),
        h100_nodes(2),
        a100_nodes(16),
        v100_nodes(1),
        NcclSystem("turing", 1, 2, 12.0, intra_link="pci"),
    ],
)
def test_small_messages_pick_ll(system: NcclSystem) -> None:
    assert select(system, "all_reduce", 8).protocol == "ll"


def test_protocol_sweep_at_256_mib_on_four_h100() -> None:
    # Measured (NCCL_PROTO forced): Simple 1181.52 us, LL128 1288.51 us, LL 2741.05 us.
    n = 256 * MiB
    times = {p: select(h100_box(4), "all_reduce", n, protocols=p).time_us for p in ("simple", "ll128", "ll")}
    assert times["simple"] < times["ll128"] < times["ll"]
    measured = {"simple": 1181.52, "ll128": 1288.51, "ll": 2741.05}
    errors = {p: times[p] / measured[p] - 1 for p in measured}
    assert errors == pytest.approx({"simple": -0.029, "ll128": -0.037, "ll": 0.046}, abs=0.001)


def test_two_nodes_pick_a_tree_for_large_messages() -> None:
    assert select(v100_nodes(2), "all_reduce", GiB).algorithm == "tree"
    nebius = select(h100_nodes(2), "all_reduce", GiB)  # measured busbw 446 GB/s > what a ring can move
    assert (nebius.algorithm, nebius.protocol) == ("nvls_tree", "simple")
    assert nebius.time_us == pytest.approx(4511.97, rel=0.03)


def test_sharp_fabric_picks_collnet_where_forced_or_enabled() -> None:
    forced = select(h100_nodes(8, True), "all_reduce", GiB, algorithms="COLLNETCHAIN")
    assert forced.algorithm == "collnet_chain" and forced.time_us == pytest.approx(5808.0, rel=0.03)
    assert select(a100_nodes(16, collnet=True), "all_reduce", GiB).algorithm.startswith("collnet")
    assert not select(a100_nodes(16), "all_reduce", GiB).algorithm.startswith("collnet")


# --- restrictions, channels, the description --------------------------------------------------------


def test_restrictions_parse_like_nccl() -> None:
    assert parse_restriction(None, PROTOCOLS, "protocol") == frozenset(PROTOCOLS)
    assert parse_restriction("Ring,Tree", ALGORITHMS, "algorithm") == {"ring", "tree"}
    assert parse_restriction("^NVLS,NVLSTree", ALGORITHMS, "algorithm") == set(ALGORITHMS) - {
        "nvls",
        "nvls_tree",
    }
    assert parse_restriction(["collnet_chain", "CollnetDirect"], ALGORITHMS, "algorithm") == {
        "collnet_chain",
        "collnet_direct",
    }
    with pytest.raises(CollectiveError, match="valid: ll, ll128, simple"):
        parse_restriction("LL256", PROTOCOLS, "protocol")


def test_select_honours_restrictions_and_lists_every_entry() -> None:
    choice = select(h100_box(8), "all_reduce", GiB, algorithms="^nvls")
    assert choice.algorithm == "ring" and len(choice.candidates) == len(ALGORITHMS) * len(PROTOCOLS)
    off = {(c.algorithm, c.protocol): c.reason for c in choice.candidates}
    assert "NCCL_ALGO" in off[("nvls", "simple")] and off[("ring", "simple")] == ""
    assert select(h100_box(8), "all_reduce", GiB, protocols="LL").protocol == "ll"
    with pytest.raises(CollectiveError, match="no NCCL algorithm"):
        select(h100_box(4), "all_reduce", GiB, algorithms="nvls_tree")
    with pytest.raises(CollectiveError, match="unknown collective"):
        select(h100_box(4), "alltoall", GiB)  # type: ignore[arg-type]


def test_runtime_channels_shrink_for_small_messages() -> None:
    s = h100_box(4)
    assert runtime_channels(s, "ring", "simple", GiB) == (12, 512)
    # 12 x 512 x 64 B: below 393216 B NCCL drops channels, one per 32 KiB.
    assert runtime_channels(s, "ring", "simple", 3 * 512 * 64) == (3, 512)
    # Ring/LL's threshold is 8 B x nRanks per thread: 1 channel, threads halved down to 64.
    assert runtime_channels(s, "ring", "ll", 8) == (1, 64)
    assert runtime_channels(s, "nvls", "simple", 8) == (16, 640)
    pci = NcclSystem("turing", 1, 2, 12.0, intra_link="pci")  # ring bw x channels <= PCI: 256 threads
    assert runtime_channels(pci, "ring", "simple", GiB) == (1, 256)
    assert select(s, "all_reduce", 8).channels == 1


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"n_nodes": 1, "ranks_per_node": 1}, "at least 2 ranks"),
        ({"n_nodes": 2}, "nics_per_node"),
        ({"arch": "ampere", "nvls": True, "nvswitch": True}, "Hopper"),
        ({"arch": "kepler"}, "arch"),
        ({"intra_path_bandwidth_GBps": 999.0}, "intra_path"),
        ({"intra_link": "pci", "nvswitch": True}, "NVSwitch"),
        ({"net_latency_us": -1.0}, "latencies"),
    ],
)
def test_inconsistent_systems_are_refused(kwargs: dict[str, object], words: str) -> None:
    base: dict[str, object] = {
        "arch": "hopper",
        "n_nodes": 1,
        "ranks_per_node": 4,
        "intra_bandwidth_GBps": 100.0,
    }
    with pytest.raises(CollectiveError, match=words):
        NcclSystem(**{**base, **kwargs})  # type: ignore[arg-type]


# --- invariants over random systems -----------------------------------------------------------------


@st.composite
def systems(draw: st.DrawFn) -> NcclSystem:
    """Any consistent system: 1-16 nodes, 1-8 GPUs each, NVLink or PCI, any NICs and switches."""
    arch = draw(st.sampled_from(["volta", "turing", "ampere", "hopper", "blackwell"]))
    nodes = draw(st.integers(1, 16))
    ppn = draw(st.integers(2 if nodes == 1 else 1, 8))
    nvlink = draw(st.booleans())
    nvswitch = nvlink and draw(st.booleans())
    return NcclSystem(
        arch,  # type: ignore[arg-type]
        nodes,
        ppn,
        draw(st.floats(5.0, 800.0)),
        intra_link="nvlink" if nvlink else "pci",
        nvswitch=nvswitch,
        nvls=nvswitch and arch in ("hopper", "blackwell") and draw(st.booleans()),
        nics_per_node=draw(st.integers(1, 8)),
        nic_bandwidth_GBps=draw(st.floats(0.5, 100.0)),
        nic_path=draw(st.sampled_from(["pix", "pxb", "pxn", "phb", "sys"])),
        collnet=draw(st.booleans()),
        cpu_vendor=draw(st.sampled_from(["intel", "amd", "other"])),
        cpu_arch=draw(st.sampled_from(["x86", "power", "arm"])),
    )


@settings(max_examples=60, deadline=None)
@given(
    system=systems(),
    collective=st.sampled_from(COLLECTIVES),
    sizes=st.lists(st.integers(0, 1 << 34), min_size=2, max_size=6),
)
def test_time_is_monotone_in_size_for_a_fixed_choice(
    system: NcclSystem, collective: str, sizes: list[int]
) -> None:
    """Every entry grows with size; Tree all-reduce only across powers of two (its correction factor
    rises again past the mid-size dip, so inside NCCL's model it may drop at a power of two)."""
    sizes.sort()
    powers = [1 << k for k in range(0, 35, 3)]
    for algorithm in ALGORITHMS:
        for protocol in PROTOCOLS:
            if unavailable_reason(system, collective, algorithm, protocol):  # type: ignore[arg-type]
                continue
            grid = powers if algorithm == "tree" else sizes
            times = [algo_time_us(system, collective, algorithm, protocol, n) for n in grid]  # type: ignore[arg-type]
            assert times == sorted(times)
            assert times[0] >= 0
    chosen = [select(system, collective, n).time_us for n in powers]  # type: ignore[arg-type]
    assert chosen == sorted(chosen)


@settings(max_examples=60, deadline=None)
@given(
    system=systems(),
    collective=st.sampled_from(COLLECTIVES),
    n_bytes=st.integers(0, 1 << 34),
    algorithms=st.sets(st.sampled_from(ALGORITHMS), min_size=1),
    protocols=st.sets(st.sampled_from(PROTOCOLS), min_size=1),
)
def test_selection_is_the_fastest_allowed_entry(
    system: NcclSystem, collective: str, n_bytes: int, algorithms: set[str], protocols: set[str]
) -> None:
    try:
        choice = select(system, collective, n_bytes, algorithms=algorithms, protocols=protocols)  # type: ignore[arg-type]
    except CollectiveError:
        assert all(
            unavailable_reason(system, collective, a, p)  # type: ignore[arg-type]
            for a in algorithms
            for p in protocols
        )
        return
    assert choice.algorithm in algorithms and choice.protocol in protocols
    assert choice.channels >= 1 and choice.threads >= 1
    for candidate in choice.candidates:
        if candidate.enabled:
            assert candidate.algorithm in algorithms and candidate.protocol in protocols
            assert choice.time_us <= candidate.time_us  # type: ignore[operator]


@pytest.mark.parametrize(
    "system",
    [
        h100_box(8),
        h100_nodes(4),
        h100_nodes(4, collnet=True),
        a100_nodes(16),
        v100_nodes(2),
        one_gpu_nodes(8),
    ],
    ids=["h100-box", "h100x4", "h100x4-sharp", "a100x16", "v100x2", "1gpu-x8"],
)
def test_selects_table_times_are_algo_time_us_bit_for_bit(system: NcclSystem) -> None:
    """select works out what does not depend on the size once per system, collective and
    restriction (read back for the next sizes): every enabled entry's time is
    :func:`algo_time_us`'s exactly, every other has none and the reason it is off."""
    restrictions = ((None, None), ("^tree", None), ("ring,tree", "simple"), (None, "^ll128"))
    for collective in COLLECTIVES:
        for algorithms, protocols in restrictions:
            for n in (1, 8191, 8192, 3 << 20, GiB + 7):
                try:
                    choice = select(system, collective, n, algorithms=algorithms, protocols=protocols)
                except CollectiveError:
                    continue
                for entry in choice.candidates:
                    off = unavailable_reason(system, collective, entry.algorithm, entry.protocol)
                    if entry.reason:
                        assert entry.time_us is None
                        assert entry.reason == off or "restriction" in entry.reason
                    else:
                        assert not off
                        expected = algo_time_us(system, collective, entry.algorithm, entry.protocol, n)
                        assert entry.time_us == expected
