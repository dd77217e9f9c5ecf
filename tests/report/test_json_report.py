"""The --json documents: valid against the shipped schema, deterministic, finite."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from parplan.api.evaluate import build_context, evaluate_plan
from parplan.api.knobs import Sweep, parse_sweep
from parplan.api.ranking import rank_results
from parplan.api.results import PlanResult
from parplan.api.variants import dedupe_variants, expand_variants
from parplan.config.scenario import ScenarioSpec
from parplan.report.json_report import (
    REPORT_VERSION,
    SCHEMA_RESOURCE,
    compare_document,
    dumps,
    finite,
    load_schema,
    scenario_info,
    simulate_document,
)

ROOT = Path(__file__).resolve().parents[2]


def validate(document: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(load_schema()).validate(json.loads(dumps(document)))


def test_schema_is_valid_draft_2020_12_and_shipped() -> None:
    schema = load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["version"]["const"] == REPORT_VERSION
    path = ROOT / "parplan" / "report" / "schema" / SCHEMA_RESOURCE
    assert path.is_file()
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "report/schema/*.json" in package_data["parplan"]


def test_simulate_document_validates(quickstart: ScenarioSpec, quickstart_results: list[PlanResult]) -> None:
    doc = simulate_document(
        scenario_info(quickstart.name, quickstart.description, "quickstart.yaml"),
        quickstart_results,
        overrides={},
        failed=[("broken", "num_replicas (8) exceeds the cluster's 4 devices")],
    )
    validate(doc)
    assert doc["version"] == 1 and doc["tool"].startswith("parplan ")
    assert [p["name"] for p in doc["plans"]] == [r.name for r in quickstart_results]
    first = doc["plans"][0]
    for key in (
        "name",
        "strategy",
        "step_time_s",
        "compute_s",
        "exposed_comm_s",
        "throughput_samples_per_s",
        "peak_memory_bytes",
        "fits",
        "bottleneck",
    ):
        assert key in first
    assert doc["failed"] == [
        {
            "name": "broken",
            "plan": "broken",
            "overrides": {},
            "error": "num_replicas (8) exceeds the cluster's 4 devices",
        }
    ]


def test_pipeline_and_federated_documents_validate(
    pipeline_results: list[PlanResult], federated_results: list[PlanResult]
) -> None:
    for results in (pipeline_results, federated_results):
        doc = simulate_document(scenario_info("x", None, None), results)
        validate(doc)
    gpipe = next(
        p
        for p in simulate_document(scenario_info("x", None, None), pipeline_results)["plans"]
        if p["name"] == "gpipe"
    )
    assert gpipe["fits"] is False and "memory" in gpipe["infeasible_reason"]


def test_schema_rejects_a_plan_without_required_fields(quickstart_results: list[PlanResult]) -> None:
    doc = json.loads(dumps(simulate_document(scenario_info("x", None, None), quickstart_results)))
    del doc["plans"][0]["step_time_s"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, load_schema())
    doc = json.loads(dumps(simulate_document(scenario_info("x", None, None), quickstart_results)))
    doc["version"] = 2
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, load_schema())


def test_compare_document_validates_and_requires_ranking_fields(quickstart: ScenarioSpec) -> None:
    sweeps = [parse_sweep("num_replicas=2,4"), Sweep("algorithm", ("ring", "tree:2"))]
    variants, duplicates = dedupe_variants(expand_variants(quickstart.plans, sweeps))
    ctx = build_context(quickstart)
    results: list[PlanResult | str] = [
        evaluate_plan(ctx, v.plan, overrides=v.overrides or None) for v in variants
    ]
    ranked, failed = rank_results(variants, results, baseline="local")
    doc = compare_document(
        scenario_info("q", None, None),
        variants,
        ranked,
        failed,
        sweeps=sweeps,
        baseline="local",
        duplicates=duplicates,
    )
    validate(doc)
    assert [p["rank"] for p in doc["plans"]] == list(range(1, len(ranked) + 1))
    assert doc["duplicates"] and all(v in {x.name for x in variants} for v in doc["duplicates"].values())
    local = next(p for p in doc["plans"] if p["name"] == "local")
    assert local["speedup"] == 1.0 and local["overrides"] == {}
    swept = next(p for p in doc["plans"] if p["overrides"])
    assert swept["name"].startswith(swept["plan"] + "[")
    broken = json.loads(dumps(doc))
    del broken["plans"][0]["rank"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, load_schema())


def test_dumps_is_deterministic(quickstart: ScenarioSpec) -> None:
    from parplan.api.evaluate import evaluate_scenario

    a = dumps(simulate_document(scenario_info("q", None, "f"), evaluate_scenario(quickstart)))
    b = dumps(simulate_document(scenario_info("q", None, "f"), evaluate_scenario(quickstart)))
    assert a == b and a.endswith("\n")


def test_finite_replaces_non_finite_numbers() -> None:
    doc = {"a": math.inf, "b": [1.5, -math.inf, math.nan], "c": {"d": (2.0, "x")}, "e": True}
    assert finite(doc) == {"a": None, "b": [1.5, None, None], "c": {"d": [2.0, "x"]}, "e": True}
    assert json.loads(dumps(doc))["a"] is None
