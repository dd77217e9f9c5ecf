"""The pipeline schedules by name, the default, and lookup with an error that lists the valid names.

Adding a schedule is adding its module and one line to :data:`SCHEDULES`; tests may
:func:`register` a toy one. The strategy config takes its valid names from here.

>>> get("1f1b").name
'1f1b'
>>> get("zigzag")
Traceback (most recent call last):
...
parplan.errors.PlanError: unknown pipeline schedule 'zigzag'; valid: gpipe, 1f1b, interleaved_1f1b
"""

from __future__ import annotations

from parplan.errors import PlanError
from parplan.pipeline.base import PipelineSchedule
from parplan.pipeline.gpipe import GPipe
from parplan.pipeline.interleaved import Interleaved1F1B
from parplan.pipeline.one_f_one_b import OneFOneB

SCHEDULES: dict[str, PipelineSchedule] = {
    "gpipe": GPipe(),
    "1f1b": OneFOneB(),
    "interleaved_1f1b": Interleaved1F1B(),
}
"""Schedule name -> schedule, in the order names are listed to users."""

DEFAULT_SCHEDULE = "gpipe"
"""The schedule of a model-parallel plan that names none."""


def schedule_names() -> tuple[str, ...]:
    """The valid schedule names (including registered ones), in listing order."""
    return tuple(SCHEDULES)


def get(name: str) -> PipelineSchedule:
    """The schedule called ``name``; a :class:`PlanError` listing the valid names otherwise."""
    try:
        return SCHEDULES[name]
    except (KeyError, TypeError):
        valid = ", ".join(SCHEDULES)
        raise PlanError(f"unknown pipeline schedule {name!r}; valid: {valid}") from None


def register(schedule: PipelineSchedule) -> PipelineSchedule:
    """Add ``schedule`` under its name (a :class:`PlanError` if the name is taken); returns it."""
    if schedule.name in SCHEDULES:
        raise PlanError(f"pipeline schedule {schedule.name!r} is already registered")
    SCHEDULES[schedule.name] = schedule
    return schedule


def unregister(name: str) -> None:
    """Remove a registered schedule (tests clean up with this); the default cannot be removed."""
    if name == DEFAULT_SCHEDULE:
        raise PlanError(f"the default pipeline schedule {name!r} cannot be removed")
    get(name)
    del SCHEDULES[name]
