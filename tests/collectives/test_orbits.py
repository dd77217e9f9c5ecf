"""Orbit schedules: the representative steps of a ring all-reduce, against its full schedule."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from parplan.collectives.orbits import orbit_schedules, ring_orbits, shift_image
from parplan.collectives.ring import ring_all_reduce
from parplan.collectives.schedule import Schedule
from parplan.collectives.specs import parse_algorithm


def _steps(s: Schedule, shift: int = 0, times: int = 1) -> Counter[tuple[int, ...]]:
    """Every step (and, for an orbit schedule, every translate) as (src, dst, length, reduce,
    phase, lane), counted."""
    lane = np.asarray(s.meta.get("lane", np.zeros(s.num_steps, dtype=np.int32)))
    out: Counter[tuple[int, ...]] = Counter()
    p = s.num_ranks
    for j in range(times):
        src, dst = (s.src + j * shift) % p, (s.dst + j * shift) % p
        out.update(zip(src.tolist(), dst.tolist(), s.length.tolist(), s.reduce.tolist(),
                       s.phase.tolist(), lane.tolist(), strict=True))  # fmt: skip
    return out


CASES = [
    (8, 1, None),
    (12, 1, None),
    (8, None, [[0, 1], [2, 3], [4, 5], [6, 7]]),
    (16, 3, [list(range(4 * i, 4 * i + 4)) for i in range(4)]),
    (16, 6, [list(range(4 * i, 4 * i + 4)) for i in range(4)]),
]


@pytest.mark.parametrize(("p", "channels", "groups"), CASES)
def test_translates_of_the_representatives_are_the_full_schedule(
    p: int, channels: int | None, groups: list[list[int]] | None
) -> None:
    n = p * 6 * 5
    full = ring_all_reduce(p, n, channels=channels, groups=groups)
    offered = list(ring_orbits(channels, p, n, groups))
    assert offered
    for orbit in offered:
        meta = orbit.meta["orbit"]
        assert isinstance(meta, dict)
        g, k = meta["shift"], meta["orbit_size"]
        assert g * k == p and meta["steps"] == full.num_steps == orbit.num_steps * k
        assert orbit.src.max() < g
        assert _steps(orbit, g, k) == _steps(full)
        # Each dependency is the previous send into the sender's orbit, on the same ring.
        for i in range(orbit.num_steps):
            for d in orbit.dep_indices[orbit.dep_offsets[i] : orbit.dep_offsets[i + 1]].tolist():
                assert orbit.dst[d] % g == orbit.src[i] and d < i
        assert np.count_nonzero(np.diff(orbit.dep_offsets) == 0) * k == np.count_nonzero(
            np.diff(full.dep_offsets) == 0
        )


def test_groups_walked_alternately_need_two_nodes_per_shift() -> None:
    groups = [list(range(4 * i, 4 * i + 4)) for i in range(4)]
    shifts = [s.meta["orbit"]["shift"] for s in ring_orbits(None, 16, 16 * 4 * 8, groups)]  # type: ignore[index]
    assert shifts == [8]


def test_no_orbit_form_for_unequal_chunks_one_rank_or_other_algorithms() -> None:
    assert list(ring_orbits(1, 8, 8 * 5 + 1)) == []
    assert list(ring_orbits(1, 1, 64)) == []
    assert list(ring_orbits(3, 8, 8 * 2)) == []  # a channel with an empty part
    assert list(orbit_schedules(parse_algorithm("tree:2"), 8, 64)) == []
    assert list(orbit_schedules(parse_algorithm("ring"), 8, 64, collective="all_gather")) == []
    assert len(list(orbit_schedules(parse_algorithm("ring:2"), 8, 64))) == 3  # shifts 1, 2, 4


def test_shift_image_moves_ranks_only() -> None:
    assert shift_image(4, 2, 6).tolist() == [2, 3, 0, 1, 4, 5]
