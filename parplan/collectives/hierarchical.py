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

from parplan.collectives._build import StepBuffer, check_sizes
from parplan.collectives.ring import ring_block, ring_final_writers
from parplan.collectives.schedule import Schedule, chunk_bounds
from parplan.collectives.tree import binomial_parents, emit_tree_broadcast, emit_tree_reduce
from parplan.errors import CollectiveError

HIERARCHICAL_PHASES = ("intra_reduce", "inter_reduce_scatter", "inter_all_gather", "intra_broadcast")


def resolve_groups(
    num_ranks: int, groups: Sequence[Sequence[int]] | None = None, group_size: int | None = None
) -> list[list[int]]:
    """The groups to use: consecutive blocks of ``group_size`` ranks if given, else ``groups``
    (validated to partition the ranks), else one group of all ranks.

    >>> resolve_groups(5, group_size=2)
    [[0, 1], [2, 3], [4]]
    """
    if group_size is not None:
        if group_size < 1:
            raise CollectiveError(f"group_size must be >= 1, got {group_size}")
        return [list(range(s, min(s + group_size, num_ranks))) for s in range(0, num_ranks, group_size)]
    if groups is None:
        return [list(range(num_ranks))]
    out = [[int(r) for r in g] for g in groups]
    seen: set[int] = set()
    for i, g in enumerate(out):
        if not g:
            raise CollectiveError(f"group {i} is empty")
        for r in g:
            if not 0 <= r < num_ranks:
                raise CollectiveError(f"group {i} names rank {r}, outside 0..{num_ranks - 1}")
            if r in seen:
                raise CollectiveError(f"rank {r} is in more than one group")
            seen.add(r)
    if len(seen) != num_ranks:
        missing = sorted(set(range(num_ranks)) - seen)
        raise CollectiveError(f"groups must cover every rank; missing {missing[:10]}")
    return out


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
