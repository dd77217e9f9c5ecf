"""Ring reduce-scatter and all-gather on their own: the halves of :mod:`parplan.collectives.ring`.

A reduce-scatter leaves rank ``r`` with chunk ``r`` of ``chunk_bounds(n, p)`` reduced; an all-gather
starts from there. On ``C`` channels (NCCL's word) every chunk is cut into ``C`` parts and ring
``c`` carries part ``c`` of every chunk over its rank order of
:func:`~parplan.collectives.ring.ring_orders` (:func:`ring_half_chunks`), its steps on the lane of
:func:`~parplan.collectives.ring.ring_lanes`, so several channels use a GPU's several NICs as the
all-reduce's do. Closed forms ``(p-1)(alpha + n/p (beta + gamma))`` and ``(p-1)(alpha + n/p beta)``
for any number of channels (they share every rank's port).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from parplan.collectives._build import check_sizes, make_schedule
from parplan.collectives.algorithm import (
    SPEC_MAX_CHANNELS,
    Algorithm,
    AlgorithmSpecBase,
    Groups,
    Traffic,
    UniformCost,
    zero_traffic,
)
from parplan.collectives.ring import RING_PHASES, ring_block, ring_channels, ring_lanes, ring_orders
from parplan.collectives.schedule import IntArray, Schedule, chunk_bounds


def _ring_schedule(
    num_ranks: int,
    num_elements: int,
    collective: str,
    rs: bool,
    ag: bool,
    channels: int | None = 1,
    groups: Sequence[Sequence[int]] | None = None,
) -> Schedule:
    """A ring reduce-scatter or all-gather on ``channels`` rings (see :func:`ring_half_chunks`)."""
    check_sizes(num_ranks, num_elements)
    count = ring_channels(num_ranks, channels, groups) if channels is None or channels > 1 else 1
    if count == 1 and groups is None:
        columns, counts, deps = ring_block(
            np.arange(num_ranks), chunk_bounds(num_elements, num_ranks), 0, reduce_scatter=rs, all_gather=ag
        )
        step_meta = None
        orders = [list(range(num_ranks))]
    else:
        orders = ring_orders(num_ranks, count, groups)
        blocks = []
        for c, order in enumerate(orders):
            block, block_counts, block_deps = ring_block(
                np.asarray(order, dtype=np.int32),
                chunk_bounds(0, num_ranks),
                0,
                reduce_scatter=rs,
                all_gather=ag,
                chunks=ring_half_chunks(num_elements, order, c, count),
            )
            blocks.append((block, block_counts.astype(np.int64), block_deps.astype(np.int64)))
        steps = len(blocks[0][1])
        columns = {k: np.concatenate([b[k] for b, _, _ in blocks]) for k in blocks[0][0]}
        counts = np.concatenate([n for _, n, _ in blocks])
        deps = np.concatenate([d + c * steps for c, (_, _, d) in enumerate(blocks)])
        lanes = ring_lanes(count, groups)
        step_meta = {"lane": np.repeat(np.asarray(lanes, dtype=np.int32), steps)} if any(lanes) else None
    return make_schedule(
        columns,
        counts,
        deps,
        algorithm="ring",
        collective=collective,
        num_ranks=num_ranks,
        num_elements=num_elements,
        phase_names=RING_PHASES,
        meta={"chunks": num_ranks, "channels": count, "rings": tuple(tuple(o) for o in orders)},
        step_meta=step_meta,
    )


def ring_half_chunks(
    num_elements: int, order: Sequence[int], channel: int, channels: int
) -> tuple[IntArray, IntArray]:
    """(start, size) per ring position of channel ``channel``'s chunks in a reduce-scatter or
    all-gather on ``channels`` rings: rank ``r``'s chunk ``r`` of ``chunk_bounds(n, p)`` is cut
    into ``channels`` parts and ring ``c`` carries part ``c`` of every rank's chunk, so the rank
    at position ``i`` ends (reduce-scatter) or starts (all-gather) with its own part.

    >>> [x.tolist() for x in ring_half_chunks(12, [1, 0, 2], 1, 2)]
    [[6, 2, 10], [2, 2, 2]]
    """
    bounds = chunk_bounds(num_elements, len(order))
    ranks = np.asarray(order, dtype=np.int64)
    sizes = np.diff(bounds)[ranks]
    base, extra = np.divmod(sizes, channels)
    before = base * channel + np.minimum(extra, channel)  # the parts of chunk_bounds(size, channels)
    part = base + (extra > channel)
    return bounds[ranks] + before, part


def ring_reduce_scatter(
    num_ranks: int,
    num_elements: int,
    *,
    channels: int | None = 1,
    groups: Sequence[Sequence[int]] | None = None,
) -> Schedule:
    """Ring reduce-scatter: rank r ends with chunk r (of ``chunk_bounds(n, p)``) fully reduced;
    on ``channels`` rings (None: automatic, :func:`ring_channels`) over the orders of
    :func:`ring_orders`, ring ``c`` carrying part ``c`` of every chunk."""
    return _ring_schedule(num_ranks, num_elements, "reduce_scatter", True, False, channels, groups)


def ring_all_gather(
    num_ranks: int,
    num_elements: int,
    *,
    channels: int | None = 1,
    groups: Sequence[Sequence[int]] | None = None,
) -> Schedule:
    """Ring all-gather: rank r starts with chunk r and every rank ends with the whole tensor; on
    ``channels`` rings as :func:`ring_reduce_scatter`."""
    return _ring_schedule(num_ranks, num_elements, "all_gather", False, True, channels, groups)


def ring_half_traffic(
    collective: str,
    num_ranks: int,
    num_elements: int,
    channels: int = 1,
    groups: Sequence[Sequence[int]] | None = None,
) -> Traffic:
    """Per-rank (sent, received) elements of the ring reduce-scatter or all-gather on ``channels``
    rings: on each, the rank at position ``i`` sends every part but its own (reduce-scatter) or
    but position ``i + 1``'s (all-gather), and receives every part but position ``i - 1``'s
    (reduce-scatter) or its own (all-gather)."""
    p = num_ranks
    sent, received = zero_traffic(p)
    if p == 1:
        return sent, received
    orders = [list(range(p))] if channels == 1 and groups is None else ring_orders(p, channels, groups)
    for c, order in enumerate(orders):
        _, size = ring_half_chunks(num_elements, order, c, len(orders))
        total = int(size.sum())
        if collective == "reduce_scatter":
            sent[order] += total - size
            received[order] += total - np.roll(size, 1)
        else:
            sent[order] += total - np.roll(size, -1)
            received[order] += total - size
    return sent, received


class RingHalfSpec(AlgorithmSpecBase):
    """A ring reduce-scatter or all-gather on ``channels`` rings (None: one per device of the
    largest node, or one; see :func:`ring_channels`). Short form ``"ring:8"``."""

    name: Literal["ring"]
    channels: int | None = Field(default=None, ge=1, le=SPEC_MAX_CHANNELS)


class _RingHalf(Algorithm[RingHalfSpec]):
    """What the two halves share: channels, groups, variants and volumes."""

    name = "ring"
    collective = "reduce_scatter"
    spec_type = RingHalfSpec
    short_parameter = "channels"

    def variants(self, num_ranks: int) -> tuple[RingHalfSpec, ...]:
        return (self.default_spec(), RingHalfSpec(name="ring", channels=2))

    def uses_groups(self, spec: RingHalfSpec) -> bool:
        return spec.channels is None or spec.channels > 1

    def _channels(self, spec: RingHalfSpec, num_ranks: int, groups: Groups | None) -> int:
        return ring_channels(num_ranks, spec.channels, groups)

    def build(
        self, spec: RingHalfSpec, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        rs = self.collective == "reduce_scatter"
        return _ring_schedule(num_ranks, num_elements, self.collective, rs, not rs, spec.channels, groups)

    def traffic(
        self, spec: RingHalfSpec, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        count = self._channels(spec, num_ranks, groups)
        return ring_half_traffic(self.collective, num_ranks, num_elements, count, groups)


class RingReduceScatter(_RingHalf):
    """The reduce-scatter half of the ring: ``(p-1)(alpha + n/p (beta + gamma))`` on any number of
    channels (they share every rank's port)."""

    collective = "reduce_scatter"

    def closed_form_s(
        self, spec: RingHalfSpec, num_ranks: int, size_bytes: float, cost: UniformCost, groups: Groups | None
    ) -> float:
        chunk = size_bytes / num_ranks
        return (num_ranks - 1) * (cost.alpha_s + chunk * (cost.beta_s_per_byte + cost.gamma_s_per_byte))


class RingAllGather(_RingHalf):
    """The all-gather half of the ring: ``(p-1)(alpha + n/p beta)`` on any number of channels."""

    collective = "all_gather"

    def closed_form_s(
        self, spec: RingHalfSpec, num_ranks: int, size_bytes: float, cost: UniformCost, groups: Groups | None
    ) -> float:
        return (num_ranks - 1) * (cost.alpha_s + size_bytes / num_ranks * cost.beta_s_per_byte)


REDUCE_SCATTER = RingReduceScatter()
ALL_GATHER = RingAllGather()
