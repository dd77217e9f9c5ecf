"""Hierarchical all-reduce: reduce within each group to its leader, ring all-reduce among the
leaders, broadcast within each group.

Groups are lists of ranks that partition ``0 .. p-1`` (typically the devices of one node); each
group's first rank is its leader. Within a group the reduce and the broadcast follow a binomial
tree over the group's ranks in the order given (so ``ceil(log2 m)`` rounds for m members); the
leaders run the ring of :mod:`ring` on ``g`` chunks. Cross-stage dependencies are exact: a leader's
ring sends also wait for the group reductions into the leader (they wrote the data being sent),
and a leader's broadcast waits for every step that wrote its final tensor.

Closed form: the binomial reduce within the groups (with the intra-group alpha/beta), the ring
among the ``q`` leaders (with the figures between groups), the binomial broadcast within the
groups; exact with equal groups. Traffic: ``n`` up and down each group tree edge, plus the ring's
among the leaders.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from parplan.collectives._build import StepBuffer, check_sizes
from parplan.collectives._tree_cost import plan_time
from parplan.collectives.algorithm import Algorithm, AlgorithmSpecBase, Groups, Traffic, UniformCost
from parplan.collectives.groups import resolve_groups
from parplan.collectives.ring import ring_block, ring_final_writers, ring_time_s, ring_traffic
from parplan.collectives.schedule import Schedule, chunk_bounds
from parplan.collectives.tree import (
    binomial_parents,
    binomial_plan,
    emit_tree_broadcast,
    emit_tree_reduce,
    tree_traffic,
)
from parplan.errors import CollectiveError

HIERARCHICAL_PHASES = ("intra_reduce", "inter_reduce_scatter", "inter_all_gather", "intra_broadcast")


def hierarchical_all_reduce(
    num_ranks: int,
    num_elements: int,
    *,
    groups: Sequence[Sequence[int]] | None = None,
    group_size: int | None = None,
) -> Schedule:
    """Group reduce to leaders, ring among leaders, group broadcast.

    >>> s = hierarchical_all_reduce(8, 16, group_size=4)
    >>> s.meta["leaders"], s.num_steps  # 2 x (3 up + 3 down) + ring of 2 leaders
    ((0, 4), 16)
    """
    check_sizes(num_ranks, num_elements)
    resolved = resolve_groups(num_ranks, groups, group_size)
    n = num_elements
    leaders = [g[0] for g in resolved]
    q = len(leaders)
    buf = StepBuffer()
    prior = []
    for g in resolved:
        prior.append(emit_tree_reduce(buf, g, binomial_parents(len(g)), [0, n], 0)[0])
    base = buf.num_steps
    bounds = chunk_bounds(n, q)
    columns, counts, deps = ring_block(leaders, bounds, base, prior=prior, phases=(1, 2))
    buf.add_block(columns, counts.astype("int64"), deps)
    for i, g in enumerate(resolved):
        writers = ring_final_writers(bounds, base, i, prior[i])
        emit_tree_broadcast(buf, g, binomial_parents(len(g)), [0, n], 3, [writers])
    return buf.build(
        algorithm="hierarchical",
        collective="all_reduce",
        num_ranks=num_ranks,
        num_elements=n,
        phase_names=HIERARCHICAL_PHASES,
        meta={"groups": tuple(tuple(g) for g in resolved), "leaders": tuple(leaders)},
    )


def _group_sizes(p: int, group_size: int | None, groups: Groups | None) -> list[int]:
    """Sizes of the groups the closed form assumes: blocks of ``group_size``, else ``groups``,
    else one group."""
    if group_size is not None:
        k = group_size
        return [k] * (p // k) + ([p % k] if p % k else [])
    if groups is not None:
        sizes = [len(grp) for grp in groups]
        if sum(sizes) != p or min(sizes) < 1:
            raise CollectiveError(f"groups of sizes {sizes} do not partition {p} ranks")
        return sizes
    return [p]


class HierarchicalAlgorithm(AlgorithmSpecBase):
    """Reduce within each group, ring among group leaders, broadcast within groups.

    Groups come from the cluster (devices sharing a node) unless ``group_size`` is given.
    """

    name: Literal["hierarchical"]
    group_size: int | None = Field(default=None, ge=1)


class HierarchicalAllReduce(Algorithm[HierarchicalAlgorithm]):
    """The hierarchical all-reduce (see the module docstring); uses the cluster's groups (nodes)
    unless its spec gives a ``group_size``."""

    name = "hierarchical"
    spec_type = HierarchicalAlgorithm
    short_parameter = "group_size"
    abbreviation = "hier"

    def variants(self, num_ranks: int) -> tuple[HierarchicalAlgorithm, ...]:
        # The largest proper divisor: equal groups, several leaders when p allows.
        size = max((d for d in range(1, num_ranks) if num_ranks % d == 0), default=1)
        return (self.default_spec(), HierarchicalAlgorithm(name="hierarchical", group_size=size))

    def uses_groups(self, spec: HierarchicalAlgorithm) -> bool:
        return spec.group_size is None

    def build(
        self, spec: HierarchicalAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        return hierarchical_all_reduce(num_ranks, num_elements, groups=groups, group_size=spec.group_size)

    def closed_form_s(
        self,
        spec: HierarchicalAlgorithm,
        num_ranks: int,
        size_bytes: float,
        cost: UniformCost,
        groups: Groups | None,
    ) -> float:
        sizes = _group_sizes(num_ranks, spec.group_size, groups)
        a, b, g, n = cost.alpha_s, cost.beta_s_per_byte, cost.gamma_s_per_byte, size_bytes
        ia = a if cost.intra_alpha_s is None else cost.intra_alpha_s
        ib = b if cost.intra_beta_s_per_byte is None else cost.intra_beta_s_per_byte
        up = 0.0
        down = 0.0
        for m in set(sizes):
            r, d = plan_time(binomial_plan(m, cost.shared_port), 1, n, ia, ib, g)
            up = max(up, r)
            down = max(down, d)
        return up + ring_time_s(len(sizes), n, a, b, g) + down

    def traffic(
        self, spec: HierarchicalAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        resolved = resolve_groups(num_ranks, groups, spec.group_size)
        sent = np.zeros(num_ranks, dtype=np.int64)
        received = np.zeros(num_ranks, dtype=np.int64)
        for grp in resolved:
            s, r = tree_traffic(binomial_parents(len(grp)), num_elements)
            sent[grp] += s
            received[grp] += r
        leaders = [grp[0] for grp in resolved]
        s, r = ring_traffic(len(leaders), num_elements)
        sent[leaders] += s
        received[leaders] += r
        return sent, received


ALL_REDUCE = HierarchicalAllReduce()
