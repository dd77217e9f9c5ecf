"""Ranking evaluated variants: by time per sample, infeasible plans last, with speed-ups against a
baseline and the time/memory Pareto front.

Ranking is by step time per sample processed (so steps, federated rounds and PBT generations stay
comparable); plans that do not fit in memory come after every plan that does and are never on the
Pareto front, which is taken over (time per sample, peak memory) among feasible plans. The baseline
is a variant or plan name (a plan stands for its variant as configured), else the first ``local``
plan, else (or when the baseline could not be evaluated) the first plan evaluated: speed-ups are
always against a named plan, and :data:`BASELINE_RULES` says how it was chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from parplan.api.knobs import OptionValueError
from parplan.api.pareto import non_dominated
from parplan.api.variants import Variant, as_configured
from parplan.errors import PlanError

if TYPE_CHECKING:
    from parplan.api.results import PlanResult


@dataclass(frozen=True)
class Ranked:
    """A plan's result with its place in the comparison."""

    rank: int
    variant_name: str
    result: PlanResult
    speedup: float | None
    pareto: bool
    time_per_sample_s: float


def pareto_front(points: Sequence[tuple[float, float]]) -> list[bool]:
    """Which points no other point beats in both coordinates (lower is better, ties kept)."""
    return non_dominated(points)


def rank_results(
    variants: Sequence[Variant],
    results: Sequence[PlanResult | str],
    *,
    baseline: str | None = None,
) -> tuple[list[Ranked], list[tuple[str, str]]]:
    """Rank evaluated variants; returns the ranked plans and the (name, error) of plans that failed.

    The baseline (a variant or plan name; default the first ``local`` plan) sets the speed-up column:
    baseline time per sample divided by the plan's. Infeasible plans (not fitting in memory) are
    ranked after the feasible ones and never on the Pareto front.
    """
    ok: list[tuple[str, PlanResult]] = []
    failed: list[tuple[str, str]] = []
    for variant, res in zip(variants, results, strict=True):
        if isinstance(res, str):
            failed.append((variant.name, res))
        else:
            ok.append((variant.name, res))

    def per_sample(r: PlanResult) -> float:
        return r.step_time_s / r.samples_per_step if r.samples_per_step > 0 else float("inf")

    base_time: float | None = None
    for name, res in ok:
        if (baseline is not None and name == baseline) or (baseline is None and res.strategy_kind == "local"):
            base_time = per_sample(res)
            break
    if baseline is not None and base_time is None:
        names = [n for n, _ in ok]
        if not any(n.split("[", 1)[0] == baseline for n in names):
            raise PlanError(f"baseline {baseline!r} is not among the evaluated plans: {', '.join(names)}")
        base_time = next(per_sample(r) for n, r in ok if n.split("[", 1)[0] == baseline)

    order = sorted(range(len(ok)), key=lambda i: (not ok[i][1].fits, per_sample(ok[i][1]), ok[i][0]))
    feasible = [i for i in order if ok[i][1].fits]
    front = pareto_front([(per_sample(ok[i][1]), ok[i][1].peak_memory_bytes) for i in feasible])
    on_front = {i for i, flag in zip(feasible, front, strict=True) if flag}
    ranked = []
    for rank, i in enumerate(order, start=1):
        name, res = ok[i]
        t = per_sample(res)
        speedup = base_time / t if base_time is not None and t > 0 else None
        ranked.append(Ranked(rank, name, res, speedup, i in on_front, t))
    return ranked, failed


def resolve_baseline(
    requested: str | None, variants: Sequence[Variant], duplicates: dict[str, str]
) -> str | None:
    """The variant (or plan) name to measure speed-ups against; an unknown name is an error.

    Spaces are ignored (so a name copied from the table works); a variant dropped as a
    duplicate stands for the variant it duplicates; a plan name stands for the variant that is
    the plan as configured (its sweep values all equal the plan's own), else its first variant.
    """
    if requested is None:
        return None
    wanted = requested.replace(" ", "")
    if wanted in duplicates:
        return duplicates[wanted]
    if any(v.name == wanted for v in variants):
        return wanted
    plan_variant = as_configured(wanted, variants)
    if plan_variant is not None:
        return plan_variant.name
    names = ", ".join(v.name for v in variants)
    raise OptionValueError(f"baseline {requested!r} is not a plan or variant compared; choose from: {names}")


BASELINE_RULES: dict[str, str] = {
    "requested": "--baseline",
    "scenario": "the scenario's baseline",
    "first_local": "the first local plan",
    "first": "the first plan",
}
"""How the baseline was chosen (the ``baseline_rule`` of the JSON) -> how the caption says it."""


def rank(
    variants: Sequence[Variant],
    results: Sequence[PlanResult | str],
    requested: str | None,
    warn: Callable[[str], None] | None = None,
    *,
    from_scenario: bool = False,
) -> tuple[list[Ranked], list[tuple[str, str]], str | None, str | None]:
    """Rank the results; returns the ranking, the failed variants, the baseline variant used and
    the rule that chose it (a key of :data:`BASELINE_RULES`).

    The baseline is the variant named ``requested`` (a name from :func:`resolve_baseline`; a plan
    name stands for that plan's first variant; ``from_scenario``: the scenario file named it);
    without a request, the first local plan; without one, or when the baseline could not be
    evaluated (reported to ``warn``), the first plan evaluated, so speed-ups are always against
    something named. Only when nothing was evaluated is there no baseline.
    """
    evaluated = {v.name: r for v, r in zip(variants, results, strict=True) if not isinstance(r, str)}
    chosen: str | None = None
    rule: str | None = None
    if requested is not None:
        exact = [v for v in variants if v.name == requested]
        chosen = (exact or [v for v in variants if v.plan.name == requested])[0].name
        rule = "scenario" if from_scenario else "requested"
    else:
        chosen = next((n for n, r in evaluated.items() if r.strategy_kind == "local"), None)
        rule = "first_local" if chosen is not None else None
    if chosen not in evaluated:
        fallback = next(iter(evaluated), None)
        if chosen is not None and warn is not None:
            instead = "no speed-ups shown"
            if fallback is not None:
                instead = f"speed-ups are against {fallback} (the first plan) instead"
            warn(f"baseline {chosen} could not be evaluated; {instead}")
        chosen, rule = fallback, ("first" if fallback is not None else None)
    ranked, failed = rank_results(variants, results, baseline=chosen)
    if chosen is None:
        ranked = [replace(r, speedup=None) for r in ranked]
    return ranked, failed, chosen, rule
