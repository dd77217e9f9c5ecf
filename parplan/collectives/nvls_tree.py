"""NVLS Tree all-reduce: NVLS inside each node, NCCL's double binary tree across nodes.

NCCL's NVLSTree (multi-node NVLS without CollNet): each node's NVSwitch reduces the node's
contributions, one GPU of the node (the slice's *head*) carries the node's sum through its NIC into
a binary tree over the nodes, and the total comes back down the tree to every head and through the
NVSwitch's multicast to the node. As a schedule, per slice ``k`` of ``segments``:

1. every rank sends slice ``k`` to its node's NVSwitch, which adds it (a switch rank per node,
   capability ``nvls``);
2. the NVSwitch sends the node's sum to the slice's head, member ``k mod len(node)`` of the node
   (so consecutive slices leave a node through different GPUs, hence NICs);
3. the heads reduce up the slice's tree and broadcast down it: slices alternate between NCCL's two
   complementary binary trees over the nodes
   (:func:`~parplan.collectives.double_binary_tree.double_binary_trees`), so every node is interior
   in one and a leaf in the other;
4. each head sends the total back to its NVSwitch, which multicasts it to the node's other ranks.

The steps are those of :mod:`parplan.collectives._nvls_nodes` with a tree across. On one node
there is no tree (NCCL turns NVLS Tree off there): the schedule is NVLS
(:mod:`parplan.collectives.nvls`). Groups (the ranks of each node) come from the cluster unless
``group_size`` sets blocks; lowering needs an NVSwitch per node that the cluster declares able to
reduce (``hardware: {nvswitch: true, nvls: true}``).

Closed form on a uniform group (a hop to or from a switch ``alpha/2 + m beta``): one node, NVLS's
(exact); several nodes, NVLS's plus one slice's trip to the head, up and down the tree and back
(an estimate: stages overlap in the schedule). Traffic: by the definition above.

>>> s = nvls_tree_all_reduce(4, 8, groups=[[0, 1], [2, 3]], segments=2)
>>> [w.capability for w in s.switches], s.num_endpoints
(['nvls', 'nvls'], 6)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from pydantic import Field

from parplan.collectives._build import check_sizes
from parplan.collectives._nvls_nodes import node_trees, nodes_all_reduce, nodes_traffic, tree_order
from parplan.collectives.algorithm import Algorithm, AlgorithmSpecBase, Groups, Traffic, UniformCost
from parplan.collectives.groups import resolve_groups
from parplan.collectives.nccl_tree import ASSUMED_ELEMENT_BYTES, auto_segments
from parplan.collectives.nvls import ALL_REDUCE as NVLS_ALL_REDUCE
from parplan.collectives.nvls import NvlsAlgorithm, nvls_all_reduce, nvls_time_s
from parplan.collectives.schedule import Schedule


def nvls_tree_all_reduce(
    num_ranks: int,
    num_elements: int,
    *,
    groups: Groups | None = None,
    group_size: int | None = None,
    segments: int | None = None,
) -> Schedule:
    """NVLS Tree all-reduce (see the module docstring)."""
    check_sizes(num_ranks, num_elements)
    nodes = resolve_groups(num_ranks, groups, group_size)
    if len(nodes) == 1:
        single = nvls_all_reduce(num_ranks, num_elements, segments=segments, groups=nodes)
        return dataclasses.replace(single, algorithm="nvls_tree")
    count = auto_segments(num_elements, segments)
    return nodes_all_reduce("nvls_tree", num_ranks, num_elements, nodes, count, "tree")


class NvlsTreeAlgorithm(AlgorithmSpecBase):
    """NVLS Tree: NVLS inside each node, a double binary tree across nodes, in ``segments`` slices
    (None: NCCL-like 128 KiB). Needs ``hardware: {nvswitch: true, nvls: true}``. Groups: the
    cluster's nodes unless ``group_size``. Short form ``nvls_tree:4`` for 4 slices."""

    name: Literal["nvls_tree"]
    segments: int | None = Field(default=None, ge=1)
    group_size: int | None = Field(default=None, ge=1)


class NvlsTreeAllReduce(Algorithm[NvlsTreeAlgorithm]):
    """NVLS Tree all-reduce (see the module docstring)."""

    name = "nvls_tree"
    spec_type = NvlsTreeAlgorithm
    short_parameter = "segments"
    abbreviation = "nvlstree"
    switch_capabilities = frozenset({"nvls"})

    def variants(self, num_ranks: int) -> tuple[NvlsTreeAlgorithm, ...]:
        one_node = NvlsTreeAlgorithm(name="nvls_tree", group_size=max(num_ranks, 1))
        return (one_node, one_node.model_copy(update={"segments": 3}))

    def uses_groups(self, spec: NvlsTreeAlgorithm) -> bool:
        return spec.group_size is None

    def build(
        self, spec: NvlsTreeAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        return nvls_tree_all_reduce(
            num_ranks, num_elements, groups=groups, group_size=spec.group_size, segments=spec.segments
        )

    def closed_form_s(
        self,
        spec: NvlsTreeAlgorithm,
        num_ranks: int,
        size_bytes: float,
        cost: UniformCost,
        groups: Groups | None,
    ) -> float:
        nodes = resolve_groups(num_ranks, groups, spec.group_size)
        segments = auto_segments(math.ceil(size_bytes / ASSUMED_ELEMENT_BYTES), spec.segments)
        a, b = cost.alpha_s, cost.beta_s_per_byte
        within = nvls_time_s(num_ranks, size_bytes, segments, a, b)
        if len(nodes) == 1:
            return within
        m = size_bytes / segments
        depth = max(len(tree_order(t)) for t in node_trees(len(nodes)))  # a bound on the depth
        depth = math.ceil(math.log2(depth + 1))
        return within + 2 * (a / 2 + m * b) + 2 * depth * (a + m * b)

    def closed_form_estimate(
        self, spec: NvlsTreeAlgorithm, num_ranks: int, groups: Groups | None = None
    ) -> str:
        if len(resolve_groups(num_ranks, groups, spec.group_size)) == 1:
            return ""
        return "across nodes the closed form adds one slice's trip through the tree to NVLS's pipeline"

    def traffic(
        self, spec: NvlsTreeAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        nodes = resolve_groups(num_ranks, groups, spec.group_size)
        if len(nodes) == 1:
            one = NvlsAlgorithm(name="nvls", segments=spec.segments)
            return NVLS_ALL_REDUCE.traffic(one, num_ranks, num_elements, [list(range(num_ranks))])
        count = auto_segments(num_elements, spec.segments)
        return nodes_traffic(num_ranks, num_elements, nodes, count, "tree")


ALL_REDUCE = NvlsTreeAllReduce()
