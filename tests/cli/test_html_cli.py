"""``--html FILE`` on simulate and compare-strategies, and the --backend/--address usage checks."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parplan.cli.app import app
from parplan.report import html as html_report

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "sample_configs" / "scenarios" / "quickstart.yaml")
runner = CliRunner()
requires_plotly = pytest.mark.skipif(
    importlib.util.find_spec("plotly") is None,
    reason="plotly is not installed, so no page can be built (pip install 'parplan[html]')",
)


@requires_plotly
@pytest.mark.parametrize("command", ["simulate", "compare-strategies"])
def test_html_writes_one_page(command: str, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = runner.invoke(app, [command, QUICKSTART, "--html", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "dp-ring" in page
    assert f"wrote HTML report {out}" in result.output
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # written atomically, no leftovers
    again = tmp_path / "again.html"
    runner.invoke(app, [command, QUICKSTART, "--html", str(again)])
    assert again.read_bytes() == out.read_bytes()


def test_html_needs_a_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", QUICKSTART, "--html", "-"])
    assert result.exit_code == 2
    assert "--html needs a file name" in result.output


def test_missing_plotly_fails_before_any_work(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(html_report, "html_available", lambda: False)
    out = tmp_path / "r.html"
    result = runner.invoke(app, ["compare-strategies", QUICKSTART, "--html", str(out)])
    assert result.exit_code == 1
    assert "pip install 'parplan[html]'" in result.output
    assert "dp-ring" not in result.output and not out.exists()


def test_address_needs_the_ray_backend() -> None:
    result = runner.invoke(app, ["compare-strategies", QUICKSTART, "--address", "127.0.0.1:1"])
    assert result.exit_code == 2
    assert "add --backend ray" in result.output


def test_unknown_backend_is_a_usage_error() -> None:
    result = runner.invoke(app, ["compare-strategies", QUICKSTART, "--backend", "dask"])
    assert result.exit_code == 2
