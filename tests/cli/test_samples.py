"""Every sample scenario runs through ``simulate`` and ``compare-strategies`` (sample files are test data)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from parplan.cli.app import app
from parplan.report.json_report import load_schema

SCENARIOS = sorted(
    p
    for p in (Path(__file__).resolve().parents[2] / "sample_configs" / "scenarios").iterdir()
    if p.suffix in {".yaml", ".yml", ".toml", ".json"}
)
runner = CliRunner()
EXPONENT = re.compile(r"\d[eE][+-]?\d")
"""``1.21389e+06``: never in a table a person reads."""


def test_there_are_samples() -> None:
    assert len(SCENARIOS) >= 5
    assert "quickstart.yaml" in {p.name for p in SCENARIOS}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.stem)
def test_simulate_sample(scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["simulate", str(scenario), "--json", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, load_schema())
    assert doc["failed"] == []
    names = [p["name"] for p in doc["plans"]]
    assert names and len(names) == len(set(names))
    for plan in doc["plans"]:
        assert f"\n{plan['name']} " in result.stdout  # in the summary table
        assert plan["step_time_s"] > 0
        assert plan["compute_s"] + plan["exposed_comm_s"] + plan["idle_s"] == pytest.approx(
            plan["step_time_s"]
        )
        assert plan["bottleneck"]
    assert result.stdout.count("bound by") == len(names)
    assert not EXPONENT.search(result.stdout)  # human numbers everywhere
    assert all(line == line.rstrip() for line in result.stdout.splitlines())  # no trailing spaces


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.stem)
def test_compare_sample(scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    result = runner.invoke(app, ["compare-strategies", str(scenario), "--json", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, load_schema())
    ranks = [p["rank"] for p in doc["plans"]]
    assert ranks == list(range(1, len(ranks) + 1))
    assert any(p["pareto"] for p in doc["plans"])
    feasible = [p["time_per_sample_s"] for p in doc["plans"] if p["fits"]]
    assert feasible == sorted(feasible)
    if doc["baseline"] is not None:
        assert next(p for p in doc["plans"] if p["name"] == doc["baseline"])["speedup"] == 1.0
    for plan in doc["plans"]:
        assert plan["name"] in result.stdout
    assert not EXPONENT.search(result.stdout)
    assert all(line == line.rstrip() for line in result.stdout.splitlines())
