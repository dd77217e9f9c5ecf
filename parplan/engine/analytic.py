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
  and the binomial trees inside ``hierarchical``: evaluated on the tree's *shapes*, the reduce up
  the tree and then the broadcast down it (the schedules of :mod:`parplan.collectives.tree`).
  Reduce: a node's children send it their segment once they have it and the node has reduced the
  previous segment from all of them; their messages share the node's port by processor sharing
  (they may start at different times when subtrees differ) and the node reduces them FIFO.
  Broadcast: a node sends a segment to all its children at once (``k`` messages through one
  port, ``alpha + k m beta`` for ``m``-byte segments) once it has it and has sent them the one
  before: a flow shop along every root-to-leaf path, so with ``S`` segments a path of ``h``
  stages costs its stages plus ``S - 1`` times its slowest one. On a perfect k-ary tree of height
  ``h`` the broadcast costs ``(h + S - 1)(alpha + k m beta)`` through a port (``(h + S - 1)(alpha
  + m beta)`` with a link per pair) and the reduce ``(h + S - 1)(alpha + k m (beta + gamma))``
  (``(h + S - 1)(alpha + m beta + k m gamma)``). Subtrees of equal shape take equal time, so a
  tree of p ranks costs O(distinct subtree shapes x S), a few dozen shapes at most; the structure
  is computed once per (tree, p, port model) and cached, and with one segment chains of
  single-kind shapes fold into linear forms.
- ``hierarchical``: binomial reduce within each group to its leader, the ring above among the ``q``
  leaders (with the inter-group ``alpha``/``beta``), binomial broadcast within the groups.

Exact agreement with the event engine (within float rounding) holds on uniform switch and fully
connected clusters for ``ring``, ``centralized``, ``halving_doubling`` (any p: its schedule runs
each round once both partners finished the last), ``tree`` (any arity and segments), the
standalone tree reduce and broadcast (:func:`tree_reduce_time`, :func:`tree_broadcast_time`;
binomial or k-ary, any segments), ``double_binary_tree`` with one segment, ``hierarchical`` with
equal groups, and multi-channel rings with gamma = 0 (an upper bound with gamma > 0). With
segments, ``double_binary_tree`` is optimistic: the two trees' pipelines share ports, which the
closed form (the slower tree alone) ignores; measured up to 16% below the engine (p <= 64, up
to 8 segments). Tensor sizes are taken as continuous (``n / p`` per chunk, ``n / S`` per
segment); schedules cut whole elements.

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

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from parplan.collectives.double_binary_tree import double_binary_trees, tree_positions
from parplan.engine.result import algorithm_bandwidth, bus_bandwidth
from parplan.errors import CollectiveError

__all__ = [
    "algorithm_bandwidth",
    "allreduce_time",
    "bandwidth_lower_bound_s",
    "bus_bandwidth",
    "latency_lower_bound_s",
    "lower_bound_s",
    "tree_broadcast_time",
    "tree_reduce_time",
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
        up, down = _plan_time(_kary_plan(p, algo.arity, shared_port), algo.segments, n, a, b, g)
        return up + down
    if name == "double_binary_tree":
        first, second = _dbt_plans(p, shared_port)
        one = _plan_time(first, algo.segments, n / 2.0, a, b, g)
        two = _plan_time(second, algo.segments, n / 2.0, a, b, g)
        return max(one[0] + one[1], two[0] + two[1])
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
        r, d = _plan_time(_binomial_plan(m, shared_port), 1, n, ia, ib, g)
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
    first, second = double_binary_trees(p)  # the very trees the schedule uses
    return _shapes_from_parents(tree_positions(first)[1]), _shapes_from_parents(tree_positions(second)[1])


# -- tree plans: the structure the evaluation needs, computed once per tree and port model ------

_Kids = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class _TreePlan:
    """A tree's shapes compiled for fast evaluation under one port model (cached per tree).

    ``steps``: every non-leaf shape bottom-up as ``(shape, children, cw, cr)``; a shape with one
    kind of children (``count`` of them) costs them ``alpha + cw work + cr red`` once they start
    together (``cw = count`` through a shared port, 1 with a link each; ``cr = count``).
    ``flat`` / ``flat_root``: the one-segment reduce with chains of such shapes folded into
    linear forms: only shapes with children of several kinds remain, each child as ``(base,
    term, count)``: it starts moving at the value of flat node ``base - 1`` (0 for a leaf, ``base
    = 0``) plus ``terms[term]``, a number of alphas, per-message transfer times and reductions
    (the chain's and the alpha of its own send). A flat node is *in turn* when its kinds of
    children, smallest subtree first, each have at least as many children of the kind before
    (one, with a link each) as that kind has members: then each kind's subtree cannot finish
    before the previous kind's messages are in, so the messages never share the port and arrive
    in that order (binomial trees: child ``B_j`` has a ``B_{j-1}`` child).
    ``down``: the Pareto-maximal ``(hops, fan sum, largest fan)`` of the root-to-leaf paths, where
    a node's fan is its children's share of its port (their number through a shared port, 1 with
    a link each).
    """

    shapes: TreeShapes
    shared_port: bool
    steps: tuple[tuple[int, _Kids, int, int], ...]
    flat: tuple[tuple[bool, tuple[tuple[int, int, int], ...]], ...]
    flat_root: tuple[int, int]
    terms: tuple[tuple[int, int, int], ...]
    down: tuple[tuple[int, int, int], ...]


def _pareto(points: set[tuple[int, int, int]]) -> tuple[tuple[int, int, int], ...]:
    """The points no other point dominates in every coordinate."""
    return tuple(
        sorted(
            x
            for x in points
            if not any(y != x and y[0] >= x[0] and y[1] >= x[1] and y[2] >= x[2] for y in points)
        )
    )


def _compile(shapes: TreeShapes, shared_port: bool) -> _TreePlan:
    steps: list[tuple[int, _Kids, int, int]] = []
    flat: list[tuple[bool, tuple[tuple[int, int, int], ...]]] = []
    terms: dict[tuple[int, int, int], int] = {}
    rep: list[tuple[int, int, int, int]] = []  # per shape: (flat base, alphas, works, reds)
    paths: list[set[tuple[int, int, int]]] = []
    size: list[int] = []  # nodes per subtree
    for s, kids in enumerate(shapes):
        size.append(1 + sum(size[c] * count for c, count in kids))
        if not kids:
            rep.append((0, 0, 0, 0))
            paths.append({(0, 0, 0)})
            continue
        total = sum(count for _, count in kids)
        fan = total if shared_port else 1
        paths.append({(h + 1, f + fan, max(m, fan)) for c, _ in kids for h, f, m in paths[c]})
        paths[s] = set(_pareto(paths[s]))
        if len(kids) == 1:
            c, count = kids[0]
            cw = count if shared_port else 1
            steps.append((s, kids, cw, count))
            base, na, nw, nr = rep[c]
            rep.append((base, na + 1, nw + cw, nr + count))
        else:
            steps.append((s, kids, 0, 0))
            ordered = sorted(kids, key=lambda kid: size[kid[0]])
            in_turn = all(
                dict(shapes[bigger]).get(smaller, 0) >= (count if shared_port else 1)
                for (smaller, count), (bigger, _) in itertools.pairwise(ordered)
            )
            entries = tuple(
                (rep[c][0], terms.setdefault((rep[c][1] + 1, rep[c][2], rep[c][3]), len(terms)), count)
                for c, count in (ordered if in_turn else kids)
            )
            flat.append((in_turn, entries))
            rep.append((len(flat), 0, 0, 0))
    base, na, nw, nr = rep[-1]
    return _TreePlan(
        shapes=shapes,
        shared_port=shared_port,
        steps=tuple(steps),
        flat=tuple(flat),
        flat_root=(base, terms.setdefault((na, nw, nr), len(terms))),
        terms=tuple(terms),
        down=tuple(x for x in _pareto(paths[-1]) if x[0]),  # a lone root has no path
    )


@lru_cache(maxsize=1024)
def _kary_plan(p: int, arity: int, shared_port: bool) -> _TreePlan:
    return _compile(_kary_shapes(p, arity), shared_port)


@lru_cache(maxsize=1024)
def _binomial_plan(m: int, shared_port: bool) -> _TreePlan:
    return _compile(_binomial_shapes(m), shared_port)


@lru_cache(maxsize=1024)
def _dbt_plans(p: int, shared_port: bool) -> tuple[_TreePlan, _TreePlan]:
    first, second = _dbt_shapes(p)
    return _compile(first, shared_port), _compile(second, shared_port)


@lru_cache(maxsize=256)
def _plan_of(shapes: TreeShapes, shared_port: bool) -> _TreePlan:
    return _compile(shapes, shared_port)


# -- evaluating a plan -------------------------------------------------------------------------


def _stage_end(starts: list[tuple[float, int]], work: float, red: float, shared_port: bool) -> float:
    """When a node has reduced the messages of its children that start moving at ``starts``
    (``(time, count)``: ``count`` equal messages of ``work`` seconds alone each).

    Through a shared port the messages share it by processor sharing (every moving message gets
    the same rate), with a link each they move at full rate; the node reduces them FIFO in order
    of arrival, ``red`` seconds each. Under processor sharing every message gets the same
    service, so equal messages finish in the order they started: tracking the service ``v`` one
    message has had since time ``starts[0]``, the oldest group still moving ends when ``v``
    reaches its start value plus ``work``. Each pass admits a group or retires one: at most
    ``2 x len(starts)`` passes.
    """
    starts.sort()
    end = -math.inf
    if not shared_port:
        for t, count in starts:
            t += work
            end = (end if end > t else t) + count * red
        return end
    if len(starts) == 2:
        return _two_groups(starts[0][0], starts[0][1], starts[1][0], starts[1][1], work, red)
    vs = [0.0]  # the service counter when each group started; it ends at that plus ``work``
    t, active = starts[0]
    v = 0.0
    head = 0
    i = 1
    groups = len(starts)
    next_start = starts[1][0]
    while True:
        t_done = t + (vs[head] + work - v) * active
        if next_start < t_done:  # the next group starts first
            v += (next_start - t) / active
            t = next_start
            vs.append(v)
            active += starts[i][1]
            i += 1
            next_start = starts[i][0] if i < groups else math.inf
        else:  # the oldest group ends first
            v = vs[head] + work
            t = t_done
            count = starts[head][1]
            head += 1
            active -= count
            end = (end if end > t else t) + count * red
            if head == i:  # nothing moving: the next group starts
                if i == groups:
                    return end
                t, active = starts[i]
                vs.append(v)
                i += 1
                next_start = starts[i][0] if i < groups else math.inf


def _two_groups(s1: float, c1: int, s2: float, c2: int, work: float, red: float) -> float:
    """:func:`_stage_end` through a shared port for two groups, ``s1 <= s2``, in closed form."""
    alone = s1 + c1 * work
    if alone <= s2:  # group 1 ends before group 2 starts
        end = alone + c1 * red
        t2 = s2 + c2 * work
    else:  # group 1 has work - (s2 - s1)/c1 left each when group 2 joins; then they share
        left = work - (s2 - s1) / c1
        t1 = s2 + left * (c1 + c2)
        end = t1 + c1 * red
        t2 = t1 + c2 * (work - left)
    return (end if end > t2 else t2) + c2 * red


def _reduce_one(plan: _TreePlan, a: float, work: float, red: float) -> float:
    """One segment: the folded linear chains, a stage per shape with children of several kinds."""
    lin = [na * a + nw * work + nr * red for na, nw, nr in plan.terms]
    values = [0.0]  # a leaf's, then each flat node's
    shared = plan.shared_port
    for in_turn, kids in plan.flat:
        if in_turn:  # each kind of child ends before the next starts: no sharing, no sort
            end = -math.inf
            for b, j, count in kids:
                t = values[b] + lin[j] + (count * work if shared else work)
                end = (end if end > t else t) + count * red
            values.append(end)
        elif shared and len(kids) == 2:  # the common case (heap trees): no lists, no sort
            (b1, j1, c1), (b2, j2, c2) = kids
            s1 = values[b1] + lin[j1]
            s2 = values[b2] + lin[j2]
            values.append(
                _two_groups(s1, c1, s2, c2, work, red) if s1 <= s2 else _two_groups(s2, c2, s1, c1, work, red)
            )
        else:
            values.append(
                _stage_end([(values[b] + lin[j], count) for b, j, count in kids], work, red, shared)
            )
    b, j = plan.flat_root
    return values[b] + lin[j]


def _reduce_pipelined(plan: _TreePlan, segments: int, a: float, work: float, red: float) -> float:
    """``segments`` segments, swept one at a time over every shape: a node's children start
    segment ``g`` once they have it and the node has reduced segment ``g - 1`` from all of them."""
    shared = plan.shared_port
    size = len(plan.shapes)
    before = [-math.inf] * size  # when each shape finished the previous segment
    for _ in range(segments):
        now = [0.0] * size  # leaves have every segment from the start
        for s, kids, cw, cr in plan.steps:
            last = before[s]
            if cw:
                ready = now[kids[0][0]]
                now[s] = (ready if ready > last else last) + a + cw * work + cr * red
            else:
                now[s] = _stage_end(
                    [((now[c] if now[c] > last else last) + a, count) for c, count in kids], work, red, shared
                )
        before = now
    return before[-1]


def _reduce_time(plan: _TreePlan, segments: int, a: float, work: float, red: float) -> float:
    """The reduce phase: the time the root has reduced the last segment."""
    if segments == 1:
        return _reduce_one(plan, a, work, red)
    return _reduce_pipelined(plan, segments, a, work, red)


def _broadcast_time(plan: _TreePlan, segments: int, a: float, work: float) -> float:
    """A flow shop along every root-to-leaf path (a node's segment ``g`` goes to all its children
    at once, once it has it and has sent them ``g - 1``): the path's stages plus ``segments - 1``
    times its slowest stage, ``alpha + fan x work``."""
    extra = segments - 1
    longest = 0.0
    for h, f, m in plan.down:
        t = (h + extra) * a + (f + extra * m) * work
        if t > longest:
            longest = t
    return longest


def _plan_time(plan: _TreePlan, segments: int, n: float, a: float, b: float, g: float) -> tuple[float, float]:
    """(reduce, broadcast) seconds of an ``n``-byte tensor in ``segments`` segments."""
    work = n / segments * b
    red = n / segments * g
    up = _reduce_one(plan, a, work, red) if segments == 1 else _reduce_pipelined(plan, segments, a, work, red)
    return up, _broadcast_time(plan, segments, a, work)


def tree_time(
    shapes: TreeShapes,
    size_bytes: float,
    alpha_s: float,
    beta_s_per_byte: float,
    gamma_s_per_byte: float,
    shared_port: bool = True,
    segments: int = 1,
) -> float:
    """Reduce up then broadcast down a tree (given by its shapes) with ``size_bytes`` messages cut
    into ``segments`` pipelined segments."""
    if segments < 1:
        raise CollectiveError(f"segments must be >= 1, got {segments}")
    up, down = _plan_time(
        _plan_of(shapes, shared_port), segments, size_bytes, alpha_s, beta_s_per_byte, gamma_s_per_byte
    )
    return up + down


def _tree_plan(num_ranks: int, arity: int | None, shared_port: bool) -> _TreePlan:
    if arity is None:
        return _binomial_plan(num_ranks, shared_port)
    if arity < 2:
        raise CollectiveError(f"tree arity must be >= 2, got {arity}")
    return _kary_plan(num_ranks, arity, shared_port)


def _check_tree_call(num_ranks: int, segments: int) -> None:
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
    """Seconds of :func:`parplan.collectives.tree.tree_reduce` on a uniform group: a binomial
    tree (``arity=None``) or a k-ary heap tree, ``segments`` pipelined segments (the root does
    not change the time)."""
    _check_tree_call(num_ranks, segments)
    if num_ranks == 1 or size_bytes <= 0:
        return 0.0
    per = float(size_bytes) / segments
    plan = _tree_plan(num_ranks, arity, shared_port)
    return _reduce_time(plan, segments, alpha_s, per * beta_s_per_byte, per * gamma_s_per_byte)


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
    """Seconds of :func:`parplan.collectives.tree.tree_broadcast` on a uniform group (see
    :func:`tree_reduce_time`)."""
    _check_tree_call(num_ranks, segments)
    if num_ranks == 1 or size_bytes <= 0:
        return 0.0
    plan = _tree_plan(num_ranks, arity, shared_port)
    return _broadcast_time(plan, segments, alpha_s, float(size_bytes) / segments * beta_s_per_byte)
