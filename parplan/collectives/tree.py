"""The k-ary tree all-reduce, and the tree machinery every tree-shaped schedule shares (the
standalone reduce and broadcast in :mod:`~parplan.collectives.tree_reduce` and
:mod:`~parplan.collectives.tree_broadcast`, the double binary tree, hierarchical's groups).

A tree is a parent array over positions ``0 .. m-1`` with the root at position 0; position ``v``
is rank ``ranks[v]``. The tensor is cut into ``segments`` contiguous segments that form a
pipeline: a node forwards segment ``g`` as soon as it has it, while segment ``g + 1`` is still on
its way to it. The program order of each rank is what real implementations do with one buffer per
link (NCCL's tree with a single slot, MPI's segmented reduce and broadcast):

- Reduce, per segment: every non-root node sends its segment to its parent, which adds it in. The
  send waits for the steps that reduced into that node's segment (its children's sends: data)
  and for the parent to have reduced the previous segment from *all* its children (program
  order: the parent's fused receive-reduce consumes a segment from every child at once, and only
  then takes the next one). A node's segments therefore leave one after the other, and siblings
  move in step instead of drifting apart on the parent's serial reduction stream.
- Broadcast, per segment: the root sends to its children (after whatever last wrote the root's
  segment), every other node forwards what it received from its parent (data), and a node's
  segment ``g`` to a child waits for its segment ``g - 1`` to that child (program order).
- The all-reduce is the reduce, then the broadcast (as MPI's non-overlapping reduce + broadcast):
  the root starts broadcasting once it has reduced every segment, so the two pipelines never
  compete for a port. With one segment this is the plain reduce + broadcast.

These program-order dependencies share a rank with the step they order, which is what the data
plane (:mod:`parplan.collectives.dataplane`) accepts beside data and anti-dependencies.

The k-ary tree is the heap layout (parent of ``v`` is ``(v - 1) // k``); the binomial tree clears
the lowest set bit (parent of ``v`` is ``v & (v - 1)``), giving depth ``ceil(log2 m)``.

Closed forms are evaluated on the tree's shapes (:mod:`parplan.collectives._tree_cost`, compiled
once per tree here), exact on a uniform group for any arity and segments. Traffic: each tree edge
carries the tensor up and down.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
from parplan.errors import CollectiveError

TREE_PHASES = ("reduce", "broadcast")


def kary_parents(size: int, arity: int) -> list[int]:
    """Heap-layout k-ary tree on ``size`` positions: parent of ``v`` is ``(v - 1) // arity``."""
    return [-1] + [(v - 1) // arity for v in range(1, size)]


def binomial_parents(size: int) -> list[int]:
    """Binomial tree on ``size`` positions: parent of ``v`` is ``v`` with its lowest set bit cleared."""
    return [-1] + [v & (v - 1) for v in range(1, size)]


def depths(parents: Sequence[int]) -> list[int]:
    """Depth of every position of a tree rooted at position 0 (raises if ``parents`` is no such tree)."""
    size = len(parents)
    if size == 0 or parents[0] != -1:
        raise CollectiveError("a tree needs position 0 as its root")
    depth = [-1] * size
    depth[0] = 0
    for v in range(size):
        path = []
        u = v
        while depth[u] < 0:
            path.append(u)
            u = parents[u]
            if not 0 <= u < size or len(path) > size:
                raise CollectiveError(f"parent array is not a tree rooted at 0 (at position {v})")
        for w in reversed(path):
            depth[w] = depth[parents[w]] + 1
    return depth


def children_counts(parents: Sequence[int]) -> list[int]:
    """How many children each position has."""
    counts = [0] * len(parents)
    for u in parents[1:]:
        counts[u] += 1
    return counts


def emit_tree_reduce(
    buf: StepBuffer,
    ranks: Sequence[int],
    parents: Sequence[int],
    bounds: Sequence[int],
    phase: int,
) -> list[list[int]]:
    """Append the reduce steps of every segment; returns, per segment, the steps that reduced into
    the root (what a following broadcast or ring must wait for).

    A node's send of segment ``g`` waits for its children's segment ``g`` (data) and for its
    parent to have reduced segment ``g - 1`` from all its children (program order, see the module
    docstring), its own included.
    """
    depth = depths(parents)
    order = sorted(range(1, len(parents)), key=lambda v: -depth[v])
    into_root: list[list[int]] = []
    before: list[list[int]] = [[] for _ in parents]  # the steps into each node of the segment before
    for g in range(len(bounds) - 1):
        offset, length = int(bounds[g]), int(bounds[g + 1] - bounds[g])
        into: list[list[int]] = [[] for _ in parents]
        for v in order:
            u = parents[v]
            into[u].append(buf.add(ranks[v], ranks[u], offset, length, True, phase, [*into[v], *before[u]]))
        into_root.append(into[0])
        before = into
    return into_root


def emit_tree_broadcast(
    buf: StepBuffer,
    ranks: Sequence[int],
    parents: Sequence[int],
    bounds: Sequence[int],
    phase: int,
    root_writers: Sequence[Sequence[int]] | None = None,
    after: Sequence[int] = (),
) -> None:
    """Append the broadcast steps of every segment. ``root_writers[g]`` are the steps that wrote
    the root's segment ``g`` (none when the root starts with the data); the root starts sending
    once ``after`` (e.g. the whole reduce before it) is done as well.

    A node forwards segment ``g`` to a child once it has it (data) and its send of segment
    ``g - 1`` to that child is done (program order), so the segments form a pipeline.
    """
    depth = depths(parents)
    order = sorted(range(1, len(parents)), key=lambda v: depth[v])
    previous: list[list[int]] = [list(after) for _ in parents]  # the send into v of the segment before
    for g in range(len(bounds) - 1):
        offset, length = int(bounds[g]), int(bounds[g + 1] - bounds[g])
        received = [-1] * len(parents)
        for v in order:
            u = parents[v]
            data = list(root_writers[g] if root_writers is not None else ()) if u == 0 else [received[u]]
            prior = [x for x in (previous[v] if u == 0 or g else ()) if x not in data]
            received[v] = buf.add(ranks[u], ranks[v], offset, length, False, phase, data + prior)
            previous[v] = [received[v]]


def check_tree_params(num_ranks: int, root: int, arity: int | None, segments: int) -> None:
    """Reject an arity below 2, no segments, or a root that is not a rank."""
    if arity is not None and arity < 2:
        raise CollectiveError(f"tree arity must be >= 2, got {arity}")
    if segments < 1:
        raise CollectiveError(f"segments must be >= 1, got {segments}")
    if not 0 <= root < num_ranks:
        raise CollectiveError(f"root {root} is not a rank of a {num_ranks}-rank collective")


def tree_layout(num_ranks: int, root: int, arity: int | None) -> tuple[list[int], list[int], str]:
    """``(ranks, parents, shape name)`` of a binomial (``arity=None``) or k-ary tree rooted at
    ``root``: position ``v`` is rank ``(v + root) mod p``."""
    parents = binomial_parents(num_ranks) if arity is None else kary_parents(num_ranks, arity)
    ranks = [(v + root) % num_ranks for v in range(num_ranks)]
    return ranks, parents, "binomial" if arity is None else f"{arity}-ary"


def tree_meta(
    ranks: list[int], parents: list[int], shape: str, segments: int, arity: int | None
) -> dict[str, object]:
    """The ``meta`` of a tree schedule: its shape, arity, segments and each rank's parent rank."""
    parent_rank = [-1] * len(ranks)
    for v in range(1, len(ranks)):
        parent_rank[ranks[v]] = ranks[parents[v]]
    return {
        "shape": shape,
        "arity": arity if arity is not None else 2,
        "segments": segments,
        "parents": tuple(parent_rank),
    }


def tree_all_reduce(num_ranks: int, num_elements: int, *, arity: int = 2, segments: int = 1) -> Schedule:
    """Reduce up a k-ary tree rooted at rank 0, then broadcast back down; ``segments`` pipelines
    each (see the module docstring).

    >>> s = tree_all_reduce(7, 10, arity=2)
    >>> s.num_steps, s.meta["parents"]
    (12, (-1, 0, 0, 1, 1, 2, 2))
    """
    check_sizes(num_ranks, num_elements)
    check_tree_params(num_ranks, 0, arity, segments)
    ranks, parents, shape = tree_layout(num_ranks, 0, arity)
    bounds = chunk_bounds(num_elements, segments).tolist()
    buf = StepBuffer()
    into_root = emit_tree_reduce(buf, ranks, parents, bounds, 0)
    emit_tree_broadcast(buf, ranks, parents, bounds, 1, into_root, after=into_root[-1])
    return buf.build(
        algorithm="tree",
        collective="all_reduce",
        num_ranks=num_ranks,
        num_elements=num_elements,
        phase_names=TREE_PHASES,
        root=0,
        meta=tree_meta(ranks, parents, shape, segments, arity),
    )


def one_way_schedule(
    collective: str,
    emit: Callable[..., object],
    num_ranks: int,
    num_elements: int,
    root: int,
    arity: int | None,
    segments: int,
) -> Schedule:
    """A reduce or a broadcast alone: one phase of the tree, named after the collective."""
    check_sizes(num_ranks, num_elements)
    check_tree_params(num_ranks, root, arity, segments)
    ranks, parents, shape = tree_layout(num_ranks, root, arity)
    buf = StepBuffer()
    emit(buf, ranks, parents, chunk_bounds(num_elements, segments).tolist(), 0)
    return buf.build(
        algorithm="tree",
        collective=collective,
        num_ranks=num_ranks,
        num_elements=num_elements,
        phase_names=(collective,),
        root=root,
        meta=tree_meta(ranks, parents, shape, segments, arity),
    )


# -- volumes and closed forms ----------------------------------------------------------------------


def tree_traffic(parent_by_rank: Sequence[int], size: int) -> Traffic:
    """A reduce plus broadcast of ``size`` elements on a tree: each edge carries it up and down."""
    p = len(parent_by_rank)
    children = np.bincount([u for u in parent_by_rank if u >= 0], minlength=p).astype(np.int64)
    has_parent = np.array([u >= 0 for u in parent_by_rank], dtype=np.int64)
    per_rank = size * (children + has_parent)
    return per_rank, per_rank.copy()


@lru_cache(maxsize=512)
def _kary_shapes(p: int, arity: int) -> TreeShapes:
    return shapes_from_parents(kary_parents(p, arity))


@lru_cache(maxsize=512)
def _binomial_shapes(m: int) -> TreeShapes:
    return shapes_from_parents(binomial_parents(m))


@lru_cache(maxsize=1024)
def kary_plan(p: int, arity: int, shared_port: bool) -> TreePlan:
    """The compiled closed form of the k-ary heap tree on ``p`` ranks (cached)."""
    return compile_plan(_kary_shapes(p, arity), shared_port)


@lru_cache(maxsize=1024)
def binomial_plan(m: int, shared_port: bool) -> TreePlan:
    """The compiled closed form of the binomial tree on ``m`` ranks (cached)."""
    return compile_plan(_binomial_shapes(m), shared_port)


def tree_plan(num_ranks: int, arity: int | None, shared_port: bool) -> TreePlan:
    """The binomial (``arity=None``) or k-ary tree's compiled closed form."""
    if arity is None:
        return binomial_plan(num_ranks, shared_port)
    if arity < 2:
        raise CollectiveError(f"tree arity must be >= 2, got {arity}")
    return kary_plan(num_ranks, arity, shared_port)


# -- the algorithm ---------------------------------------------------------------------------------


class TreeAlgorithm(AlgorithmSpecBase):
    """Reduce up a k-ary tree and broadcast back down, optionally pipelined in ``segments``."""

    name: Literal["tree"]
    arity: int = Field(default=2, ge=2)
    segments: int = Field(default=1, ge=1, le=SPEC_MAX_SEGMENTS)


class TreeAllReduce(Algorithm[TreeAlgorithm]):
    """The k-ary tree all-reduce: the reduce up the heap tree, then the broadcast down it, timed on
    the tree's shapes (:mod:`parplan.collectives._tree_cost`); exact for any arity and segments."""

    name = "tree"
    spec_type = TreeAlgorithm
    short_parameter = "arity"

    def variants(self, num_ranks: int) -> tuple[TreeAlgorithm, ...]:
        return (self.default_spec(), TreeAlgorithm(name="tree", arity=3, segments=3))

    def build(
        self, spec: TreeAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        return tree_all_reduce(num_ranks, num_elements, arity=spec.arity, segments=spec.segments)

    def closed_form_s(
        self, spec: TreeAlgorithm, num_ranks: int, size_bytes: float, cost: UniformCost, groups: Groups | None
    ) -> float:
        plan = kary_plan(num_ranks, spec.arity, cost.shared_port)
        a, b, g = cost.alpha_s, cost.beta_s_per_byte, cost.gamma_s_per_byte
        up, down = plan_time(plan, spec.segments, size_bytes, a, b, g)
        return up + down

    def traffic(
        self, spec: TreeAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        return tree_traffic(kary_parents(num_ranks, spec.arity), num_elements)


ALL_REDUCE = TreeAllReduce()
