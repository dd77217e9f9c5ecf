"""Pictures: a timeline per plan and the scaling plot; a clear error without matplotlib."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from parplan.api.results import PlanResult
from parplan.errors import ParplanError
from parplan.report import plot

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
needs_matplotlib = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None, reason="matplotlib (the plot extra) is not installed"
)


@needs_matplotlib
def test_timeline_png(tmp_path: Path, pipeline_results: list[PlanResult]) -> None:
    target = tmp_path / "timeline.png"
    plot.plot_timeline(next(r for r in pipeline_results if r.name == "dp4-x-pp4"), target)
    data = target.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000
    assert [p.name for p in tmp_path.iterdir()] == ["timeline.png"]


@needs_matplotlib
def test_timeline_svg_by_suffix(tmp_path: Path, quickstart_results: list[PlanResult]) -> None:
    target = tmp_path / "t.svg"
    plot.plot_timeline(quickstart_results[1], target)
    assert target.read_text().lstrip().startswith("<?xml")


@needs_matplotlib
def test_unknown_picture_format_is_an_error(tmp_path: Path, quickstart_results: list[PlanResult]) -> None:
    with pytest.raises(ParplanError, match="cannot write plot"):
        plot.plot_timeline(quickstart_results[0], tmp_path / "t.xyz")


@needs_matplotlib
def test_scaling_png(tmp_path: Path) -> None:
    points = [
        plot.ScalingPoint("ring", 2, 0.3, True),
        plot.ScalingPoint("ring", 4, 0.45, True),
        plot.ScalingPoint("tree:2", 2, 0.6, True),
        plot.ScalingPoint("tree:2", 4, 1.5, False),
        plot.ScalingPoint("local", None, 0.0004, True),
    ]
    target = tmp_path / "scaling.png"
    plot.plot_scaling(points, target, title="t")
    assert target.read_bytes().startswith(PNG_MAGIC)


def test_nothing_to_plot_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ParplanError, match="nothing to plot"):
        plot.plot_scaling([], tmp_path / "x.png")


def test_missing_matplotlib_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a)
    )
    assert not plot.plotting_available()
    with pytest.raises(ParplanError, match=r"pip install 'parplan\[plot\]'"):
        plot.require_matplotlib()


def test_time_scale_and_finite_points() -> None:
    assert plot.time_scale(5e-5) == (1e-6, "us")
    pts = [
        plot.ScalingPoint("a", 1, 0.0, True),
        plot.ScalingPoint("a", 2, float("inf"), True),
        plot.ScalingPoint("a", 4, 1.0, True),
    ]
    assert plot.finite_points(pts) == [pts[2]]
