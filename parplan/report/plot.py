"""Pictures (the ``plot`` extra): a plan's timeline, and step time against replicas per algorithm.

matplotlib is imported inside the functions, through its object API (``Figure`` and the Agg
canvas, no pyplot and no global backend), so importing this module costs nothing and a missing
matplotlib is a :class:`~parplan.errors.ParplanError` telling the user to install the extra.

- :func:`plot_timeline`: one lane per device; compute tasks as bars coloured by category
  (forward, backward, optimizer, ...) in the upper part of the lane, the transfers a device sends
  in the lower part; the x axis in the unit that suits the step (us, ms, s).
- :func:`plot_scaling`: step time (log) against the number of replicas (log 2) with one line per
  all-reduce algorithm; other plans (local, pipelines, ...) as dashed horizontal references.
  Plans that do not fit in memory are drawn with hollow markers.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parplan.errors import ParplanError

if TYPE_CHECKING:
    from parplan.api.results import PlanResult

MISSING_MESSAGE = (
    "plots need matplotlib, which is not installed; install the plot extra: pip install 'parplan[plot]'"
)
"""The error message when matplotlib is missing."""

MAX_LANES = 64
"""Most device lanes drawn in a timeline; further devices are left out (and the title says so)."""

_DPI = 120


def plotting_available() -> bool:
    """Whether matplotlib can be imported (checked before a long simulation, without importing it)."""
    return importlib.util.find_spec("matplotlib") is not None


def require_matplotlib() -> None:
    """Raise the user-facing error when matplotlib is missing."""
    if not plotting_available():
        raise ParplanError(MISSING_MESSAGE)


def _figure(width_in: float, height_in: float) -> Any:
    require_matplotlib()
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # present but broken
        raise ParplanError(f"{MISSING_MESSAGE} ({exc})") from None
    return Figure(figsize=(width_in, height_in), dpi=_DPI, layout="constrained")


def _save(fig: Any, path: str | Path) -> None:
    """Render to a temporary file next to ``path`` and move it into place (same rule as reports)."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from parplan.report.output import write_atomic

    FigureCanvasAgg(fig)
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=fmt)
    except ValueError as exc:  # unknown format
        raise ParplanError(f"cannot write plot {path}: {exc}") from None
    write_atomic(path, buf.getvalue())


def time_scale(span_s: float) -> tuple[float, str]:
    """A divisor and unit for an axis spanning ``span_s`` seconds.

    >>> time_scale(0.02), time_scale(3.5)
    ((0.001, 'ms'), (1.0, 's'))
    """
    if span_s >= 1:
        return 1.0, "s"
    if span_s >= 1e-3:
        return 1e-3, "ms"
    return 1e-6, "us"


def plot_timeline(result: PlanResult, path: str | Path) -> None:
    """Draw ``result``'s simulated unit as lanes of compute and transfers; write it to ``path``."""
    import numpy as np

    from parplan.taskgraph import COMPUTE, TRANSFER

    g, sim = result.graph, result.sim
    if g is None or sim is None:
        raise ParplanError(f"plan {result.name} has no timeline to plot")
    lanes = list(g.devices[:MAX_LANES])
    scale, unit = time_scale(max(result.step_time_s, 1e-12))
    fig = _figure(11.0, max(2.4, 0.32 * len(lanes) + 1.4))
    ax = fig.add_subplot()
    cmap = _palette(len(g.categories))
    used: dict[str, Any] = {}
    for kind, lo, hi in ((COMPUTE, 0.45, 0.9), (TRANSFER, 0.1, 0.4)):
        mask = (g.kind == kind) & (g.device < len(lanes)) & (sim.end_s > sim.start_s)
        for cat in np.unique(g.category[mask]).tolist():
            sel = mask & (g.category == cat)
            name = g.categories[cat]
            label = name if kind == COMPUTE else f"{name} (sent)"
            colour = cmap[cat % len(cmap)]
            for lane in np.unique(g.device[sel]).tolist():
                on = sel & (g.device == lane)
                starts = sim.start_s[on] / scale
                widths = (sim.end_s[on] - sim.start_s[on]) / scale
                bars = ax.broken_barh(
                    list(zip(starts.tolist(), widths.tolist(), strict=True)),
                    (lane + lo, hi - lo),
                    facecolors=colour,
                    alpha=1.0 if kind == COMPUTE else 0.55,
                    linewidth=0,
                )
                used.setdefault(label, bars)
    ax.set_yticks([i + 0.5 for i in range(len(lanes))], lanes)
    ax.set_ylim(len(lanes), 0)
    ax.set_xlim(0, result.step_time_s / scale)
    ax.set_xlabel(f"time ({unit})")
    more = len(g.devices) - len(lanes)
    extra = f"; {more} more devices not shown" if more > 0 else ""
    ax.set_title(
        f"{result.name}: {result.description}; {result.unit} {_fmt_time(result.step_time_s)}{extra}",
        fontsize=10,
    )
    ax.grid(axis="x", alpha=0.3)
    if used:
        ax.legend(list(used.values()), list(used), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    _save(fig, path)


def _palette(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"] if n <= 10 else colormaps["tab20"]
    return [cmap(i % cmap.N) for i in range(max(n, 1))]


def _fmt_time(value_s: float) -> str:
    from parplan.report.humanize import seconds

    return seconds(value_s)


@dataclass(frozen=True)
class ScalingPoint:
    """One evaluated plan placed on the scaling plot."""

    series: str
    replicas: int | None  # None: a reference line (not data-parallel)
    step_time_s: float
    fits: bool


def plot_scaling(points: Sequence[ScalingPoint], path: str | Path, *, title: str = "") -> None:
    """Step time against replicas, one line per series; reference plans as horizontal lines."""
    if not points:
        raise ParplanError("nothing to plot: no plan was evaluated")
    fig = _figure(8.0, 5.0)
    ax = fig.add_subplot()
    lines: dict[str, list[ScalingPoint]] = {}
    refs: list[ScalingPoint] = []
    for p in points:
        if p.replicas is None:
            refs.append(p)
        else:
            lines.setdefault(p.series, []).append(p)
    colours = _palette(len(lines) + len(refs))
    xs_all: list[int] = []
    for i, (name, pts) in enumerate(lines.items()):
        pts = sorted(pts, key=lambda q: q.replicas or 0)
        xs = [q.replicas or 0 for q in pts]
        xs_all.extend(xs)
        ys = [q.step_time_s for q in pts]
        colour = colours[i]
        ax.plot(xs, ys, "-", color=colour, label=name)
        ax.scatter(
            xs,
            ys,
            color=[colour if q.fits else "none" for q in pts],
            edgecolors=[colour] * len(pts),
            zorder=3,
        )
    for j, ref in enumerate(refs):
        colour = colours[len(lines) + j]
        suffix = "" if ref.fits else " (does not fit)"
        ax.axhline(ref.step_time_s, linestyle="--", color=colour, label=f"{ref.series}{suffix}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    if xs_all:
        ticks = sorted(set(xs_all))
        ax.set_xticks(ticks, [str(t) for t in ticks])
        lo, hi = min(ticks), max(ticks)
        ax.set_xlim(lo / 1.3 if lo > 0 else 0.5, hi * 1.3)
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    from parplan.report.humanize import seconds

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: seconds(v)))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: seconds(v)))
    ax.tick_params(axis="y", which="both", labelsize=8)
    ax.set_xlabel("replicas")
    ax.set_ylabel("step time")
    ax.grid(True, which="both", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if any(not p.fits for p in points if p.replicas is not None):
        handles.append(Line2D([], [], marker="o", linestyle="", markerfacecolor="none", color="grey"))
        labels.append("does not fit in memory")
    ax.legend(handles, labels, fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    _save(fig, path)


def finite_points(points: Sequence[ScalingPoint]) -> list[ScalingPoint]:
    """Points that can go on a log axis."""
    return [p for p in points if p.step_time_s > 0 and math.isfinite(p.step_time_s)]
