"""Closed forms of trees by their shapes: the reduce up a tree and the broadcast down it, as the
tree schedules run them (:mod:`parplan.collectives.tree`), on a uniform group.

Used by every algorithm built from trees (``tree``, ``double_binary_tree``, the binomial trees
inside ``hierarchical``, the standalone tree reduce and broadcast); see
:mod:`parplan.engine.analytic` for the cost model. Reduce: a node's children send it their
segment once they have it and the node has reduced the previous segment from all of them; their
messages share the node's port by processor sharing (they may start at different times when
subtrees differ) and the node reduces them FIFO. Broadcast: a node sends a segment to all its
children at once (``k`` messages through one port, ``alpha + k m beta`` for ``m``-byte segments)
once it has it and has sent them the one before: a flow shop along every root-to-leaf path, so
with ``S`` segments a path of ``h`` stages costs its stages plus ``S - 1`` times its slowest one.
On a perfect k-ary tree of height ``h`` the broadcast costs ``(h + S - 1)(alpha + k m beta)``
through a port (``(h + S - 1)(alpha + m beta)`` with a link per pair) and the reduce ``(h + S -
1)(alpha + k m (beta + gamma))`` (``(h + S - 1)(alpha + m beta + k m gamma)``). Subtrees of equal
shape take equal time, so a tree of p ranks costs O(distinct subtree shapes x S), a few dozen
shapes at most; the structure is compiled once per (tree, port model) into a :class:`TreePlan`
(callers cache it per tree), and with one segment chains of single-kind shapes fold into linear
forms.

>>> plan = compile_plan(shapes_from_parents([-1, 0, 0]), shared_port=True)
>>> plan_time(plan, 1, 1.0, 0.0, 1.0, 0.0)  # two children through one port, up then down
(2.0, 2.0)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from parplan.errors import CollectiveError

# -- trees by shape ----------------------------------------------------------------------------

TreeShapes = tuple[tuple[tuple[int, int], ...], ...]
"""A tree as its distinct subtree shapes, children first: shape ``i`` is a tuple of
``(child shape, how many such children)``; the last shape is the whole tree."""


def shapes_from_parents(parents: Sequence[int]) -> TreeShapes:
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


# -- tree plans: the structure the evaluation needs, computed once per tree and port model ------

_Kids = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class TreePlan:
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


def compile_plan(shapes: TreeShapes, shared_port: bool) -> TreePlan:
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
    return TreePlan(
        shapes=shapes,
        shared_port=shared_port,
        steps=tuple(steps),
        flat=tuple(flat),
        flat_root=(base, terms.setdefault((na, nw, nr), len(terms))),
        terms=tuple(terms),
        down=tuple(x for x in _pareto(paths[-1]) if x[0]),  # a lone root has no path
    )


@lru_cache(maxsize=256)
def plan_of(shapes: TreeShapes, shared_port: bool) -> TreePlan:
    return compile_plan(shapes, shared_port)


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


def _reduce_one(plan: TreePlan, a: float, work: float, red: float) -> float:
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


def _reduce_pipelined(plan: TreePlan, segments: int, a: float, work: float, red: float) -> float:
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


def reduce_time(plan: TreePlan, segments: int, a: float, work: float, red: float) -> float:
    """The reduce phase: the time the root has reduced the last segment."""
    if segments == 1:
        return _reduce_one(plan, a, work, red)
    return _reduce_pipelined(plan, segments, a, work, red)


def broadcast_time(plan: TreePlan, segments: int, a: float, work: float) -> float:
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


def plan_time(plan: TreePlan, segments: int, n: float, a: float, b: float, g: float) -> tuple[float, float]:
    """(reduce, broadcast) seconds of an ``n``-byte tensor in ``segments`` segments."""
    work = n / segments * b
    red = n / segments * g
    up = _reduce_one(plan, a, work, red) if segments == 1 else _reduce_pipelined(plan, segments, a, work, red)
    return up, broadcast_time(plan, segments, a, work)


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
    up, down = plan_time(
        plan_of(shapes, shared_port), segments, size_bytes, alpha_s, beta_s_per_byte, gamma_s_per_byte
    )
    return up + down
