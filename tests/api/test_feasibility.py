"""Memory-fit warnings for validate-config: reported with figures, at the plan, as warnings."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from parplan.api.validate_config import memory_issues
from parplan.cli.app import app

SAMPLES = Path(__file__).resolve().parents[2] / "sample_configs" / "scenarios"


def test_gpipe_plan_that_does_not_fit_is_a_warning_with_figures() -> None:
    issues = memory_issues(SAMPLES / "pipeline.yaml")
    assert [i.field for i in issues] == ["plans[0]"]
    (issue,) = issues
    assert issue.severity == "warning"
    assert issue.line > 0
    assert "plan 'gpipe' does not fit in device memory" in issue.message
    assert "of 80 GiB (short by" in issue.message


def test_plans_that_fit_give_no_issue() -> None:
    assert memory_issues(SAMPLES / "dp-algorithms.yaml") == []


def test_validate_config_shows_the_warning_and_still_passes() -> None:
    args = ["validate-config", str(SAMPLES / "pipeline.yaml")]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "warning: plan 'gpipe' does not fit in device memory" in result.output
