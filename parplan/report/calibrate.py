"""What ``parplan calibrate`` and ``parplan validate --cross`` show.

:func:`calibration_view`: the parameters (before, after, fitted / at bound / not identified and
why), then the residuals per size of every log before and after, then the median and max |error|
before and after. :func:`calibration_document` is ``calibrate``'s ``--json`` document::

    {"version": 1, "tool": str, "command": "calibrate", "base": str, "cluster": str,
     "parameters": [{"key", "before", "after", "status", "note"}],
     "logs": [{"path", "sha256", "collective", "ranks", "sizes"}],
     "rows": [{"log", "line", "size_bytes", "measured_s", "before_s", "after_s",
               "before_pct", "after_pct"}],
     "before": {"count", "median_abs_pct", "max_abs_pct"}, "after": {...},
     "iterations": int, "simulations": int}

Efficiencies are fractions, latencies seconds, errors percent (positive: predicted too long).
:func:`cross_view` shows ``validate --cross``: per calibration table, each other table of the same
hardware predicted with the spec-sheet file and with the calibrated one.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table

from parplan.api.accuracy import ErrorStats
from parplan.api.calibrate import Calibration, value_text
from parplan.api.cross_validation import CrossReport
from parplan.report import humanize as hz
from parplan.report.accuracy import pct

VERSION = 1
"""Version of the ``--json`` document."""


def parameters_view(calibration: Calibration) -> Table:
    """Each parameter before and after, and whether it was fitted."""
    table = Table(
        title=f"calibrated {calibration.cluster_name} from {calibration.base}", title_justify="left"
    )
    for column in ("parameter", "before", "after"):
        table.add_column(column, justify="left" if column == "parameter" else "right", no_wrap=True)
    table.add_column("status")
    for p in calibration.parameters:
        status = p.status if not p.note else f"{p.status}: {p.note}"
        table.add_row(p.key, value_text(p.key, p.before), value_text(p.key, p.after), status)
    return table


def residuals_view(calibration: Calibration) -> Table:
    """Measured beside predicted per size, before and after calibration."""
    table = Table(title="residuals per size: before and after", title_justify="left")
    several = len(calibration.logs) > 1
    if several:
        table.add_column("log", no_wrap=True)
    for column in ("size", "measured", "before", "error", "after", "error "):
        table.add_column(column, justify="right", no_wrap=True)
    for r in calibration.rows:
        cells = [
            hz.size(r.size_bytes),
            hz.seconds(r.measured_s),
            hz.seconds(r.before_s),
            pct(r.before_pct, signed=True),
            hz.seconds(r.after_s),
            pct(r.after_pct, signed=True),
        ]
        table.add_row(*([r.log] if several else []), *cells)
    return table


def summary_line(before: ErrorStats, after: ErrorStats) -> str:
    """``median |error| 27.8% -> 6.0%, max 37.0% -> 44.1% over 31 sizes``."""
    return (
        f"median |error| {pct(before.median_abs_pct)} -> {pct(after.median_abs_pct)}, "
        f"max {pct(before.max_abs_pct)} -> {pct(after.max_abs_pct)} over {after.count} sizes"
    )


def calibration_view(calibration: Calibration) -> RenderableType:
    """Parameters, residuals and the summary."""
    return Group(
        parameters_view(calibration),
        residuals_view(calibration),
        summary_line(calibration.before, calibration.after),
    )


def _stats(stats: ErrorStats) -> dict[str, Any]:
    return {"count": stats.count, "median_abs_pct": stats.median_abs_pct, "max_abs_pct": stats.max_abs_pct}


def calibration_document(calibration: Calibration) -> dict[str, Any]:
    """The ``--json`` document (layout in the module docstring)."""
    from parplan.report.json_report import tool_name

    return {
        "version": VERSION,
        "tool": tool_name(),
        "command": "calibrate",
        "base": calibration.base,
        "cluster": calibration.cluster_name,
        "parameters": [
            {"key": p.key, "before": p.before, "after": p.after, "status": p.status, "note": p.note}
            for p in calibration.parameters
        ],
        "logs": [log.to_data() for log in calibration.record.logs],
        "rows": [
            {
                "log": r.log,
                "line": r.line,
                "size_bytes": r.size_bytes,
                "measured_s": r.measured_s,
                "before_s": r.before_s,
                "after_s": r.after_s,
                "before_pct": r.before_pct,
                "after_pct": r.after_pct,
            }
            for r in calibration.rows
        ],
        "before": _stats(calibration.before),
        "after": _stats(calibration.after),
        "iterations": calibration.iterations,
        "simulations": calibration.simulations,
    }


def cross_view(report: CrossReport) -> RenderableType:
    """``validate --cross``: per pair of tables of one hardware, spec-sheet beside calibrated errors."""
    table = Table(
        title="cross: calibrated on one table, predicting the others of the same hardware "
        "(median / max |error|)",
        title_justify="left",
    )
    for column in ("system", "calibrated on", "predicting", "sizes"):
        table.add_column(column, no_wrap=True, justify="right" if column == "sizes" else "left")
    for column in ("spec sheet", "calibrated"):
        table.add_column(column, justify="right", no_wrap=True)
    for pair in report.pairs:
        table.add_row(
            pair.system,
            pair.source,
            pair.target,
            str(pair.spec_sheet.count),
            f"{pct(pair.spec_sheet.median_abs_pct)} / {pct(pair.spec_sheet.max_abs_pct)}",
            f"{pct(pair.calibrated.median_abs_pct)} / {pct(pair.calibrated.max_abs_pct)}",
        )
    table.add_section()
    table.add_row(
        "all",
        "",
        "",
        str(report.spec_sheet.count),
        f"{pct(report.spec_sheet.median_abs_pct)} / {pct(report.spec_sheet.max_abs_pct)}",
        f"{pct(report.calibrated.median_abs_pct)} / {pct(report.calibrated.max_abs_pct)}",
        style="bold",
    )
    fits = Table(title="what each calibration fitted", title_justify="left")
    fits.add_column("calibrated on", no_wrap=True)
    fits.add_column("fitted")
    fits.add_column("own sizes: before -> after", no_wrap=True, justify="right")
    for fit in report.fits:
        fitted = ", ".join(f"{k} {v}" for k, v in fit.fitted.items()) or "nothing identified"
        own = f"{pct(fit.before.median_abs_pct)} -> {pct(fit.after.median_abs_pct)}"
        fits.add_row(fit.source, fitted, own)
    return Group(fits, table)


def cross_document(report: CrossReport) -> dict[str, Any]:
    """``validate --cross --json``: every fit and pair with its figures."""
    from parplan.report.json_report import tool_name

    return {
        "version": VERSION,
        "tool": tool_name(),
        "command": "validate --cross",
        "manifest": report.manifest,
        "fits": [
            {
                "system": f.system,
                "source": f.source,
                "fitted": f.fitted,
                "before": _stats(f.before),
                "after": _stats(f.after),
            }
            for f in report.fits
        ],
        "pairs": [
            {
                "system": p.system,
                "source": p.source,
                "target": p.target,
                "spec_sheet": _stats(p.spec_sheet),
                "calibrated": _stats(p.calibrated),
            }
            for p in report.pairs
        ],
        "spec_sheet": _stats(report.spec_sheet),
        "calibrated": _stats(report.calibrated),
    }
