"""Compare plans: expand sweeps, evaluate every variant (optionally in worker processes), rank them.

A sweep is a knob and its values (``algorithm=ring,tree:2``); several sweeps form their cartesian
product, applied to every plan whose strategy has that knob (a plan without it is evaluated once,
as it is). Variants are named ``plan[knob=value,...]``. Ranking is by step time per sample
processed (so plans with different units stay comparable), infeasible plans last; the Pareto front
is taken over (time per sample, peak memory) among feasible plans.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from parplan.errors import ParplanError, PlanError
from parplan.pipeline import schedule_names
from parplan.plan.knobs import KNOBS

if TYPE_CHECKING:
    from parplan.config.scenario import PlanSpec, ScenarioSpec
    from parplan.plan.evaluate import PlanResult

INTEGER_KNOBS = frozenset(
    {"num_replicas", "microbatches", "num_clients", "rounds", "local_steps", "population_size", "generations"}
)
"""Knobs whose values are positive integers."""

CHOICES: dict[str, tuple[str, ...]] = {
    "schedule": schedule_names(),
    "batch_split": ("round_robin", "by_speed"),
    "reduce": ("mean", "sum", "weighted_by_samples"),
}
"""Knobs whose values come from a fixed list."""

_TRUE = {"true", "on", "yes", "1"}
_FALSE = {"false", "off", "no", "0"}


@dataclass(frozen=True)
class Sweep:
    """One knob and the values to try."""

    knob: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Variant:
    """A plan to evaluate: a scenario plan and the overrides a sweep applies to it."""

    plan: PlanSpec
    overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """``plan`` or ``plan[knob=value,...]``."""
        if not self.overrides:
            return self.plan.name
        inner = ",".join(f"{k}={v}" for k, v in self.overrides.items())
        return f"{self.plan.name}[{inner}]"


@dataclass(frozen=True)
class Ranked:
    """A plan's result with its place in the comparison."""

    rank: int
    variant_name: str
    result: PlanResult
    speedup: float | None
    pareto: bool
    time_per_sample_s: float


def parse_value(knob: str, text: str, where: str | None = None) -> Any:
    """Check and convert one value of ``knob`` (``where`` names it in errors, e.g. ``--algorithm``).

    Counts become ints, ``overlap`` a bool; algorithms, sizes and choices are checked and kept as
    written (``tree:4``, ``25MiB``), so variant names read like the command line.

    >>> parse_value("num_replicas", "8"), parse_value("overlap", "off"), parse_value("algorithm", "tree:4")
    (8, False, 'tree:4')
    """
    where = where or f"sweep {knob}"
    text = text.strip()
    if knob in INTEGER_KNOBS:
        try:
            value = int(text)
        except ValueError:
            raise PlanError(f"{where}: {text!r} is not an integer") from None
        if value < 1:
            raise PlanError(f"{where}: {value} must be >= 1")
        return value
    if knob == "overlap":
        lowered = text.lower()
        if lowered not in _TRUE | _FALSE:
            raise PlanError(f"{where}: {text!r} is not a boolean (true/false, on/off, yes/no)")
        return lowered in _TRUE
    if knob in CHOICES:
        if text not in CHOICES[knob]:
            raise PlanError(f"{where}: {text!r} is not one of {', '.join(CHOICES[knob])}")
        return text
    if knob == "bucket_size":
        from parplan.config.units import parse_bytes

        try:
            size_bytes = parse_bytes(text)
        except ValueError as exc:
            raise PlanError(f"{where}: {exc}") from None
        if size_bytes <= 0:
            raise PlanError(f"{where}: {text!r} must be more than 0 bytes")
        return text
    if knob == "algorithm":
        from parplan.config.algorithms import parse_algorithm

        try:
            parse_algorithm(text)
        except ValueError as exc:  # pydantic ValidationError is a ValueError
            errors = exc.errors() if hasattr(exc, "errors") else []
            first = str(errors[0]["msg"]) if errors else str(exc)
            loc = ".".join(str(x) for x in errors[0]["loc"][1:]) if errors else ""
            detail = first.removeprefix("Value error, ")
            if loc and not detail.startswith("unknown"):
                detail = f"{loc}: {detail}"
            raise PlanError(f"{where}: {text!r}: {detail}") from None
        return text
    return text


def parse_sweep(text: str) -> Sweep:
    """Read ``knob=v1,v2,...``; an unknown knob is a :class:`PlanError` listing the known ones.

    >>> parse_sweep("num_replicas=2,4")
    Sweep(knob='num_replicas', values=(2, 4))
    """
    knob, sep, values = text.partition("=")
    knob = knob.strip()
    if not sep or not values.strip():
        raise PlanError(f"sweep {text!r}: expected knob=value1,value2,...")
    if knob not in KNOBS:
        raise PlanError(f"unknown sweep knob {knob!r}; valid: {', '.join(KNOBS)}")
    items = [v.strip() for v in values.split(",") if v.strip()]
    return Sweep(knob, tuple(dict.fromkeys(parse_value(knob, v) for v in items)))


def parse_setting(text: str) -> tuple[str, Any]:
    """Read one ``knob=value`` (``simulate --set``).

    >>> parse_setting("rounds=20")
    ('rounds', 20)
    """
    knob, sep, value = text.partition("=")
    knob = knob.strip()
    if not sep or not value.strip():
        raise PlanError(f"--set {text!r}: expected knob=value")
    if knob not in KNOBS:
        raise PlanError(f"--set: unknown knob {knob!r}; valid: {', '.join(KNOBS)}")
    return knob, parse_value(knob, value, where=f"--set {knob}")


def applies(knob: str, plan: PlanSpec) -> bool:
    """Whether ``knob`` changes ``plan`` (microbatches/schedule: pipelines and 2-D plans only)."""
    return _applies(knob, plan)


def _applies(knob: str, plan: PlanSpec) -> bool:
    strategy = plan.strategy
    if strategy.kind not in KNOBS[knob]:
        return False
    if strategy.kind == "data_parallel" and knob in {"microbatches", "schedule"}:
        return strategy.replica is not None
    return True


def expand_variants(plans: Sequence[PlanSpec], sweeps: Sequence[Sweep]) -> list[Variant]:
    """Every plan crossed with the sweeps that apply to it, in a stable order, without duplicates."""
    out: list[Variant] = []
    for plan in plans:
        applicable = [s for s in sweeps if _applies(s.knob, plan)]
        if not applicable:
            out.append(Variant(plan))
            continue
        for combo in itertools.product(*(s.values for s in applicable)):
            out.append(Variant(plan, dict(zip((s.knob for s in applicable), combo, strict=True))))
    return out


def _without_file_fields(value: Any) -> Any:
    """``value`` without ``*_file`` keys (where a spec was loaded from does not change the plan)."""
    if isinstance(value, dict):
        return {k: _without_file_fields(v) for k, v in value.items() if not k.endswith("_file")}
    if isinstance(value, list):
        return [_without_file_fields(v) for v in value]
    return value


def strategy_key(strategy: Any) -> str:
    """A canonical text of a strategy (ignoring where its files came from), equal for equal plans."""
    import json

    return json.dumps(_without_file_fields(strategy.model_dump(mode="json")), sort_keys=True)


def _effective_key(variant: Variant, overrides: dict[str, Any] | None = None) -> str | None:
    from parplan.plan.evaluate import apply_overrides

    overrides = variant.overrides if overrides is None else overrides
    try:
        strategy = apply_overrides(variant.plan.strategy, overrides) if overrides else variant.plan.strategy
    except ParplanError:
        return None
    return strategy_key(strategy)


def _no_op_overrides(variant: Variant) -> int:
    """How many of the variant's overrides leave its plan as it is (``algorithm=ring`` on a ring plan)."""
    own = strategy_key(variant.plan.strategy)
    return sum(1 for k, v in variant.overrides.items() if _effective_key(variant, {k: v}) == own)


def dedupe_variants(variants: Sequence[Variant]) -> tuple[list[Variant], dict[str, str]]:
    """Drop variants whose strategy, once the overrides are applied, equals another variant's.

    Crossing ``--sweep algorithm=ring,tree:2`` with plans that differ only in their algorithm
    gives the same strategy several times (``dp-tree[algorithm=ring]`` is ``dp-ring[algorithm=ring]``);
    evaluating it once is enough. Of identical variants the one kept is the one whose plan
    already had most of the swept values (``dp-ring[algorithm=ring]``), ties to the first.
    Returns the variants kept (in their original order) and, for each one dropped, the name of
    the variant it duplicates. Where strategy files came from is ignored; a variant whose
    overrides do not validate is kept (its evaluation reports the error).
    """
    groups: dict[str, list[int]] = {}
    keep: set[int] = set()
    for i, variant in enumerate(variants):
        key = _effective_key(variant)
        if key is None:
            keep.add(i)
        else:
            groups.setdefault(key, []).append(i)
    dropped: dict[str, str] = {}
    for members in groups.values():
        best = members[0]
        if len(members) > 1:
            best = max(members, key=lambda i: (_no_op_overrides(variants[i]), -i))
        keep.add(best)
        for i in members:
            if i != best:
                dropped[variants[i].name] = variants[best].name
    return [v for i, v in enumerate(variants) if i in keep], dropped


def as_configured(plan_name: str, variants: Sequence[Variant]) -> Variant | None:
    """The variant of ``plan_name`` that is the plan as its file has it (every override a no-op),
    else that plan's first variant; None when no variant comes from that plan."""
    own = [v for v in variants if v.plan.name == plan_name]
    for v in own:
        if _no_op_overrides(v) == len(v.overrides):
            return v
    return own[0] if own else None


def pareto_front(points: Sequence[tuple[float, float]]) -> list[bool]:
    """Which points no other point beats in both coordinates (lower is better, ties kept)."""
    flags = []
    for i, (t, m) in enumerate(points):
        dominated = any(
            (t2 <= t and m2 <= m) and (t2 < t or m2 < m) for j, (t2, m2) in enumerate(points) if j != i
        )
        flags.append(not dominated)
    return flags


_WORKER_CONTEXT: dict[str, Any] = {}
"""Per worker process: the scenario's :class:`~parplan.plan.base.PlanContext`, built once."""


def _init_worker(scenario: ScenarioSpec) -> None:
    from parplan.plan.evaluate import build_context

    _WORKER_CONTEXT["ctx"] = build_context(scenario)


def _evaluate_in_worker(variant: Variant) -> PlanResult | str:
    """Evaluate one variant in a worker; the timeline and task graph stay behind (only figures travel)."""
    from dataclasses import replace

    from parplan.plan.evaluate import evaluate_plan

    try:
        result = evaluate_plan(_WORKER_CONTEXT["ctx"], variant.plan, overrides=variant.overrides or None)
    except ParplanError as exc:
        return str(exc)
    return replace(result, work=None, sim=None)


def evaluate_variants(
    scenario: ScenarioSpec,
    variants: Sequence[Variant],
    *,
    jobs: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> list[PlanResult | str]:
    """Evaluate each variant; a variant that cannot be planned yields its error message instead.

    With ``jobs > 1`` variants are spread over worker processes (each builds the scenario's
    network and model once); results come back in variant order, so the ranking is the same as
    with one process, and without their timeline (``work``/``sim`` are None) to keep the traffic
    between processes small. ``progress(done, total)`` is called as variants finish.
    """
    from parplan.plan.evaluate import build_context, evaluate_plan

    total = len(variants)
    workers = max(1, min(jobs, total, os.cpu_count() or 1))
    if workers <= 1:
        results: list[PlanResult | str] = []
        ctx = build_context(scenario)
        for i, variant in enumerate(variants):
            try:
                results.append(evaluate_plan(ctx, variant.plan, overrides=variant.overrides or None))
            except ParplanError as exc:
                results.append(str(exc))
            if progress:
                progress(i + 1, total)
        return results
    slots: list[PlanResult | str | None] = [None] * total
    with ProcessPoolExecutor(max_workers=workers, initializer=_init_worker, initargs=(scenario,)) as pool:
        futures = {pool.submit(_evaluate_in_worker, v): i for i, v in enumerate(variants)}
        for done, future in enumerate(as_completed(futures), start=1):
            slots[futures[future]] = future.result()
            if progress:
                progress(done, total)
    return cast("list[PlanResult | str]", slots)  # every slot was filled above


def scaling_key(variant: Variant) -> tuple[str, int | None]:
    """Where a variant goes on a step-time-against-replicas plot: (series, replicas).

    Data-parallel variants give their all-reduce algorithm (``ring``, ``tree:4``; ``ring, 2-D``
    when the replica is a pipeline) and replica count; any other plan gives its variant name
    and None (a reference line).
    """
    from parplan.config.algorithms import algorithm_label, parse_algorithm

    strategy = variant.plan.strategy
    if strategy.kind != "data_parallel":
        return variant.name, None
    algorithm = variant.overrides.get("algorithm")
    label = algorithm_label(parse_algorithm(algorithm) if algorithm else strategy.aggregation.algorithm)
    if strategy.replica is not None:
        label += ", 2-D"
    replicas = int(variant.overrides.get("num_replicas", strategy.num_replicas))
    return label, replicas


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


def sweeps_from_scenario(scenario: ScenarioSpec) -> list[Sweep]:
    """The sweeps a scenario file declares, parsed like command-line ones."""
    return [parse_sweep(f"{s.knob}={','.join(str(v) for v in s.values)}") for s in scenario.sweeps]


def merge_sweeps(first: Iterable[Sweep], second: Iterable[Sweep]) -> list[Sweep]:
    """Sweeps from the scenario overridden knob by knob by those from the command line."""
    merged = {s.knob: s for s in first}
    merged.update({s.knob: s for s in second})
    return list(merged.values())
