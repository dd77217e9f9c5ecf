"""The ``--json`` documents of ``simulate`` and ``compare-strategies``, and their JSON Schema.

Both commands write one document (schema: ``parplan/report/schema/report-v1.schema.json``,
shipped with the package; :func:`load_schema` reads it)::

    {
      "version": 1,                       # REPORT_VERSION: bumped on any incompatible change
      "tool": "parplan 0.1.0",
      "command": "simulate" | "compare-strategies",
      "scenario": {"name", "description", "file"},
      "overrides": {knob: value},         # simulate: the command-line knobs applied to each plan
      "sweeps": [{"knob", "values"}],     # compare: the sweeps evaluated (scenario + command line)
      "baseline": str | null,             # compare: the plan the speed-ups are measured against
      "baseline_rule": str | null,        # compare: how it was chosen: requested, scenario,
                                          #   first_local or first (no baseline, no local plan)
      "ranking": "time_per_sample",       # compare: what plans are ranked by
      "duplicates": {variant: same_as},   # compare: sweep variants identical to one evaluated
      "plans": [plan, ...],
      "failed": [{"name", "plan", "overrides", "error"}]   # plans that could not be built at all
    }

Each ``plan`` is :meth:`parplan.api.results.PlanResult.to_dict` (``name``, ``strategy``,
``step_time_s``, ``compute_s``, ``exposed_comm_s``, ``throughput_samples_per_s``,
``peak_memory_bytes``, ``fits``, ``bottleneck``, memory per device, collectives, quality, ...)
with ``plan`` (the scenario's plan name) and ``overrides`` added; compare-strategies also adds
``rank`` (1 = fastest per sample; infeasible plans after feasible ones), ``time_per_sample_s``,
``speedup`` (baseline time per sample / this plan's; null without a baseline) and ``pareto``
(on the time-per-sample / peak-memory front). In compare-strategies ``name`` is the variant name,
``plan[knob=value,...]`` for a swept plan. All quantities are SI base units (seconds, bytes,
bytes per second); byte counts (every ``*_bytes`` field) are integers, rounded to the nearest
byte; values that are not finite are written as null. Within version 1 fields may
be added, never removed or renamed.

Identical inputs give identical bytes: keys keep a fixed order, floats are written with
``repr`` precision and nothing depends on the clock or the machine.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parplan.api.compare import Comparison
    from parplan.api.knobs import Sweep
    from parplan.api.ranking import Ranked
    from parplan.api.results import PlanResult
    from parplan.api.variants import Variant

REPORT_VERSION = 1
"""Version of the document layout (the ``version`` field); matches the shipped schema file."""

SCHEMA_RESOURCE = f"report-v{REPORT_VERSION}.schema.json"
"""File name of the JSON Schema inside :mod:`parplan.report.schema`."""


def tool_name() -> str:
    """``parplan <version>`` for the ``tool`` field."""
    from parplan import __version__

    return f"parplan {__version__}"


def scenario_info(name: str, description: str | None, file: str | None) -> dict[str, Any]:
    """The ``scenario`` object."""
    return {"name": name, "description": description, "file": file}


def plan_entry(
    result: PlanResult, *, plan: str, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """One plan's figures with its scenario plan name and the overrides applied to it."""
    entry = result.to_dict()
    entry["plan"] = plan
    entry["overrides"] = dict(overrides or {})
    return entry


def failed_entry(name: str, plan: str, overrides: Mapping[str, Any] | None, error: str) -> dict[str, Any]:
    """A plan that could not be built: why."""
    return {"name": name, "plan": plan, "overrides": dict(overrides or {}), "error": error}


def simulate_document(
    scenario: Mapping[str, Any],
    results: Sequence[PlanResult],
    *,
    overrides: Mapping[str, Any] | None = None,
    failed: Iterable[tuple[str, str]] = (),
) -> dict[str, Any]:
    """The ``simulate --json`` document; ``failed`` holds (plan name, error) pairs."""
    return {
        "version": REPORT_VERSION,
        "tool": tool_name(),
        "command": "simulate",
        "scenario": dict(scenario),
        "overrides": dict(overrides or {}),
        "plans": [plan_entry(r, plan=r.name, overrides=overrides) for r in results],
        "failed": [failed_entry(name, name, overrides, error) for name, error in failed],
    }


def comparison_document(comparison: Comparison) -> dict[str, Any]:
    """:func:`compare_document` of a whole :class:`~parplan.api.compare.Comparison`, as
    ``compare-strategies --json`` writes it."""
    spec = comparison.scenario
    return compare_document(
        scenario_info(spec.name, spec.description, comparison.scenario_file),
        comparison.variants,
        comparison.ranked,
        comparison.failed,
        sweeps=comparison.sweeps,
        baseline=comparison.baseline,
        duplicates=comparison.duplicates,
        baseline_rule=comparison.baseline_rule,
    )


def compare_document(
    scenario: Mapping[str, Any],
    variants: Sequence[Variant],
    ranked: Sequence[Ranked],
    failed: Iterable[tuple[str, str]],
    *,
    sweeps: Sequence[Sweep],
    baseline: str | None,
    duplicates: Mapping[str, str] | None = None,
    baseline_rule: str | None = None,
) -> dict[str, Any]:
    """The ``compare-strategies --json`` document: every variant, in rank order.

    ``duplicates`` maps sweep variants that were not evaluated to the identical variant that was.
    """
    by_name = {v.name: v for v in variants}
    plans = []
    for r in ranked:
        variant = by_name[r.variant_name]
        entry = plan_entry(r.result, plan=variant.plan.name, overrides=variant.overrides)
        entry["name"] = r.variant_name
        entry["rank"] = r.rank
        entry["time_per_sample_s"] = r.time_per_sample_s
        entry["speedup"] = r.speedup
        entry["pareto"] = r.pareto
        plans.append(entry)
    return {
        "version": REPORT_VERSION,
        "tool": tool_name(),
        "command": "compare-strategies",
        "scenario": dict(scenario),
        "sweeps": [{"knob": s.knob, "values": list(s.values)} for s in sweeps],
        "baseline": baseline,
        "baseline_rule": baseline_rule,
        "ranking": "time_per_sample",
        "duplicates": dict(duplicates or {}),
        "plans": plans,
        "failed": [
            failed_entry(name, by_name[name].plan.name, by_name[name].overrides, error)
            for name, error in failed
        ],
    }


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (inf, nan) replaced by None, recursively.

    >>> finite({"a": [1.0, float("inf")], "b": float("nan")})
    {'a': [1.0, None], 'b': None}
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def whole_bytes(value: Any) -> Any:
    """``value`` with every finite number under a ``*_bytes`` key made an integer (rounded to the
    nearest byte), recursively: a count of bytes is whole, ``4194304`` and not ``4194304.0``.

    >>> whole_bytes({"size_bytes": 4194304.0, "time_s": 1.5, "m": [{"total_bytes": 9.6}]})
    {'size_bytes': 4194304, 'time_s': 1.5, 'm': [{'total_bytes': 10}]}
    """
    if isinstance(value, Mapping):
        return {k: _whole(v) if str(k).endswith("_bytes") else whole_bytes(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [whole_bytes(v) for v in value]
    return value


def _whole(value: Any) -> Any:
    if isinstance(value, float) and math.isfinite(value):
        return round(value)
    return whole_bytes(value)


def dumps(document: Mapping[str, Any]) -> str:
    """The document as deterministic, indented JSON text ending in a newline (byte counts whole,
    non-finite values null)."""
    return json.dumps(finite(whole_bytes(document)), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


SEARCH_SCHEMA_RESOURCE = f"search-v{REPORT_VERSION}.schema.json"
"""File name of the ``search --json`` document's JSON Schema (it refers to this one's plan objects
by a reference relative to its own file: ``report-v1.schema.json#/$defs/plan``)."""


@cache
def load_schema(resource: str = SCHEMA_RESOURCE) -> dict[str, Any]:
    """A shipped JSON Schema (draft 2020-12): the simulate / compare-strategies document's, or
    :data:`SEARCH_SCHEMA_RESOURCE` for search's."""
    text = resources.files("parplan.report.schema").joinpath(resource).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema
