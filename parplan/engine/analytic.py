"""Closed forms: the time of every all-reduce algorithm on a uniform group, in plain Python math.

The model is the engine's (see :mod:`parplan.engine.simulate`) on a uniform group: every message
costs ``alpha`` (the path latency, a pure delay before its bytes move) plus ``bytes x beta`` at its
fair share of bandwidth, and a reduction costs ``gamma x bytes`` on the receiver's serial reduction
stream. On a switch each host has one full-duplex link to the switch, so a message crosses two links
(``alpha`` = twice the link latency) but ``beta`` applies once: store-and-forward is not modelled.
``shared_port=True`` (a switch) means a rank's concurrent receives share its one incoming link and
its concurrent sends its one outgoing link; ``shared_port=False`` (a fully connected cluster) gives
every pair of ranks its own link. With ``p`` ranks and ``n`` bytes:

- ``ring``: ``2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma``, whatever its number of channels
  (C rings in step, each on n/C bytes, share each port C ways: the same time; with gamma > 0 the
  engine overlaps one channel's reductions with another's transfers, so there the closed form is an
  upper bound).
- ``halving_doubling`` with ``p' = 2^floor(log2 p)``: ``2 log2(p') alpha + 2(p'-1)/p' n beta +
  (p'-1)/p' n gamma``, plus ``2 alpha + 2 n beta + n gamma`` for the fold-in and fold-out when
  ``p != p'`` (the textbook form, where each round starts once both partners finished the last).
- ``centralized``: ``2 alpha + 2(p-1) n beta + (p-1) n gamma`` through one port (the root's link
  carries every message), ``2 alpha + 2 n beta + (p-1) n gamma`` with a link per pair.
- ``tree`` (k-ary heap tree), ``double_binary_tree`` (two NCCL binary trees, half the tensor each)
  and the binomial trees inside ``hierarchical``: evaluated on the tree's *shapes*. Every node sends
  its reduced tensor to its parent once its children's tensors are in; siblings' messages share the
  parent's port by processor sharing (they may arrive at different times when subtrees differ); the
  parent's reductions queue FIFO. The broadcast sends to all children at once (``k`` messages through
  one port: ``alpha + k n beta`` per level). Subtrees of equal shape take equal time, so a tree of
  p ranks costs O(number of distinct subtree shapes), a few dozen at most.
- ``hierarchical``: binomial reduce within each group to its leader, the ring above among the ``q``
  leaders (with the inter-group ``alpha``/``beta``), binomial broadcast within the groups.

Exact agreement with the event engine (within float rounding) holds on uniform switch and fully
connected clusters for ``ring``, ``centralized``, ``tree`` (one segment, or any segments with
gamma = 0: the schedule sends all segments at once, so under fair sharing they cost what one
message does; with gamma > 0 the analytic charges the reductions as for one segment, an upper bound),
``double_binary_tree``, ``halving_doubling`` for powers of two, ``hierarchical`` with equal
groups, and multi-channel rings with gamma = 0 (an upper bound with gamma > 0). Tensor sizes are
taken as continuous (``n / p`` per chunk); schedules cut whole elements. ``halving_doubling`` with
p not a power of two is the textbook form: its schedule lets a participant's later rounds (and its
partner's first) start before the fold or an earlier round has landed, which the engine times as
contention, so the two differ there.

Lower bounds (:func:`lower_bound_s`): ``ceil(log2 p) alpha`` and ``2(p-1)/p n beta``. The bandwidth
bound holds for every algorithm here. The latency bound assumes a rank handles one message per
round; in this model latency is a pure delay, so algorithms that fan many concurrent messages into
one rank (centralized, trees with ``2 x depth < ceil(log2 p)``) pay it once per fan and beat it on
tiny tensors; every algorithm pays at least ``2 alpha``.

>>> round(allreduce_time("ring", 4, 1e9, alpha_s=1e-6, beta_s_per_byte=1e-10) * 1e3, 6)
150.006
>>> bus_bandwidth(1e9, 0.15, 4) / 1e9
10.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from parplan.engine.result import algorithm_bandwidth, bus_bandwidth
from parplan.errors import CollectiveError

__all__ = [
    "algorithm_bandwidth",
    "allreduce_time",
    "bandwidth_lower_bound_s",
    "bus_bandwidth",
    "latency_lower_bound_s",
    "lower_bound_s",
    "tree_time",
]

_NAMES = ("centralized", "tree", "ring", "halving_doubling", "double_binary_tree", "hierarchical")


@dataclass(frozen=True)
class _Algo:
    """A parsed algorithm: its name and the parameters the closed forms use."""

    name: str
    arity: int = 2
    segments: int = 1
    group_size: int | None = None


@lru_cache(maxsize=256)
def _parse_text(text: str) -> _Algo:
    name, _, arg = text.strip().partition(":")
    if name not in _NAMES:
        raise CollectiveError(f"unknown collective algorithm {name!r}; valid: {', '.join(_NAMES)}")
    if not arg:
        return _Algo(name)
    try:
        value = int(arg)
    except ValueError:
        raise CollectiveError(f"{text!r}: the parameter after ':' must be an integer") from None
    if name == "tree":
        if value < 2:
            raise CollectiveError(f"tree arity must be >= 2, got {value}")
        return _Algo(name, arity=value)
    if name == "hierarchical":
        if value < 1:
            raise CollectiveError(f"group_size must be >= 1, got {value}")
        return _Algo(name, group_size=value)
    if name == "centralized":
        return _Algo(name)  # the root does not change the time on a uniform group
    if name == "ring":
        if value < 1:
            raise CollectiveError(f"ring channels must be >= 1, got {value}")
        return _Algo(name)  # see the module docstring: channels do not change the closed form
    raise CollectiveError(f"algorithm {name!r} takes no parameter, got {text!r}")


def _parse(algorithm: Any) -> _Algo:
    if isinstance(algorithm, str):
        return _parse_text(algorithm)
    name = getattr(algorithm, "name", None)
    if name not in _NAMES:
        raise CollectiveError(f"unknown collective algorithm {name!r}; valid: {', '.join(_NAMES)}")
    return _Algo(
        str(name),
        arity=int(getattr(algorithm, "arity", 2)),
        segments=int(getattr(algorithm, "segments", 1)),
        group_size=getattr(algorithm, "group_size", None),
    )


# -- bounds ------------------------------------------------------------------------------------


def latency_lower_bound_s(num_ranks: int, alpha_s: float) -> float:
    """``ceil(log2 p) x alpha``: rounds needed when a rank handles one message per round."""
    return math.ceil(math.log2(num_ranks)) * alpha_s if num_ranks > 1 else 0.0


def bandwidth_lower_bound_s(num_ranks: int, size_bytes: float, beta_s_per_byte: float) -> float:
    """``2(p-1)/p x n x beta``: every rank must send and receive that much through its port."""
    return 2.0 * (num_ranks - 1) / num_ranks * size_bytes * beta_s_per_byte if num_ranks > 1 else 0.0


def lower_bound_s(num_ranks: int, size_bytes: float, *, alpha_s: float, beta_s_per_byte: float) -> float:
    """The larger of the latency and bandwidth lower bounds of DESIGN.md."""
    return max(
        latency_lower_bound_s(num_ranks, alpha_s),
        bandwidth_lower_bound_s(num_ranks, size_bytes, beta_s_per_byte),
    )


# -- the closed forms --------------------------------------------------------------------------


def allreduce_time(
    algorithm: Any,
    num_ranks: int,
    size_bytes: float,
    *,
    alpha_s: float,
    beta_s_per_byte: float,
    gamma_s_per_byte: float = 0.0,
    groups: Sequence[Sequence[int]] | None = None,
    shared_port: bool = True,
    intra_alpha_s: float | None = None,
    intra_beta_s_per_byte: float | None = None,
) -> float:
    """Seconds an all-reduce of ``size_bytes`` takes on ``num_ranks`` ranks of a uniform group.

    ``algorithm`` is a short form (``"ring"``, ``"tree:4"``, ``"hierarchical:8"``) or a spec from
    :mod:`parplan.config.algorithms`. ``groups`` (lists of ranks) are the hierarchical algorithm's
    groups when its spec gives no ``group_size`` (default: one group). ``intra_alpha_s`` /
    ``intra_beta_s_per_byte`` are the within-group link figures of ``hierarchical`` (default: the
    same as ``alpha_s`` / ``beta_s_per_byte``, which then are the figures between group leaders).
    """
    algo = _parse(algorithm)
    p = num_ranks
    if p < 1:
        raise CollectiveError(f"a collective needs at least one rank, got {p}")
    if p == 1 or size_bytes <= 0:
        return 0.0
    a, b, g, n = alpha_s, beta_s_per_byte, gamma_s_per_byte, float(size_bytes)
    name = algo.name
    if name == "ring":
        return _ring(p, n, a, b, g)
    if name == "halving_doubling":
        pp = 1 << (p.bit_length() - 1)
        t = 2.0 * (pp.bit_length() - 1) * a + (pp - 1) / pp * n * (2.0 * b + g)
        if pp != p:
            t += 2.0 * a + n * (2.0 * b + g)
        return t
    if name == "centralized":
        fan = p - 1 if shared_port else 1
        return 2.0 * a + 2.0 * fan * n * b + (p - 1) * n * g
    if name == "tree":
        shapes = _kary_shapes(p, algo.arity)
        return tree_time(shapes, n, a, b, g, shared_port)
    if name == "double_binary_tree":
        first, second = _dbt_shapes(p)
        half = n / 2.0
        return max(
            tree_time(first, half, a, b, g, shared_port), tree_time(second, half, a, b, g, shared_port)
        )
    return _hierarchical(algo, p, n, a, b, g, groups, shared_port, intra_alpha_s, intra_beta_s_per_byte)


def _ring(p: int, n: float, a: float, b: float, g: float) -> float:
    if p <= 1:
        return 0.0
    chunk = n / p
    return 2.0 * (p - 1) * (a + chunk * b) + (p - 1) * chunk * g


def _hierarchical(
    algo: _Algo,
    p: int,
    n: float,
    a: float,
    b: float,
    g: float,
    groups: Sequence[Sequence[int]] | None,
    shared_port: bool,
    intra_a: float | None,
    intra_b: float | None,
) -> float:
    if algo.group_size is not None:
        k = algo.group_size
        sizes = [k] * (p // k) + ([p % k] if p % k else [])
    elif groups is not None:
        sizes = [len(grp) for grp in groups]
        if sum(sizes) != p or min(sizes) < 1:
            raise CollectiveError(f"groups of sizes {sizes} do not partition {p} ranks")
    else:
        sizes = [p]
    ia = a if intra_a is None else intra_a
    ib = b if intra_b is None else intra_b
    up = 0.0
    down = 0.0
    for m in set(sizes):
        shapes = _binomial_shapes(m)
        r, d = _tree_phases(shapes, n, ia, ib, g, shared_port)
        up = max(up, r)
        down = max(down, d)
    return up + _ring(len(sizes), n, a, b, g) + down


# -- trees by shape ----------------------------------------------------------------------------

TreeShapes = tuple[tuple[tuple[int, int], ...], ...]
"""A tree as its distinct subtree shapes, children first: shape ``i`` is a tuple of
``(child shape, how many such children)``; the last shape is the whole tree."""


def _shapes_from_parents(parents: Sequence[int]) -> TreeShapes:
    """Canonical subtree shapes of a tree given as a parent array (root at position 0)."""
    size = len(parents)
    children: list[list[int]] = [[] for _ in range(size)]
    for v in range(1, size):
        children[parents[v]].append(v)
    order: list[int] = [0]
    for v in order:
        order.extend(children[v])
    index: dict[tuple[tuple[int, int], ...], int] = {}
    shapes: list[tuple[tuple[int, int], ...]] = []
    shape_of = [0] * size
    for v in reversed(order):
        counts: dict[int, int] = {}
        for c in children[v]:
            counts[shape_of[c]] = counts.get(shape_of[c], 0) + 1
        key = tuple(sorted(counts.items()))
        if key not in index:
            index[key] = len(shapes)
            shapes.append(key)
        shape_of[v] = index[key]
    # The root's subtree strictly contains every other, so its shape is the last one registered.
    return tuple(shapes)


@lru_cache(maxsize=512)
def _kary_shapes(p: int, arity: int) -> TreeShapes:
    return _shapes_from_parents([-1] + [(v - 1) // arity for v in range(1, p)])


@lru_cache(maxsize=512)
def _binomial_shapes(m: int) -> TreeShapes:
    return _shapes_from_parents([-1] + [v & (v - 1) for v in range(1, m)])


@lru_cache(maxsize=512)
def _dbt_shapes(p: int) -> tuple[TreeShapes, TreeShapes]:
    first = _nccl_btree_parents(p)
    if p % 2 == 0:
        second = [-1 if first[p - 1 - r] < 0 else p - 1 - first[p - 1 - r] for r in range(p)]
    else:
        second = [-1 if first[(r - 1) % p] < 0 else (first[(r - 1) % p] + 1) % p for r in range(p)]
    return _shapes_from_parents(_rooted(first)), _shapes_from_parents(_rooted(second))


def _nccl_btree_parents(p: int) -> list[int]:
    """NCCL's in-order binary tree rooted at rank 0 (as in the double binary tree schedule)."""
    parents = [-1] * p
    for r in range(1, p):
        bit = r & -r
        up = (r ^ bit) | (bit << 1)
        parents[r] = up if up < p else r ^ bit
    return parents


def _rooted(parent_by_rank: Sequence[int]) -> list[int]:
    """Relabel a parent array over ranks so that the root is position 0."""
    root = next(r for r, u in enumerate(parent_by_rank) if u < 0)
    ranks = [root] + [r for r in range(len(parent_by_rank)) if r != root]
    position = {r: v for v, r in enumerate(ranks)}
    return [-1] + [position[parent_by_rank[r]] for r in ranks[1:]]


def _shared_completions(groups: list[tuple[float, int]], work_s: float) -> list[tuple[float, int]]:
    """Completion times of equal messages (``work_s`` each at full rate) sharing one port.

    ``groups`` are ``(start time, count)`` sorted by distinct start; processor sharing, every
    message alone could use the whole port. Messages of a group finish together and, having had
    more service, earlier groups finish first: each step either admits the next group or retires
    the oldest, so the loop ends after ``2 x len(groups)`` steps.
    """
    done: list[tuple[float, int]] = []
    active: list[list[float]] = []  # [remaining work per message, count], oldest first
    t = groups[0][0]
    i = 0
    while i < len(groups) or active:
        if not active:
            t = max(t, groups[i][0])
            active.append([work_s, float(groups[i][1])])
            i += 1
            continue
        k = sum(c for _, c in active)
        t_done = t + max(active[0][0], 0.0) * k
        if i < len(groups) and groups[i][0] < t_done:  # the next group arrives first
            served = (groups[i][0] - t) / k
            for item in active:
                item[0] -= served
            t = groups[i][0]
            active.append([work_s, float(groups[i][1])])
            i += 1
        else:  # the oldest group finishes first
            served = max(active[0][0], 0.0)
            for item in active:
                item[0] -= served
            t = t_done
            done.append((t, int(active.pop(0)[1])))
    return done


def _tree_phases(
    shapes: TreeShapes, n: float, a: float, b: float, g: float, shared_port: bool
) -> tuple[float, float]:
    """(reduce time to the root, broadcast time from the root) of a tree of ``n``-byte messages."""
    work = n * b
    red = n * g
    up = [0.0] * len(shapes)
    down = [0.0] * len(shapes)
    for s, kids in enumerate(shapes):
        if not kids:
            continue
        if len(kids) == 1:
            c, count = kids[0]
            start = up[c] + a
            if shared_port:
                up[s] = start + count * (work + red)
                down[s] = a + count * work + down[c]
            else:
                up[s] = start + work + count * red
                down[s] = a + work + down[c]
            continue
        arrivals = sorted([(up[c] + a, count) for c, count in kids])
        fan = 0
        deepest = 0.0
        for c, count in kids:
            fan += count
            if down[c] > deepest:
                deepest = down[c]
        if not shared_port:
            completions = [(start + work, count) for start, count in arrivals]
            fan = 1
        elif len(arrivals) == 2 and arrivals[0][0] < arrivals[1][0]:
            (s1, c1), (s2, c2) = arrivals
            alone = s1 + c1 * work
            if alone <= s2:
                completions = [(alone, c1), (s2 + c2 * work, c2)]
            else:  # group 1 has w - (s2 - s1)/c1 left each when group 2 joins; then they share
                left = work - (s2 - s1) / c1
                t1 = s2 + left * (c1 + c2)
                completions = [(t1, c1), (t1 + c2 * (work - left), c2)]
        else:
            merged: list[tuple[float, int]] = []
            for start, count in arrivals:
                if merged and merged[-1][0] == start:
                    merged[-1] = (start, merged[-1][1] + count)
                else:
                    merged.append((start, count))
            if len(merged) == 1:
                completions = [(merged[0][0] + merged[0][1] * work, merged[0][1])]
            else:
                completions = _shared_completions(merged, work)
        end = -math.inf
        for t, count in completions:
            end = (end if end > t else t) + count * red
        up[s] = end
        down[s] = a + fan * work + deepest
    return up[-1], down[-1]


def tree_time(
    shapes: TreeShapes,
    size_bytes: float,
    alpha_s: float,
    beta_s_per_byte: float,
    gamma_s_per_byte: float,
    shared_port: bool = True,
) -> float:
    """Reduce up then broadcast down a tree (given by its shapes) with ``size_bytes`` messages."""
    up, down = _tree_phases(shapes, size_bytes, alpha_s, beta_s_per_byte, gamma_s_per_byte, shared_port)
    return up + down
