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
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from parplan.collectives._build import StepBuffer, check_sizes
from parplan.collectives.schedule import Schedule, chunk_bounds
from parplan.collectives.tree import TREE_PHASES, emit_tree_broadcast, emit_tree_reduce
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
