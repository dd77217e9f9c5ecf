"""Pictures: a timeline per plan and the scaling plot; a clear error without matplotlib."""

from __future__ import annotations

import importlib.util
import itertools
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
    with pytest.raises(ParplanError, match="cannot write plot") as err:
        plot.plot_timeline(quickstart_results[0], tmp_path / "t.xyz")
    assert str(err.value).endswith("(PNG, SVG, PDF)")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["x.bmp", "x.jpg", "x.eps", "x.xyz"])
def test_plot_format_is_checked_before_any_drawing(name: str) -> None:
    with pytest.raises(ParplanError, match=r"not a picture format parplan writes \(PNG, SVG, PDF\)"):
        plot.plot_format(name)
    assert plot.plot_format("x.PDF") == "pdf"


def test_each_phase_has_one_colour_in_every_plot() -> None:
    colours = {name: plot.phase_colour(name) for name in plot.PHASE_COLOURS}
    assert len(set(colours.values())) == len(colours)
    assert plot.phase_colour("backward") == "#ff7f0e"
    assert plot.phase_colour("my_plugin_phase") == plot.phase_colour("my_plugin_phase")


@needs_matplotlib
def test_backward_is_the_same_colour_whatever_the_plan(
    tmp_path: Path, quickstart_results: list[PlanResult], pipeline_results: list[PlanResult]
) -> None:
    # The plans number their task categories differently; the colour must follow the name.
    for i, result in enumerate([quickstart_results[1], *pipeline_results[:2]]):
        target = tmp_path / f"t{i}.svg"
        plot.plot_timeline(result, target)
        assert "#ff7f0e" in target.read_text()


@pytest.mark.parametrize(
    ("values", "top"),
    [([0.00037, 1.8], 2.0), ([0.3, 0.45, 1.5], 2.0), ([2.5, 30.0], 50.0), ([1e-5, 2e-3], 2e-3)],
)
def test_log_time_axis_labels_a_tick_above_every_value(values: list[float], top: float) -> None:
    ticks = plot.log_time_ticks(values)
    assert ticks[-1] == pytest.approx(top)
    assert ticks[0] <= min(values)
    assert all(b > a for a, b in itertools.pairwise(ticks))


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
