"""Double binary tree all-reduce (NCCL's tree algorithm): two complementary binary trees, each
reducing and broadcasting half of the tensor.

Tree 1 is NCCL's in-order binary tree: for rank ``r > 0`` with lowest set bit ``b`` the parent is
``(r XOR b) | 2b``, or ``r XOR b`` when that is out of range; rank 0 is the root (with a single
child). Odd ranks are its leaves and even ranks its interior nodes. Tree 2 is tree 1 mirrored
(``r -> p - 1 - r``) when p is even, so its interior nodes are exactly tree 1's leaves, or shifted
by one (``r -> r + 1``) when p is odd, where only rank 0 is interior in both. Every rank thus
forwards through at most one tree (bar that one rank), which is why the pair reaches full
bandwidth with logarithmic depth.

Each tree carries one half (the first ``ceil(n/2)`` elements go to tree 1) cut into ``segments``
pipelined segments, reduced to the tree's root and broadcast back; see :mod:`tree` for the
per-step dependencies (data and program order: each segment pipelines up, then down).

Closed form: the slower of the two trees, each on the tree's shapes with half the tensor (the very
trees the schedule uses). Exact with one segment; with segments it is optimistic: the two trees'
pipelines share ports, which the closed form ignores (measured up to 16% below the engine, p <= 64,
up to 8 segments). Traffic: each tree edge carries its half up and down.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Literal

import numpy as np
from pydantic import Field

from parplan.collectives._build import StepBuffer, check_sizes
from parplan.collectives._tree_cost import TreePlan, TreeShapes, compile_plan, plan_time, shapes_from_parents
from parplan.collectives.algorithm import (
    SPEC_MAX_SEGMENTS,
    Algorithm,
    AlgorithmSpecBase,
    Groups,
    Traffic,
    UniformCost,
)
from parplan.collectives.schedule import Schedule, chunk_bounds
from parplan.collectives.tree import TREE_PHASES, emit_tree_broadcast, emit_tree_reduce, tree_traffic
from parplan.errors import CollectiveError


def nccl_btree_parents(num_ranks: int) -> list[int]:
    """Parent of every rank in NCCL's binary tree rooted at rank 0 (-1 for the root).

    >>> nccl_btree_parents(6)
    [-1, 2, 4, 2, 0, 4]
    """
    parents = [-1] * num_ranks
    for r in range(1, num_ranks):
        bit = r & -r
        up = (r ^ bit) | (bit << 1)
        parents[r] = up if up < num_ranks else r ^ bit
    return parents


def double_binary_trees(num_ranks: int) -> tuple[list[int], list[int]]:
    """Parent arrays (indexed by rank, -1 at the root) of the two complementary trees."""
    p = num_ranks
    first = nccl_btree_parents(p)
    if p % 2 == 0:
        second = [-1 if first[p - 1 - r] < 0 else p - 1 - first[p - 1 - r] for r in range(p)]
    else:
        second = [-1 if first[(r - 1) % p] < 0 else (first[(r - 1) % p] + 1) % p for r in range(p)]
    return first, second


def tree_positions(parent_by_rank: Sequence[int]) -> tuple[list[int], list[int]]:
    """Relabel a parent array over ranks as positions with the root at position 0.

    Returns ``(ranks, parents)``: position ``v`` is rank ``ranks[v]`` and its parent position is
    ``parents[v]``.
    """
    roots = [r for r, u in enumerate(parent_by_rank) if u < 0]
    if len(roots) != 1:
        raise CollectiveError(f"a tree needs exactly one root, found {len(roots)}")
    ranks = roots + [r for r in range(len(parent_by_rank)) if r != roots[0]]
    position = {r: v for v, r in enumerate(ranks)}
    parents = [-1] + [position[parent_by_rank[r]] for r in ranks[1:]]
    return ranks, parents


def double_binary_tree_all_reduce(num_ranks: int, num_elements: int, *, segments: int = 1) -> Schedule:
    """Two complementary binary trees, each all-reducing half the tensor in ``segments`` pieces.

    >>> s = double_binary_tree_all_reduce(4, 10)
    >>> s.num_steps  # 2 trees x (3 up + 3 down)
    12
    """
    check_sizes(num_ranks, num_elements)
    if segments < 1:
        raise CollectiveError(f"segments must be >= 1, got {segments}")
    halves = chunk_bounds(num_elements, 2)
    trees = double_binary_trees(num_ranks)
    layouts = [tree_positions(t) for t in trees]
    seg_bounds = [
        (int(halves[t]) + chunk_bounds(int(halves[t + 1] - halves[t]), segments)).tolist() for t in range(2)
    ]
    buf = StepBuffer()
    tree_of_step: list[np.ndarray] = []
    into_root = []
    for t, (ranks, parents) in enumerate(layouts):
        before = buf.num_steps
        into_root.append(emit_tree_reduce(buf, ranks, parents, seg_bounds[t], 0))
        tree_of_step.append(np.full(buf.num_steps - before, t, dtype=np.int8))
    for t, (ranks, parents) in enumerate(layouts):
        before = buf.num_steps
        emit_tree_broadcast(buf, ranks, parents, seg_bounds[t], 1, into_root[t], after=into_root[t][-1])
        tree_of_step.append(np.full(buf.num_steps - before, t, dtype=np.int8))
    return buf.build(
        algorithm="double_binary_tree",
        collective="all_reduce",
        num_ranks=num_ranks,
        num_elements=num_elements,
        phase_names=TREE_PHASES,
        meta={"parents": (tuple(trees[0]), tuple(trees[1])), "segments": segments},
        step_meta={"tree": np.concatenate(tree_of_step)},
    )


@lru_cache(maxsize=512)
def _dbt_shapes(p: int) -> tuple[TreeShapes, TreeShapes]:
    first, second = double_binary_trees(p)  # the very trees the schedule uses
    return shapes_from_parents(tree_positions(first)[1]), shapes_from_parents(tree_positions(second)[1])


@lru_cache(maxsize=1024)
def dbt_plans(p: int, shared_port: bool) -> tuple[TreePlan, TreePlan]:
    """The compiled closed forms of the two trees on ``p`` ranks (cached)."""
    first, second = _dbt_shapes(p)
    return compile_plan(first, shared_port), compile_plan(second, shared_port)


class DoubleBinaryTreeAlgorithm(AlgorithmSpecBase):
    """Two complementary binary trees, each carrying half the tensor (NCCL's tree algorithm),
    optionally pipelined in ``segments`` per tree (NCCL pipelines in chunks)."""

    name: Literal["double_binary_tree"]
    segments: int = Field(default=1, ge=1, le=SPEC_MAX_SEGMENTS)


class DoubleBinaryTreeAllReduce(Algorithm[DoubleBinaryTreeAlgorithm]):
    """NCCL's double binary tree all-reduce (see the module docstring)."""

    name = "double_binary_tree"
    spec_type = DoubleBinaryTreeAlgorithm
    abbreviation = "dbt"

    def build(
        self, spec: DoubleBinaryTreeAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        return double_binary_tree_all_reduce(num_ranks, num_elements, segments=spec.segments)

    def closed_form_s(
        self,
        spec: DoubleBinaryTreeAlgorithm,
        num_ranks: int,
        size_bytes: float,
        cost: UniformCost,
        groups: Groups | None,
    ) -> float:
        a, b, g = cost.alpha_s, cost.beta_s_per_byte, cost.gamma_s_per_byte
        first, second = dbt_plans(num_ranks, cost.shared_port)
        one = plan_time(first, spec.segments, size_bytes / 2.0, a, b, g)
        two = plan_time(second, spec.segments, size_bytes / 2.0, a, b, g)
        return max(one[0] + one[1], two[0] + two[1])

    def traffic(
        self, spec: DoubleBinaryTreeAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        first, second = double_binary_trees(num_ranks)
        half = np.diff(chunk_bounds(num_elements, 2))
        s1, r1 = tree_traffic(first, int(half[0]))
        s2, r2 = tree_traffic(second, int(half[1]))
        return s1 + s2, r1 + r2


ALL_REDUCE = DoubleBinaryTreeAllReduce()
