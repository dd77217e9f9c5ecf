"""Ring all-reduce, reduce-scatter and all-gather, built with vectorised numpy.

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
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from parplan.collectives._build import AnyIntArray, check_sizes, make_schedule, merge_csr
from parplan.collectives.schedule import IntArray, Schedule, chunk_bounds

RING_PHASES = ("reduce_scatter", "all_gather")


def ring_block(
    ranks: Sequence[int] | IntArray,
    bounds: IntArray,
    base: int,
    *,
    reduce_scatter: bool = True,
    all_gather: bool = True,
    prior: Sequence[Sequence[int]] | None = None,
    phases: tuple[int, int] = (0, 1),
) -> tuple[dict[str, np.ndarray], AnyIntArray, IntArray]:
    """The steps of a ring over ``ranks`` (ring order) with chunk ``bounds`` (``len(ranks) + 1``).

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
    starts2 = np.tile(bounds[:-1], 2)
    sizes2 = np.tile(np.diff(bounds), 2)
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
    deps = np.arange(q, total, dtype=np.int64)
    deps -= q + 1 - base
    deps[::q] += q
    if prior is not None and total:
        extra_rows = rs_rows + (1 if all_gather else 0)
        lengths = np.array([len(x) for x in prior], dtype=np.int64)
        extra_counts = np.zeros(total, dtype=np.int64)
        extra_counts[: extra_rows * q] = np.tile(lengths, extra_rows)
        flat_prior = np.asarray([x for group in prior for x in group], dtype=np.int64)
        counts, deps = merge_csr(counts.astype(np.int64), deps, extra_counts, np.tile(flat_prior, extra_rows))
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


def _ring_schedule(num_ranks: int, num_elements: int, collective: str, rs: bool, ag: bool) -> Schedule:
    check_sizes(num_ranks, num_elements)
    columns, counts, deps = ring_block(
        np.arange(num_ranks), chunk_bounds(num_elements, num_ranks), 0, reduce_scatter=rs, all_gather=ag
    )
    return make_schedule(
        columns,
        counts,
        deps,
        algorithm="ring",
        collective=collective,
        num_ranks=num_ranks,
        num_elements=num_elements,
        phase_names=RING_PHASES,
        meta={"chunks": num_ranks},
    )


def ring_all_reduce(num_ranks: int, num_elements: int) -> Schedule:
    """Ring all-reduce: reduce-scatter then all-gather, 2(p-1) rounds of p concurrent sends.

    >>> s = ring_all_reduce(4, 8)
    >>> s.num_steps, s.phase_names
    (24, ('reduce_scatter', 'all_gather'))
    """
    return _ring_schedule(num_ranks, num_elements, "all_reduce", True, True)


def ring_reduce_scatter(num_ranks: int, num_elements: int) -> Schedule:
    """Ring reduce-scatter: rank r ends with chunk r (of ``chunk_bounds(n, p)``) fully reduced."""
    return _ring_schedule(num_ranks, num_elements, "reduce_scatter", True, False)


def ring_all_gather(num_ranks: int, num_elements: int) -> Schedule:
    """Ring all-gather: rank r starts with chunk r and every rank ends with the whole tensor."""
    return _ring_schedule(num_ranks, num_elements, "all_gather", False, True)
