"""What ``parplan simulate`` does, as one call: :func:`simulate_scenario`.

Load the scenario, pick the plans named (all by default), read the knob overrides, simulate each
plan and return a :class:`Simulation`: the results, the plans that could not be built (with why),
and what the reports need (the scenario, its file, its network for traces, the overrides). A plan
that cannot be built is not an error here: it is listed in ``failed`` and the caller decides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parplan.api.evaluate import build_context, evaluate_plan, select_plans
from parplan.api.knobs import KnobOptions, unused_knobs
from parplan.errors import ParplanError

if TYPE_CHECKING:
    from parplan.api.results import PlanResult
    from parplan.config.scenario import PlanSpec, ScenarioSpec
    from parplan.plan.base import PlanContext
    from parplan.topology.network import Network


@dataclass(frozen=True)
class Simulation:
    """The plans of a scenario, simulated (what :func:`simulate_scenario` returns)."""

    scenario: ScenarioSpec
    scenario_file: str
    network: Network
    results: list[PlanResult]
    failed: list[tuple[str, str]]
    overrides: dict[str, Any]
    named: bool
    """Whether the plans were named by the caller (then a plan that does not fit is a problem)."""

    def problems(self) -> list[str]:
        """What makes the request fail: plans that could not be built, and named plans that do
        not fit in memory (a plan simulated as part of the whole scenario is only marked)."""
        lines = [f"plan {name}: {error}" for name, error in self.failed]
        if self.named:
            lines += [
                f"plan {r.name} does not fit: {r.infeasible_reason}" for r in self.results if not r.fits
            ]
        return lines


def simulate_scenario(
    scenario_file: str | Path,
    *,
    plans: Sequence[str] = (),
    knobs: KnobOptions | None = None,
    warn: Callable[[str], None] | None = None,
    analytic: bool = False,
) -> Simulation:
    """Simulate the plans of the scenario at ``scenario_file`` (only those named in ``plans``).

    ``knobs`` override plan settings (:mod:`parplan.api.knobs`); a knob that changes none of the
    plans is reported to ``warn`` before the simulation starts; ``analytic`` evaluates sharded
    plans in closed form instead of simulating them. Raises
    :class:`~parplan.errors.ParplanError` for a bad file, an unknown plan or a bad knob value.
    """
    from parplan.api.kinds import load_expected

    spec: ScenarioSpec = load_expected(scenario_file, "scenario", command="parplan simulate")
    chosen = select_plans(spec, list(plans))
    knobs = knobs or KnobOptions()
    overrides = knobs.overrides()
    for message in unused_knobs(overrides, chosen, knobs.option_of):
        if warn is not None:
            warn(message)
    ctx = build_context(spec)
    results, failed = evaluate_plans(ctx, chosen, overrides, analytic=analytic)
    return Simulation(spec, str(scenario_file), ctx.network, results, failed, overrides, named=bool(plans))


def evaluate_plans(
    ctx: PlanContext, plans: Sequence[PlanSpec], overrides: dict[str, Any], *, analytic: bool = False
) -> tuple[list[PlanResult], list[tuple[str, str]]]:
    """Simulate each plan; a plan that cannot be built goes to the failed list with its error."""
    results: list[PlanResult] = []
    failed: list[tuple[str, str]] = []
    for p in plans:
        try:
            results.append(evaluate_plan(ctx, p, overrides=overrides or None, analytic=analytic))
        except ParplanError as exc:
            failed.append((p.name, str(exc)))
    return results, failed
