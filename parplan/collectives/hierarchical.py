"""Hierarchical all-reduce: reduce within each group to its leader, ring all-reduce among the
leaders, broadcast within each group.

Groups are lists of ranks that partition ``0 .. p-1`` (typically the devices of one node); each
group's first rank is its leader. Within a group the reduce and the broadcast follow a binomial
tree over the group's ranks in the order given (so ``ceil(log2 m)`` rounds for m members); the
leaders run the ring of :mod:`ring` on ``g`` chunks. Cross-stage dependencies are exact: a leader's
ring sends also wait for the group reductions into the leader (they wrote the data being sent),
and a leader's broadcast waits for every step that wrote its final tensor.
"""

from __future__ import annotations

from collections.abc import Sequence

from parplan.collectives._build import StepBuffer, check_sizes, resolve_groups
from parplan.collectives.ring import ring_block, ring_final_writers
from parplan.collectives.schedule import Schedule, chunk_bounds
from parplan.collectives.tree import binomial_parents, emit_tree_broadcast, emit_tree_reduce

HIERARCHICAL_PHASES = ("intra_reduce", "inter_reduce_scatter", "inter_all_gather", "intra_broadcast")

__all__ = ["HIERARCHICAL_PHASES", "hierarchical_all_reduce", "resolve_groups"]


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
