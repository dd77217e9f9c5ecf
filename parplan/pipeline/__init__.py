"""Pipeline schedules (GPipe, 1F1B, interleaved 1F1B): one module each, behind
:class:`PipelineSchedule`, by name in
:mod:`parplan.pipeline.registry`.

A bottom layer: it imports only :mod:`parplan.errors` and the standard library, so the strategy
config can take its valid names from the registry and the plan builder can ask the schedule objects.
"""

from __future__ import annotations

from parplan.pipeline.base import PipelineSchedule, Stage, Unit, peak_inflight
from parplan.pipeline.registry import DEFAULT_SCHEDULE, SCHEDULES, get, register, schedule_names, unregister

__all__ = [
    "DEFAULT_SCHEDULE",
    "SCHEDULES",
    "PipelineSchedule",
    "Stage",
    "Unit",
    "get",
    "peak_inflight",
    "register",
    "schedule_names",
    "unregister",
]
