"""Orbit schedules: one representative step per orbit of a schedule that a rank shift maps onto
itself, built without the p^2 steps of the full schedule (the exact symmetric simulation of
:mod:`parplan.engine.symmetry` runs them).

A schedule on p ranks is *invariant under the shift* ``g`` (a divisor of p, below p) when
``r -> r + g mod p`` maps every step onto a step of the same size, kind and lane, and every
dependency onto a dependency. Its steps then fall into orbits of ``p / g`` steps each, and the
steps whose sender is one of the ranks ``0 .. g-1`` are one representative per orbit. An orbit
schedule is a plain :class:`~parplan.collectives.schedule.Schedule` holding only those: ``src``
in ``0 .. g-1``, ``dst`` the real receiver, each dependency on another rank's step replaced by its
representative (the same step of rank ``r mod g``), and ``meta["orbit"] = {"shift": g,
"orbit_size": p / g, "steps": steps of the full schedule}``. It is for the engine only: the data
plane and the traces need the full schedule.

The ring all-reduce (:func:`ring_orbits`) is invariant under ``g`` when every channel's chunks
are equal (each channel's part of the tensor a multiple of p elements, none empty) and every
channel's ring commutes with the shift (``next(r + g) = next(r) + g``: one ring ``0 -> 1 -> ..``
for every g; rings laid out node by node for a multiple of the node size, when they go round
alike). Anything else has no orbit form and is simulated in full. Adding an algorithm's orbit
form is a function here and a line in :data:`ORBIT_BUILDERS`.

>>> s = next(orbit_schedules(RingAlgorithm(name="ring"), 8, 64))
>>> s.meta["orbit"], s.num_steps, s.src.tolist()[:3], s.dst.tolist()[:3]
({'shift': 1, 'orbit_size': 8, 'steps': 112}, 14, [0, 0, 0], [1, 1, 1])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from parplan.collectives._build import make_schedule
from parplan.collectives.algorithm import AlgorithmSpecBase
from parplan.collectives.ring import (
    RING_PHASES,
    RingAlgorithm,
    ring_channels,
    ring_lanes,
    ring_meta,
    ring_orders,
)
from parplan.collectives.schedule import IntArray, Schedule, chunk_bounds

Groups = Sequence[Sequence[int]]
OrbitBuilder = Callable[[AlgorithmSpecBase, int, int, Groups | None], Iterator[Schedule]]
"""(spec, ranks, elements, groups) -> orbit schedules, shifts ascending."""

MAX_SHIFTS = 12
"""Orbit schedules offered per call at most (the smallest shifts): each one the network refuses
costs a check (routes are cached, so mostly array work), and a leaf of 32 hosts needs the sixth
divisor of p."""


def _divisors(p: int) -> list[int]:
    """Divisors of ``p`` below ``p``, ascending."""
    return [g for g in range(1, p) if p % g == 0]


def ring_orbits(
    channels: int | None, num_ranks: int, num_elements: int, groups: Groups | None = None
) -> Iterator[Schedule]:
    """The ring all-reduce's orbit schedules (as :func:`~parplan.collectives.ring.ring_all_reduce`
    with the same arguments would build it in full), one per shift it is invariant under, the
    smallest first; none when its chunks are unequal or it has fewer than two ranks."""
    p = num_ranks
    if p < 2:
        return
    count = ring_channels(p, channels, groups)
    parts = chunk_bounds(num_elements, count)
    sizes = np.diff(parts)
    if np.any(sizes == 0) or np.any(sizes % p):
        return
    orders = [np.asarray(o, dtype=np.int64) for o in ring_orders(p, count, groups)]
    nxt = np.empty((count, p), dtype=np.int64)
    for c, order in enumerate(orders):
        nxt[c, order] = np.roll(order, -1)
    ranks = np.arange(p)
    lanes = ring_lanes(count, groups)
    offered = 0
    for g in _divisors(p):
        if np.array_equal(nxt[:, (ranks + g) % p], (nxt + g) % p):
            yield _ring_orbit_schedule(orders, parts, lanes, p, num_elements, g)
            offered += 1
            if offered == MAX_SHIFTS:
                return


def _ring_orbit_schedule(
    orders: list[IntArray], parts: IntArray, lanes: list[int], p: int, num_elements: int, g: int
) -> Schedule:
    """The representative steps of a ring all-reduce invariant under shift ``g``: per channel,
    round by round, the senders ``0 .. g-1`` in ring-position order (the full schedule's order)."""
    rows = 2 * (p - 1)
    per_channel = rows * g
    src_l, dst_l, off_l, deps_l, counts_l = [], [], [], [], []
    for c, order in enumerate(orders):
        inv = np.empty(p, dtype=np.int64)
        inv[order] = np.arange(p)
        pos = np.sort(inv[:g])  # ring positions of the representative senders
        prev_rep = order[(pos - 1) % p] % g  # the left neighbour's representative rank
        prev_idx = np.searchsorted(pos, inv[prev_rep])
        chunk = (int(parts[c + 1]) - int(parts[c])) // p
        shift = np.array([*range(1, p), *range(p - 1)], dtype=np.int64)  # row R sends chunk i - shift[R]
        base = c * per_channel
        src_l.append(np.tile(order[pos], rows))
        dst_l.append(np.tile(order[(pos + 1) % p], rows))
        off_l.append((int(parts[c]) + ((pos[None, :] - shift[:, None]) % p) * chunk).ravel())
        counts = np.ones(per_channel, dtype=np.int64)
        counts[:g] = 0
        counts_l.append(counts)
        deps_l.append((base + np.arange(rows - 1)[:, None] * g + prev_idx[None, :]).ravel())
    n = len(orders) * per_channel
    reduce = np.tile(np.repeat(np.arange(rows) < p - 1, g), len(orders))
    columns = {
        "src": np.concatenate(src_l),
        "dst": np.concatenate(dst_l),
        "offset": np.concatenate(off_l),
        "length": np.repeat(np.diff(parts) // p, per_channel),
        "reduce": reduce,
        "phase": (~reduce).astype(np.int8),
    }
    step_meta = None
    if any(lanes):
        step_meta = {"lane": np.repeat(np.asarray(lanes, dtype=np.int32), per_channel)}
    return make_schedule(
        columns,
        np.concatenate(counts_l),
        np.concatenate(deps_l),
        algorithm="ring",
        collective="all_reduce",
        num_ranks=p,
        num_elements=num_elements,
        phase_names=RING_PHASES,
        meta={
            **ring_meta(p, orders, parts),
            "orbit": {"shift": g, "orbit_size": p // g, "steps": n * (p // g)},
        },
        step_meta=step_meta,
    )


def _ring_spec_orbits(
    spec: AlgorithmSpecBase, num_ranks: int, num_elements: int, groups: Groups | None
) -> Iterator[Schedule]:
    """:func:`ring_orbits` for a ring spec (its channels)."""
    channels = spec.channels if isinstance(spec, RingAlgorithm) else 1
    return ring_orbits(channels, num_ranks, num_elements, groups)


ORBIT_BUILDERS: dict[tuple[str, str], OrbitBuilder] = {("all_reduce", "ring"): _ring_spec_orbits}
"""Orbit forms by (collective, algorithm name)."""


def orbit_schedules(
    spec: AlgorithmSpecBase,
    num_ranks: int,
    num_elements: int,
    groups: Groups | None = None,
    collective: str = "all_reduce",
) -> Iterator[Schedule]:
    """The orbit schedules of ``collective``'s algorithm ``spec`` on ``num_ranks`` ranks, smallest
    shift first (as its full schedule would be built with these arguments); none when it has no
    orbit form here or is not invariant under any shift."""
    builder = ORBIT_BUILDERS.get((collective, spec.name))
    if builder is None:
        return iter(())
    return builder(spec, num_ranks, num_elements, groups)


def shift_image(num_ranks: int, shift: int, num_devices: int | None = None) -> IntArray:
    """The rank shift ``r -> r + shift mod num_ranks`` as a permutation of the task graph's
    devices (devices past the ranks, e.g. switch ranks, stay put: an orbit schedule has none).

    >>> shift_image(4, 1).tolist()
    [1, 2, 3, 0]
    """
    n = num_ranks if num_devices is None else num_devices
    image = np.arange(n, dtype=np.int64)
    image[:num_ranks] = (image[:num_ranks] + shift) % num_ranks
    return image
