"""The HTML report: self-contained, deterministic, escaped; the Gantt bars partition each device's step."""

from __future__ import annotations

import importlib.util
import re
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parplan.api.results import PlanResult
from parplan.api.simulate import Simulation, simulate_scenario
from parplan.errors import ParplanError
from parplan.report import html as html_report
from parplan.report.json_report import scenario_info, simulate_document
from parplan.report.timeline_bars import KINDS, _subtract, _union, busiest_links, device_lanes

SCENARIOS = Path(__file__).resolve().parents[2] / "sample_configs" / "scenarios"
requires_plotly = pytest.mark.skipif(
    importlib.util.find_spec("plotly") is None,
    reason="plotly is not installed, so no page can be built (pip install 'parplan[html]')",
)


@pytest.fixture(scope="module")
def pipeline() -> Simulation:
    return simulate_scenario(SCENARIOS / "pipeline.yaml")


def _page(run: Simulation) -> str:
    spec = run.scenario
    document = simulate_document(
        scenario_info(spec.name, spec.description, "pipeline.yaml"), run.results, failed=run.failed
    )
    return html_report.html_page(document, {r.name: r for r in run.results})


@requires_plotly
def test_page_is_self_contained_and_byte_identical(pipeline: Simulation) -> None:
    page = _page(pipeline)
    assert page == _page(pipeline)
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=", page)  # nothing fetched: plotly.js inlined
    assert "Plotly.newPlot" in page and page.count("<script>") == 2
    for r in pipeline.results:
        assert f"<h2>{r.name}</h2>" in page
    ids = re.findall(r'<div id="(parplan-figure-\d+)"', page)
    assert ids == [f"parplan-figure-{i}" for i in range(1, len(ids) + 1)]
    # a scatter, then per plan a Gantt, a links chart and a memory chart
    assert len(ids) == 1 + 3 * len(pipeline.results)
    assert "short by" in page  # gpipe does not fit: its bound says by how much


@requires_plotly
def test_hostile_names_are_escaped() -> None:
    document = {
        "command": "compare-strategies",
        "tool": "parplan test",
        "scenario": {"name": "<b>x</b>", "description": None, "file": "s.yaml"},
        "plans": [
            {
                "name": "</script><script>alert(1)</script>",
                "rank": 1,
                "fits": True,
                "num_devices": 1,
                "step_time_s": 1.0,
                "samples_per_step": 1.0,
                "peak_memory_bytes": 1.0,
                "memory": [],
            },
            {
                "name": "b",
                "rank": 2,
                "fits": True,
                "num_devices": 2,
                "step_time_s": 2.0,
                "samples_per_step": 1.0,
                "peak_memory_bytes": 0.5,
                "memory": [],
            },
        ],
        "failed": [{"name": "<i>", "error": "<bad>"}],
    }
    page = html_report.html_page(document)
    body = page[page.index("<body>") :]
    assert "<script>alert(1)" not in body and "<b>x</b>" not in body and "<bad>" not in body
    assert body.count("</script>") == 1  # only the page's own figure script ends


def test_missing_plotly_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(html_report, "html_available", lambda: False)
    with pytest.raises(ParplanError, match=r"pip install 'parplan\[html\]'"):
        html_report.html_page({"plans": []})


def test_lanes_partition_every_device_step(pipeline: Simulation) -> None:
    for result in pipeline.results:
        lanes = device_lanes(result)
        assert lanes is not None and lanes.makespan_s == pytest.approx(result.step_time_s)
        for d in range(len(lanes.devices)):
            bars = sorted((s, e) for kind in KINDS for dev, s, e in lanes.bars[kind] if dev == d)
            assert bars[0][0] == 0.0 and bars[-1][1] == pytest.approx(lanes.makespan_s)
            for (_, e1), (s2, _) in pairwise(bars):
                assert s2 == pytest.approx(e1)  # no overlap, no hole
        compute_s = sum(e - s for dev, s, e in lanes.bars["compute"] if dev == 0)
        assert result.sim is not None
        assert compute_s >= float(result.sim.compute_busy_s[0]) * (1 - 1e-9)


def test_busiest_links_are_ranked(pipeline: Simulation) -> None:
    result: PlanResult = pipeline.results[-1]
    links = busiest_links(result, top=5)
    assert 0 < len(links) <= 5
    assert [link.utilisation for link in links] == sorted((link.utilisation for link in links), reverse=True)
    assert result.busiest_link == links[0].name


def test_a_result_without_timeline_has_no_lanes(pipeline: Simulation) -> None:
    from dataclasses import replace

    stripped = replace(pipeline.results[0], work=None, sim=None)
    assert device_lanes(stripped) is None and busiest_links(stripped) == []


intervals = st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), max_size=12)


@given(intervals, intervals)
def test_union_and_subtract_match_a_pixel_model(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    def cells(ivs: list[tuple[float, float]]) -> set[int]:
        return {t for s, e in ivs for t in range(int(s), int(e))}

    def arr(ivs: list[tuple[int, int]], i: int) -> np.ndarray:
        return np.array([iv[i] for iv in ivs], dtype=np.float64)

    ua, ub = _union(arr(a, 0), arr(a, 1), 0.0), _union(arr(b, 0), arr(b, 1), 0.0)
    assert cells(ua) == {t for s, e in a for t in range(s, e)}
    assert all(e1 < s2 for (_, e1), (s2, _) in pairwise(ua))  # disjoint, sorted
    assert cells(_subtract(ua, ub)) == cells(ua) - cells(ub)
