"""Scenario specs: the unit ``simulate`` and ``compare-strategies`` take.

A scenario names a cluster, a model, the training settings and a list of named plans, and may
have a ``search:`` block (:mod:`parplan.config.search`), with which the plans may be left out.
Cluster, model and each plan's strategy may be inline or a path; the loader resolves paths against
the file that names them and keeps them in ``*_file`` fields so a saved scenario still points at
its files.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from parplan.config.cluster import ClusterSpec
from parplan.config.model import ModelSpec
from parplan.config.search import SearchSpec
from parplan.config.strategy import StrategySpec
from parplan.spec import Spec

_SEARCH_ONLY = object()
"""What ``plans`` holds while a scenario with a ``search:`` block and no plans validates."""


class TrainingSpec(Spec):
    """What one training step means for this scenario."""

    global_batch_size: int = Field(ge=1, description="samples per optimizer step, across all replicas")
    sequence_length: int | None = Field(
        default=None, ge=1, description="tokens per sample, for tokens/s (default: the model generator's)"
    )
    steps: int = Field(default=1, ge=1, description="optimizer steps to report totals for")
    seed: int = 0
    straggler_jitter: float = Field(
        default=0.0, ge=0, lt=1, description="seeded relative jitter on compute times (0.05 = up to +/-5%)"
    )


class PlanSpec(Spec):
    """A named plan: a strategy, inline or from a strategy file."""

    name: str = Field(min_length=1)
    strategy: StrategySpec
    strategy_file: str | None = None
    description: str | None = None


class SweepSpec(Spec):
    """A sweep in the scenario: a knob (``algorithm``, ``num_replicas``, ...) and its values."""

    knob: str = Field(min_length=1)
    values: tuple[str | int | float, ...] = Field(min_length=1)


class ScenarioSpec(Spec):
    """A cluster, a model, training settings and the plans to compare."""

    name: str = "scenario"
    description: str | None = None
    cluster: ClusterSpec
    cluster_file: str | None = None
    model: ModelSpec
    model_file: str | None = None
    training: TrainingSpec
    search: SearchSpec | None = Field(
        default=None, description="the plan space `parplan search` explores (then plans may be left out)"
    )
    plans: tuple[PlanSpec, ...]
    sweeps: tuple[SweepSpec, ...] = ()
    baseline: str | None = Field(default=None, description="plan name to compare against (default: local)")

    @model_validator(mode="before")
    @classmethod
    def _plans_optional_with_search(cls, data: Any) -> Any:
        """A scenario with a ``search:`` block may leave ``plans`` out (or empty): the search finds
        them. Marked, so a bad block gets its own message, not also one about missing plans."""
        if isinstance(data, dict) and data.get("search") is not None and not data.get("plans"):
            return {**data, "plans": _SEARCH_ONLY}
        return data

    @field_validator("plans", mode="before")
    @classmethod
    def _some_plans(cls, plans: Any) -> Any:
        if plans is _SEARCH_ONLY:
            return ()
        if isinstance(plans, list | tuple) and not plans:
            raise ValueError("give at least one plan (or a search: block for `parplan search`)")
        return plans

    @field_validator("plans")
    @classmethod
    def _unique_names(cls, plans: tuple[PlanSpec, ...]) -> tuple[PlanSpec, ...]:
        names = [p.name for p in plans]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"plan names used twice: {', '.join(dupes)}")
        return plans

    @field_validator("baseline")
    @classmethod
    def _known_baseline(cls, baseline: str | None, info: ValidationInfo) -> str | None:
        plans = info.data.get("plans")
        if baseline is not None and plans is not None:
            names = [p.name for p in plans]
            if baseline not in names:
                raise ValueError(f"{baseline!r} is not a plan; plans: {', '.join(names)}")
        return baseline
