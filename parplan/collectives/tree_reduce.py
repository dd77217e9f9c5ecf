"""Tree reduce on its own: every rank's tensor summed at ``root`` up a binomial or k-ary tree.

The reduce phase of :mod:`parplan.collectives.tree` (same per-step dependencies, ``segments``
pipelined), rooted anywhere: position ``v`` of the tree is rank ``(v + root) mod p``. Its closed
form is the tree's reduce by shapes (:mod:`parplan.collectives._tree_cost`), exact on a uniform
group for any arity and segments; the root does not change the time.

>>> tree_reduce(4, 8, root=1).meta["parents"]
(3, -1, 1, 1)
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from parplan.collectives._tree_cost import reduce_time
from parplan.collectives.algorithm import Algorithm, AlgorithmSpecBase, Groups, Traffic, UniformCost
from parplan.collectives.schedule import Schedule
from parplan.collectives.tree import (
    binomial_parents,
    emit_tree_reduce,
    kary_parents,
    one_way_schedule,
    tree_plan,
)
from parplan.errors import CollectiveError


def tree_reduce(
    num_ranks: int, num_elements: int, *, root: int = 0, arity: int | None = None, segments: int = 1
) -> Schedule:
    """Reduce to ``root`` up a binomial tree (``arity=None``) or a k-ary tree."""
    return one_way_schedule("reduce", emit_tree_reduce, num_ranks, num_elements, root, arity, segments)


def check_call(num_ranks: int, segments: int) -> None:
    """Reject no ranks or no segments (the closed forms of the rooted tree collectives)."""
    if num_ranks < 1:
        raise CollectiveError(f"a collective needs at least one rank, got {num_ranks}")
    if segments < 1:
        raise CollectiveError(f"segments must be >= 1, got {segments}")


def tree_reduce_time(
    num_ranks: int,
    size_bytes: float,
    *,
    alpha_s: float,
    beta_s_per_byte: float,
    gamma_s_per_byte: float = 0.0,
    arity: int | None = None,
    segments: int = 1,
    shared_port: bool = True,
) -> float:
    """Seconds of :func:`tree_reduce` on a uniform group: a binomial tree (``arity=None``) or a
    k-ary heap tree, ``segments`` pipelined segments (the root does not change the time)."""
    check_call(num_ranks, segments)
    if num_ranks == 1 or size_bytes <= 0:
        return 0.0
    per = float(size_bytes) / segments
    plan = tree_plan(num_ranks, arity, shared_port)
    return reduce_time(plan, segments, alpha_s, per * beta_s_per_byte, per * gamma_s_per_byte)


def rooted_traffic(num_ranks: int, num_elements: int, root: int, arity: int | None) -> Traffic:
    """Per-rank (up, down) elements of a rooted tree: ``n`` up each rank's edge to its parent and
    ``n`` down each edge to a child (a reduce sends up, a broadcast down)."""
    p, n = num_ranks, num_elements
    parents = binomial_parents(p) if arity is None else kary_parents(p, arity)
    children = np.bincount([u for u in parents if u >= 0], minlength=p).astype(np.int64)
    has_parent = np.array([u >= 0 for u in parents], dtype=np.int64)
    # Position v is rank (v + root) mod p.
    return np.roll(n * has_parent, root), np.roll(n * children, root)


class TreeRootedSpec(AlgorithmSpecBase):
    """A tree reduce or broadcast: its ``root``, a binomial tree (``arity`` unset) or a k-ary one,
    pipelined in ``segments``."""

    name: Literal["tree"]
    root: int = Field(default=0, ge=0)
    arity: int | None = Field(default=None, ge=2)
    segments: int = Field(default=1, ge=1)


class TreeReduce(Algorithm[TreeRootedSpec]):
    """The tree reduce (see the module docstring)."""

    name = "tree"
    collective = "reduce"
    spec_type = TreeRootedSpec
    short_parameter = "arity"

    def variants(self, num_ranks: int) -> tuple[TreeRootedSpec, ...]:
        return (self.default_spec(), TreeRootedSpec(name="tree", root=num_ranks // 2, arity=3, segments=3))

    def build(
        self, spec: TreeRootedSpec, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        return tree_reduce(num_ranks, num_elements, root=spec.root, arity=spec.arity, segments=spec.segments)

    def closed_form_s(
        self,
        spec: TreeRootedSpec,
        num_ranks: int,
        size_bytes: float,
        cost: UniformCost,
        groups: Groups | None,
    ) -> float:
        return tree_reduce_time(
            num_ranks,
            size_bytes,
            alpha_s=cost.alpha_s,
            beta_s_per_byte=cost.beta_s_per_byte,
            gamma_s_per_byte=cost.gamma_s_per_byte,
            arity=spec.arity,
            segments=spec.segments,
            shared_port=cost.shared_port,
        )

    def traffic(
        self, spec: TreeRootedSpec, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        return rooted_traffic(num_ranks, num_elements, spec.root, spec.arity)


REDUCE = TreeReduce()
