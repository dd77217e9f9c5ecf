"""The Pareto helper search and the HTML report share: checked against the definition by brute force."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parplan.api.pareto import non_dominated, plan_front, plan_objectives
from parplan.api.results import PlanResult
from parplan.api.simulate import simulate_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "sample_configs" / "scenarios"


def _brute(points: list[tuple[int, ...]]) -> list[bool]:
    def beats(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
        return all(x <= y for x, y in zip(a, b, strict=True)) and a != b

    return [not any(beats(q, p) for q in points) for p in points]


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 4)), max_size=25))
def test_non_dominated_matches_the_definition(points: list[tuple[int, int, int]]) -> None:
    flags = non_dominated(points)
    assert flags == _brute(points)
    if points:
        assert any(flags)  # a non-empty set always has a front


def test_nan_counts_as_worst() -> None:
    assert non_dominated([(float("nan"), 1.0), (1.0, 1.0)]) == [False, True]


@pytest.fixture(scope="module")
def simulated() -> PlanResult:
    return simulate_scenario(SCENARIOS / "quickstart.yaml", plans=["local"]).results[0]


def test_plan_front_over_time_memory_devices(simulated: PlanResult) -> None:
    def plan(step_s: float, memory: float, devices: int, *, fits: bool = True) -> PlanResult:
        return replace(
            simulated,
            step_time_s=step_s,
            samples_per_step=1.0,
            peak_memory_bytes=memory,
            num_devices=devices,
            fits=fits,
        )

    plans = [
        plan(1.0, 10.0, 8),  # fastest
        plan(2.0, 5.0, 8),  # smallest
        plan(3.0, 10.0, 2),  # fewest devices
        plan(3.0, 10.0, 8),  # beaten by each of the above
        plan(0.5, 1.0, 1, fits=False),  # best everywhere but does not fit
    ]
    assert plan_front(plans) == [True, True, True, False, False]
    assert plan_objectives(plans[0])[1:] == (10.0, 8.0)
