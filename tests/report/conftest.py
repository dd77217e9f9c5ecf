"""Shared fixtures for report tests: sample scenarios evaluated once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from parplan.api.evaluate import evaluate_scenario
from parplan.api.results import PlanResult
from parplan.config.loader import load_scenario
from parplan.config.scenario import ScenarioSpec

SCENARIOS = Path(__file__).resolve().parents[2] / "sample_configs" / "scenarios"


@pytest.fixture(scope="session")
def quickstart() -> ScenarioSpec:
    return load_scenario(SCENARIOS / "quickstart.yaml")


@pytest.fixture(scope="session")
def quickstart_results(quickstart: ScenarioSpec) -> list[PlanResult]:
    return evaluate_scenario(quickstart)


@pytest.fixture(scope="session")
def pipeline_results() -> list[PlanResult]:
    """GPT-1.3B pipelines: one plan (gpipe) does not fit, a 2-D plan has per-stage all-reduces."""
    return evaluate_scenario(load_scenario(SCENARIOS / "pipeline.yaml"))


@pytest.fixture(scope="session")
def federated_results() -> list[PlanResult]:
    return evaluate_scenario(load_scenario(SCENARIOS / "federated.yaml"))
