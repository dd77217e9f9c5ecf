"""Every registered algorithm, of every collective, provides every part and meets the shared
invariants (the checks of :mod:`tests.collectives.invariants`)."""

from __future__ import annotations

from typing import Any

import pytest

from parplan.collectives.algorithm import Algorithm
from parplan.collectives.registry import algorithms
from parplan.collectives.schedule import COLLECTIVES
from tests.collectives.invariants import check_data_plane, check_parts, check_timing

REGISTERED = [a for c in COLLECTIVES for a in algorithms(c).values()]


def _id(algorithm: Algorithm[Any]) -> str:
    return f"{algorithm.collective}-{algorithm.name}"


def test_every_collective_has_an_algorithm() -> None:
    assert {a.collective for a in REGISTERED} == set(COLLECTIVES)


@pytest.mark.parametrize("algorithm", REGISTERED, ids=_id)
def test_parts(algorithm: Algorithm[Any]) -> None:
    check_parts(algorithm)


@pytest.mark.parametrize("algorithm", REGISTERED, ids=_id)
def test_data_plane_and_traffic(algorithm: Algorithm[Any]) -> None:
    check_data_plane(algorithm)


@pytest.mark.parametrize("algorithm", REGISTERED, ids=_id)
def test_closed_form_equals_the_engine_and_the_bounds_hold(algorithm: Algorithm[Any]) -> None:
    check_timing(algorithm)
