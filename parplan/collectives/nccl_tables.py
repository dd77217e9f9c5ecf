"""The constant tables of NCCL's tuner, as NCCL 2.30.7 ships them (src/graph/tuning.cc, search.cc, topo.h).

Pure data, read by :mod:`parplan.collectives.nccl_search` (the topology search model) and
:mod:`parplan.collectives.nccl_tuner` (the time model and the selection). Units are NCCL's: latency
in microseconds, bandwidth in GB/s (1e9 bytes per second). Every table is keyed by parplan's names
(``ring``, ``ll128``, ``hopper`` ...) instead of NCCL's enum indices; the comments say where a value
comes from and where older NCCL releases (2.8, 2.18) differed, because the published measurements
this model is checked against ran on those.
"""

from __future__ import annotations

from typing import Final, Literal

Algorithm = Literal["tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"]
Protocol = Literal["ll", "ll128", "simple"]
Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"]
Arch = Literal["volta", "turing", "ampere", "hopper", "blackwell"]
Hardware = Literal["nvlink", "pci", "net"]

#: NCCL's algorithm enum order (NCCL_ALGO_TREE = 0 ... NCCL_ALGO_PAT = 6): the tuner scans in this
#: order and keeps the first strict minimum, so ties go to the earlier algorithm.
ALGORITHMS: Final[tuple[Algorithm, ...]] = (
    "tree",
    "ring",
    "collnet_direct",
    "collnet_chain",
    "nvls",
    "nvls_tree",
    "pat",
)
#: NCCL's protocol enum order (LL = 0, LL128 = 1, Simple = 2).
PROTOCOLS: Final[tuple[Protocol, ...]] = ("ll", "ll128", "simple")
COLLECTIVES: Final[tuple[Collective, ...]] = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
)

#: Compute capability of each architecture parplan names (sm70 .. sm100). Turing (sm75) is here for
#: consumer PCIe cards: NCCL indexes its tables by Volta for it and never enables LL128 on it.
COMPUTE_CAPABILITY: Final[dict[Arch, int]] = {
    "volta": 70,
    "turing": 75,
    "ampere": 80,
    "hopper": 90,
    "blackwell": 100,
}

#: Which row of the per-architecture tables an architecture reads (NCCL's compCapIndex).
TABLE_ROW: Final[dict[Arch, int]] = {"volta": 0, "turing": 0, "ampere": 1, "hopper": 2, "blackwell": 3}

# --- Topology search (search.cc ~L1051-1067, topo.h L17-35) -----------------------------------------

#: Per-channel speeds the search tries, highest first, inside one node and across nodes. The tails
#: of the sm90 and sm100 inter-node lists past the values the notes print are taken to repeat the
#: pre-Hopper tail (they only matter below 3 GB/s per channel).
SPEEDS_INTRA_GBps: Final[dict[str, tuple[float, ...]]] = {
    "pre_hopper": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    "sm90": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    "sm100": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
}
SPEEDS_INTER_GBps: Final[dict[str, tuple[float, ...]]] = {
    "pre_hopper": (
        48.0,
        30.0,
        28.0,
        24.0,
        20.0,
        18.0,
        15.0,
        12.0,
        10.0,
        9.0,
        7.0,
        6.0,
        5.0,
        4.0,
        3.0,
        2.4,
        1.2,
        0.24,
        0.12,
    ),
    "sm90": (
        48.0,
        45.0,
        42.0,
        40.0,
        30.0,
        24.0,
        22.0,
        20.0,
        17.5,
        15.0,
        12.0,
        6.0,
        3.0,
        2.4,
        1.2,
        0.24,
        0.12,
    ),
    "sm100": (
        96.0,
        86.0,
        80.0,
        48.0,
        45.1,
        42.0,
        40.0,
        30.0,
        24.0,
        22.0,
        20.0,
        17.5,
        15.0,
        12.0,
        6.0,
        3.0,
        2.4,
        1.2,
        0.24,
        0.12,
    ),
}

#: Bandwidth of one NVLink as NCCL's topology assigns it (topo.h): SM60 18, SM70 20, SM80 20,
#: SM86 12, SM90 20.6, SM100 40.1 GB/s. Turing falls in NCCL's ">= SM70" branch.
NVLINK_GBps: Final[dict[Arch, float]] = {
    "volta": 20.0,
    "turing": 20.0,
    "ampere": 20.0,
    "hopper": 20.6,
    "blackwell": 40.1,
}
#: NCCL's per-lane PCIe speed code by generation; a link is ``width * code / 80`` GB/s (topo.cc
#: ~L657), so Gen3 x16 is 12, Gen4 x16 24 and Gen5 x16 48 GB/s.
PCI_LANE_CODE: Final[dict[int, float]] = {1: 15.0, 2: 30.0, 3: 60.0, 4: 120.0, 5: 240.0, 6: 480.0}

#: Channel limits: ring/tree graphs search up to MAXCHANNELS/2 = 16 channels; NVLS and CollNet
#: Direct have at most one head per GPU (CollNet Direct at most NCCL_MAX_DIRECT_ARITY + 1 = 8).
MAX_CHANNELS: Final = 16
MAX_DIRECT_HEADS: Final = 8
#: Runtime NVLS channels (NCCL_NVLS_NCHANNELS default): NVLS work is never spread thinner.
NVLS_CHANNELS: Final = 16

# --- Latencies (tuning.cc ncclTunerConstantsDefaults), microseconds, per protocol -------------------

#: Base latency per call, LL / LL128 / Simple. NCCL 2.8 had Tree Simple 0 (2.30.7: 8.4).
BASE_LATENCY_US: Final[dict[Algorithm, tuple[float, float, float]]] = {
    "tree": (6.8, 14.0, 8.4),
    "ring": (6.6, 14.0, 8.4),
    "collnet_direct": (0.0, 0.0, 0.0),
    "collnet_chain": (0.0, 0.0, 0.0),
    "nvls": (0.0, 0.0, 0.0),
    "nvls_tree": (0.0, 0.0, 0.0),
    "pat": (8.0, 8.0, 8.0),
}

#: Hardware latency per step, LL / LL128 / Simple. Entries NCCL leaves empty ("-": the protocol is
#: never enabled for that algorithm) are 0. NCCL 2.8 had PCI Tree Simple 6 (2.30.7: 4).
HW_LATENCY_US: Final[dict[Hardware, dict[Algorithm, tuple[float, float, float]]]] = {
    "nvlink": {
        "tree": (0.6, 1.25, 4.0),
        "ring": (0.6, 1.9, 3.4),
        "collnet_direct": (0.0, 0.0, 3.7),
        "collnet_chain": (0.0, 0.0, 2.8),
        "nvls": (0.0, 0.0, 25.0),
        "nvls_tree": (0.0, 0.0, 25.0),
        "pat": (0.0, 0.0, 4.0),
    },
    "pci": {
        "tree": (1.0, 1.9, 4.0),
        "ring": (1.0, 2.5, 5.7),
        "collnet_direct": (0.0, 0.0, 3.7),
        "collnet_chain": (0.0, 0.0, 2.8),
        "nvls": (0.0, 0.0, 0.0),
        "nvls_tree": (0.0, 0.0, 0.0),
        "pat": (0.0, 0.0, 4.0),
    },
    "net": {
        "tree": (5.0, 8.5, 14.0),
        "ring": (2.7, 4.0, 14.0),
        "collnet_direct": (0.0, 0.0, 31.0),
        "collnet_chain": (0.0, 0.0, 30.0),
        "nvls": (0.0, 0.0, 18.0),
        "nvls_tree": (0.0, 0.0, 20.9),
        "pat": (0.0, 0.0, 14.0),
    },
}

#: Software cost of one network step (getNetOverhead): Intel x86 1 us, AMD x86 2 us, others 1 us;
#: tripled for Simple. NCCL_NET_OVERHEAD (ns) overrides it.
NET_OVERHEAD_US: Final[dict[str, float]] = {"intel": 1.0, "amd": 2.0, "other": 1.0}
NET_OVERHEAD_SIMPLE_FACTOR: Final = 3.0

#: Ring/Simple all-reduce across nodes: latency multiplier once every rank's share of a channel
#: reaches 64 bytes ("plateau effect"), 1.4 on sm80+ and 1.9 before.
RING_PLATEAU_FACTOR: Final[tuple[float, float]] = (1.9, 1.4)
RING_PLATEAU_MIN_BYTES: Final = 64  # bytes per rank and channel

# --- Bandwidth caps (tuning.cc ~L165-210), GB/s, columns: 1 node / 2 nodes / 3+ nodes --------------

#: LL's ceiling. One node reads the GPU's row; several nodes read row 0 (Intel and other CPUs) or
#: row 1 (AMD), whatever the GPU: LL's speed across nodes is bound by the host's memory ordering.
LL_MAX_GBps: Final[tuple[tuple[float, float, float], ...]] = (
    (39.0, 39.0, 20.4),  # Volta (and Intel hosts across nodes)
    (87.7, 22.5, 19.0),  # Ampere (and AMD hosts across nodes)
    (141.0, 45.0, 35.0),  # Hopper
    (282.0, 90.0, 70.0),  # Blackwell
)
PER_CHANNEL_MAX_RING_LL128_GBps: Final[tuple[tuple[float, float, float], ...]] = (
    (20.0, 20.0, 20.0),
    (20.0, 20.0, 20.0),
    (36.7, 36.7, 36.7),
    (40.0, 40.0, 40.0),
)
PER_CHANNEL_MAX_TREE_LL128_GBps: Final[tuple[tuple[float, float, float], ...]] = (
    (20.0, 20.0, 20.0),
    (20.0, 20.0, 20.0),
    (36.7, 36.7, 29.0),
    (55.6, 31.67, 20.0),
)
PER_CHANNEL_MAX_TREE_GBps: Final[tuple[tuple[float, float, float], ...]] = (
    (26.5, 18.5, 10.0),
    (24.0, 23.6, 17.8),
    (38.7, 41.4, 36.0),
    (70.0, 42.8, 24.0),
)
PER_CHANNEL_MAX_NVLS_TREE_GBps: Final[tuple[tuple[float, float, float], ...]] = (
    (0.0, 0.0, 0.0),
    (0.0, 0.0, 0.0),
    (0.0, 57.7, 45.5),
    (0.0, 96.0, 80.0),
)
#: Share of the NVLink bandwidth NVLS reductions achieve inside the switch.
NVLS_EFFICIENCY: Final[tuple[float, ...]] = (0.0, 0.0, 0.85, 0.74)

#: Protocol refinements of the bus bandwidth (ncclTopoTuneModel). NCCL 2.8 .. 2.2x scaled Ring/LL
#: by 1/4 (1/3 for one-node all-gather / reduce-scatter) and Ring/LL128 by 0.7 with one GPU per node.
RING_LL_FACTOR: Final = 0.5
LL128_FACTOR: Final = 0.92
TREE_FACTOR: Final = 0.92
TREE_LL_DIVISOR: Final = 3.8
TREE_LL128_FACTOR_ONE_NODE: Final = 7.0 / 9.0
TREE_LL128_FACTOR_MULTI_NODE: Final = 120.0 / 128.0
SIMPLE_TREE_PATTERN_FACTOR: Final = 0.85
PAT_FACTOR: Final = 0.75
COLLNET_DIRECT_SM90_FACTOR: Final = 0.85
COLLNET_DIRECT_GATHER_INTER_FACTOR: Final = 0.9
COLLNET_DIRECT_ARITY_LATENCY_US: Final = 0.4

#: Trees stray from the model at medium sizes; NCCL scales Tree all-reduce bandwidth by this factor,
#: indexed by floor(log2(bytes / 64)) for 64 B .. 256 MiB (23 entries per protocol, LL/LL128/Simple).
#: The values are those of tuning.cc since NCCL 2.12 (the notes describe the shape: 0.4 .. 1.0, a dip
#: in the middle sizes); they are not in the notes.
TREE_CORRECTION: Final[dict[Protocol, tuple[float, ...]]] = {
    "ll": (
        1.0,
        1.0,
        1.0,
        1.0,
        0.9,
        0.8,
        0.7,
        0.7,
        0.7,
        0.7,
        0.6,
        0.5,
        0.4,
        0.4,
        0.5,
        0.6,
        0.7,
        0.8,
        0.9,
        1.0,
        1.0,
        1.0,
        1.0,
    ),
    "ll128": (
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
        0.9,
        0.8,
        0.8,
        0.8,
        0.7,
        0.6,
        0.6,
        0.6,
        0.6,
        0.6,
        0.6,
        0.8,
        0.9,
        0.9,
        0.9,
        0.9,
        1.0,
        1.0,
    ),
    "simple": (
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.8,
        0.7,
        0.6,
        0.6,
        0.5,
        0.5,
        0.5,
        0.5,
        0.6,
        0.7,
        0.8,
        0.7,
        0.7,
        0.8,
        0.9,
        0.9,
    ),
}

# --- Channel tuning for small messages (enqueue.cc, device.h, comm.h L49-51) -----------------------

#: Most threads per channel: Simple 512 (Ring uses 256 when ring bandwidth x channels <= PCI_BW),
#: LL 512, LL128 640; NVLS and CollNet always run 640.
MAX_THREADS: Final[dict[Protocol, int]] = {"ll": 512, "ll128": 640, "simple": 512}
MAX_THREADS_NVLS_COLLNET: Final = 640
RING_SIMPLE_FEW_THREADS: Final = 256
PCI_BW_GBps: Final = 12.0
#: Bytes each thread must have before NCCL keeps another channel; Ring/LL's is multiplied by nRanks.
THREAD_THRESHOLD_BYTES: Final[dict[Protocol, int]] = {"ll": 8, "ll128": 8, "simple": 64}
