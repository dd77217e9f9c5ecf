"""NCCL's tree all-reduce: a chain through each node's ranks, NCCL's double binary tree across
nodes, pipelined in chunks, on ``channels`` channels.

Layout (NCCL's ``ncclTopoPreset``/``connectTrees``, simplified to what the cost model sees): the
tensor is cut into ``channels`` parts, one per channel. On one node a channel's part goes down
and up a chain of the node's ranks. With ``q >= 2`` nodes each part is split in two halves, one
per tree of :func:`~parplan.collectives.double_binary_tree.double_binary_trees` over the nodes
(NCCL's double binary tree: the second tree's interior nodes are the first's leaves). Inside node
``g`` each tree runs through the chain ``g`` rotated to start at member ``c mod len(g)`` for
channel ``c``: the chain's first rank (the *head*) talks to the heads of the parent and child
nodes, every other rank to its chain neighbours. So each channel leaves a node through a different
rank, hence a different NIC on a node with one NIC per GPU, and on two nodes each node sends about
``n`` bytes across the network (each half once each way) where a ring sends ``2(p-1)/p n``.

Each (channel, tree) is one tree over all ranks (parent of a chain member: the member before it;
of a head: the head of its parent node), reduced up then broadcast down with the per-step
dependencies of :mod:`parplan.collectives.tree`, its part cut in ``segments`` pipelined chunks.
``segments=None`` picks NCCL-like chunks of about :data:`CHUNK_ELEMENTS` elements (128 KiB of
float32, the order of NCCL's Simple-protocol tree chunk), a power of two of them, at most
:data:`MAX_SEGMENTS`.

Groups (the ranks of each node) come from the cluster like ``hierarchical`` unless ``group_size``
sets blocks of that many ranks; without either, all ranks are one node.

Closed form, on a uniform group: with one node, the chain's reduce and broadcast on the tree's
shapes (:mod:`parplan.collectives._tree_cost`) with the channel's part. Exact with one channel for
any segments; with several channels and one segment the rotated chains use each port at distinct
times, so it stays exact when a hop (``alpha + m beta``) outlasts a reduction (``m gamma``). With
several nodes it is an estimate by stages: the chain's reduce (both trees' halves move together
through every chain port), the double binary tree among the heads (inter-group figures), the
chain's broadcast. Stages do not overlap in it while the schedule pipelines them into each
other, so it mostly exceeds the engine: measured from -8% to +38% on two to four nodes of a
uniform switch, the most with segments (held in tests/collectives/test_nccl_tree.py).
Traffic: each tree edge carries its part up and down.

>>> s = nccl_tree_all_reduce(4, 8, groups=[[0, 1], [2, 3]])
>>> s.meta["heads"], s.meta["segments"]
(((0, 2),), 1)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from parplan.collectives._build import StepBuffer, check_sizes
from parplan.collectives._tree_cost import plan_of, plan_time, shapes_from_parents
from parplan.collectives.algorithm import (
    SPEC_MAX_CHANNELS,
    SPEC_MAX_SEGMENTS,
    Algorithm,
    AlgorithmSpecBase,
    Groups,
    Traffic,
    UniformCost,
)
from parplan.collectives.double_binary_tree import dbt_plans, double_binary_trees, tree_positions
from parplan.collectives.groups import resolve_groups
from parplan.collectives.schedule import Schedule, chunk_bounds
from parplan.collectives.tree import TREE_PHASES, emit_tree_broadcast, emit_tree_reduce, tree_traffic
from parplan.collectives.tree_reduce import check_call
from parplan.errors import CollectiveError

CHUNK_ELEMENTS = 32768
"""Elements per pipelined chunk when ``segments`` is automatic: 128 KiB of float32."""

MAX_SEGMENTS = 16
"""The most chunks an automatic ``segments`` cuts each tree's part into (bounds schedule size)."""

ASSUMED_ELEMENT_BYTES = 4
"""Element size the closed form assumes to count automatic segments from bytes."""


def auto_segments(part_elements: int, segments: int | None) -> int:
    """``segments`` if given, else about one chunk per :data:`CHUNK_ELEMENTS` of ``part_elements``:
    that count rounded up to a power of two (so chunks split evenly like NCCL's power-of-two
    buffers), at most :data:`MAX_SEGMENTS`.

    >>> auto_segments(100, None), auto_segments(3 * 32768, None), auto_segments(10**6, None)
    (1, 4, 16)
    """
    if segments is not None:
        if segments < 1:
            raise CollectiveError(f"segments must be >= 1, got {segments}")
        return segments
    chunks = max(1, math.ceil(part_elements / CHUNK_ELEMENTS))
    return min(MAX_SEGMENTS, 1 << (chunks - 1).bit_length())


def tree_channels(groups: Sequence[Sequence[int]], channels: int | None) -> int:
    """``channels`` if given, else one per rank of the largest group when there are several
    groups (each rank of a node heads a channel, so each NIC carries one) and 1 on one group.

    >>> tree_channels([[0, 1, 2], [3, 4, 5]], None), tree_channels([[0, 1, 2]], None)
    (3, 1)
    """
    if channels is not None:
        if channels < 1:
            raise CollectiveError(f"channels must be >= 1, got {channels}")
        return channels
    return max(len(g) for g in groups) if len(groups) > 1 else 1


def node_trees(num_nodes: int) -> list[list[int]]:
    """Parent arrays over nodes of the trees each channel runs: one (a lone root) on one node,
    else NCCL's two complementary binary trees."""
    if num_nodes == 1:
        return [[-1]]
    return list(double_binary_trees(num_nodes))


def rank_tree(
    groups: Sequence[Sequence[int]], node_parents: Sequence[int], channel: int
) -> tuple[list[int], list[int]]:
    """The tree over ranks of one (channel, node tree): ``(parent of each rank, head of each node)``.

    Node ``g``'s chain is its ranks rotated to start at member ``channel mod len(g)``; each member's
    parent is the member before it, the head's is the head of the parent node (-1 at the root).
    """
    p = sum(len(g) for g in groups)
    parent = [-1] * p
    heads = []
    chains = []
    for g in groups:
        k = channel % len(g)
        chain = [*g[k:], *g[:k]]
        chains.append(chain)
        heads.append(chain[0])
    for i, chain in enumerate(chains):
        for a, b in itertools.pairwise(chain):
            parent[b] = a
        if node_parents[i] >= 0:
            parent[chain[0]] = heads[node_parents[i]]
    return parent, heads


def _instances(
    num_ranks: int, num_elements: int, groups: Sequence[Sequence[int]], channels: int
) -> list[tuple[list[int], int, int, tuple[int, ...]]]:
    """Every (channel, tree) as ``(parent of each rank, first element, element count, heads)``."""
    trees = node_trees(len(groups))
    parts = chunk_bounds(num_elements, channels)
    out = []
    for c in range(channels):
        halves = int(parts[c]) + chunk_bounds(int(parts[c + 1] - parts[c]), len(trees))
        for t, node_parents in enumerate(trees):
            parent, heads = rank_tree(groups, node_parents, c)
            out.append((parent, int(halves[t]), int(halves[t + 1] - halves[t]), tuple(heads)))
    return out


def nccl_tree_all_reduce(
    num_ranks: int,
    num_elements: int,
    *,
    groups: Sequence[Sequence[int]] | None = None,
    group_size: int | None = None,
    channels: int | None = 1,
    segments: int | None = None,
) -> Schedule:
    """NCCL's tree all-reduce (see the module docstring); ``channels=None``: automatic
    (:func:`tree_channels`)."""
    check_sizes(num_ranks, num_elements)
    resolved = resolve_groups(num_ranks, groups, group_size)
    channels = tree_channels(resolved, channels)
    instances = _instances(num_ranks, num_elements, resolved, channels)
    count = auto_segments(max(size for _, _, size, _ in instances), segments)
    buf = StepBuffer()
    layouts = [tree_positions(parent) for parent, _, _, _ in instances]
    bounds = [(start + chunk_bounds(size, count)).tolist() for _, start, size, _ in instances]
    into_root = [emit_tree_reduce(buf, r, par, b, 0) for (r, par), b in zip(layouts, bounds, strict=True)]
    for (ranks, parents), b, into in zip(layouts, bounds, into_root, strict=True):
        emit_tree_broadcast(buf, ranks, parents, b, 1, into, after=into[-1])
    heads = tuple(dict.fromkeys(h for _, _, _, h in instances))
    return buf.build(
        algorithm="nccl_tree",
        collective="all_reduce",
        num_ranks=num_ranks,
        num_elements=num_elements,
        phase_names=TREE_PHASES,
        meta={
            "groups": tuple(tuple(g) for g in resolved),
            "channels": channels,
            "segments": count,
            "trees": len(instances) // channels,
            "heads": heads,
        },
    )


def _equal_group_size(num_ranks: int, groups: Groups | None, group_size: int | None) -> tuple[int, int]:
    """``(nodes, ranks per node)`` the closed form assumes: the largest group sets the chain."""
    resolved = resolve_groups(num_ranks, groups, group_size)
    return len(resolved), max(len(g) for g in resolved)


def chain_time_s(
    length: int, segments: int, size_bytes: float, a: float, b: float, g: float
) -> tuple[float, float]:
    """(reduce, broadcast) seconds of a pipelined chain of ``length`` ranks."""
    if length <= 1:
        return 0.0, 0.0
    shapes = shapes_from_parents([-1, *range(length - 1)])
    return plan_time(plan_of(shapes, True), segments, size_bytes, a, b, g)


class NcclTreeAlgorithm(AlgorithmSpecBase):
    """NCCL's tree: chains inside nodes, a double binary tree across them, pipelined in chunks
    (``segments``; None: NCCL-like 128 KiB chunks), on ``channels`` channels (None: one per rank
    of the largest node, so every rank of a node heads one channel; one on a single node). Groups
    come from the cluster's nodes unless ``group_size`` is given. Short form ``nccl_tree:4`` for 4
    channels."""

    name: Literal["nccl_tree"]
    channels: int | None = Field(default=None, ge=1, le=SPEC_MAX_CHANNELS)
    segments: int | None = Field(default=None, ge=1, le=SPEC_MAX_SEGMENTS)
    group_size: int | None = Field(default=None, ge=1)


class NcclTreeAllReduce(Algorithm[NcclTreeAlgorithm]):
    """NCCL's tree all-reduce (see the module docstring)."""

    name = "nccl_tree"
    spec_type = NcclTreeAlgorithm
    short_parameter = "channels"
    abbreviation = "ntree"

    def variants(self, num_ranks: int) -> tuple[NcclTreeAlgorithm, ...]:
        # Where the closed form is exact: one node (see the module docstring); several nodes are
        # held against the engine, within the stated margin, by tests/collectives/test_nccl_tree.py.
        one_node = NcclTreeAlgorithm(name="nccl_tree", group_size=num_ranks)
        return (
            one_node,
            one_node.model_copy(update={"segments": 3}),
            one_node.model_copy(update={"channels": 2, "segments": 1}),
        )

    def uses_groups(self, spec: NcclTreeAlgorithm) -> bool:
        return spec.group_size is None

    def build(
        self, spec: NcclTreeAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        return nccl_tree_all_reduce(
            num_ranks,
            num_elements,
            groups=groups,
            group_size=spec.group_size,
            channels=spec.channels,
            segments=spec.segments,
        )

    def closed_form_s(
        self,
        spec: NcclTreeAlgorithm,
        num_ranks: int,
        size_bytes: float,
        cost: UniformCost,
        groups: Groups | None,
    ) -> float:
        check_call(num_ranks, spec.segments or 1)
        nodes, per_node = _equal_group_size(num_ranks, groups, spec.group_size)
        a, b, g = cost.alpha_s, cost.beta_s_per_byte, cost.gamma_s_per_byte
        ia = a if cost.intra_alpha_s is None else cost.intra_alpha_s
        ib = b if cost.intra_beta_s_per_byte is None else cost.intra_beta_s_per_byte
        part = size_bytes / tree_channels(resolve_groups(num_ranks, groups, spec.group_size), spec.channels)
        trees = 1 if nodes == 1 else 2
        segments = auto_segments(math.ceil(part / trees / ASSUMED_ELEMENT_BYTES), spec.segments)
        if nodes == 1:
            up, down = chain_time_s(per_node, segments, part, a, b, g)
            return up + down
        # Both trees' halves cross every chain port together: the chain carries the whole part.
        up, down = chain_time_s(per_node, segments, part, ia, ib, g)
        first, second = dbt_plans(nodes, cost.shared_port)
        across = max(sum(plan_time(plan, segments, part / 2.0, a, b, g)) for plan in (first, second))
        return up + across + down

    def closed_form_estimate(
        self, spec: NcclTreeAlgorithm, num_ranks: int, groups: Groups | None = None
    ) -> str:
        if len(resolve_groups(num_ranks, groups, spec.group_size)) == 1:
            return ""
        return "across nodes the closed form adds the chain and tree stages, which the schedule overlaps"

    def traffic(
        self, spec: NcclTreeAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        resolved = resolve_groups(num_ranks, groups, spec.group_size)
        sent = np.zeros(num_ranks, dtype=np.int64)
        received = np.zeros(num_ranks, dtype=np.int64)
        channels = tree_channels(resolved, spec.channels)
        for parent, _, size, _ in _instances(num_ranks, num_elements, resolved, channels):
            s, r = tree_traffic(parent, size)
            sent += s
            received += r
        return sent, received


ALL_REDUCE = NcclTreeAllReduce()
