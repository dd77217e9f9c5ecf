"""The HTML report opened in headless Chromium (Debian's ``chromium``): every figure renders, the
console stays silent, and a screenshot is saved (to ``$PARPLAN_SCREENSHOTS`` when set, else the
test's temporary directory)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from parplan.api.compare import compare_scenario
from parplan.api.simulate import simulate_scenario
from parplan.report.html import html_page
from parplan.report.json_report import comparison_document, scenario_info, simulate_document

SCENARIOS = Path(__file__).resolve().parents[2] / "sample_configs" / "scenarios"
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None, reason="no headless Chromium on this machine (Debian: apt-get install chromium)"
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("plotly") is None,
        reason="plotly is not installed, so no page can be built (pip install 'parplan[html]')",
    ),
]


def _chromium(page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    cmd += ["--enable-logging=stderr", "--v=0", "--window-size=1280,2400", *args, page.as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)


def _simulate_page() -> str:
    run = simulate_scenario(SCENARIOS / "pipeline.yaml")
    info = scenario_info(run.scenario.name, run.scenario.description, "pipeline.yaml")
    return html_page(
        simulate_document(info, run.results, failed=run.failed), {r.name: r for r in run.results}
    )


def _compare_page() -> str:
    c = compare_scenario(SCENARIOS / "quickstart.yaml", sweeps=["num_replicas=2,4"])
    return html_page(comparison_document(c), {r.variant_name: r.result for r in c.ranked})


@pytest.mark.parametrize("name", ["simulate", "compare"])
def test_page_renders_in_chromium_without_console_errors(name: str, tmp_path: Path) -> None:
    page = tmp_path / f"{name}.html"
    page.write_text(_simulate_page() if name == "simulate" else _compare_page(), encoding="utf-8")
    figures = len(re.findall(r'<div id="parplan-figure-\d+"', page.read_text(encoding="utf-8")))

    dom = _chromium(page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], "\n".join(console)
    rendered = re.findall(r'id="parplan-figure-\d+" class="figure js-plotly-plot"', dom.stdout)
    assert figures > 0 and len(rendered) == figures  # plotly drew every figure
    assert dom.stdout.count('class="main-svg"') >= figures

    shots = Path(os.environ.get("PARPLAN_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    png = shots / f"html-report-{name}.png"
    shot = _chromium(page, f"--screenshot={png}")
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
