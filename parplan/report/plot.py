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

PLOT_FORMATS = ("png", "svg", "pdf")
"""The picture formats parplan writes, chosen by the file's suffix."""

PHASE_COLOURS: dict[str, str] = {
    "forward": "#1f77b4",
    "backward": "#ff7f0e",
    "optimizer": "#2ca02c",
    "allreduce": "#d62728",
    "activation": "#9467bd",
    "activation_grad": "#8c564b",
    "push": "#e377c2",
    "pull": "#7f7f7f",
    "aggregate": "#bcbd22",
    "download": "#17becf",
    "upload": "#aec7e8",
    "evaluate": "#ffbb78",
    "exploit": "#98df8a",
}
"""One colour per phase (task category) in every plot, so backward is the same orange everywhere;
categories not listed (a plugin's own) get a colour from their name, the same in every plot."""

_EXTRA_COLOURS = ("#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5", "#ff9896", "#393b79", "#637939")

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


def plot_format(path: str | Path) -> str:
    """The picture format of ``path`` from its suffix (no suffix: PNG); raises a
    :class:`ParplanError` naming the formats parplan writes for any other suffix, so a command can
    check its ``--plot`` file before any work.

    >>> plot_format("step.SVG"), plot_format("step")
    ('svg', 'png')
    """
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    if fmt not in PLOT_FORMATS:
        names = ", ".join(f.upper() for f in PLOT_FORMATS)
        raise ParplanError(
            f"cannot write plot {path}: .{fmt} is not a picture format parplan writes ({names})"
        )
    return fmt


def phase_colour(category: str) -> str:
    """The colour of a phase (task category) in every plot: :data:`PHASE_COLOURS`, or for another
    name one of a few spare colours picked by a stable hash of the name.

    >>> phase_colour("backward"), phase_colour("backward") == phase_colour("backward")
    ('#ff7f0e', True)
    """
    if category in PHASE_COLOURS:
        return PHASE_COLOURS[category]
    import zlib

    return _EXTRA_COLOURS[zlib.crc32(category.encode()) % len(_EXTRA_COLOURS)]


def _save(fig: Any, path: str | Path) -> None:
    """Render to a temporary file next to ``path`` and move it into place (same rule as reports)."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from parplan.report.output import write_atomic

    fmt = plot_format(path)
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt)
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
    used: dict[str, Any] = {}
    for kind, lo, hi in ((COMPUTE, 0.45, 0.9), (TRANSFER, 0.1, 0.4)):
        mask = (g.kind == kind) & (g.device < len(lanes)) & (sim.end_s > sim.start_s)
        for cat in np.unique(g.category[mask]).tolist():
            sel = mask & (g.category == cat)
            name = g.categories[cat]
            label = name if kind == COMPUTE else f"{name} (sent)"
            colour = phase_colour(name)
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

    _log_time_axis(ax, [p.step_time_s for p in points])
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


def log_time_ticks(values_s: Sequence[float]) -> list[float]:
    """Labelled ticks of a log time axis covering ``values_s``: 1-2-5 steps per decade (only the
    powers of ten past four decades), from the last tick at or below the smallest value to the
    first at or above the largest, so the largest value always has a labelled tick above it.

    >>> log_time_ticks([0.00037, 1.8])[-3:], len(log_time_ticks([1e-6, 10.0]))
    ([0.5, 1.0, 2.0], 8)
    """
    positive = [v for v in values_s if v > 0 and math.isfinite(v)]
    if not positive:
        return [1.0]
    lo, hi = min(positive), max(positive)
    decades = math.log10(hi) - math.log10(lo)
    steps = (1.0,) if decades > 4 else (1.0, 2.0, 5.0)
    first, last = math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1
    ticks = [float(f"{m}e{k}") for k in range(first, last + 1) for m in steps]
    below = max(t for t in ticks if t <= lo * (1 + 1e-9))
    above = min(t for t in ticks if t >= hi * (1 - 1e-9))
    return [t for t in ticks if below <= t <= above]


def _log_time_axis(ax: Any, values_s: Sequence[float]) -> None:
    """A log y axis of times with every labelled tick from :func:`log_time_ticks` (``2 s``,
    ``500 ms``, ...) and unlabelled minor ticks, so labels never crowd or go missing."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    from parplan.report.humanize import seconds

    ticks = log_time_ticks(values_s)
    ax.set_ylim(ticks[0] / 1.15, ticks[-1] * 1.15)
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: seconds(v)))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.tick_params(axis="y", which="major", labelsize=8)


def finite_points(points: Sequence[ScalingPoint]) -> list[ScalingPoint]:
    """Points that can go on a log axis."""
    return [p for p in points if p.step_time_s > 0 and math.isfinite(p.step_time_s)]
