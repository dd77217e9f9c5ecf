"""Ring all-reduce, built with vectorised numpy (the reduce-scatter and all-gather halves on their own
are in :mod:`parplan.collectives.ring_halves`).

The tensor is cut into p chunks (:func:`~parplan.collectives.schedule.chunk_bounds`). Around the
ring ``r -> r + 1``:

- reduce-scatter, round ``s = 0 .. p-2``: rank ``r`` sends chunk ``(r - s - 1) mod p`` to ``r + 1``,
  which adds it into its copy. Each round's send forwards the chunk received in the round before,
  so step ``(s, r)`` depends on step ``(s - 1, r - 1)`` only. Rank ``r`` ends with chunk ``r``.
- all-gather, round ``t = 0 .. p-2``: rank ``r`` sends chunk ``(r - t) mod p`` (its own fully
  reduced chunk first, then the one it just received), overwriting the receiver's copy.

Steps are laid out round by round, ``p`` per round, so step ``k`` is rank ``k mod p``'s send of
round ``k // p``, and for every ``k >= p`` the single dependency is
``k - p - 1 + p * [k mod p == 0]`` (the previous round's send of the left neighbour). No Python
loop runs per step: a ring of 4096 ranks (33.5 M steps) builds in seconds.

**Channels** (NCCL's word): the all-reduce may run ``C`` rings at once, each on its own contiguous
part of the tensor (``chunk_bounds(n, C)``), as NCCL does to use every NIC of a node. With rank
``groups`` (the ranks of each node), every ring visits the groups in the order given and the
members of a group consecutively, so a ring crosses between nodes once per node and all its other
hops stay inside a node (NVLink / NVSwitch). Ring ``c`` starts each group at member ``c mod m``
(``m`` its size), so the rank that leaves a node, and with one NIC per device the NIC its traffic
takes, is a different one for every channel: ``m`` channels on nodes of ``m`` devices use all
``m`` NICs of every node, where one ring uses one. Every other group is visited backwards (from
member ``c - 1`` to member ``c``), so the ring leaves a node and enters the next through devices
of the same local index: on a rail-optimized fabric the crossing stays on one rail, the direct
route (NCCL keeps a channel on one rail, NCCL_CROSS_NIC=0), instead of tying with routes through
the spine or through another GPU's NIC. With an odd number of nodes the wrap-around crossing is
the one that changes rails. Without groups (or with groups of one rank)
the rings all run ``0 -> 1 -> ... -> p-1`` and channels only split the tensor. Each ring is the
vectorised block above, offset by the steps of the rings before it; rings on disjoint parts of
the tensor need no dependency between them.

Closed form (:class:`RingAllReduce`): ``2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma`` for any
number of channels; the halves alone take half the alphas and betas (the reduce-scatter all the
gammas). Volumes: :func:`ring_traffic`.

>>> ring_orders(6, 3, [[0, 1, 2], [3, 4, 5]])
[[0, 1, 2, 5, 4, 3], [1, 2, 0, 3, 5, 4], [2, 0, 1, 4, 3, 5]]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from parplan.collectives._build import AnyIntArray, check_sizes, make_schedule, merge_csr
from parplan.collectives.algorithm import (
    SPEC_MAX_CHANNELS,
    Algorithm,
    AlgorithmSpecBase,
    Groups,
    PairTraffic,
    Traffic,
    UniformCost,
    zero_traffic,
)
from parplan.collectives.groups import resolve_groups
from parplan.collectives.schedule import _STEP_MAX, IntArray, Schedule, StepArray, chunk_bounds
from parplan.errors import CollectiveError

RING_PHASES = ("reduce_scatter", "all_gather")

AUTO_CHANNEL_STEP_BUDGET = 1 << 25
"""Most steps an automatic channel count may give a ring all-reduce: the 33.5 M steps of one ring
at p = 4096, so ``channels=None`` never builds a schedule larger than one ring at the largest size
supported; past it fewer channels are used (a schedule costs about 42 bytes per step)."""


def ring_block(
    ranks: Sequence[int] | IntArray,
    bounds: IntArray,
    base: int,
    *,
    reduce_scatter: bool = True,
    all_gather: bool = True,
    prior: Sequence[Sequence[int]] | None = None,
    phases: tuple[int, int] = (0, 1),
    chunks: tuple[IntArray, IntArray] | None = None,
) -> tuple[dict[str, np.ndarray], AnyIntArray, StepArray]:
    """The steps of a ring over ``ranks`` (ring order) with chunk ``bounds`` (``len(ranks) + 1``),
    or with ``chunks``: the (start, size) of each position's chunk when they are not contiguous
    in ring order (``bounds`` is then ignored). The position-``i`` chunk is the one a
    reduce-scatter leaves at position ``i`` and an all-gather starts from there.

    Returns ``(columns, dep_counts, dep_indices)`` with absolute step indices for steps numbered
    from ``base``. ``prior[i]`` lists earlier steps that reduced into ``ranks[i]``'s whole tensor
    before the ring (e.g. a group's members reducing into its leader): every step that sends data
    ``ranks[i]`` held before the ring also depends on them.
    """
    ring = np.asarray(ranks, dtype=np.int32)
    q = len(ring)
    rs_rows = q - 1 if reduce_scatter else 0
    ag_rows = q - 1 if all_gather else 0
    rows = rs_rows + ag_rows
    total = rows * q
    shift = [*range(1, rs_rows + 1), *range(ag_rows)]
    # Row R sends chunk (i - shift[R]) mod q from position i: a rotation of the chunk table, read
    # as a slice of the table written twice (no index temporaries at 33 M steps).
    starts, sizes = (bounds[:-1], np.diff(bounds)) if chunks is None else chunks
    starts2 = np.tile(starts, 2)
    sizes2 = np.tile(sizes, 2)
    offset = np.empty((rows, q), dtype=np.int64)
    length = np.empty((rows, q), dtype=np.int64)
    for row, h in enumerate(shift):
        offset[row] = starts2[q - h : 2 * q - h]
        length[row] = sizes2[q - h : 2 * q - h]
    columns: dict[str, np.ndarray] = {
        "src": np.tile(ring, rows),
        "dst": np.tile(np.roll(ring, -1), rows),
        "offset": offset.reshape(total),
        "length": length.reshape(total),
    }
    reduce = np.zeros(total, dtype=np.bool_)
    reduce[: rs_rows * q] = True
    phase = np.full(total, phases[1], dtype=np.int8)
    phase[: rs_rows * q] = phases[0]
    columns["reduce"] = reduce
    columns["phase"] = phase

    # One dependency per step after the first round; int8 counts keep the p = 4096 build small.
    counts: AnyIntArray = np.ones(total, dtype=np.int8 if prior is None else np.int64)
    counts[: min(q, total)] = 0
    # Absolute step indices, in the schedule's int32 when they fit (no 64-bit copy at 33 M steps).
    deps: StepArray
    if base + total <= _STEP_MAX:
        deps = np.arange(q, total, dtype=np.int32)
    else:
        deps = np.arange(q, total, dtype=np.int64)
    deps -= q + 1 - base
    deps[::q] += q
    if prior is not None and total:
        extra_rows = rs_rows + (1 if all_gather else 0)
        lengths = np.array([len(x) for x in prior], dtype=np.int64)
        extra_counts = np.zeros(total, dtype=np.int64)
        extra_counts[: extra_rows * q] = np.tile(lengths, extra_rows)
        flat_prior = np.asarray([x for group in prior for x in group], dtype=np.int64)
        counts, deps = merge_csr(
            counts.astype(np.int64), deps.astype(np.int64), extra_counts, np.tile(flat_prior, extra_rows)
        )
    return columns, counts, deps


def ring_final_writers(bounds: IntArray, base: int, position: int, prior: Sequence[int] = ()) -> list[int]:
    """The steps of a ring all-reduce block (from :func:`ring_block`, chunk ``bounds``) whose writes
    make up the final tensor of the rank at ``position``: the all-gather step that delivered each
    other chunk and, for its own chunk (if not empty), the last reduce-scatter step and ``prior``.
    Steps that carry an empty chunk are left out (they are dropped from schedules)."""
    q = len(bounds) - 1
    sizes = np.diff(bounds)
    if q == 1:
        return list(prior) if sizes[0] > 0 else []
    left = (position - 1) % q
    writers = [base + (q - 2) * q + left, *prior] if sizes[position] > 0 else []
    ag = base + (q - 1) * q
    # All-gather round t delivers chunk (position - 1 - t) mod q to this rank.
    writers.extend(ag + t * q + left for t in range(q - 1) if sizes[(position - 1 - t) % q] > 0)
    return writers


def ring_channels(
    num_ranks: int, channels: int | None = None, groups: Sequence[Sequence[int]] | None = None
) -> int:
    """How many rings a ring all-reduce runs: ``channels`` when given, else (automatic) one per
    member of the largest group when ``groups`` are given and it has more than one (one ring per
    local GPU, as NCCL runs on a DGX node), else 1. The automatic count is lowered, if need be,
    so the schedule has at most :data:`AUTO_CHANNEL_STEP_BUDGET` steps.

    >>> ring_channels(16, None, [list(range(8)), list(range(8, 16))]), ring_channels(16), ring_channels(16, 3)
    (8, 1, 3)
    """
    if channels is not None:
        if channels < 1:
            raise CollectiveError(f"ring channels must be >= 1, got {channels}")
        return int(channels)
    if not groups:
        return 1
    largest = max(len(g) for g in groups)
    per_ring = 2 * (num_ranks - 1) * num_ranks
    return max(1, min(largest, AUTO_CHANNEL_STEP_BUDGET // per_ring if per_ring else largest))


def ring_orders(
    num_ranks: int, channels: int = 1, groups: Sequence[Sequence[int]] | None = None
) -> list[list[int]]:
    """The rank order of each channel's ring: ``0 .. p-1`` without groups, else the groups in the
    order given, each rotated to start at its member ``c mod len(group)`` for channel ``c`` and
    every other group visited backwards (:func:`_group_visit`). Raises :class:`CollectiveError`
    when ``groups`` do not partition the ranks."""
    if groups is None:
        return [list(range(num_ranks))] * channels
    resolved = resolve_groups(num_ranks, groups)
    return [[r for j, g in enumerate(resolved) for r in _group_visit(g, c, j)] for c in range(channels)]


def _group_visit(group: Sequence[int], channel: int, index: int) -> list[int]:
    """The order ring ``channel`` visits the ``index``-th group in: rotated to start at member
    ``channel mod m``; every other group backwards, so the ring leaves one node and enters the
    next through members of the same local index (on a rail-optimized fabric, the same rail)."""
    k = channel % len(group)
    forward = list(group[k:]) + list(group[:k])
    return forward if index % 2 == 0 else forward[::-1]


def ring_all_reduce(
    num_ranks: int,
    num_elements: int,
    *,
    channels: int | None = 1,
    groups: Sequence[Sequence[int]] | None = None,
) -> Schedule:
    """Ring all-reduce: reduce-scatter then all-gather, 2(p-1) rounds of p concurrent sends, on
    each of ``channels`` rings (None: automatic, see :func:`ring_channels`) carrying its own part
    of the tensor, over the rank orders of :func:`ring_orders` (``groups``: the ranks of each node).

    ``meta`` records ``channels``, the tensor part of each (``channel_bounds``: step ``k`` belongs
    to the channel whose part holds ``offset[k]``), each ring's rank order (``rings``) and, when
    some channel is on a lane other than 0, each step's ``lane`` (:func:`ring_lanes`).

    >>> s = ring_all_reduce(4, 8)
    >>> s.num_steps, s.phase_names
    (24, ('reduce_scatter', 'all_gather'))
    >>> ring_all_reduce(4, 8, channels=2, groups=[[0, 1], [2, 3]]).meta["rings"]
    ((0, 1, 3, 2), (1, 0, 2, 3))
    """
    check_sizes(num_ranks, num_elements)
    p = num_ranks
    count = ring_channels(p, channels, groups)
    orders = ring_orders(p, count, groups)
    parts = chunk_bounds(num_elements, count)
    # Every ring has the same number of steps and dependencies; each block is written into its
    # slice of the whole as soon as it is built, so the peak is the schedule plus one ring. One
    # channel (the case that must stay lean at p = 4096) uses its block as is.
    columns: dict[str, np.ndarray] = {}
    counts: AnyIntArray = np.zeros(0, dtype=np.int8)
    deps: StepArray = np.zeros(0, dtype=np.int64)
    for c, order in enumerate(orders):
        bounds = chunk_bounds(int(parts[c + 1] - parts[c]), p) + parts[c]
        block, block_counts, block_deps = ring_block(np.asarray(order, dtype=np.int32), bounds, 0)
        if count == 1:
            columns, counts, deps = block, block_counts, block_deps
            break
        steps, edges = len(block_counts), len(block_deps)
        if not c:
            columns = {k: np.empty(count * steps, dtype=v.dtype) for k, v in block.items()}
            counts = np.empty(count * steps, dtype=block_counts.dtype)
            if count * steps <= _STEP_MAX:
                deps = np.empty(count * edges, dtype=np.int32)
            else:
                deps = np.empty(count * edges, dtype=np.int64)
        for k, v in block.items():
            columns[k][c * steps : (c + 1) * steps] = v
        counts[c * steps : (c + 1) * steps] = block_counts
        np.add(block_deps, c * steps, out=deps[c * edges : (c + 1) * edges])
    lanes = ring_lanes(count, groups)
    step_meta = None
    if any(lanes):
        steps = len(counts) // count
        step_meta = {"lane": np.repeat(np.asarray(lanes, dtype=np.int32), steps)}
    return make_schedule(
        columns,
        counts,
        deps,
        algorithm="ring",
        collective="all_reduce",
        num_ranks=p,
        num_elements=num_elements,
        phase_names=RING_PHASES,
        meta=ring_meta(p, orders, parts),
        step_meta=step_meta,
    )


def ring_meta(p: int, orders: Sequence[Iterable[int]], parts: Iterable[int]) -> dict[str, object]:
    """A ring all-reduce schedule's ``meta``: ``p`` chunks, the channels' element bounds
    (``parts``) and rings (``orders``); the orbit form (:mod:`parplan.collectives.orbits`) adds
    its own entry to the same."""
    return {
        "chunks": p,
        "channels": len(orders),
        "channel_bounds": tuple(int(x) for x in parts),
        "rings": tuple(tuple(int(r) for r in o) for o in orders),
    }


def ring_lanes(channels: int, groups: Sequence[Sequence[int]] | None = None) -> list[int]:
    """The lane of each channel's steps (``meta["lane"]``, which the engine routes by): how many
    channels before it left each node through the same device, ``c // m`` with groups (``m`` the
    largest group: channels ``c`` and ``c + m`` start their groups at the same member), else ``c``
    (every ring takes the same devices). On a GPU with several NICs the lanes of one pair take
    different NICs, as NCCL gives each channel's ring its own NIC.

    >>> ring_lanes(4, [[0, 1], [2, 3]]), ring_lanes(3)
    ([0, 0, 1, 1], [0, 1, 2])
    """
    if groups:
        largest = max(len(g) for g in groups)
        return [c // largest for c in range(channels)]
    return list(range(channels))


def ring_traffic(
    num_ranks: int, num_elements: int, *, channels: int = 1, groups: Sequence[Sequence[int]] | None = None
) -> Traffic:
    """Per-rank (sent, received) elements of the ring all-reduce on ``channels`` rings.

    Ring ``c`` all-reduces part ``c`` of ``chunk_bounds(n, channels)`` over its rank order: ranks
    ``0 .. p-1`` without ``groups``, else the groups in order, each rotated to start at its member
    ``c mod len(group)`` and every other one backwards from member ``c - 1`` (the layout of
    :func:`ring_orders`, restated here so the tests check the
    schedule against its definition). The rank at ring position ``i`` sends
    ``2 n_c - c_i - c_{i+1}`` and receives ``2 n_c - c_{i-1} - c_i`` (``c`` its ring's chunks).
    """
    p = num_ranks
    sent, received = zero_traffic(p)
    if p == 1:
        return sent, received
    members = None if groups is None else resolve_groups(p, groups)
    parts = np.diff(chunk_bounds(num_elements, channels))
    for c, part in enumerate(parts.tolist()):
        order = (
            list(range(p))
            if members is None
            else [
                g[(c + i) % len(g)] if j % 2 == 0 else g[(c - 1 - i) % len(g)]
                for j, g in enumerate(members)
                for i in range(len(g))
            ]
        )
        chunks = np.diff(chunk_bounds(part, p))
        sent[order] += 2 * part - chunks - np.roll(chunks, -1)
        received[order] += 2 * part - np.roll(chunks, 1) - chunks
    return sent, received


def ring_pair_traffic(
    num_ranks: int,
    num_elements: int,
    *,
    channels: int | None = 1,
    groups: Sequence[Sequence[int]] | None = None,
) -> PairTraffic:
    """What :func:`ring_all_reduce` moves between each pair of ranks, without building its p^2 steps.

    On each ring the rank at position ``i`` sends its right neighbour every chunk but its own in
    the reduce-scatter and every chunk but the neighbour's in the all-gather:
    ``2 n_c - c_i - c_{i+1}`` elements in ``2(p-1)`` steps per non-empty chunk (empty ones are
    dropped from the schedule, as pairs that would move nothing).
    """
    check_sizes(num_ranks, num_elements)
    p = num_ranks
    count = ring_channels(p, channels, groups)
    parts = np.diff(chunk_bounds(num_elements, count))
    keys: list[IntArray] = []
    moved: list[IntArray] = []
    steps = 0
    for order, part in zip(ring_orders(p, count, groups), parts.tolist(), strict=True):
        ring = np.asarray(order, dtype=np.int64)
        chunks = np.diff(chunk_bounds(part, p))
        keys.append(ring * p + np.roll(ring, -1))
        moved.append(2 * part - chunks - np.roll(chunks, -1))
        steps += 2 * (p - 1) * int(np.count_nonzero(chunks)) if p > 1 else 0
    key = np.concatenate(keys)
    elements = np.concatenate(moved)
    keep = (elements > 0) & (key // p != key % p)
    pairs, inverse = np.unique(key[keep], return_inverse=True)
    total = np.bincount(inverse, weights=elements[keep], minlength=len(pairs)).astype(np.int64)
    return PairTraffic(pairs // p, pairs % p, total, steps, count)


def ring_time_s(num_ranks: int, size_bytes: float, alpha_s: float, beta_s: float, gamma_s: float) -> float:
    """The ring all-reduce's closed form: ``2(p-1)(alpha + n/p beta) + (p-1) n/p gamma``."""
    p = num_ranks
    if p <= 1:
        return 0.0
    chunk = size_bytes / p
    return 2.0 * (p - 1) * (alpha_s + chunk * beta_s) + (p - 1) * chunk * gamma_s


class RingAlgorithm(AlgorithmSpecBase):
    """Reduce-scatter then all-gather around a ring, p slices, on ``channels`` rings at once.

    Each channel (NCCL's word) is a ring over every rank carrying its own part of the tensor; the
    rings go through each node's devices consecutively, each entering and leaving the node through
    a different device, so several channels use several NICs per node. ``None`` (the default)
    picks one ring per device of the largest node (NCCL on a DGX runs about that many), or one
    ring without nodes to follow. Short form ``"ring:8"`` for 8 channels.
    """

    name: Literal["ring"]
    channels: int | None = Field(default=None, ge=1, le=SPEC_MAX_CHANNELS)


class RingAllReduce(Algorithm[RingAlgorithm]):
    """The ring all-reduce: ``2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma`` whatever its number
    of channels (C rings in step, each on n/C bytes, share each port C ways: the same time; with
    gamma > 0 the engine overlaps one channel's reductions with another's transfers, so there the
    closed form is an upper bound). Groups lay the channels' rings out node by node."""

    name = "ring"
    spec_type = RingAlgorithm
    short_parameter = "channels"

    def variants(self, num_ranks: int) -> tuple[RingAlgorithm, ...]:
        return (self.default_spec(), RingAlgorithm(name="ring", channels=3))

    def uses_groups(self, spec: RingAlgorithm) -> bool:
        return True  # one ring per device of a node, each leaving the node through its own NIC

    def build(
        self, spec: RingAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        return ring_all_reduce(num_ranks, num_elements, channels=spec.channels, groups=groups)

    def pair_traffic(
        self, spec: RingAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> PairTraffic:
        return ring_pair_traffic(num_ranks, num_elements, channels=spec.channels, groups=groups)

    def closed_form_s(
        self, spec: RingAlgorithm, num_ranks: int, size_bytes: float, cost: UniformCost, groups: Groups | None
    ) -> float:
        return ring_time_s(num_ranks, size_bytes, cost.alpha_s, cost.beta_s_per_byte, cost.gamma_s_per_byte)

    def traffic(
        self, spec: RingAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        channels = ring_channels(num_ranks, spec.channels, groups)
        return ring_traffic(num_ranks, num_elements, channels=channels, groups=groups)


ALL_REDUCE = RingAllReduce()
