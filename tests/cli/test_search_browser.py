"""``parplan search --html``'s page opened in headless Chromium: every figure renders, the console
stays silent, and a screenshot is saved (to ``$PARPLAN_SCREENSHOTS`` when set)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from typer.testing import CliRunner

from parplan.cli.app import app
from tests.api.search.test_run import SMALL, small_scenario
from tests.report.test_html_browser import _chromium, pytestmark  # noqa: F401 (the same skips)


def test_search_page_renders_in_chromium_without_console_errors(tmp_path: Path) -> None:
    page = tmp_path / "search.html"
    result = CliRunner().invoke(app, ["search", str(small_scenario(tmp_path, SMALL)), "--html", str(page)])
    assert result.exit_code == 0, result.output
    figures = len(re.findall(r'<div id="parplan-figure-\d+"', page.read_text(encoding="utf-8")))

    dom = _chromium(page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], "\n".join(console)
    rendered = re.findall(r'id="parplan-figure-\d+" class="figure js-plotly-plot"', dom.stdout)
    assert figures > 2 and len(rendered) == figures

    shots = Path(os.environ.get("PARPLAN_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    png = shots / "html-report-search.png"
    shot = _chromium(page, f"--screenshot={png}")
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
