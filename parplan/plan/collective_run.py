"""What one collective call runs at one size, before it is lowered: :func:`resolve_run` asks NCCL's
tuner when the algorithm is ``auto`` (or runs a named algorithm as it is) and gives a
:class:`CollectiveRun` (the schedule's spec, protocol, per-channel rate ceiling and per-call cost);
:func:`call_overhead_s` is that per-call cost (the transport's call latency and NCCL's base
latency). ``parplan collective``, data-parallel buckets and the sharded plans' clock all time a
call this way; :mod:`parplan.plan.collective` lowers the schedule it names into task-graph work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from parplan.collectives.algorithm import AlgorithmSpecBase
from parplan.collectives.nccl_search import NcclSystem
from parplan.collectives.nccl_tables import BASE_LATENCY_US, HW_LATENCY_US
from parplan.config.cluster import TransportCosts
from parplan.taskgraph import PROTOCOLS

NVLS_CALL_US: tuple[float, ...] = tuple(
    max(0.0, nvls - 2 * ring)
    for nvls, ring in zip(HW_LATENCY_US["nvlink"]["nvls"], HW_LATENCY_US["nvlink"]["ring"], strict=True)
)
"""Per protocol, NCCL's NVLS latency (``hwLat[NVLINK][NVLS]``, which replaces the base latency in
NCCL's model) less the per-step latency the engine already charges the two hops of the slice that
goes up to the switch and comes back: so one slice costs what NCCL's tuner says."""


def call_overhead_s(
    transport: TransportCosts, algorithm: str, protocol: str | None, collective: str = "all_reduce"
) -> float:
    """What one collective call costs before its first message: the transport's call latency, and
    under ``nccl`` NCCL's base latency of the algorithm (``ring`` or ``tree``: the family whose
    table row applies) and protocol (Simple when none); for ``nvls``, :data:`NVLS_CALL_US`. An
    ``all_to_all`` is NCCL's grouped p2p calls, which have no base latency in NCCL's model: the
    call latency alone (each message pays its protocol's per-step latency in the engine)."""
    cost = transport.call_latency_s
    if transport.kind == "nccl" and collective != "all_to_all":
        index = PROTOCOLS.index(protocol or "simple")
        if algorithm == "nvls":
            return cost + NVLS_CALL_US[index] * 1e-6
        row = BASE_LATENCY_US["tree" if "tree" in algorithm else "ring"]
        cost += row[index] * 1e-6
    return cost


@dataclass(frozen=True)
class CollectiveRun:
    """What one call of a collective runs at one size: the schedule's spec, its protocol, the name
    reports show for ``auto``'s choice or a forced protocol (None: the spec's own label), each
    channel's payload rate ceiling (``inf``: none) and the per-call cost."""

    spec: AlgorithmSpecBase
    protocol: str | None
    chosen: str | None
    max_rate_Bps: float
    call_overhead_s: float

    @classmethod
    def as_named(
        cls,
        spec: AlgorithmSpecBase,
        transport: TransportCosts,
        protocol: str | None = None,
        collective: str = "all_reduce",
    ) -> CollectiveRun:
        """``spec`` run as it is (no tuner), with ``protocol`` when one is forced (and only then
        named), no rate ceiling and the transport's per-call cost."""
        label = None if protocol is None else f"{spec.name}/{protocol}"
        cost = call_overhead_s(transport, spec.name, protocol, collective)
        return cls(spec, protocol, label, math.inf, cost)


def resolve_run(
    spec: AlgorithmSpecBase,
    size_bytes: float,
    system: NcclSystem | None,
    transport: TransportCosts,
    protocol: str | None = None,
    collective: str = "all_reduce",
) -> CollectiveRun:
    """The run of ``spec`` at ``size_bytes``: ``auto`` asks NCCL's tuner on ``system``
    (:func:`parplan.collectives.auto_collectives.choose_for`, for any ``collective``); another
    algorithm runs as it is, with ``protocol`` when one is forced (and only then is it named).
    ``parplan collective`` and data-parallel buckets both time a call this way."""
    from parplan.collectives.auto import AutoAlgorithm
    from parplan.collectives.auto_collectives import choose_for
    from parplan.collectives.registry import algorithms

    if isinstance(spec, AutoAlgorithm):
        if protocol is not None and spec.protocol is None:
            spec = spec.model_copy(update={"protocol": protocol})
        choice = choose_for(spec, system, size_bytes, algorithms(collective), collective)
        cost = call_overhead_s(transport, choice.spec.name, choice.protocol, collective)
        return CollectiveRun(choice.spec, choice.protocol, choice.label, choice.channel_rate_Bps, cost)
    return CollectiveRun.as_named(spec, transport, protocol, collective)
