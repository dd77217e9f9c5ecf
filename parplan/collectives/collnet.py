"""CollNet (InfiniBand SHARP) all-reduce: an InfiniBand switch reduces across nodes.

NCCL's CollNet hands the reduction across nodes to the fabric: each node's NIC-owning GPUs send
their node's partial sums to a SHARP-capable switch, which adds them and sends the total back. The
switch is a *switch rank* (:class:`~parplan.collectives.schedule.SwitchRank`, id ``num_ranks``,
capability ``sharp``): the data plane proves the schedules like any other, and lowering places it
on the InfiniBand switch the cluster declares able to reduce (``hardware: {sharp: true}``); on any
other cluster lowering refuses it. Both variants pipeline the tensor in ``segments`` slices
(``None``: NCCL-like 128 KiB slices, as :func:`~parplan.collectives.nccl_tree.auto_segments`).

- ``collnet_direct`` (NCCL's CollNetDirect: every GPU of a node owns a NIC). Each slice is cut in
  one part per GPU of the node; every GPU sends each part to the part's owner, which adds them (a
  direct reduce-scatter inside the node), sends its part to the switch and gets the total back,
  then sends it to every other GPU of the node (a direct all-gather).
- ``collnet_chain`` (NCCL's CollNetChain): on each of ``channels`` channels a chain through the
  node's GPUs, rotated per channel so that each channel leaves the node through a different GPU
  (its NIC), reduces up to the chain's head, the head sends to the switch, and the total comes back
  down the chain: NCCL's tree with the switch as the root of every node's chain.

Groups (the ranks of each node) come from the cluster unless ``group_size`` sets blocks of that
many ranks. Without either, every rank is a node of its own: all ranks send straight to the switch.

Closed forms, on a uniform group where a message between two ranks costs ``alpha + m beta`` (so a
hop to or from the switch costs ``alpha / 2 + m beta``, the switch in the middle of the path). One
rank per node, ``S`` slices: ``(S + 1) alpha / 2 + n beta + (n / S) beta`` (the slices go up one
after another, the last comes down), exact on the engine's star switch, as NVLS. Several ranks per
node, one slice: the same stages added up (the chain's hops, or the direct reduce-scatter, the
switch both ways, the direct all-gather), exact as well; several slices: one slice's stages plus,
per further slice, the slowest stage or a rank's port (which every stage of a slice crosses), an
estimate the engine beats by up to 18% or exceeds by up to 8% on the star switch (held in
tests/collectives/test_collnet.py). Traffic: by the
definitions above; the switch rank (last entry) receives and sends every node's share.

>>> s = collnet_direct_all_reduce(4, 8, groups=[[0, 1], [2, 3]], segments=1)
>>> s.num_endpoints, s.switches[0].capability, s.phase_names[1]
(5, 'sharp', 'switch reduce')
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from parplan.collectives._build import StepBuffer, check_sizes
from parplan.collectives.algorithm import (
    SPEC_MAX_CHANNELS,
    SPEC_MAX_SEGMENTS,
    Algorithm,
    AlgorithmSpecBase,
    Groups,
    Traffic,
    UniformCost,
)
from parplan.collectives.double_binary_tree import tree_positions
from parplan.collectives.groups import resolve_groups
from parplan.collectives.nccl_tree import ASSUMED_ELEMENT_BYTES, auto_segments
from parplan.collectives.nvls import nvls_time_s
from parplan.collectives.schedule import Schedule, SwitchRank, chunk_bounds
from parplan.collectives.tree import TREE_PHASES, emit_tree_broadcast, emit_tree_reduce, tree_traffic

DIRECT_PHASES = ("node reduce", "switch reduce", "switch broadcast", "node broadcast")


def node_groups(num_ranks: int, groups: Groups | None, group_size: int | None) -> list[list[int]]:
    """The nodes: ``group_size`` blocks, else ``groups``, else one node per rank."""
    if group_size is None and groups is None:
        return [[r] for r in range(num_ranks)]
    return resolve_groups(num_ranks, groups, group_size)


def _with_switch(schedule: Schedule, num_ranks: int) -> Schedule:
    """``schedule`` with its SHARP switch rank (none on one rank: nothing to reduce)."""
    if num_ranks == 1:
        return schedule
    return dataclasses.replace(schedule, switches=(SwitchRank("sharp", tuple(range(num_ranks))),))


def _owned_parts(nodes: Sequence[Sequence[int]], lo: int, hi: int) -> list[list[tuple[int, int, int]]]:
    """Per node, ``(owner, start, end)`` of each member's part of the slice ``[lo, hi)``."""
    out = []
    for node in nodes:
        bounds = (lo + chunk_bounds(hi - lo, len(node))).tolist()
        out.append([(r, bounds[j], bounds[j + 1]) for j, r in enumerate(node)])
    return out


def collnet_direct_all_reduce(
    num_ranks: int,
    num_elements: int,
    *,
    groups: Groups | None = None,
    group_size: int | None = None,
    segments: int | None = None,
) -> Schedule:
    """CollNetDirect all-reduce (see the module docstring)."""
    check_sizes(num_ranks, num_elements)
    nodes = node_groups(num_ranks, groups, group_size)
    count = auto_segments(num_elements, segments)
    switch = num_ranks
    buf = StepBuffer()
    last: dict[tuple[int, int, int], int] = {}  # (phase, src, dst) -> previous step, program order

    def add(phase: int, src: int, dst: int, lo: int, hi: int, reduce: bool, deps: list[int]) -> int:
        prior = last.get((phase, src, dst))
        step = buf.add(src, dst, lo, hi - lo, reduce, phase, [*deps, *([prior] if prior is not None else [])])
        last[(phase, src, dst)] = step
        return step

    slices = chunk_bounds(num_elements, count).tolist()
    for k in range(count if num_ranks > 1 else 0):
        parts = _owned_parts(nodes, slices[k], slices[k + 1])
        ups: list[tuple[int, int, int]] = []
        for node, owned in zip(nodes, parts, strict=True):
            for owner, lo, hi in owned:
                into = [add(0, r, owner, lo, hi, True, []) for r in node if r != owner]
                ups.append((add(1, owner, switch, lo, hi, True, into), lo, hi))
        for node, owned in zip(nodes, parts, strict=True):
            for owner, lo, hi in owned:
                writers = [u for u, a, b in ups if a < hi and lo < b]
                back = add(2, switch, owner, lo, hi, False, writers)
                for r in node:
                    if r != owner:
                        add(3, owner, r, lo, hi, False, [back])
    schedule = buf.build(
        algorithm="collnet_direct",
        collective="all_reduce",
        num_ranks=num_ranks,
        num_elements=num_elements,
        phase_names=DIRECT_PHASES,
        meta={"groups": tuple(tuple(g) for g in nodes), "segments": count},
    )
    return _with_switch(schedule, num_ranks)


def chain_parents(nodes: Sequence[Sequence[int]], channel: int, switch: int) -> list[int]:
    """Parent of every endpoint on one channel: each node's chain rotated to start at member
    ``channel mod len(node)``, each member under the one before it, each head under the switch."""
    parent = [-1] * (switch + 1)
    for node in nodes:
        k = channel % len(node)
        chain = [*node[k:], *node[:k]]
        parent[chain[0]] = switch
        for a, b in itertools.pairwise(chain):
            parent[b] = a
    return parent


def collnet_chain_all_reduce(
    num_ranks: int,
    num_elements: int,
    *,
    groups: Groups | None = None,
    group_size: int | None = None,
    channels: int = 1,
    segments: int | None = None,
) -> Schedule:
    """CollNetChain all-reduce (see the module docstring)."""
    check_sizes(num_ranks, num_elements)
    nodes = node_groups(num_ranks, groups, group_size)
    parts = chunk_bounds(num_elements, channels).tolist()
    count = auto_segments(max(b - a for a, b in itertools.pairwise(parts)), segments)
    buf = StepBuffer()
    if num_ranks > 1:
        layouts = [tree_positions(chain_parents(nodes, c, num_ranks)) for c in range(channels)]
        bounds = [(parts[c] + chunk_bounds(parts[c + 1] - parts[c], count)).tolist() for c in range(channels)]
        into = [emit_tree_reduce(buf, r, par, b, 0) for (r, par), b in zip(layouts, bounds, strict=True)]
        for (ranks, parents), b, root in zip(layouts, bounds, into, strict=True):
            emit_tree_broadcast(buf, ranks, parents, b, 1, root)  # slice k comes down once it is in
    schedule = buf.build(
        algorithm="collnet_chain",
        collective="all_reduce",
        num_ranks=num_ranks,
        num_elements=num_elements,
        phase_names=TREE_PHASES,
        meta={"groups": tuple(tuple(g) for g in nodes), "channels": channels, "segments": count},
    )
    return _with_switch(schedule, num_ranks)


class CollnetDirectAlgorithm(AlgorithmSpecBase):
    """CollNetDirect: a direct reduce-scatter inside each node, the SHARP switch across nodes, a
    direct all-gather back (``segments`` slices; None: NCCL-like 128 KiB). Needs a cluster whose
    InfiniBand switch declares it (``hardware: {sharp: true}``). Groups: the cluster's nodes unless
    ``group_size``. Short form ``collnet_direct:4`` for 4 slices."""

    name: Literal["collnet_direct"]
    segments: int | None = Field(default=None, ge=1, le=SPEC_MAX_SEGMENTS)
    group_size: int | None = Field(default=None, ge=1)


class CollnetChainAlgorithm(AlgorithmSpecBase):
    """CollNetChain: a chain inside each node up to a head, the SHARP switch across nodes, back
    down the chain, on ``channels`` channels (each leaving a node through a different GPU) in
    ``segments`` slices. Needs ``hardware: {sharp: true}``. Short form ``collnet_chain:4`` for 4
    channels."""

    name: Literal["collnet_chain"]
    channels: int = Field(default=1, ge=1, le=SPEC_MAX_CHANNELS)
    segments: int | None = Field(default=None, ge=1, le=SPEC_MAX_SEGMENTS)
    group_size: int | None = Field(default=None, ge=1)


def _segments(size_bytes: float, parts: int, segments: int | None) -> int:
    return auto_segments(math.ceil(size_bytes / parts / ASSUMED_ELEMENT_BYTES), segments)


def _estimate(nodes: Sequence[Sequence[int]], segments: int | None) -> str:
    """Why the closed form is an estimate here ("" where it is exact)."""
    if max(len(n) for n in nodes) == 1 or segments == 1:
        return ""
    return "with several ranks per node and slices, the schedule overlaps stages the closed form bounds"


class CollnetDirectAllReduce(Algorithm[CollnetDirectAlgorithm]):
    """CollNetDirect all-reduce (see the module docstring)."""

    name = "collnet_direct"
    spec_type = CollnetDirectAlgorithm
    short_parameter = "segments"
    abbreviation = "cn-direct"
    switch_capabilities = frozenset({"sharp"})

    def variants(self, num_ranks: int) -> tuple[CollnetDirectAlgorithm, ...]:
        flat = CollnetDirectAlgorithm(name="collnet_direct", group_size=1)
        return (flat, flat.model_copy(update={"segments": 3}))

    def uses_groups(self, spec: CollnetDirectAlgorithm) -> bool:
        return spec.group_size is None

    def build(
        self, spec: CollnetDirectAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        return collnet_direct_all_reduce(
            num_ranks, num_elements, groups=groups, group_size=spec.group_size, segments=spec.segments
        )

    def closed_form_s(
        self,
        spec: CollnetDirectAlgorithm,
        num_ranks: int,
        size_bytes: float,
        cost: UniformCost,
        groups: Groups | None,
    ) -> float:
        nodes = node_groups(num_ranks, groups, spec.group_size)
        g = max(len(n) for n in nodes)
        a, b, gamma = cost.alpha_s, cost.beta_s_per_byte, cost.gamma_s_per_byte
        ia = a if cost.intra_alpha_s is None else cost.intra_alpha_s
        ib = b if cost.intra_beta_s_per_byte is None else cost.intra_beta_s_per_byte
        segments = _segments(size_bytes, 1, spec.segments)
        if g == 1:
            return nvls_time_s(num_ranks, size_bytes, segments, a, b)
        m = size_bytes / segments / g  # one owner's part of one slice
        stages = [ia + (g - 1) * m * (ib + gamma), a / 2 + m * b, a / 2 + m * b, ia + (g - 1) * m * ib]
        port = (2 * g - 1) * m * ib + (g - 1) * m * gamma  # a rank's port, every stage of a slice
        return sum(stages) + (segments - 1) * max(*stages, port)

    def closed_form_estimate(
        self, spec: CollnetDirectAlgorithm, num_ranks: int, groups: Groups | None = None
    ) -> str:
        return _estimate(node_groups(num_ranks, groups, spec.group_size), spec.segments)

    def traffic(
        self, spec: CollnetDirectAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        if num_ranks == 1:
            return np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
        nodes = node_groups(num_ranks, groups, spec.group_size)
        sent = np.zeros(num_ranks + 1, dtype=np.int64)
        received = np.zeros(num_ranks + 1, dtype=np.int64)
        slices = chunk_bounds(num_elements, auto_segments(num_elements, spec.segments)).tolist()
        for lo, hi in itertools.pairwise(slices):
            for node, owned in zip(nodes, _owned_parts(nodes, lo, hi), strict=True):
                for owner, a, b in owned:
                    size, others = b - a, len(node) - 1
                    sent[owner] += size + others * size  # up to the switch, out to the others
                    received[owner] += others * size + size  # the others' parts, the total back
                    for r in node:
                        if r != owner:
                            sent[r] += size
                            received[r] += size
                    sent[-1] += size
                    received[-1] += size
        return sent, received


class CollnetChainAllReduce(Algorithm[CollnetChainAlgorithm]):
    """CollNetChain all-reduce (see the module docstring)."""

    name = "collnet_chain"
    spec_type = CollnetChainAlgorithm
    short_parameter = "channels"
    abbreviation = "cn-chain"
    switch_capabilities = frozenset({"sharp"})

    def variants(self, num_ranks: int) -> tuple[CollnetChainAlgorithm, ...]:
        flat = CollnetChainAlgorithm(name="collnet_chain", group_size=1)
        return (flat, flat.model_copy(update={"segments": 3}), flat.model_copy(update={"channels": 2}))

    def uses_groups(self, spec: CollnetChainAlgorithm) -> bool:
        return spec.group_size is None

    def build(
        self, spec: CollnetChainAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        return collnet_chain_all_reduce(
            num_ranks,
            num_elements,
            groups=groups,
            group_size=spec.group_size,
            channels=spec.channels,
            segments=spec.segments,
        )

    def closed_form_s(
        self,
        spec: CollnetChainAlgorithm,
        num_ranks: int,
        size_bytes: float,
        cost: UniformCost,
        groups: Groups | None,
    ) -> float:
        nodes = node_groups(num_ranks, groups, spec.group_size)
        g = max(len(n) for n in nodes)
        a, b, gamma = cost.alpha_s, cost.beta_s_per_byte, cost.gamma_s_per_byte
        segments = _segments(size_bytes, spec.channels, spec.segments)
        if g == 1:  # every channel's slices share the rank's link
            return nvls_time_s(num_ranks, size_bytes, segments, a, b)
        ia = a if cost.intra_alpha_s is None else cost.intra_alpha_s
        ib = b if cost.intra_beta_s_per_byte is None else cost.intra_beta_s_per_byte
        m = size_bytes / spec.channels / segments  # one channel's slice
        hop = ia + m * ib
        first = (g - 1) * (2 * hop + m * gamma) + a + 2 * m * b  # one slice up the chain and back
        port = spec.channels * (2 * m * ib + m * gamma)  # a port: up from a child, down from a parent
        return first + (segments - 1) * max(hop + m * gamma, port)

    def closed_form_estimate(
        self, spec: CollnetChainAlgorithm, num_ranks: int, groups: Groups | None = None
    ) -> str:
        return _estimate(node_groups(num_ranks, groups, spec.group_size), spec.segments)

    def traffic(
        self, spec: CollnetChainAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        if num_ranks == 1:
            return np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
        nodes = node_groups(num_ranks, groups, spec.group_size)
        parts = chunk_bounds(num_elements, spec.channels).tolist()
        sent = np.zeros(num_ranks + 1, dtype=np.int64)
        received = np.zeros(num_ranks + 1, dtype=np.int64)
        for c in range(spec.channels):
            s, r = tree_traffic(chain_parents(nodes, c, num_ranks), parts[c + 1] - parts[c])
            sent += s
            received += r
        return sent, received


ALL_REDUCE_DIRECT = CollnetDirectAllReduce()
ALL_REDUCE_CHAIN = CollnetChainAllReduce()
