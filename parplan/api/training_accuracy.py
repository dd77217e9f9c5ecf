"""``parplan validate``'s training rows: predicted step times beside published training runs.

Each ``[[training]]`` row of the manifest names a scenario (cluster from spec sheets, the model's
public shape, the published plan as a ``sharded`` strategy) and the figure its source printed: a
step time (``step_time_s``) or a throughput in tokens per second per GPU
(``tokens_per_s_per_gpu``). Both are compared as step times, so every row's error has one meaning:
``(predicted - measured) / measured`` of the seconds one optimizer step takes; a throughput
``T`` over ``G`` GPUs is a step of ``global batch x sequence / (T x G)`` seconds.

A row may be ``excluded`` with the reason (a Float8 run, a compiled run, a figure without the
configuration to predict it): it is listed in the report with that reason and enters no statistic,
so the report shows every row the sources give and which of them parplan does not claim to predict.

The prediction is ``parplan simulate``'s for that plan: the plan expanded and simulated by the event
engine on the cluster, its step time as ``simulate`` reports it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from parplan.api.kinds import load_expected
from parplan.config.scenario import ScenarioSpec
from parplan.errors import ConfigError, ParplanError
from parplan.plan.base import PlanContext
from parplan.spec import Spec

TrainingMetric = Literal["step_time_s", "tokens_per_s_per_gpu"]


class TrainingRowSpec(Spec):
    """One published training figure and the scenario that predicts it."""

    name: str = Field(min_length=1)
    system: str = Field(min_length=1, description="the system, for the per-system summary")
    scenario: str | None = Field(
        default=None, min_length=1, description="the scenario file, relative to the manifest"
    )
    plan: str = Field(default="published", min_length=1, description="the scenario's plan to predict")
    measured: TrainingMetric = "step_time_s"
    value: float = Field(gt=0, description="the published figure, in the unit `measured` names")
    source: str = Field(min_length=1, description="where the figure and its configuration are published")
    note: str | None = None
    excluded: str | None = Field(
        default=None, description="why this row is listed but not predicted (it enters no statistic)"
    )

    @model_validator(mode="after")
    def _scenario_unless_excluded(self) -> TrainingRowSpec:
        if self.scenario is None and self.excluded is None:
            raise ValueError("a row needs the scenario that predicts it (or `excluded` with the reason)")
        return self


@dataclass(frozen=True)
class TrainingResult:
    """One row: measured and predicted step time (``None`` for an excluded row) and the plan's shape."""

    spec: TrainingRowSpec
    devices: int
    measured_step_s: float | None
    predicted_step_s: float | None
    predicted_tokens_per_s_per_gpu: float | None
    mfu: float | None
    peak_memory_bytes: float | None
    fits: bool | None

    @property
    def error_pct(self) -> float | None:
        """Signed error of the predicted step time, in percent (``None`` when not predicted)."""
        if self.predicted_step_s is None or self.measured_step_s is None:
            return None
        return 100.0 * (self.predicted_step_s - self.measured_step_s) / self.measured_step_s


@dataclass(frozen=True)
class TrainingStats:
    """Median and maximum |error| over the predicted rows (``None`` without any)."""

    count: int
    median_pct: float | None
    max_pct: float | None

    @classmethod
    def of(cls, results: Sequence[TrainingResult]) -> TrainingStats:
        """The statistics of the rows that have an error."""
        errors = [abs(e) for e in (r.error_pct for r in results) if e is not None]
        if not errors:
            return cls(0, None, None)
        return cls(len(errors), statistics.median(errors), max(errors))


def measured_step_s(row: TrainingRowSpec, ctx: PlanContext, devices: int) -> float:
    """The published figure as seconds per optimizer step (a throughput over ``devices`` GPUs, with
    the scenario's tokens per sample as ``simulate`` counts them)."""
    if row.measured == "step_time_s":
        return row.value
    if ctx.sequence_length is None:
        raise ConfigError(
            f"training row {row.name!r}: a tokens/s figure needs a sequence length "
            "(training.sequence_length or the model generator's seq_len)"
        )
    tokens = ctx.training.global_batch_size * ctx.sequence_length
    return tokens / (row.value * devices)


def predict_row(row: TrainingRowSpec, scenario_path: Path) -> TrainingResult:
    """Simulate the row's plan on its scenario and compare its step time with the published one."""
    from parplan.api.evaluate import build_context, evaluate_plan, select_plans

    scenario: ScenarioSpec = load_expected(scenario_path, "scenario", command="parplan validate")
    try:
        (plan,) = select_plans(scenario, [row.plan])
    except ParplanError as exc:
        raise ConfigError(f"training row {row.name!r}: {exc}") from None
    ctx = build_context(scenario)
    result = evaluate_plan(ctx, plan)
    devices = result.num_devices
    tokens = result.tokens_per_s / devices if result.tokens_per_s is not None else None
    mfu = result.quality.get("mfu")
    return TrainingResult(
        spec=row,
        devices=devices,
        measured_step_s=measured_step_s(row, ctx, devices),
        predicted_step_s=result.step_time_s,
        predicted_tokens_per_s_per_gpu=tokens,
        mfu=float(mfu) if isinstance(mfu, int | float) else None,
        peak_memory_bytes=result.peak_memory_bytes,
        fits=result.fits,
    )


def predict_rows(
    rows: Sequence[TrainingRowSpec],
    resolve: Callable[[str], Path],
    progress: Callable[[str], None] | None = None,
) -> tuple[TrainingResult, ...]:
    """Every row predicted in manifest order (excluded rows listed, not simulated)."""
    out: list[TrainingResult] = []
    for i, row in enumerate(rows, start=1):
        if progress is not None:
            what = f"excluded: {row.excluded}" if row.excluded else row.system
            progress(f"[training {i}/{len(rows)}] {row.name}: {what}")
        if row.excluded is not None or row.scenario is None:
            out.append(TrainingResult(row, 0, None, None, None, None, None, None))
        else:
            out.append(predict_row(row, resolve(row.scenario)))
    return tuple(out)
