"""``auto`` for reduce-scatter, all-gather, broadcast and reduce: NCCL's pick per size, as for all-reduce.

NCCL's tuner (:mod:`parplan.collectives.nccl_tuner`) already times these collectives: rings for all
four (broadcast and reduce as pipelined chains), NVLS / CollNet Direct / PAT for all-gather and
reduce-scatter where the hardware has them. :func:`choose_for` asks it through
:func:`parplan.collectives.auto.choose` (which picks among the schedules registered for the
collective, with stand-ins where one is missing) and fits the choice to the collective's own
schedule: the ring reduce-scatter and all-gather (:mod:`parplan.collectives.ring_halves`) take
NCCL's channels; the ring broadcast and reduce
(:mod:`parplan.collectives.ring_rooted`) take NCCL's channels and one segment per step of the
protocol's buffer (:data:`~parplan.collectives.auto.CHUNK_BYTES`) of each channel's part, so labels
read ``auto=ring/simple/8ch/16seg``. The root of a broadcast or reduce is rank 0.

An all-to-all is not in NCCL's tuner: NCCL always runs it as point-to-point sends and receives, so
``auto`` is ``pairwise`` (:mod:`parplan.collectives.all_to_all`) on NCCL's p2p channels with NCCL's
p2p protocol (LL up to :data:`~parplan.collectives.all_to_all.P2P_LL_THRESHOLD_BYTES` per peer,
Simple above; :func:`choose_all_to_all`), labelled ``auto=pairwise/simple/2ch``. Without a system
it is the cheaper of ``pairwise`` and ``bruck`` by their closed forms, which in this engine's
postal model (a rank's concurrent messages pay one latency) is always ``pairwise``: Bruck pays a
latency per round and moves ``sum popcount(d) >= p-1`` blocks.

Without a system (no GPU architecture in the cluster file) ``auto`` is the collective's ring with
NCCL's Simple protocol: :meth:`AutoCollective.build`, the closed form and the volumes are the
ring's with its defaults, so the registry-wide invariants hold for it too.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, ClassVar

from parplan.collectives import all_to_all, all_to_all_bruck, ring_halves, ring_rooted
from parplan.collectives.algorithm import Algorithm, AlgorithmSpecBase, Groups, Traffic, UniformCost
from parplan.collectives.auto import CHUNK_BYTES, AutoAlgorithm, AutoChoice, _forced_protocol, choose
from parplan.collectives.nccl_search import NcclSystem
from parplan.collectives.schedule import Schedule

_SEGMENTS_SUFFIX = re.compile(r"/\d+seg$")


def chain_segments(size_bytes: float, channels: int, protocol: str) -> int:
    """Segments of each channel of a ring broadcast or reduce: one per step of the protocol's
    buffer in the channel's part, 1 .. :data:`~parplan.collectives.ring_rooted.MAX_SEGMENTS`.

    >>> chain_segments(2**30, 8, "simple"), chain_segments(8, 8, "ll")
    (64, 1)
    """
    per_channel = size_bytes / max(channels, 1)
    return max(1, min(ring_rooted.MAX_SEGMENTS, math.ceil(per_channel / CHUNK_BYTES[protocol])))


def choose_for(
    spec: AutoAlgorithm,
    system: NcclSystem | None,
    size_bytes: float,
    registered: Any,
    collective: str,
) -> AutoChoice:
    """What ``auto`` runs for ``collective`` at ``size_bytes`` on ``system``:
    :func:`~parplan.collectives.auto.choose`, with the spec made one of ``registered``'s (the
    collective's registry) and, for a chain, NCCL's segments."""
    if collective == "all_to_all":
        return choose_all_to_all(spec, system, size_bytes)
    choice = choose(spec, system, size_bytes, registered, collective)
    if collective == "all_reduce":
        return choice
    target = registered[choice.spec.name]
    fields = target.spec_type.model_fields
    values: dict[str, Any] = {
        k: v for k, v in choice.spec.model_dump().items() if k in fields and (system or k == "name")
    }
    label = choice.label
    if "segments" in fields and system is not None:
        channels = int(values.get("channels") or 1)
        segments = chain_segments(size_bytes, channels, choice.protocol)
        values["segments"] = segments
        label = f"{_SEGMENTS_SUFFIX.sub('', label)}/{segments}seg"
    concrete: AlgorithmSpecBase = target.spec_type.model_validate(values)
    rate = choice.channel_rate_Bps
    if "channels" not in fields and choice.nccl is not None:
        rate *= choice.nccl.channels  # a schedule without channels stands for all of NCCL's
    return dataclasses.replace(choice, spec=concrete, label=label, channel_rate_Bps=rate)


def choose_all_to_all(spec: AutoAlgorithm, system: NcclSystem | None, size_bytes: float) -> AutoChoice:
    """What ``auto`` runs for an all-to-all of ``size_bytes`` per rank: ``pairwise``; on a system,
    on NCCL's p2p channels per peer, with LL where each peer's message (``size / p``) is at most
    :data:`~parplan.collectives.all_to_all.P2P_LL_THRESHOLD_BYTES` and Simple above (a protocol
    the spec forces wins); without one, with Simple (see the module docstring).

    >>> choose_all_to_all(AutoAlgorithm(name="auto"), None, 2**20).label
    'auto=pairwise/simple'
    """
    forced = _forced_protocol(spec)
    if system is None:
        protocol = forced or "simple"
        return AutoChoice(all_to_all.PAIRWISE.default_spec(), protocol, f"auto=pairwise/{protocol}")
    ranks = max(system.n_nodes * system.ranks_per_node, 1)
    per_peer = size_bytes / ranks
    protocol = forced or ("ll" if per_peer <= all_to_all.P2P_LL_THRESHOLD_BYTES else "simple")
    channels = all_to_all.P2P_CHANNELS_PER_PEER
    concrete = all_to_all.PairwiseSpec(name="pairwise", channels=channels)
    return AutoChoice(concrete, protocol, f"auto=pairwise/{protocol}/{channels}ch")


class AutoCollective(Algorithm[AutoAlgorithm]):
    """``auto`` in one collective's registry; without a system it is :attr:`fallback`, that
    collective's ring, with its defaults."""

    name = "auto"
    spec_type = AutoAlgorithm
    fallback: ClassVar[Algorithm[Any]]

    def uses_groups(self, spec: AutoAlgorithm) -> bool:
        return self.fallback.uses_groups(self.fallback.default_spec())

    def build(
        self, spec: AutoAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        schedule = self.fallback.build(self.fallback.default_spec(), num_ranks, num_elements, groups)
        return dataclasses.replace(schedule, algorithm=self.name)

    def closed_form_s(
        self, spec: AutoAlgorithm, num_ranks: int, size_bytes: float, cost: UniformCost, groups: Groups | None
    ) -> float:
        return self.fallback.closed_form_s(self.fallback.default_spec(), num_ranks, size_bytes, cost, groups)

    def traffic(
        self, spec: AutoAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        return self.fallback.traffic(self.fallback.default_spec(), num_ranks, num_elements, groups)


class AutoReduceScatter(AutoCollective):
    """``auto`` reduce-scatter (the ring's without a system)."""

    collective = "reduce_scatter"
    fallback = ring_halves.REDUCE_SCATTER


class AutoAllGather(AutoCollective):
    """``auto`` all-gather (the ring's without a system)."""

    collective = "all_gather"
    fallback = ring_halves.ALL_GATHER


class AutoBroadcast(AutoCollective):
    """``auto`` broadcast from rank 0 (the ring chain's without a system)."""

    collective = "broadcast"
    fallback = ring_rooted.BROADCAST


class AutoReduce(AutoCollective):
    """``auto`` reduce to rank 0 (the ring chain's without a system)."""

    collective = "reduce"
    fallback = ring_rooted.REDUCE


class AutoAllToAll(AutoCollective):
    """``auto`` all-to-all: ``pairwise`` (see :func:`choose_all_to_all`); its closed form is the
    cheaper of pairwise's and Bruck's, which is pairwise's (see the module docstring)."""

    collective = "all_to_all"
    fallback = all_to_all.PAIRWISE

    def closed_form_s(
        self, spec: AutoAlgorithm, num_ranks: int, size_bytes: float, cost: UniformCost, groups: Groups | None
    ) -> float:
        bruck = all_to_all_bruck.BRUCK
        return min(
            super().closed_form_s(spec, num_ranks, size_bytes, cost, groups),
            bruck.closed_form_s(bruck.default_spec(), num_ranks, size_bytes, cost, groups),
        )


REDUCE_SCATTER = AutoReduceScatter()
ALL_GATHER = AutoAllGather()
BROADCAST = AutoBroadcast()
REDUCE = AutoReduce()
ALL_TO_ALL = AutoAllToAll()
