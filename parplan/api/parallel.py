"""Evaluating many variants of a scenario, in this process or spread over worker processes.

Each worker builds the scenario's network and model once; results come back in variant order, so
the ranking is the same as with one process, and without their timeline (``work``/``sim`` are None)
to keep the traffic between processes small.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from parplan.api.evaluate import build_context, evaluate_plan
from parplan.errors import ParplanError

if TYPE_CHECKING:
    from parplan.api.results import PlanResult
    from parplan.api.variants import Variant
    from parplan.config.scenario import ScenarioSpec

_WORKER_CONTEXT: dict[str, Any] = {}
"""Per worker process: the scenario's :class:`~parplan.plan.base.PlanContext`, built once."""


def _init_worker(scenario: ScenarioSpec, analytic: bool = False) -> None:
    _WORKER_CONTEXT["ctx"] = build_context(scenario)
    _WORKER_CONTEXT["analytic"] = analytic


def _evaluate_in_worker(variant: Variant) -> PlanResult | str:
    """Evaluate one variant in a worker; the timeline and task graph stay behind (only figures travel)."""
    try:
        result = evaluate_plan(
            _WORKER_CONTEXT["ctx"],
            variant.plan,
            overrides=variant.overrides or None,
            analytic=bool(_WORKER_CONTEXT.get("analytic")),
        )
    except ParplanError as exc:
        return str(exc)
    return replace(result, work=None, sim=None)


def evaluate_variants(
    scenario: ScenarioSpec,
    variants: Sequence[Variant],
    *,
    jobs: int = 1,
    progress: Callable[[int, int], None] | None = None,
    analytic: bool = False,
) -> list[PlanResult | str]:
    """Evaluate each variant; a variant that cannot be planned yields its error message instead.

    With ``jobs > 1`` variants are spread over worker processes (each builds the scenario's
    network and model once); results come back in variant order, so the ranking is the same as
    with one process, and without their timeline (``work``/``sim`` are None) to keep the traffic
    between processes small. ``progress(done, total)`` is called as variants finish. ``analytic``
    evaluates sharded plans in closed form (:func:`~parplan.api.evaluate.evaluate_plan`).
    """
    total = len(variants)
    workers = max(1, min(jobs, total, os.cpu_count() or 1))
    if workers <= 1:
        results: list[PlanResult | str] = []
        ctx = build_context(scenario)
        for i, variant in enumerate(variants):
            try:
                results.append(
                    evaluate_plan(ctx, variant.plan, overrides=variant.overrides or None, analytic=analytic)
                )
            except ParplanError as exc:
                results.append(str(exc))
            if progress:
                progress(i + 1, total)
        return results
    slots: list[PlanResult | str | None] = [None] * total
    with ProcessPoolExecutor(
        max_workers=workers, initializer=_init_worker, initargs=(scenario, analytic)
    ) as pool:
        futures = {pool.submit(_evaluate_in_worker, v): i for i, v in enumerate(variants)}
        for done, future in enumerate(as_completed(futures), start=1):
            slots[futures[future]] = future.result()
            if progress:
                progress(done, total)
    return cast("list[PlanResult | str]", slots)  # every slot was filled above
