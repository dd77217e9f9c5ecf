"""Rank groups: lists of ranks that partition ``0 .. p-1`` (the ranks of each node, the replicas
of one pipeline stage, fixed-size blocks), which hierarchical and ring schedules follow.

>>> resolve_groups(5, group_size=2)
[[0, 1], [2, 3], [4]]
"""

from __future__ import annotations

from collections.abc import Sequence

from parplan.errors import CollectiveError, ParplanError


def check_groups(
    groups: Sequence[Sequence[int]], p: int, *, error: type[ParplanError] = CollectiveError
) -> None:
    """Raise ``error`` (a :class:`CollectiveError` unless the caller names its own, as placement
    does) unless ``groups`` are non-empty and partition ranks ``0..p-1``."""
    seen: set[int] = set()
    for i, g in enumerate(groups):
        if not g:
            raise error(f"group {i} is empty")
        for r in g:
            if not 0 <= r < p:
                raise error(f"group {i} names rank {r}, out of range: outside 0..{p - 1}")
            if r in seen:
                raise error(f"rank {r} is in more than one group")
            seen.add(r)
    if len(seen) != p:
        missing = sorted(set(range(p)) - seen)
        raise error(f"ranks {missing[:8]} are in no group (missing {missing[:8]} of 0..{p - 1})")


def resolve_groups(
    num_ranks: int, groups: Sequence[Sequence[int]] | None = None, group_size: int | None = None
) -> list[list[int]]:
    """The groups to use: consecutive blocks of ``group_size`` ranks if given, else ``groups``
    (validated to partition the ranks), else one group of all ranks."""
    if group_size is not None:
        if group_size < 1:
            raise CollectiveError(f"group_size must be >= 1, got {group_size}")
        return [list(range(s, min(s + group_size, num_ranks))) for s in range(0, num_ranks, group_size)]
    if groups is None:
        return [list(range(num_ranks))]
    out = [[int(r) for r in g] for g in groups]
    check_groups(out, num_ranks)
    return out
