"""``parplan simulate`` and ``compare-strategies`` with sharded plans: MFU shown, --analytic."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from parplan.cli.app import app
from parplan.report.json_report import load_schema

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

SCENARIO = """\
name: sharded-cli
cluster: {root}/sample_configs/clusters/dgx-a100-2nodes.yaml
model: {root}/sample_configs/models/gpt-1.3b.yaml
training:
  global_batch_size: 32
plans:
  - name: tp4-pp2
    strategy: {{kind: sharded, tp: 4, pp: 2, sequence_parallel: true, zero: 1, recompute: selective}}
  - name: fsdp
    strategy: {{kind: sharded, fsdp: full_shard}}
"""


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("sharded") / "scenario.yaml"
    path.write_text(SCENARIO.format(root=ROOT))
    return str(path)


def test_simulate_prints_mfu_and_the_mesh(scenario: str) -> None:
    result = runner.invoke(app, ["simulate", scenario, "-p", "tp4-pp2"])
    assert result.exit_code == 0, result.output
    assert "model FLOPs utilisation" in result.stdout
    assert "hardware FLOPs with recomputation" in result.stdout
    assert "dp 2 x tp 4 x pp 2 x cp 1" in result.stdout
    assert "sharded dp? x tp4 x pp2 (1f1b), SP, ZeRO-1, recompute selective" in result.stdout


def test_simulate_json_carries_mfu_and_meets_the_schema(scenario: str) -> None:
    result = runner.invoke(app, ["simulate", scenario, "--json", "-"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, load_schema())
    for plan in doc["plans"]:
        assert 0 < plan["quality"]["mfu"] < 1
        assert plan["quality"]["model_tflops_per_gpu"] > 0


def test_analytic_path_is_close_to_the_simulation(scenario: str) -> None:
    steps = {}
    for extra in ([], ["--analytic"]):
        result = runner.invoke(app, ["simulate", scenario, "-p", "tp4-pp2", "--json", "-", *extra])
        assert result.exit_code == 0, result.output
        steps[bool(extra)] = json.loads(result.stdout)["plans"][0]["step_time_s"]
    assert steps[True] == pytest.approx(steps[False], rel=0.15)
    result = runner.invoke(app, ["simulate", scenario, "--analytic"])
    assert "closed-form evaluation" in result.stdout


def test_analytic_has_no_timeline(scenario: str, tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", scenario, "--analytic", "--trace", str(tmp_path / "t.json")])
    assert result.exit_code == 2
    assert "a timeline needs a simulation" in result.output


def test_compare_sweeps_sharded_knobs_with_an_mfu_column(scenario: str) -> None:
    result = runner.invoke(app, ["compare-strategies", scenario, "--analytic", "--sweep", "tp=2,4"])
    assert result.exit_code == 0, result.output
    assert "MFU" in result.stdout
    assert "tp4-pp2[tp=2]" in result.stdout and "fsdp[tp=4]" in result.stdout


def test_validate_config_places_a_sharded_plan_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    text = SCENARIO.format(root=ROOT).replace("tp: 4, pp: 2", "tp: 3, pp: 2")
    path.write_text(text)
    result = runner.invoke(app, ["validate-config", str(path)])
    assert result.exit_code == 1
    assert (
        "plans[0].strategy.dp: 16 devices are not a multiple of tp x pp x cp = 3 x 2 x 1 = 6" in result.stdout
    )
