"""NVLS (NVLink SHARP) all-reduce: the NVSwitch of one node reduces, then multicasts the result.

NCCL's NVLS runs on Hopper-class NVSwitches that reduce in flight (``multimem.ld_reduce``) and
multicast (``multimem.st``). As a schedule: the tensor is cut in ``segments`` slices; every rank
sends slice ``k`` to the switch, which adds it into its (initially zero) copy; once every rank's
slice ``k`` is in, the switch sends the reduced slice ``k`` back to every rank. The switch is a
*switch rank* (:class:`~parplan.collectives.schedule.SwitchRank`, id ``num_ranks``, capability
``nvls``, serving every rank): the data plane proves the schedule like any other, and lowering
places it on the NVSwitch the cluster declares able to reduce (``hardware: {nvswitch: true, nvls:
true}``); on any other cluster lowering refuses it.

Across nodes (several rank groups: the ranks of each node, or ``group_size`` blocks) NCCL runs NVLS
only with CollNet, and so does this schedule (:mod:`parplan.collectives._nvls_nodes`): each node's
NVSwitch (a switch rank per node) hands its node's sum of a slice to the slice's head GPU, which
sends it through its NIC to an InfiniBand switch that reduces (one more switch rank, capability
``sharp``) and gets the total back for the NVSwitch to multicast. Lowering then needs both
declarations (``nvls`` and ``sharp``).

Per rank, slices go up one after another (program order) and come down one after another, so the
reduce of slice ``k + 1`` overlaps the multicast of slice ``k``. Each rank's link carries ``n``
bytes up and ``n`` down, both directions at once, so the time is about ``n`` over the link rate:
bus bandwidth (nccl-tests: ``n / t x 2(p-1)/p``) up to ``2(p-1)/p`` times the link rate, above the
``2(p-1)/p n`` bound of algorithms without in-network reduction. NCCL's own figure is lower (the
switch reduces at ``nvlsEfficiency`` of NVLink, one channel short); ``auto`` caps the transfers at
it (:mod:`parplan.collectives.auto`).

``segments=None`` picks about one slice per :data:`~parplan.collectives.nccl_tree.CHUNK_ELEMENTS`
elements, a power of two of them, at most 16 (as NCCL's tree does).

Closed form, on a uniform group where a message between two ranks costs ``alpha + m beta`` over a
switch (so a hop to or from the switch costs ``alpha / 2 + m beta``, the switch sitting in the
middle of the path), ``S`` equal slices of ``m = n / S`` bytes: ``(S + 1)(alpha / 2) + n beta + m
beta``, the ``S`` slices going up and the last one coming down. A switch reduces at line rate, so
there is no ``gamma`` term (the engine charges switch endpoints none). Exact on the engine's star
switch for slices of equal size, on one node (several nodes: the same plus one slice's trip to the
head, across and back, an estimate). Traffic: on one node each rank sends and receives ``n``
elements, the switch rank (last entry) ``p n``; across nodes as the shared module counts it.

>>> s = nvls_all_reduce(4, 8, segments=2)
>>> s.num_endpoints, s.num_steps, s.switches[0].capability
(5, 16, 'nvls')
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import numpy as np
from pydantic import Field

from parplan.collectives._build import StepBuffer, check_sizes
from parplan.collectives._nvls_nodes import nodes_all_reduce, nodes_traffic
from parplan.collectives.algorithm import Algorithm, AlgorithmSpecBase, Groups, Traffic, UniformCost
from parplan.collectives.groups import resolve_groups
from parplan.collectives.nccl_tree import ASSUMED_ELEMENT_BYTES, auto_segments
from parplan.collectives.schedule import Schedule, SwitchRank, chunk_bounds

NVLS_PHASES = ("switch reduce", "multicast")


def nvls_all_reduce(
    num_ranks: int,
    num_elements: int,
    *,
    segments: int | None = None,
    groups: Groups | None = None,
    group_size: int | None = None,
) -> Schedule:
    """NVLS all-reduce on ``num_ranks`` ranks, an NVSwitch per group (see the module docstring)."""
    check_sizes(num_ranks, num_elements)
    count = auto_segments(num_elements, segments)
    nodes = resolve_groups(num_ranks, groups, group_size) if num_ranks > 1 else []
    if len(nodes) > 1:
        return nodes_all_reduce("nvls", num_ranks, num_elements, nodes, count, "sharp")
    switch = num_ranks
    bounds = chunk_bounds(num_elements, count).tolist()
    buf = StepBuffer()
    up: list[int] = []
    down: list[int] = []
    for k in range(count if nodes else 0):
        offset, length = bounds[k], bounds[k + 1] - bounds[k]
        up = [buf.add(r, switch, offset, length, True, 0, up[r : r + 1]) for r in range(num_ranks)]
        down = [
            buf.add(switch, r, offset, length, False, 1, [*up, *down[r : r + 1]]) for r in range(num_ranks)
        ]
    schedule = buf.build(
        algorithm="nvls",
        collective="all_reduce",
        num_ranks=num_ranks,
        num_elements=num_elements,
        phase_names=NVLS_PHASES,
        meta={"segments": count},
    )
    if not nodes:
        return schedule
    return dataclasses.replace(schedule, switches=(SwitchRank("nvls", tuple(range(num_ranks))),))


class NvlsAlgorithm(AlgorithmSpecBase):
    """NVLS: the NVSwitch reduces and multicasts, slice by slice (``segments``; None: NCCL-like
    128 KiB slices). Needs a cluster whose NVSwitch declares it (``hardware: {nvswitch: true,
    nvls: true}``) and ranks on one such switch. Short form ``nvls:4`` for 4 slices."""

    name: Literal["nvls"]
    segments: int | None = Field(default=None, ge=1)
    group_size: int | None = Field(default=None, ge=1)


def nvls_time_s(num_ranks: int, size_bytes: float, segments: int, a: float, b: float) -> float:
    """The closed form of the module docstring (``a``: a rank-to-rank message's latency)."""
    if num_ranks <= 1 or size_bytes <= 0:
        return 0.0
    return (segments + 1) * a / 2.0 + size_bytes * b + size_bytes / segments * b


class NvlsAllReduce(Algorithm[NvlsAlgorithm]):
    """NVLS all-reduce inside one NVSwitch (see the module docstring)."""

    name = "nvls"
    spec_type = NvlsAlgorithm
    short_parameter = "segments"
    switch_capabilities = frozenset({"nvls"})

    def variants(self, num_ranks: int) -> tuple[NvlsAlgorithm, ...]:
        one_node = NvlsAlgorithm(name="nvls", group_size=max(num_ranks, 1))
        return (one_node, one_node.model_copy(update={"segments": 3}))

    def uses_groups(self, spec: NvlsAlgorithm) -> bool:
        return spec.group_size is None

    def build(
        self, spec: NvlsAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        return nvls_all_reduce(
            num_ranks, num_elements, segments=spec.segments, groups=groups, group_size=spec.group_size
        )

    def closed_form_s(
        self, spec: NvlsAlgorithm, num_ranks: int, size_bytes: float, cost: UniformCost, groups: Groups | None
    ) -> float:
        segments = auto_segments(math.ceil(size_bytes / ASSUMED_ELEMENT_BYTES), spec.segments)
        a, b = cost.alpha_s, cost.beta_s_per_byte
        within = nvls_time_s(num_ranks, size_bytes, segments, a, b)
        if len(resolve_groups(num_ranks, groups, spec.group_size)) == 1:
            return within
        return within + 4 * (a / 2 + size_bytes / segments * b)  # the last slice's trip across

    def closed_form_estimate(self, spec: NvlsAlgorithm, num_ranks: int, groups: Groups | None = None) -> str:
        if len(resolve_groups(num_ranks, groups, spec.group_size)) == 1:
            return ""
        return "across nodes the closed form adds the switches' hop to the pipeline of one node"

    def traffic(
        self, spec: NvlsAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        if num_ranks == 1:
            return np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
        nodes = resolve_groups(num_ranks, groups, spec.group_size)
        if len(nodes) > 1:
            count = auto_segments(num_elements, spec.segments)
            return nodes_traffic(num_ranks, num_elements, nodes, count, "sharp")
        each = np.full(num_ranks + 1, num_elements, dtype=np.int64)
        each[-1] = num_ranks * num_elements
        return each, each.copy()


ALL_REDUCE = NvlsAllReduce()


# -- reduce-scatter and all-gather on one NVSwitch ---------------------------------------------------


def nvls_reduce_scatter(num_ranks: int, num_elements: int, *, segments: int | None = None) -> Schedule:
    """Every rank sends each slice to the switch, which adds them and sends each rank the part of
    the slice in its chunk (:func:`~parplan.collectives.schedule.chunk_bounds`)."""
    return _nvls_half("reduce_scatter", num_ranks, num_elements, segments)


def nvls_all_gather(num_ranks: int, num_elements: int, *, segments: int | None = None) -> Schedule:
    """Every rank sends the part of each slice in its chunk to the switch, which multicasts the
    slice to every rank (all but the rank's own part, in two pieces around it)."""
    return _nvls_half("all_gather", num_ranks, num_elements, segments)


def _nvls_half(collective: str, num_ranks: int, num_elements: int, segments: int | None) -> Schedule:
    """The two halves of NVLS on one switch, slice by slice, each rank's sends and receives in
    program order across slices."""
    check_sizes(num_ranks, num_elements)
    count = auto_segments(num_elements, segments)
    chunks = chunk_bounds(num_elements, num_ranks).tolist()
    slices = chunk_bounds(num_elements, count).tolist()
    switch = num_ranks
    buf = StepBuffer()
    up_prior: dict[int, list[int]] = {}
    down_prior: dict[int, list[int]] = {}
    reduce = collective == "reduce_scatter"
    for k in range(count if num_ranks > 1 else 0):
        lo, hi = slices[k], slices[k + 1]
        ups: list[tuple[int, int, int]] = []  # (step, start, end) into the switch
        for r in range(num_ranks):
            a, b = (lo, hi) if reduce else (max(lo, chunks[r]), min(hi, chunks[r + 1]))
            if b > a:
                ups.append((buf.add(r, switch, a, b - a, reduce, 0, up_prior.get(r, [])), a, b))
                up_prior[r] = [ups[-1][0]]
        for r in range(num_ranks):
            pieces = (
                [(max(lo, chunks[r]), min(hi, chunks[r + 1]))]
                if reduce
                else [(lo, min(hi, chunks[r])), (max(lo, chunks[r + 1]), hi)]
            )
            sent = []
            for a, b in pieces:
                if b > a:
                    writers = [s for s, x, y in ups if x < b and a < y]
                    sent.append(buf.add(switch, r, a, b - a, False, 1, [*writers, *down_prior.get(r, [])]))
            down_prior[r] = sent or down_prior.get(r, [])
    schedule = buf.build(
        algorithm="nvls",
        collective=collective,
        num_ranks=num_ranks,
        num_elements=num_elements,
        phase_names=NVLS_PHASES[:2],
        meta={"segments": count},
    )
    if num_ranks == 1:
        return schedule
    return dataclasses.replace(schedule, switches=(SwitchRank("nvls", tuple(range(num_ranks))),))


class NvlsHalfAlgorithm(AlgorithmSpecBase):
    """NVLS reduce-scatter or all-gather on one NVSwitch, in ``segments`` slices (None: NCCL-like
    128 KiB). Needs ``hardware: {nvswitch: true, nvls: true}``. Short form ``nvls:4``."""

    name: Literal["nvls"]
    segments: int | None = Field(default=None, ge=1)


class _NvlsHalf(Algorithm[NvlsHalfAlgorithm]):
    """Shared parts of the NVLS reduce-scatter and all-gather."""

    name = "nvls"
    spec_type = NvlsHalfAlgorithm
    short_parameter = "segments"
    switch_capabilities = frozenset({"nvls"})

    def build(
        self, spec: NvlsHalfAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        return _nvls_half(self.collective, num_ranks, num_elements, spec.segments)

    def closed_form_estimate(
        self, spec: NvlsHalfAlgorithm, num_ranks: int, groups: Groups | None = None
    ) -> str:
        if spec.segments == 1:
            return ""
        return "with several slices, the closed form assumes slices and chunks line up"

    def traffic(
        self, spec: NvlsHalfAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        if num_ranks == 1:
            return np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
        own = np.diff(chunk_bounds(num_elements, num_ranks))
        total = np.array([num_elements * num_ranks], dtype=np.int64)
        if self.collective == "reduce_scatter":  # all of it up, its chunk down
            up = np.full(num_ranks, num_elements, dtype=np.int64)
            return np.concatenate([up, [num_elements]]), np.concatenate([own, total])
        rest = num_elements - own  # its chunk up, the rest down
        return np.concatenate([own, [total[0] - num_elements]]), np.concatenate([rest, [num_elements]])


class NvlsReduceScatter(_NvlsHalf):
    """NVLS reduce-scatter: ``S`` slices up, each rank's part of the last one down:
    ``S (alpha/2 + (n/S) beta) + alpha/2 + min(n/S, n/p) beta`` on the star switch (exact with one
    slice, and where slices and chunks line up)."""

    collective = "reduce_scatter"

    def closed_form_s(
        self,
        spec: NvlsHalfAlgorithm,
        num_ranks: int,
        size_bytes: float,
        cost: UniformCost,
        groups: Groups | None,
    ) -> float:
        s = auto_segments(math.ceil(size_bytes / ASSUMED_ELEMENT_BYTES), spec.segments)
        a, b = cost.alpha_s, cost.beta_s_per_byte
        return s * (a / 2 + size_bytes / s * b) + a / 2 + min(size_bytes / s, size_bytes / num_ranks) * b


class NvlsAllGather(_NvlsHalf):
    """NVLS all-gather: each rank's chunk up, every slice down but the rank's own part; with one
    slice ``alpha + n beta`` on the star switch (each rank's ``n/p`` up, then ``(p-1)/p n`` down)."""

    collective = "all_gather"

    def closed_form_s(
        self,
        spec: NvlsHalfAlgorithm,
        num_ranks: int,
        size_bytes: float,
        cost: UniformCost,
        groups: Groups | None,
    ) -> float:
        s = auto_segments(math.ceil(size_bytes / ASSUMED_ELEMENT_BYTES), spec.segments)
        a, b = cost.alpha_s, cost.beta_s_per_byte
        return (s + 1) * a / 2 + size_bytes * b + (size_bytes / s * b if s > 1 else 0.0)


REDUCE_SCATTER = NvlsReduceScatter()
ALL_GATHER = NvlsAllGather()
