"""``parplan validate``'s training rows: step times and throughputs against simulated plans."""

from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from parplan.api.accuracy import load_manifest, run_validation
from parplan.api.evaluate import build_context, evaluate_plan, select_plans
from parplan.api.kinds import load_expected
from parplan.api.training_accuracy import TrainingResult, TrainingRowSpec, TrainingStats, measured_step_s
from parplan.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
VALIDATION = ROOT / "validation"
QUICKSTART = ROOT / "sample_configs" / "scenarios" / "quickstart.yaml"

TABLE = f"""
[[tables]]
name = "ring4"
system = "HGX H100 box"
csv = "{VALIDATION / "nccl-tests" / "h100x4-nvswitch-algo-ring.csv"}"
cluster = "{VALIDATION / "clusters" / "hgx-h100-8gpu.yaml"}"
ranks = 4
nccl_algo = "Ring"
"""


def quickstart_step_s(plan: str) -> float:
    scenario = load_expected(QUICKSTART, "scenario", command="test")
    (spec,) = select_plans(scenario, [plan])
    return evaluate_plan(build_context(scenario), spec).step_time_s


def write(tmp_path: Path, training: str) -> Path:
    path = tmp_path / "manifest.toml"
    path.write_text(textwrap.dedent(TABLE) + textwrap.dedent(training))
    return path


def row(**fields: object) -> TrainingRowSpec:
    base: dict[str, object] = {"name": "r", "system": "s", "scenario": "x.yaml", "value": 1.0}
    base["source"] = "src"
    return TrainingRowSpec.model_validate(base | fields)


def test_a_row_is_predicted_as_simulate_predicts_its_plan(tmp_path: Path) -> None:
    step = quickstart_step_s("dp-ring")
    manifest = write(
        tmp_path,
        f"""
        [training_thresholds]
        median_pct = 30
        [[training]]
        name = "quick"
        system = "workstations"
        scenario = "{QUICKSTART}"
        plan = "dp-ring"
        value = {step * 1.25!r}
        source = "a test"
        [[training]]
        name = "fp8"
        system = "workstations"
        value = 1.0
        source = "a test"
        excluded = "Float8"
        """,
    )
    report = run_validation(manifest, tables=["quick", "fp8"])
    assert report.tables == ()
    quick, fp8 = report.training
    assert quick.predicted_step_s == pytest.approx(step)
    assert quick.error_pct == pytest.approx(-20.0)
    assert quick.devices == 4 and quick.fits
    assert fp8.error_pct is None and fp8.spec.excluded == "Float8"
    assert report.training_stats == TrainingStats(1, pytest.approx(20.0), pytest.approx(20.0))
    assert report.passed

    tight = tmp_path / "tight"
    tight.mkdir()
    text = manifest.read_text().replace("median_pct = 30", "median_pct = 5")
    (tight / "manifest.toml").write_text(text)
    report = run_validation(tight / "manifest.toml", tables=["quick"])
    assert [(c.band, c.statistic) for c in report.failures] == [("training", "median")]


def test_a_throughput_becomes_a_step_time() -> None:
    scenario = load_expected(QUICKSTART, "scenario", command="test")
    ctx = build_context(scenario)
    spec = row(measured="tokens_per_s_per_gpu", value=1000.0)
    with pytest.raises(ConfigError, match="sequence length"):
        measured_step_s(spec, ctx, 4)
    with_sequence = replace(ctx, training=scenario.training.model_copy(update={"sequence_length": 2048}))
    # 512 samples x 2048 tokens over 4 GPUs at 1000 tokens/s each
    assert measured_step_s(spec, with_sequence, 4) == pytest.approx(512 * 2048 / 4000)
    assert measured_step_s(row(value=3.5), ctx, 4) == 3.5


def test_rows_need_a_scenario_unless_excluded_and_unique_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs the scenario"):
        row(scenario=None)
    assert row(scenario=None, excluded="why").excluded == "why"
    manifest = write(
        tmp_path,
        """
        [[training]]
        name = "ring4"
        system = "s"
        value = 1.0
        source = "src"
        excluded = "why"
        """,
    )
    with pytest.raises(ConfigError, match="used twice"):
        load_manifest(manifest)


def test_an_unknown_plan_names_the_row(tmp_path: Path) -> None:
    manifest = write(
        tmp_path,
        f"""
        [[training]]
        name = "quick"
        system = "s"
        scenario = "{QUICKSTART}"
        plan = "nope"
        value = 1.0
        source = "src"
        """,
    )
    with pytest.raises(ConfigError, match=r"training row 'quick'.*unknown plan 'nope'"):
        run_validation(manifest, tables=["quick"])


def test_statistics_skip_rows_without_an_error() -> None:
    def result(measured: float | None, predicted: float | None) -> TrainingResult:
        return TrainingResult(row(), 1, measured, predicted, None, None, None, None)

    stats = TrainingStats.of([result(10.0, 11.0), result(10.0, 7.0), result(None, None)])
    assert stats.count == 2
    assert stats.median_pct == pytest.approx(20.0) and stats.max_pct == pytest.approx(30.0)
    assert TrainingStats.of([]) == TrainingStats(0, None, None)
