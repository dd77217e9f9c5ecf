"""``auto``: algorithm, protocol and channels per message size, the way NCCL's tuner picks them.

``auto`` is a registry entry like the schedules, but it stands for one of them: given the system
NCCL would detect on the placed ranks (:class:`~parplan.collectives.nccl_search.NcclSystem`, built
from the network by :mod:`parplan.topology.nccl_system`), :func:`choose` calls the tuner's
:func:`~parplan.collectives.nccl_tuner.select` for the message size and returns the schedule to
simulate with the chosen protocol, each channel's transfers moving at most NCCL's per-channel bus
bandwidth for that algorithm and protocol (a channel is one thread block; its copy loop, not the
link, bounds LL and LL128, and the topology search's per-channel speed bounds Simple):

- ``ring`` -> the ``ring`` schedule on the chosen number of channels;
- ``tree`` -> NCCL's tree (``nccl_tree``) when registered, else ``double_binary_tree``, pipelined in
  NCCL's chunks: a protocol's step buffer (:data:`CHUNK_BYTES`) per segment;
- ``nvls`` / ``nvls_tree`` / ``collnet_direct`` / ``collnet_chain`` -> the registered schedule of that
  name (:mod:`parplan.collectives.nvls`, ``nvls_tree``, ``collnet``). Unforced, ``auto`` only picks
  algorithms with a schedule of their own, and not NVLS Tree yet (:data:`FORCED_ONLY`): the tuner's
  choice among the rest; forced without one, a stand-in runs it and the label says so
  (:data:`STAND_INS`: ``auto=nvls_tree as nccl_tree/...`` were NVLS Tree unregistered).
  An in-network schedule (a reducing switch in its loop) moves each rank's whole buffer once each
  way, in one stream (NVLS), one per channel (CollNet's chain) or one per GPU of the node, each
  with its share (CollNet Direct), so its transfers run at most at
  NCCL's *algorithm* bandwidth for the choice (bus bandwidth x p / (2(p-1)) for NVLS, half the bus
  bandwidth for CollNet), shared by its channels, rather than a channel's share of the bus
  bandwidth. The tuner only offers them where the system has them (``hardware: {nvls: true}``,
  ``{sharp: true}``), and lowering places the switch rank on the switch the cluster declares;
- ``pat`` -> the ring (PAT only runs all-gather / reduce-scatter with one GPU per node).

The spec's ``algorithm`` and ``protocol`` restrict the choice as NCCL_ALGO and NCCL_PROTO do
(``"ring"``, ``"tree,ring"``, ``"^nvls"``; ``"ll128"``). Labels read ``auto=ring/ll128/8ch`` or
``auto=tree/simple/16ch/4seg``. Without a system (no GPU architecture in the cluster file) ``auto``
is the ring with NCCL's Simple protocol; :meth:`AutoAllReduce.build` and the closed form are the
ring's, so the registry-wide invariants hold for it too.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal, cast

from pydantic import Field, field_validator

from parplan.collectives import ring
from parplan.collectives.algorithm import (
    Algorithm,
    AlgorithmSpecBase,
    Groups,
    Traffic,
    UniformCost,
)
from parplan.collectives.nccl_search import NcclSystem
from parplan.collectives.nccl_tables import ALGORITHMS as NCCL_ALGORITHMS
from parplan.collectives.nccl_tables import PROTOCOLS, Collective
from parplan.collectives.nccl_tuner import (
    NcclChoice,
    algorithm_bandwidth_GBps,
    bus_bandwidth_GBps,
    graph_bandwidths,
    parse_restriction,
    select,
)
from parplan.collectives.schedule import Schedule
from parplan.errors import CollectiveError

CHUNK_BYTES: dict[str, int] = {
    "simple": 4 * 2**20 // 8,  # NCCL's 4 MiB Simple buffer over NCCL_STEPS = 8 steps
    "ll128": 120 * 640 * 8 * 8 // 8,  # 120 elements x 640 threads x 8 steps x 8 bytes, per step
    "ll": 8 * 512 * 8 * 16 // 8 // 2,  # 8 lines x 512 threads x 8 steps x 16 bytes, per step, half data
}
"""Bytes of data one pipelined tree segment carries per protocol: one step of NCCL's buffer."""
MAX_SEGMENTS = 64
"""Cap on tree segments, to bound the schedule's size (the pipeline is full long before)."""

SCHEDULES: dict[str, tuple[str, ...]] = {
    "ring": ("ring",),
    "tree": ("nccl_tree", "double_binary_tree"),
    "nvls": ("nvls",),
    "nvls_tree": ("nvls_tree",),
    "collnet_direct": ("collnet_direct",),
    "collnet_chain": ("collnet_chain",),
    "pat": ("pat",),
}
"""Per NCCL algorithm, the registered schedules that are it, best first."""
STAND_INS: dict[str, tuple[str, ...]] = {
    "ring": ("ring",),
    "tree": ("nccl_tree", "double_binary_tree"),
    "nvls": ("nvls", "ring"),
    "nvls_tree": ("nvls_tree", "nccl_tree", "double_binary_tree"),
    "collnet_direct": ("collnet_direct", "nccl_tree", "double_binary_tree"),
    "collnet_chain": ("collnet_chain", "nccl_tree", "double_binary_tree"),
    "pat": ("pat", "ring"),
}
"""Per NCCL algorithm, what runs it when forced: its schedules, then the closest stand-ins."""
FORCED_ONLY: frozenset[str] = frozenset({"nvls_tree"})
"""NCCL algorithms ``auto`` runs only when forced, though they have a schedule: NVLS Tree's is
proven on arrays, but its six pipelined stages (each step paying its latency in turn) and one NIC
per slice put it 2-5x over the published 2-node H100 run at 4-64 MiB, where NCCL's tuner would
pick it; unforced, ``auto`` takes what NCCL would run without it."""


class AutoAlgorithm(AlgorithmSpecBase):
    """NCCL's choice per size; ``algorithm`` / ``protocol`` restrict it as NCCL_ALGO / NCCL_PROTO."""

    name: Literal["auto"]
    algorithm: str | None = Field(default=None, description="NCCL_ALGO-style restriction, e.g. 'ring'")
    protocol: str | None = Field(default=None, description="NCCL_PROTO-style restriction, e.g. 'll128'")

    @field_validator("algorithm")
    @classmethod
    def _known_algorithm(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_restriction(value, NCCL_ALGORITHMS, "algorithm")
            except CollectiveError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("protocol")
    @classmethod
    def _known_protocol(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_restriction(value, PROTOCOLS, "protocol")
            except CollectiveError as exc:
                raise ValueError(str(exc)) from None
        return value


@dataclass(frozen=True)
class AutoChoice:
    """What ``auto`` runs at one size: the schedule's spec, the protocol, NCCL's pick and a label."""

    spec: AlgorithmSpecBase
    protocol: str
    label: str
    nccl: NcclChoice | None = None
    channel_rate_Bps: float = math.inf
    """NCCL's bus bandwidth per channel for the choice: the most one channel's transfers carry."""


def choose(
    spec: AutoAlgorithm,
    system: NcclSystem | None,
    size_bytes: float,
    registered: Any,
    collective: str = "all_reduce",
) -> AutoChoice:
    """The schedule and protocol ``auto`` runs for ``size_bytes`` on ``system``.

    ``registered`` maps names to registered algorithms (the registry of ``collective``), so that
    NCCL's tree, NVLS and CollNet run the registered schedules of those names when they exist.
    """
    if system is None:
        protocol = _forced_protocol(spec) or "simple"
        return AutoChoice(ring.RingAlgorithm(name="ring"), protocol, f"auto=ring/{protocol}")
    op = cast("Collective", collective)  # one of NCCL's: the registries hold no other collective
    nccl = select(system, op, max(int(size_bytes), 1), algorithms=spec.algorithm, protocols=spec.protocol)
    missing = [
        a for a in NCCL_ALGORITHMS if a in FORCED_ONLY or not any(n in registered for n in SCHEDULES[a])
    ]
    if spec.algorithm is None and nccl.algorithm in missing:
        # Unforced, auto picks among the algorithms parplan has schedules for: what NCCL would
        # run were the others unavailable.
        restriction = "^" + ",".join(missing)
        nccl = select(system, op, max(int(size_bytes), 1), algorithms=restriction, protocols=spec.protocol)
    name = next((n for n in STAND_INS[nccl.algorithm] if n in registered), "ring")
    concrete, detail = _concrete_spec(name, registered, nccl, size_bytes)
    stand_in = "" if name in (nccl.algorithm, *SCHEDULES[nccl.algorithm]) else f" as {name}"
    label = f"auto={nccl.algorithm}{stand_in}/{nccl.protocol}/{nccl.channels}ch{detail}"
    graph = graph_bandwidths(system, nccl.algorithm)
    bus_GBps = bus_bandwidth_GBps(system, op, nccl.algorithm, nccl.protocol, graph)
    per_channel_Bps = bus_GBps * 1e9 / graph.n_channels if graph.n_channels and bus_GBps > 0 else math.inf
    if registered[name].switch_capabilities:  # each rank's buffer goes once each way
        algbw_GBps = algorithm_bandwidth_GBps(system, op, nccl.algorithm, nccl.protocol, graph)
        # CollNet Direct: each GPU of a node carries its 1/ppn share of the buffer through its NIC.
        direct = nccl.algorithm == "collnet_direct"
        streams = int(getattr(concrete, "channels", None) or (system.ranks_per_node if direct else 1))
        per_channel_Bps = algbw_GBps * 1e9 / streams if algbw_GBps > 0 else math.inf
    return AutoChoice(concrete, nccl.protocol, label, nccl, per_channel_Bps)


def _forced_protocol(spec: AutoAlgorithm) -> str | None:
    """The one protocol a restriction leaves, if it leaves one."""
    if spec.protocol is None:
        return None
    allowed = parse_restriction(spec.protocol, PROTOCOLS, "protocol")
    return next(iter(allowed)) if len(allowed) == 1 else None


def _concrete_spec(
    name: str, registered: Any, nccl: NcclChoice, size_bytes: float
) -> tuple[AlgorithmSpecBase, str]:
    """The registered schedule's spec with NCCL's channels and chunking where it takes them."""
    found = registered[name]
    fields = found.spec_type.model_fields
    values: dict[str, Any] = {"name": name}
    detail = ""
    if "channels" in fields:
        values["channels"] = nccl.channels
    if "segments" in fields:
        per_tree = size_bytes / 2.0 / max(nccl.channels, 1)
        segments = max(1, min(MAX_SEGMENTS, math.ceil(per_tree / CHUNK_BYTES[nccl.protocol])))
        values["segments"] = segments
        detail = f"/{segments}seg"
    spec: AlgorithmSpecBase = found.spec_type.model_validate(values)
    return spec, detail


class AutoAllReduce(Algorithm[AutoAlgorithm]):
    """``auto`` in the registry: its schedule and closed form without a system are the ring's
    (what :func:`choose` picks when the cluster names no GPU architecture)."""

    name = "auto"
    spec_type = AutoAlgorithm

    def uses_groups(self, spec: AutoAlgorithm) -> bool:
        return True

    def build(
        self, spec: AutoAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        schedule = ring.ALL_REDUCE.build(ring.RingAlgorithm(name="ring"), num_ranks, num_elements, groups)
        return dataclasses.replace(schedule, algorithm=self.name)

    def closed_form_s(
        self, spec: AutoAlgorithm, num_ranks: int, size_bytes: float, cost: UniformCost, groups: Groups | None
    ) -> float:
        a, b, g = cost.alpha_s, cost.beta_s_per_byte, cost.gamma_s_per_byte
        return ring.ring_time_s(num_ranks, size_bytes, a, b, g)

    def traffic(
        self, spec: AutoAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        return ring.ALL_REDUCE.traffic(ring.RingAlgorithm(name="ring"), num_ranks, num_elements, groups)


ALL_REDUCE = AutoAllReduce()
