"""Tree broadcast on its own: ``root``'s tensor copied to every rank down a binomial or k-ary tree.

The broadcast phase of :mod:`parplan.collectives.tree` (same per-step dependencies, ``segments``
pipelined), rooted anywhere: position ``v`` of the tree is rank ``(v + root) mod p``. Its closed
form is a flow shop along every root-to-leaf path (:mod:`parplan.collectives._tree_cost`), exact
on a uniform group for any arity and segments; the root does not change the time.

>>> tree_broadcast(4, 8, root=1).src.tolist()
[1, 1, 3]
"""

from __future__ import annotations

from parplan.collectives._tree_cost import broadcast_time
from parplan.collectives.algorithm import Algorithm, Groups, Traffic, UniformCost
from parplan.collectives.schedule import Schedule
from parplan.collectives.tree import emit_tree_broadcast, one_way_schedule, tree_plan
from parplan.collectives.tree_reduce import TreeRootedSpec, check_call, rooted_traffic


def tree_broadcast(
    num_ranks: int, num_elements: int, *, root: int = 0, arity: int | None = None, segments: int = 1
) -> Schedule:
    """Broadcast from ``root`` down a binomial tree (``arity=None``) or a k-ary tree."""
    return one_way_schedule("broadcast", emit_tree_broadcast, num_ranks, num_elements, root, arity, segments)


def tree_broadcast_time(
    num_ranks: int,
    size_bytes: float,
    *,
    alpha_s: float,
    beta_s_per_byte: float,
    arity: int | None = None,
    segments: int = 1,
    shared_port: bool = True,
) -> float:
    """Seconds of :func:`tree_broadcast` on a uniform group (see
    :func:`~parplan.collectives.tree_reduce.tree_reduce_time`)."""
    check_call(num_ranks, segments)
    if num_ranks == 1 or size_bytes <= 0:
        return 0.0
    plan = tree_plan(num_ranks, arity, shared_port)
    return broadcast_time(plan, segments, alpha_s, float(size_bytes) / segments * beta_s_per_byte)


class TreeBroadcast(Algorithm[TreeRootedSpec]):
    """The tree broadcast (see the module docstring)."""

    name = "tree"
    collective = "broadcast"
    spec_type = TreeRootedSpec
    short_parameter = "arity"

    def variants(self, num_ranks: int) -> tuple[TreeRootedSpec, ...]:
        return (self.default_spec(), TreeRootedSpec(name="tree", root=num_ranks // 2, arity=3, segments=3))

    def build(
        self, spec: TreeRootedSpec, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        return tree_broadcast(
            num_ranks, num_elements, root=spec.root, arity=spec.arity, segments=spec.segments
        )

    def closed_form_s(
        self,
        spec: TreeRootedSpec,
        num_ranks: int,
        size_bytes: float,
        cost: UniformCost,
        groups: Groups | None,
    ) -> float:
        return tree_broadcast_time(
            num_ranks,
            size_bytes,
            alpha_s=cost.alpha_s,
            beta_s_per_byte=cost.beta_s_per_byte,
            arity=spec.arity,
            segments=spec.segments,
            shared_port=cost.shared_port,
        )

    def traffic(
        self, spec: TreeRootedSpec, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        up, down = rooted_traffic(num_ranks, num_elements, spec.root, spec.arity)
        return down, up


BROADCAST = TreeBroadcast()
