"""Cluster specs: devices, switches and links, written out or made by a generator.

A cluster is either explicit (``devices``, ``switches``, ``links``), made by one ``generator``
(``switch``, ``ring``, ``torus2d``, ``fat_tree``, ``hierarchical``), or both: a generator's devices
and links plus extra explicit ones. :mod:`parplan.topology` turns a spec into a graph; the names a
generator gives its devices are documented on each generator class.

Supported sizes (:data:`MAX_DEVICES`, :data:`MAX_NODES`, :data:`MAX_LINKS`): up to 65,536 devices,
262,144 devices and switches together, and 262,144 links. A spec beyond them is refused when it is
loaded, from its generator's arithmetic (:meth:`ClusterSpec.size`), before any graph is built;
validating and simulating a cluster at the limits takes seconds and a few hundred MB.

Every rate and capacity of a device or link is strictly positive (a zero would divide by zero or make
work free) and finite; the ranges are in :data:`parplan.config.units.LIMITS`.

Two parts of the cost model live here as data: a link's *class* (``nvlink``, ``pcie``,
``infiniband``, ``roce``, ``efa``, ``ethernet``, ``slingshot``) with the achievable efficiency of
its framing (:data:`LINK_EFFICIENCY`, overridable per link), and the cluster's *transport*
(:class:`TransportSpec`: ``ideal``, ``nccl``, ``gloo`` or ``mpi``) with per-kind defaults
(:data:`TRANSPORT_DEFAULTS`) a file may override. :mod:`parplan.engine.transport` charges them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from parplan.config.devices import Dtype, device_type
from parplan.config.units import (
    Bytes,
    Flops,
    PositiveBandwidth,
    PositiveBytes,
    PositiveFlopRate,
    Seconds,
)
from parplan.spec import Spec

MAX_DEVICES = 65_536
"""The most devices a cluster may have."""
MAX_NODES = 262_144
"""The most devices and switches (NICs included) a cluster may have together."""
MAX_LINKS = 262_144
"""The most links a cluster may have (a full-duplex link counts once)."""


@dataclass(frozen=True)
class ClusterSize:
    """How many devices, switches and links a cluster spec makes (computed, not built)."""

    devices: int = 0
    switches: int = 0
    links: int = 0

    def __add__(self, other: ClusterSize) -> ClusterSize:
        return ClusterSize(
            self.devices + other.devices, self.switches + other.switches, self.links + other.links
        )

    def check(self) -> None:
        """Raise :class:`ValueError` (a validation issue) when beyond the supported sizes."""
        counts = (
            (self.devices, "devices", MAX_DEVICES),
            (self.devices + self.switches, "devices and switches", MAX_NODES),
            (self.links, "links", MAX_LINKS),
        )
        over = [f"{count:,} {what}" for count, what, limit in counts if count > limit]
        if over:
            raise ValueError(
                f"makes {' and '.join(over)}; parplan supports clusters of up to {MAX_DEVICES:,} devices, "
                f"{MAX_NODES:,} devices and switches together, and {MAX_LINKS:,} links"
            )


def _ring_links(n: int) -> int:
    """Links of a ring of ``n`` nodes: none for one, one for two (not two parallel ones)."""
    return n if n > 2 else n - 1


GpuArch = Literal["volta", "turing", "ampere", "hopper", "blackwell"]


class MatmulEfficiencySpec(Spec):
    """How close GEMMs of a given size come to the dtype's peak: ``max x F / (F + half_at)`` for a
    GEMM of ``F = 2 m n k`` FLOPs (large GEMMs reach ``max``; one of ``half_at`` FLOPs half of it)."""

    max: float = Field(default=0.8, gt=0, le=1, description="share of peak large GEMMs reach")
    half_at_flops: Flops = Field(
        default=2e9, gt=0, alias="half_at", description="GEMM size (2mnk FLOPs) reaching half of max"
    )


def _typed_or_explicit(schema: dict[str, Any]) -> None:
    """JSON Schema: ``peak_flops`` and ``memory`` are required unless a ``type:`` names them."""
    required = [r for r in schema.get("required", []) if r not in ("peak_flops", "memory")]
    if required:
        schema["required"] = required
    else:
        schema.pop("required", None)
    schema["anyOf"] = [{"required": ["type"]}, {"required": ["peak_flops", "memory"]}]


class DeviceTemplate(Spec):
    """What one accelerator (or host) can do; generators stamp it onto every device they make.

    ``type: H100-SXM`` names an entry of :mod:`parplan.config.devices`; it fills ``peak_flops``,
    ``memory``, ``memory_bandwidth``, ``arch`` and the per-dtype peaks where the file leaves them out
    (``efficiency``, the whole-model path's share of peak, keeps its default).
    """

    model_config = ConfigDict(**Spec.model_config, json_schema_extra=_typed_or_explicit)

    device_type: str | None = Field(
        default=None, alias="type", description="a catalog device (H100-SXM, A100-80GB, MI300X, ...)"
    )

    peak_flop_per_s: PositiveFlopRate = Field(
        alias="peak_flops", description="peak compute, e.g. '312 TFLOP/s'"
    )
    memory_bytes: PositiveBytes = Field(alias="memory", description="device memory, e.g. '80 GiB'")
    efficiency: float = Field(
        default=0.5, gt=0, le=1, description="fraction of peak reached on training kernels (MFU)"
    )
    memory_bandwidth_Bps: PositiveBandwidth | None = Field(
        default=None,
        alias="memory_bandwidth",
        description="device memory bandwidth; sets the cost of reductions (gamma) when given",
    )
    speed_factor: float = Field(
        default=1.0, gt=0, le=1000, description="relative speed multiplier for heterogeneous devices"
    )
    arch: GpuArch | None = Field(
        default=None, description="GPU architecture, for NCCL's tuner (what `auto` picks); None: not a GPU"
    )
    peak_flop_per_s_by_dtype: dict[Dtype, PositiveFlopRate] | None = Field(
        default=None,
        alias="peak_flops_by_dtype",
        description="dense peak per matmul dtype for the per-kernel roofline, e.g. {bf16: '989 TFLOP/s'}",
    )
    matmul_efficiency: MatmulEfficiencySpec | None = Field(
        default=None, description="GEMM efficiency curve of the roofline (default: the catalog's, or 0.8)"
    )
    sm_count: int | None = Field(
        default=None, ge=1, le=100_000, description="streaming multiprocessors (wave quantisation)"
    )
    tdp_watts: float | None = Field(
        default=None, gt=0, le=100_000, description="board power the datasheet's peaks are sustained at (W)"
    )
    power_limit_watts: float | None = Field(
        default=None,
        gt=0,
        le=100_000,
        description="a power cap below the TDP (nvidia-smi -pl): tensor clocks drop to stay under it (W)",
    )

    @model_validator(mode="before")
    @classmethod
    def _from_catalog(cls, data: Any) -> Any:
        """Fill what a ``type:`` names and the file leaves out from the device catalog."""
        if not isinstance(data, dict) or data.get("type", data.get("device_type")) is None:
            return data
        name = data.get("type", data.get("device_type"))
        if not isinstance(name, str):
            return data
        try:
            entry = device_type(name)
        except KeyError as exc:
            raise ValueError(str(exc.args[0])) from None
        out = dict(data)

        def fill(alias: str, field: str, value: Any) -> None:
            if out.get(alias) is None and out.get(field) is None:
                out.pop(field, None)
                out[alias] = value

        fill("peak_flops", "peak_flop_per_s", entry.peak_flop_per_s)
        fill("memory", "memory_bytes", entry.memory_bytes)
        fill("memory_bandwidth", "memory_bandwidth_Bps", entry.memory_bandwidth_Bps)
        fill("sm_count", "sm_count", entry.sm_count)
        fill("tdp_watts", "tdp_watts", entry.tdp_watts)
        if entry.arch is not None:
            fill("arch", "arch", entry.arch)
        given = out.get("peak_flops_by_dtype", out.get("peak_flop_per_s_by_dtype"))
        peaks: dict[str, Any] = dict(entry.peak_flop_per_s_by_dtype)
        if isinstance(given, dict):
            peaks.update(given)
        out.pop("peak_flop_per_s_by_dtype", None)
        out["peak_flops_by_dtype"] = peaks if given is None or isinstance(given, dict) else given
        fill("matmul_efficiency", "matmul_efficiency", {"max": entry.matmul_max_efficiency})
        return out


class DeviceSpec(DeviceTemplate):
    """One named device of an explicit cluster."""

    name: str = Field(min_length=1)
    group: str | None = Field(
        default=None,
        description="the node (or other group) the device belongs to, for hierarchical collectives",
    )


class SwitchSpec(Spec):
    """A switch: it forwards traffic but computes nothing."""

    name: str = Field(min_length=1)


LinkClass = Literal["nvlink", "pcie", "infiniband", "roce", "efa", "ethernet", "slingshot"]
"""The kinds of link the cost model tells apart (their framing, and NCCL's per-step latencies)."""

LINK_EFFICIENCY: dict[str, float] = {
    "nvlink": 256 / (256 + 16),  # 256-byte payload per packet, 16 bytes of header and CRC
    "pcie": 256 / (256 + 24),  # 256-byte max payload per TLP; header 16, sequence + LCRC 6, framing 2
    "infiniband": 4096 / (4096 + 26),  # 4 KiB MTU; LRH 8 + BTH 12 + ICRC 4 + VCRC 2
    # 4 KiB MTU; Ethernet 14 + FCS 4 + preamble and gap 20, IP 20, UDP 8, BTH 12, ICRC 4
    "roce": 4096 / (4096 + 82),
    "efa": 8192 / (8192 + 110),  # SRD on 9 KB jumbo frames: 8 KiB payload, Ethernet/IP/UDP/SRD headers
    "ethernet": 1448 / 1538,  # TCP on a 1500 MTU: 1448 payload bytes of 1538 on the wire
    "slingshot": 4096 / (4096 + 56),  # Slingshot's HPC Ethernet: 4 KiB payload, reduced 32-byte header
}
"""Achievable share of a link's line rate that carries payload, per class (framing overhead only;
a link without a class carries 100%). A link's ``efficiency`` overrides its class's figure."""

NETWORK_CLASSES = frozenset({"infiniband", "roce", "efa", "ethernet", "slingshot"})
"""Link classes that leave the node (NCCL's NET hardware); ``nvlink`` and ``pcie`` stay inside."""


class LinkTemplate(Spec):
    """Bandwidth and latency of one link, as generators stamp it."""

    bandwidth_Bps: PositiveBandwidth = Field(alias="bandwidth", description="per direction, e.g. '25 GB/s'")
    latency_s: Seconds = Field(default=0.0, alias="latency", description="per hop, e.g. '2 us'")
    full_duplex: bool = Field(
        default=True, description="each direction has the full bandwidth (False: both share one channel)"
    )
    link_class: LinkClass | None = Field(
        default=None, alias="class", description="what the link is; sets its default efficiency"
    )
    efficiency: float | None = Field(
        default=None, gt=0, le=1, description="share of the line rate carrying payload (default: the class's)"
    )

    @property
    def achievable_efficiency(self) -> float:
        """The share of the line rate payload gets: the link's own figure, its class's, or 1."""
        if self.efficiency is not None:
            return self.efficiency
        return LINK_EFFICIENCY[self.link_class] if self.link_class else 1.0


class LinkSpec(LinkTemplate):
    """A link between two named endpoints (devices or switches)."""

    a: str = Field(min_length=1, description="one endpoint")
    b: str = Field(min_length=1, description="the other endpoint")


HostLinks = dict[str, LinkTemplate]
"""Links by host name (``h3``) that replace a generator's ``link`` for those hosts."""


def _check_host_links(host_links: HostLinks, hosts: int | None) -> HostLinks:
    """Every key of ``host_links`` names a generated host ``h0 .. h{hosts-1}``."""
    if hosts is None:
        return host_links
    for name in host_links:
        index = name[1:]
        if not (name.startswith("h") and index.isdigit() and int(index) < hosts and str(int(index)) == index):
            raise ValueError(f"{name!r} is not a host of this generator (h0 .. h{hosts - 1})")
    return host_links


class _Generator(Spec):
    """What every cluster generator shares: its size, computed without building it, and the check
    that it is supported."""

    def size(self) -> ClusterSize:
        """The devices, switches and links this generator makes."""
        raise NotImplementedError

    @model_validator(mode="after")
    def _supported(self) -> _Generator:
        self.size().check()
        return self


class SwitchGenerator(_Generator):
    """``hosts`` devices ``h0 .. h{N-1}``, each linked to one switch ``sw0``.

    ``host_links`` overrides ``link`` for named hosts (``h3: {bandwidth: 20 Mbit/s, latency:
    45 ms}``): an edge cluster whose clients reach the switch at different rates.
    """

    kind: Literal["switch"]
    hosts: int = Field(ge=1)
    device: DeviceTemplate
    link: LinkTemplate
    host_links: dict[str, LinkTemplate] = Field(
        default_factory=dict, description="per-host link (by host name) in place of 'link'"
    )

    @field_validator("host_links")
    @classmethod
    def _known_hosts(cls, host_links: HostLinks, info: ValidationInfo) -> HostLinks:
        return _check_host_links(host_links, info.data.get("hosts"))

    def size(self) -> ClusterSize:
        """``hosts`` devices, one switch, a link per host."""
        return ClusterSize(self.hosts, 1, self.hosts)


class RingGenerator(_Generator):
    """``hosts`` devices ``h0 .. h{N-1}``; ``h{i}`` is linked to ``h{i+1 mod N}``."""

    kind: Literal["ring"]
    hosts: int = Field(ge=2)
    device: DeviceTemplate
    link: LinkTemplate

    def size(self) -> ClusterSize:
        """``hosts`` devices on one ring."""
        return ClusterSize(self.hosts, 0, _ring_links(self.hosts))


class Torus2DGenerator(_Generator):
    """An ``x`` by ``y`` torus of devices ``h{i}_{j}``, each linked to its four wrap-around neighbours."""

    kind: Literal["torus2d"]
    x: int = Field(ge=1)
    y: int = Field(ge=1)
    device: DeviceTemplate
    link: LinkTemplate

    def size(self) -> ClusterSize:
        """``x y`` devices; ``y`` rings of ``x`` and ``x`` rings of ``y``."""
        return ClusterSize(self.x * self.y, 0, self.y * _ring_links(self.x) + self.x * _ring_links(self.y))


class FatTreeGenerator(_Generator):
    """A three-level k-ary fat tree (k even): k pods of k/2 edge and k/2 aggregation switches,
    (k/2)^2 core switches, and k^3/4 hosts ``h0 ..``; ``hosts`` may ask for fewer (filled in order)."""

    kind: Literal["fat_tree"]
    k: int = Field(ge=2)
    hosts: int | None = Field(default=None, ge=1)
    device: DeviceTemplate
    link: LinkTemplate = Field(description="host-to-edge link")
    uplink: LinkTemplate | None = Field(
        default=None, description="switch-to-switch links (default: same as link)"
    )
    host_links: dict[str, LinkTemplate] = Field(
        default_factory=dict, description="per-host link to its edge switch (by host name) in place of 'link'"
    )

    @field_validator("k")
    @classmethod
    def _even(cls, k: int) -> int:
        if k % 2:
            raise ValueError(f"must be even, got {k}")
        return k

    @field_validator("hosts")
    @classmethod
    def _fits(cls, hosts: int | None, info: ValidationInfo) -> int | None:
        k = info.data.get("k")
        if hosts is not None and k is not None and hosts > k**3 // 4:
            raise ValueError(f"a fat tree with k={k} has at most {k**3 // 4} hosts, asked {hosts}")
        return hosts

    @field_validator("host_links")
    @classmethod
    def _known_hosts(cls, host_links: HostLinks, info: ValidationInfo) -> HostLinks:
        k, hosts = info.data.get("k"), info.data.get("hosts")
        if hosts is None and k is not None:
            hosts = k**3 // 4
        return _check_host_links(host_links, hosts)

    def size(self) -> ClusterSize:
        """The hosts, ``k^2`` pod switches and ``(k/2)^2`` cores; a link per host, ``k^3/2`` above."""
        hosts = self.k**3 // 4 if self.hosts is None else self.hosts
        return ClusterSize(hosts, self.k**2 + (self.k // 2) ** 2, hosts + self.k**3 // 2)


class HierarchicalGenerator(_Generator):
    """``nodes`` nodes of ``devices_per_node`` devices ``n{i}.d{j}``.

    Inside node i every device links to the node's switch ``n{i}.sw`` with ``intra`` (NVLink/NVSwitch).
    Each node has ``nics_per_node`` NICs ``n{i}.nic{r}`` (or ``nics_per_device`` per device: the
    same as ``nics_per_node = nics_per_device x devices_per_node``). With at most one NIC per device,
    device j reaches NIC ``j mod nics_per_node``; with several (a p5 node: 32 NICs for 8 GPUs),
    device j owns NICs ``j k .. j k + k - 1`` (``k = nics_per_node / devices_per_node``, which must be
    whole). A device reaches its NICs over ``pcie`` (or directly when no device shares a NIC and no
    pcie link is given). ``fabric: switch`` links every NIC to one fabric switch ``fabric`` with
    ``nic``; ``fabric: rails`` is a rail-optimized fabric: NIC r of every node links to rail switch
    ``rail{r}`` with ``nic`` and the rails join at a ``spine`` switch with ``spine`` (default: a
    non-blocking rail uplink, ``nodes`` x the NIC bandwidth at the NIC latency), so cross-node
    traffic between devices of one local rank crosses one switch. Devices of one node share the
    group ``n{i}``.
    """

    kind: Literal["hierarchical"]
    nodes: int = Field(ge=1)
    devices_per_node: int = Field(ge=1)
    device: DeviceTemplate
    intra: LinkTemplate
    nics_per_node: int = Field(default=1, ge=1)
    nics_per_device: int | None = Field(
        default=None, ge=1, description="NICs each device owns (instead of nics_per_node)"
    )
    nic: LinkTemplate
    pcie: LinkTemplate | None = None
    fabric: Literal["switch", "rails"] = Field(
        default="switch",
        description="'switch': every NIC on one fabric switch; 'rails': NIC r of every node on rail switch r",
    )
    spine: LinkTemplate | None = Field(
        default=None, description="rail switch <-> spine link of a 'rails' fabric"
    )

    @model_validator(mode="before")
    @classmethod
    def _nics_from_per_device(cls, data: Any) -> Any:
        """``nics_per_device: k`` stands for ``nics_per_node: k x devices_per_node``."""
        if isinstance(data, dict):
            k, per_node = data.get("nics_per_device"), data.get("devices_per_node")
            if isinstance(k, int) and isinstance(per_node, int) and k >= 1 and per_node >= 1:
                given = data.get("nics_per_node")
                if given is None:
                    data = {**data, "nics_per_node": k * per_node}
                elif given != k * per_node:
                    raise ValueError(
                        f"nics_per_node ({given}) and nics_per_device ({k}) x devices_per_node ({per_node}) "
                        "disagree; give one of them"
                    )
        return data

    @model_validator(mode="after")
    def _nic_counts(self) -> HierarchicalGenerator:
        if self.nics_per_node > self.devices_per_node and self.nics_per_node % self.devices_per_node:
            raise ValueError(
                f"{self.nics_per_node} NICs per node for {self.devices_per_node} devices: more NICs than "
                "devices must be a whole number per device"
            )
        if self.spine is not None and self.fabric != "rails":
            raise ValueError("a spine link needs fabric: rails")
        return self

    @property
    def nics_per_device_owned(self) -> int:
        """NICs each device owns: ``nics_per_node / devices_per_node`` when NICs outnumber devices,
        else 1 (devices then share NICs, or each has one)."""
        return max(1, self.nics_per_node // self.devices_per_node)

    def size(self) -> ClusterSize:
        """Per node: its devices, a node switch and its NICs; two links per device, one per NIC."""
        n, d, r, k = self.nodes, self.devices_per_node, self.nics_per_node, self.nics_per_device_owned
        rails = self.fabric == "rails"  # a rail switch per NIC of a node, and a spine
        switches = n * (1 + r) + (r + 1 if rails else 1)
        return ClusterSize(n * d, switches, n * (d + d * k + r) + (r if rails else 0))


ClusterGenerator = Annotated[
    SwitchGenerator | RingGenerator | Torus2DGenerator | FatTreeGenerator | HierarchicalGenerator,
    Field(discriminator="kind"),
]


class HardwareFeatures(Spec):
    """What NCCL's topology detection finds that links alone do not say: whether the node switch is
    an NVSwitch, whether it can reduce (NVLink SHARP, NVLS), whether the network switches can reduce
    (InfiniBand SHARP, CollNet, with NCCL_COLLNET_ENABLE), and the host CPU's vendor."""

    nvswitch: bool = False
    nvls: bool = False
    sharp: bool = False
    cpu_vendor: Literal["intel", "amd", "other"] = "intel"


TransportKind = Literal["ideal", "nccl", "gloo", "mpi"]


class TransportSpec(Spec):
    """What a message costs beyond link latency and bytes over bandwidth (LogGP's o, handshakes).

    Every field left out takes the kind's default from :data:`TRANSPORT_DEFAULTS`:

    - ``send_overhead`` / ``recv_overhead``: CPU time the sender and the receiver spend per message;
    - ``call_latency``: software and launch cost paid once per collective call;
    - ``eager_threshold``: messages above it wait a rendezvous round trip (request to send, clear to
      send) before their bytes move; ``null`` never.

    ``nccl`` adds its protocols' per-step latencies (LL / LL128 / Simple, per link type) and per-call
    base latencies from NCCL's tuner tables; those are not fields here.
    """

    kind: TransportKind
    send_overhead_s: Seconds | None = Field(default=None, alias="send_overhead")
    recv_overhead_s: Seconds | None = Field(default=None, alias="recv_overhead")
    call_latency_s: Seconds | None = Field(default=None, alias="call_latency")
    eager_threshold_bytes: Bytes | None = Field(default=None, alias="eager_threshold")

    def resolved(self) -> TransportCosts:
        """The costs with the kind's defaults filled in."""
        base = TRANSPORT_DEFAULTS[self.kind]
        return TransportCosts(
            kind=self.kind,
            send_overhead_s=base.send_overhead_s if self.send_overhead_s is None else self.send_overhead_s,
            recv_overhead_s=base.recv_overhead_s if self.recv_overhead_s is None else self.recv_overhead_s,
            call_latency_s=base.call_latency_s if self.call_latency_s is None else self.call_latency_s,
            eager_threshold_bytes=(
                base.eager_threshold_bytes
                if self.eager_threshold_bytes is None
                else self.eager_threshold_bytes
            ),
        )


@dataclass(frozen=True)
class TransportCosts:
    """A transport with every cost known (see :class:`TransportSpec`); ``inf`` threshold: never."""

    kind: TransportKind
    send_overhead_s: float = 0.0
    recv_overhead_s: float = 0.0
    call_latency_s: float = 0.0
    eager_threshold_bytes: float = math.inf


TRANSPORT_DEFAULTS: dict[str, TransportCosts] = {
    # Pure alpha-beta: the closed forms' model.
    "ideal": TransportCosts("ideal"),
    # GPU kernels post the messages: no CPU overhead per message; per-step latencies and the
    # per-call base latency come from NCCL's protocol tables (engine per message, lowering per
    # call). On top, each call pays its launch: NCCL's host-side enqueue plus CUDA's kernel launch,
    # ~5 us on current drivers and CPUs (NCCL's tuner leaves it out; back-to-back small calls pay it).
    "nccl": TransportCosts("nccl", call_latency_s=5e-6),
    # Gloo over TCP: a send and a receive syscall plus a copy each side (~5 us on a modern x86 core),
    # ~20 us to enter a collective (Python, the context's lookups, buffer registration); messages
    # above 64 KiB wait for the receiver to post its buffer (a round trip) before streaming.
    "gloo": TransportCosts("gloo", 5e-6, 5e-6, 20e-6, 64 * 1024.0),
    # MPI over RDMA-capable NICs: ~1 us per message each side, ~2 us per call, rendezvous above
    # 64 KiB (the usual default of Open MPI's ob1/UCX and MPICH's eager limits).
    "mpi": TransportCosts("mpi", 1e-6, 1e-6, 2e-6, 64 * 1024.0),
}
"""Per-kind defaults of :class:`TransportSpec`; each figure is documented beside it."""


class CalibrationLog(Spec):
    """One measured log a calibration fitted: where it was, its hash, what it measured."""

    path: str = Field(min_length=1, description="the log as it was named to parplan calibrate")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the log's bytes")
    collective: str = Field(min_length=1)
    ranks: int = Field(ge=1)
    sizes: int = Field(ge=1, description="sizes fitted")


class CalibrationRecord(Spec):
    """What ``parplan calibrate`` fitted into a cluster file, from which logs, and when.

    A calibrated cluster file is the base file written out whole with the fitted values in place
    (link ``efficiency`` per class crossed, ``transport`` latencies) plus this record: it loads like
    any cluster file, and stays right even if the base file changes later. The record itself does
    not change the model; it says where the numbers came from. ``fitted`` and ``kept`` map each
    parameter to its value in human units (``kept``: with the reason it was not fitted).
    """

    base: str = Field(min_length=1, description="the cluster file the calibration started from")
    base_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    date: str = Field(min_length=1, description="when it was fitted (ISO 8601, UTC)")
    method: str = Field(min_length=1)
    logs: tuple[CalibrationLog, ...] = Field(min_length=1)
    fitted: dict[str, str] = Field(default_factory=dict)
    kept: dict[str, str] = Field(default_factory=dict)
    median_error_pct: dict[str, float] = Field(
        default_factory=dict, description="median |error| over the fitted sizes: before and after"
    )


class ClusterSpec(Spec):
    """A cluster: a generator, explicit devices/switches/links, or both."""

    name: str = "cluster"
    description: str | None = None
    generator: ClusterGenerator | None = None
    devices: tuple[DeviceSpec, ...] = ()
    switches: tuple[SwitchSpec, ...] = ()
    links: tuple[LinkSpec, ...] = ()
    routing: Literal["auto", "shortest", "dmodk"] = Field(
        default="auto",
        description=(
            "route choice among equal shortest paths: 'shortest' takes the first (stable), 'dmodk' "
            "spreads by destination index mod the number of next hops, as InfiniBand's fat-tree "
            "routing does; 'auto' is dmodk for a fat_tree generator and shortest otherwise"
        ),
    )
    hardware: HardwareFeatures = Field(
        default_factory=HardwareFeatures, description="NVSwitch, NVLS and SHARP capabilities, CPU vendor"
    )
    transport: TransportSpec | None = Field(
        default=None,
        description=(
            "per-message and per-call costs; when left out: 'nccl' if a link is of class nvlink, "
            "infiniband, roce, efa or slingshot (a GPU cluster), 'gloo' if every classed link is "
            "ethernet or pcie (a CPU cluster on TCP), 'ideal' when no link has a class"
        ),
    )
    calibration: CalibrationRecord | None = Field(
        default=None, description="what parplan calibrate fitted into this file (a record only)"
    )

    @field_validator("devices")
    @classmethod
    def _unique_devices(cls, devices: tuple[DeviceSpec, ...]) -> tuple[DeviceSpec, ...]:
        _no_repeats([d.name for d in devices], set())
        return devices

    @field_validator("switches")
    @classmethod
    def _unique_switches(
        cls, switches: tuple[SwitchSpec, ...], info: ValidationInfo
    ) -> tuple[SwitchSpec, ...]:
        _no_repeats([s.name for s in switches], {d.name for d in info.data.get("devices", ())})
        return switches

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        if self.generator is None and not self.devices:
            raise ValueError("a cluster needs a generator or at least one device")
        self.size().check()
        return self

    def size(self) -> ClusterSize:
        """The devices, switches and links the generator and the explicit lists make together."""
        explicit = ClusterSize(len(self.devices), len(self.switches), len(self.links))
        return explicit if self.generator is None else self.generator.size() + explicit


def _no_repeats(names: list[str], taken: set[str]) -> None:
    seen = set(taken)
    for name in names:
        if name in seen:
            raise ValueError(f"name {name!r} is used twice")
        seen.add(name)


GPU_FABRIC_CLASSES = frozenset({"nvlink", "infiniband", "roce", "efa", "slingshot"})


def default_transport(link_classes: set[str]) -> TransportKind:
    """The transport of a cluster whose file names none, from the classes of its links:
    ``nccl`` with a GPU fabric, ``gloo`` with only Ethernet/PCIe, ``ideal`` with no classes."""
    if link_classes & GPU_FABRIC_CLASSES:
        return "nccl"
    return "gloo" if link_classes else "ideal"
