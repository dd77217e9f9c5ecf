"""Contexts of the bundled LLM samples (and the MT-NLG one) for the search tests, built once."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np

from parplan.api.evaluate import build_context
from parplan.api.search import vector
from parplan.api.search.space import CandidateTable, enumerate_space
from parplan.config.loader import load_scenario
from parplan.config.scenario import ScenarioSpec
from parplan.config.search import SearchSpec
from parplan.config.strategy import ShardedStrategy
from parplan.plan.base import PlanContext

ROOT = Path(__file__).resolve().parents[3]
LLM_SAMPLES = (
    "gpt3-175b-1024xa100",
    "llama3-70b-64xh100",
    "mixtral-8x7b-64xh100",
    "mt-nlg-530b-5128xa100",
)
"""Scenarios with sharded plans of a transformer: what a search runs on."""


@cache
def sample(name: str) -> tuple[ScenarioSpec, PlanContext]:
    """The scenario ``name`` under sample_configs/scenarios and its context."""
    scenario = load_scenario(ROOT / "sample_configs" / "scenarios" / f"{name}.yaml")
    return scenario, build_context(scenario)


def search_of(name: str) -> SearchSpec:
    """The search of sample ``name``: its own ``search:`` block, else a small default space."""
    scenario, _ = sample(name)
    return scenario.search or SearchSpec(
        algorithms=("auto", "ring"), bucket_sizes=("25 MiB", "100 MiB"), zero=(0, 1, 3)
    )


def first_candidate(name: str) -> tuple[PlanContext, ShardedStrategy]:
    """Sample ``name``'s context and the strategy of the first candidate of its search."""
    _, ctx = sample(name)
    search = search_of(name)
    table, _ = enumerate_space(ctx, search)
    return ctx, table.strategy(0, search)


def structure_of(table: CandidateTable) -> np.ndarray:
    """Each row's structure number: ``np.unique`` over the stacked structure columns, apart from
    the evaluator's own grouping (``vector._keys``) so that tests picking structures do not rest
    on it."""
    columns = np.stack([getattr(table, c).astype(np.int64) for c in vector._STRUCTURE], axis=1)
    _, inverse = np.unique(columns, axis=0, return_inverse=True)
    return np.asarray(inverse.reshape(-1))
