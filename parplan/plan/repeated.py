"""Plans whose units differ from one another: federated rounds and PBT generations.

A data-parallel step is the same every step, so one simulated step stands for all of them. A
federated round is not: random and round-robin selection pick other clients (other devices, other
links) each round, straggler jitter differs per round, and PBT copies different members' weights
after each generation. Such plans build one task graph per unit, and this module times every one
with the context's simulator (the engine, passed in by :func:`parplan.api.evaluate.build_context`:
plan sits below the engine and does not import it), sums them into the run's total and picks the
unit whose graph the plan hands to the evaluator: the one with the upper-median time (ties to the
earliest), so the reported unit time, its compute/communication split and its busiest link describe
a typical unit, not an outlier. The representative graph carries ``meta["run_time_s"]``, the whole
run's simulated time, which the evaluator reports as the run time instead of unit time x units.
Only the first :data:`MAX_SIMULATED_UNITS` units are simulated; a longer run's total is their mean
times the number of units.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from parplan.errors import PlanError
from parplan.plan.base import PlanContext
from parplan.taskgraph import TaskGraph

MAX_SIMULATED_UNITS = 50
"""Most rounds or generations simulated (and run numerically) for one plan."""


@dataclass(frozen=True)
class UnitTimes:
    """The simulated time of every unit and which unit represents them."""

    times_s: tuple[float, ...]
    representative: int
    total_units: int

    @property
    def mean_s(self) -> float:
        """Mean time of the simulated units."""
        return sum(self.times_s) / len(self.times_s)

    @property
    def total_s(self) -> float:
        """Time of the whole run: the simulated units, extrapolated by their mean past the cap."""
        extra = self.total_units - len(self.times_s)
        return sum(self.times_s) + max(0, extra) * self.mean_s


def representative_index(times_s: Sequence[float]) -> int:
    """The unit with the upper-median time, ties to the earliest.

    >>> representative_index([3.0, 1.0, 2.0, 2.0])
    2
    """
    if not times_s:
        raise ValueError("no units to choose from")
    order = sorted(range(len(times_s)), key=lambda i: (times_s[i], i))
    target = times_s[order[len(order) // 2]]
    return min(i for i, t in enumerate(times_s) if t == target)


def time_units(graphs: Sequence[TaskGraph], ctx: PlanContext, total_units: int) -> UnitTimes:
    """Time each unit's graph with ``ctx.simulator`` on ``ctx.network``; choose the representative one."""
    simulator = ctx.simulator
    if simulator is None:
        raise PlanError("timing rounds or generations needs a simulator: build the context with parplan.api")
    times = tuple(float(simulator(g, ctx.network)) for g in graphs)
    return UnitTimes(times, representative_index(times), max(total_units, len(times)))


def representative_graph(graphs: Sequence[TaskGraph], times: UnitTimes) -> TaskGraph:
    """The representative unit's graph, with the run's total time in ``meta["run_time_s"]``."""
    graph = graphs[times.representative]
    return replace(
        graph, meta={**graph.meta, "run_time_s": times.total_s, "unit_times_s": list(times.times_s)}
    )
