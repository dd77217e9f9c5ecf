"""Closed-form traffic of every algorithm: elements each rank sends and receives.

These are derived from each algorithm's definition, not from its schedule, so tests can hold the
data plane's byte counts against them. Headline figures, for ``p`` ranks and ``n`` elements:

- ring: ``2 (p-1)/p n`` per rank in each direction when ``p`` divides ``n`` (with uneven chunks,
  rank r sends ``2n - c_r - c_{r+1}`` and receives ``2n - c_{r-1} - c_r``, c = chunk sizes); with
  ``C`` channels the same per ring on its part ``n_c`` of the tensor, summed over the rings, so
  ``2 (p-1)/p n`` again up to chunk rounding;
- centralized: ``(p-1) n`` into the root and ``(p-1) n`` out of it, ``n`` each way elsewhere;
- tree / double binary tree / hierarchical: ``n`` (or a half) up and down per tree edge;
- halving-doubling: ``2 (p'-1)/p' n`` per participant for ``p'`` a power of two dividing ``n``,
  plus ``n`` each way between a folded rank and its partner.

Every all-reduce algorithm here moves ``2 (p-1) n`` elements in total, the lower bound (each
element needs ``p - 1`` merges and ``p - 1`` further deliveries), which :func:`allreduce_total_lower_bound`
states.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from parplan.collectives._build import resolve_groups
from parplan.collectives.double_binary_tree import double_binary_trees
from parplan.collectives.ring import ring_channels
from parplan.collectives.schedule import IntArray, chunk_bounds
from parplan.config.algorithms import parse_algorithm
from parplan.errors import CollectiveError

Traffic = tuple[IntArray, IntArray]


def allreduce_total_lower_bound(num_ranks: int, num_elements: int) -> int:
    """Fewest elements any all-reduce must move in total: ``2 (p - 1) n``."""
    return 2 * (num_ranks - 1) * num_elements


def ring_traffic(
    num_ranks: int, num_elements: int, *, channels: int = 1, groups: Sequence[Sequence[int]] | None = None
) -> Traffic:
    """Per-rank (sent, received) elements of the ring all-reduce on ``channels`` rings.

    Ring ``c`` all-reduces part ``c`` of ``chunk_bounds(n, channels)`` over its rank order: ranks
    ``0 .. p-1`` without ``groups``, else the groups in order, each rotated to start at its member
    ``c mod len(group)`` (the layout of :mod:`parplan.collectives.ring`, restated here so the
    tests check the schedule against its definition). The rank at ring position ``i`` sends
    ``2 n_c - c_i - c_{i+1}`` and receives ``2 n_c - c_{i-1} - c_i`` (``c`` its ring's chunks).
    """
    p = num_ranks
    sent = np.zeros(p, dtype=np.int64)
    received = np.zeros(p, dtype=np.int64)
    if p == 1:
        return sent, received
    members = None if groups is None else resolve_groups(p, groups)
    parts = np.diff(chunk_bounds(num_elements, channels))
    for c, part in enumerate(parts.tolist()):
        order = (
            list(range(p))
            if members is None
            else [g[(c + i) % len(g)] for g in members for i in range(len(g))]
        )
        chunks = np.diff(chunk_bounds(part, p))
        sent[order] += 2 * part - chunks - np.roll(chunks, -1)
        received[order] += 2 * part - np.roll(chunks, 1) - chunks
    return sent, received


def _tree_traffic(parent_by_rank: Sequence[int], size: int) -> Traffic:
    """A reduce plus broadcast of ``size`` elements on a tree: each edge carries it up and down."""
    p = len(parent_by_rank)
    children = np.bincount([u for u in parent_by_rank if u >= 0], minlength=p).astype(np.int64)
    has_parent = np.array([u >= 0 for u in parent_by_rank], dtype=np.int64)
    per_rank = size * (children + has_parent)
    return per_rank, per_rank.copy()


def _kary_parents_closed(p: int, arity: int) -> list[int]:
    return [-1] + [(v - 1) // arity for v in range(1, p)]


def _binomial_parents_closed(m: int) -> list[int]:
    return [-1] + [v & (v - 1) for v in range(1, m)]


def expected_traffic(
    algorithm: Any, num_ranks: int, num_elements: int, *, groups: Sequence[Sequence[int]] | None = None
) -> Traffic:
    """Per-rank (sent, received) element counts of an all-reduce algorithm (spec or short form)."""
    spec = parse_algorithm(algorithm) if isinstance(algorithm, str | dict) else algorithm
    p, n = num_ranks, num_elements
    if spec.name == "ring":
        return ring_traffic(p, n, channels=ring_channels(p, spec.channels, groups), groups=groups)
    if spec.name == "centralized":
        per = np.full(p, n, dtype=np.int64)
        per[spec.root] = (p - 1) * n
        if p == 1:
            per[:] = 0
        return per, per.copy()
    if spec.name == "tree":
        return _tree_traffic(_kary_parents_closed(p, spec.arity), n)
    if spec.name == "double_binary_tree":
        first, second = double_binary_trees(p)
        half = np.diff(chunk_bounds(n, 2))
        s1, r1 = _tree_traffic(first, int(half[0]))
        s2, r2 = _tree_traffic(second, int(half[1]))
        return s1 + s2, r1 + r2
    if spec.name == "halving_doubling":
        pp = 1 << (p.bit_length() - 1)
        extra = p - pp
        c = np.diff(chunk_bounds(n, pp))
        prefix = np.concatenate([[0], np.cumsum(c)])
        part_sent = np.zeros(pp, dtype=np.int64)
        part_recv = np.zeros(pp, dtype=np.int64)
        for i in range(pp):
            kept = 0
            block = pp // 2
            while block >= 1:  # the block of `block` chunks around i that i keeps at each halving
                lo = (i // block) * block
                kept += int(prefix[lo + block] - prefix[lo])
                block //= 2
            # Halving sends what it gives away (n - own chunk); doubling sends what it kept.
            part_sent[i] = (n - c[i]) + kept
            part_recv[i] = kept + (n - c[i])
        sent = np.zeros(p, dtype=np.int64)
        received = np.zeros(p, dtype=np.int64)
        actual = [2 * i for i in range(extra)] + list(range(2 * extra, p))
        sent[actual] = part_sent
        received[actual] = part_recv
        for i in range(extra):
            sent[2 * i + 1] += n
            received[2 * i + 1] += n
            sent[2 * i] += n
            received[2 * i] += n
        return sent, received
    if spec.name == "hierarchical":
        resolved = resolve_groups(p, groups, spec.group_size)
        sent = np.zeros(p, dtype=np.int64)
        received = np.zeros(p, dtype=np.int64)
        for g in resolved:
            s, r = _tree_traffic(_binomial_parents_closed(len(g)), n)
            sent[g] += s
            received[g] += r
        leaders = [g[0] for g in resolved]
        s, r = ring_traffic(len(leaders), n)
        sent[leaders] += s
        received[leaders] += r
        return sent, received
    raise CollectiveError(f"no traffic formula for algorithm {spec.name!r}")


def collective_traffic(
    collective: str, num_ranks: int, num_elements: int, *, root: int = 0, arity: int | None = None
) -> Traffic:
    """Per-rank (sent, received) elements of the standalone collectives of the registry
    (ring reduce-scatter and all-gather; binomial or k-ary tree reduce and broadcast)."""
    p, n = num_ranks, num_elements
    if collective in ("reduce_scatter", "all_gather"):
        if p == 1:
            return np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
        c = np.diff(chunk_bounds(n, p))
        if collective == "reduce_scatter":  # rank r sends every chunk but its own, gets all but r-1's
            return n - c, n - np.roll(c, 1)
        return n - np.roll(c, -1), n - c  # sends all but chunk r+1, receives all but its own
    if collective in ("reduce", "broadcast"):
        parents = _binomial_parents_closed(p) if arity is None else _kary_parents_closed(p, arity)
        children = np.bincount([u for u in parents if u >= 0], minlength=p).astype(np.int64)
        has_parent = np.array([u >= 0 for u in parents], dtype=np.int64)
        # Position v is rank (v + root) mod p.
        up, down = np.roll(n * has_parent, root), np.roll(n * children, root)
        return (up, down) if collective == "reduce" else (down, up)
    raise CollectiveError(f"no traffic formula for collective {collective!r}")
