"""Pareto fronts: which candidates no other candidate beats in every objective (lower is better).

:func:`non_dominated` is the general rule over any number of objectives; :func:`plan_front` applies
it to evaluated plans over (time, peak memory, devices), the front ``compare-strategies --html``
draws and ``search`` reports. Ties are kept: two plans with equal objectives are both on the front.
Plans that do not fit in memory are never on it.

>>> non_dominated([(1.0, 5.0), (2.0, 2.0), (3.0, 3.0), (1.0, 5.0)])
[True, True, False, True]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from parplan.api.results import PlanResult

PLAN_OBJECTIVES = ("time_per_sample_s", "peak_memory_bytes", "num_devices")
"""What :func:`plan_front` minimises, in order (time per sample equals step time when every plan
processes the same global batch, as in a search)."""


def non_dominated(points: Sequence[Sequence[float]]) -> list[bool]:
    """For each point, whether no other point is at most as large in every coordinate and smaller
    in one. A NaN coordinate counts as +inf (the worst value).

    Vectorised over the points (one pass per point, numpy over the rest), so a few thousand
    candidates take milliseconds; every point must have the same number of coordinates.
    """
    if not points:
        return []
    values = np.asarray(points, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError("every point needs the same number of objectives")
    values = np.where(np.isnan(values), np.inf, values)
    flags: list[bool] = []
    for row in values:
        at_most = np.all(values <= row, axis=1)
        smaller = np.any(values < row, axis=1)
        flags.append(not bool(np.any(at_most & smaller)))
    return flags


def plan_objectives(result: PlanResult) -> tuple[float, float, float]:
    """A plan's (time per sample, peak memory, devices), the coordinates of :data:`PLAN_OBJECTIVES`."""
    per_sample = result.step_time_s / result.samples_per_step if result.samples_per_step > 0 else np.inf
    return (float(per_sample), float(result.peak_memory_bytes), float(result.num_devices))


def plan_front(results: Sequence[PlanResult]) -> list[bool]:
    """Which plans are on the (time per sample, peak memory, devices) front; infeasible plans are not."""
    feasible = [i for i, r in enumerate(results) if r.fits]
    flags = non_dominated([plan_objectives(results[i]) for i in feasible])
    on_front = {i for i, flag in zip(feasible, flags, strict=True) if flag}
    return [i in on_front for i in range(len(results))]
