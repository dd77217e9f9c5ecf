"""An algorithm's pair traffic (what ``--analytic`` routes) equals its schedule's, for every
algorithm in the registry and for the ring's own fast path, which never builds its p^2 steps."""

from __future__ import annotations

import numpy as np
import pytest

from parplan.collectives.algorithm import PairTraffic, schedule_pair_traffic
from parplan.collectives.registry import get, schedules
from parplan.collectives.ring import ring_all_reduce, ring_pair_traffic

GROUPS8 = [[0, 1, 2, 3], [4, 5, 6, 7]]


def _same(a: PairTraffic, b: PairTraffic) -> None:
    for name in ("src", "dst", "elements"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert (a.steps, a.channels) == (b.steps, b.channels)


@pytest.mark.parametrize(
    ("p", "n", "channels", "groups"),
    [
        (1, 4, 1, None),
        (2, 1, 1, None),
        (5, 3, 1, None),  # fewer elements than ranks: empty chunks are dropped
        (5, 17, 2, None),
        (8, 100, None, GROUPS8),
        (8, 5, 3, GROUPS8),
        (6, 1000, None, [[0, 1, 2], [3, 4, 5]]),
    ],
)
def test_ring_pair_traffic_equals_its_schedule(
    p: int, n: int, channels: int | None, groups: list[list[int]] | None
) -> None:
    built = schedule_pair_traffic(ring_all_reduce(p, n, channels=channels, groups=groups))
    _same(ring_pair_traffic(p, n, channels=channels, groups=groups), built)


@pytest.mark.parametrize("name", schedules())
def test_every_algorithm_pair_traffic_matches_its_volumes(name: str) -> None:
    found = get(name)
    spec = found.default_spec()
    p, n = 8, 4096
    pairs = found.pair_traffic(spec, p, n, GROUPS8)
    _same(pairs, schedule_pair_traffic(found.build(spec, p, n, GROUPS8)))
    sent, received = found.traffic(spec, p, n, GROUPS8)
    assert np.array_equal(np.bincount(pairs.src, weights=pairs.elements, minlength=p), sent)
    assert np.array_equal(np.bincount(pairs.dst, weights=pairs.elements, minlength=p), received)
