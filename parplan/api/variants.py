"""Variants of a scenario's plans: every plan crossed with the sweeps that apply to it, identical
variants dropped, and where each goes on a scaling plot.

A sweep is a knob and its values (``algorithm=ring,tree:2``); several sweeps form their cartesian
product, applied to every plan whose strategy has that knob (a plan without it is evaluated once,
as it is). Variants are named ``plan[knob=value,...]``. The sweeps of a scenario file and of the
command line merge knob by knob, the command line winning.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from parplan.api.knobs import Sweep, applies, apply_overrides, parse_sweep
from parplan.errors import ParplanError

if TYPE_CHECKING:
    from parplan.config.scenario import PlanSpec, ScenarioSpec


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


def expand_variants(plans: Sequence[PlanSpec], sweeps: Sequence[Sweep]) -> list[Variant]:
    """Every plan crossed with the sweeps that apply to it, in a stable order, without duplicates."""
    out: list[Variant] = []
    for plan in plans:
        applicable = [s for s in sweeps if applies(s.knob, plan)]
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


def sweeps_from_scenario(scenario: ScenarioSpec) -> list[Sweep]:
    """The sweeps a scenario file declares, parsed like command-line ones."""
    return [parse_sweep(f"{s.knob}={','.join(str(v) for v in s.values)}", "sweeps") for s in scenario.sweeps]


def merge_sweeps(first: Iterable[Sweep], second: Iterable[Sweep]) -> list[Sweep]:
    """Sweeps from the scenario overridden knob by knob by those from the command line."""
    merged = {s.knob: s for s in first}
    merged.update({s.knob: s for s in second})
    return list(merged.values())


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
