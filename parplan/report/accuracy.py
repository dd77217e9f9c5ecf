"""What ``parplan validate`` shows: measured beside predicted, and the figures against thresholds.

:func:`validation_view` is a rich renderable: one table per nccl-tests table (size, measured and
predicted time, signed error, the algorithm parplan picked; numbers for people), a summary per system
and overall (median and max |error|, all sizes and per size band) and the thresholds with the
targets beside them. :func:`validation_document` is the ``--json`` document::

    {
      "version": 1, "tool": "parplan 0.1.0", "command": "validate",
      "manifest": str, "passed": bool, "large_from_bytes": float,
      "simulations": {"pruned": bool, "run": int, "possible": int},
      "tables": [{"name", "system", "csv", "cluster", "cluster_name", "ranks", "measured_column",
                  "nccl_algo", "algorithm_forced", "note", "rounding_pct", "stats",
                  "rows": [{"size_bytes", "line", "measured_s", "predicted_s", "error_pct",
                            "algorithm", "simulated"}]}],
      "summary": {"overall": stats, "systems": {system: stats}},
      "checks": [{"band", "statistic", "value_pct", "threshold_pct", "target_pct", "passed"}],
      "training": {"stats": {"count", "median_abs_pct", "max_abs_pct"},
                   "rows": [{"name", "system", "scenario", "plan", "measured", "value", "source",
                             "note", "excluded", "devices", "measured_step_s", "predicted_step_s",
                             "error_pct", "predicted_tokens_per_s_per_gpu", "mfu",
                             "peak_memory_bytes", "fits"}]}
    }

where ``stats`` is ``{"overall"|"large"|"small": {"count", "median_abs_pct", "max_abs_pct"}}``.
Times are seconds, errors percent (positive: predicted too long). :func:`validation_csv` is the
``--csv`` text: one row per table and size (:data:`CSV_COLUMNS`).
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from parplan.api.accuracy import (
    BANDS,
    Band,
    BandStats,
    ErrorStats,
    TableResult,
    ThresholdCheck,
    ValidationReport,
)
from parplan.api.training_accuracy import TrainingResult
from parplan.config.units import format_bytes
from parplan.report import humanize as hz
from parplan.report.csv_report import rows_csv

VERSION = 1
"""Version of the ``--json`` document; fields may be added within a version, never removed."""

_MEASURED = {
    "time_us": "out-of-place time",
    "in_place_time_us": "in-place time",
    "algbw_GBps": "out-of-place algbw (time = size / algbw)",
    "in_place_algbw_GBps": "in-place algbw (time = size / algbw)",
    "busbw_GBps": "busbw (time = size / (busbw x p / (2(p-1))))",
    "in_place_busbw_GBps": "in-place busbw (time = size / (busbw x p / (2(p-1))))",
}


def pct(value: float | None, signed: bool = False) -> str:
    """A percentage for tables: ``+12.3%``, ``45.0%``; ``—`` when there is none.

    >>> pct(12.345, signed=True), pct(None)
    ('+12.3%', '—')
    """
    if value is None:
        return "—"
    return f"{value:+.1f}%" if signed else f"{value:.1f}%"


def band_name(band: Band, large_from_bytes: float) -> str:
    """``all sizes``, ``>= 64 MiB`` or ``< 64 MiB``."""
    if band == "overall":
        return "all sizes"
    return f"{'>=' if band == 'large' else '<'} {format_bytes(large_from_bytes)}"


def table_notes(result: TableResult) -> list[str]:
    """What a reader needs to know about one table: the measured column, forcing, rounding."""
    spec = result.spec
    notes = [f"measured: {_MEASURED[spec.measured]}"]
    if spec.measured != "time_us" and result.rounding_pct >= 1:
        notes[0] += f"; printed precision alone allows up to ±{result.rounding_pct:.1f}%"
    if spec.nccl_algo is not None:
        notes.append(f"NCCL_ALGO={spec.nccl_algo}: auto restricted to {result.algorithm_forced}")
    if spec.note:
        notes.append(spec.note)
    return notes


def table_view(result: TableResult) -> Table:
    """One nccl-tests table: measured beside predicted per size, with its figures as the caption."""
    s = result.stats.overall
    title = f"{result.spec.name}: {result.ranks} ranks on {result.cluster_name} ({result.spec.system})"
    caption = "; ".join(
        [f"median |error| {pct(s.median_abs_pct)}, max {pct(s.max_abs_pct)}", *table_notes(result)]
    )
    table = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    for column in ("size", "measured", "predicted", "error"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("algorithm", no_wrap=True)
    for row in result.rows:
        table.add_row(
            hz.size(row.size_bytes),
            hz.seconds(row.measured_s),
            hz.seconds(row.predicted_s),
            pct(row.error_pct, signed=True),
            row.algorithm,
        )
    return table


def summary_view(report: ValidationReport) -> Table:
    """Median and max |error| per system and overall, all sizes and per size band."""
    large = band_name("large", report.large_from_bytes)
    small = band_name("small", report.large_from_bytes)
    table = Table(
        title="summary: median and max |error| of the predicted time; median per size band",
        title_justify="left",
    )
    table.add_column("system", no_wrap=True)
    for column in ("tables", "sizes", "median", "max", large, small):
        table.add_column(column, justify="right", no_wrap=True)
    counts: dict[str, int] = {}
    for t in report.tables:
        counts[t.spec.system] = counts.get(t.spec.system, 0) + 1
    for system, stats in report.systems.items():
        table.add_row(system, str(counts[system]), *_stat_cells(stats))
    table.add_section()
    table.add_row("all", str(len(report.tables)), *_stat_cells(report.overall), style="bold")
    return table


def _stat_cells(stats: BandStats) -> list[str]:
    o = stats.overall
    return [
        str(o.count),
        pct(o.median_abs_pct),
        pct(o.max_abs_pct),
        pct(stats.large.median_abs_pct),
        pct(stats.small.median_abs_pct),
    ]


def check_name(check: ThresholdCheck, large_from_bytes: float) -> str:
    """``median |error|, >= 64 MiB``: which figure a check is about."""
    if check.band == "training":
        return f"{check.statistic} |error|, training step time"
    return f"{check.statistic} |error|, {band_name(check.band, large_from_bytes)}"


def training_view(results: tuple[TrainingResult, ...]) -> RenderableType:
    """Published training runs beside the predicted step time; every row, the excluded ones listed
    under the table with the reason."""
    table = Table(title="training runs: step time, published beside predicted", title_justify="left")
    table.add_column("run", no_wrap=True)
    table.add_column("system")
    for column in ("GPUs", "measured", "predicted", "error", "tokens/s/GPU", "MFU", "peak memory"):
        table.add_column(column, justify="right", no_wrap=True)
    excluded: list[TrainingResult] = []
    for r in results:
        if r.spec.excluded is not None:
            excluded.append(r)
            continue
        memory = "" if r.peak_memory_bytes is None else hz.size(r.peak_memory_bytes)
        if r.fits is False:
            memory += " ✗"
        table.add_row(
            r.spec.name,
            r.spec.system,
            str(r.devices),
            hz.seconds(r.measured_step_s) if r.measured_step_s is not None else "",
            hz.seconds(r.predicted_step_s) if r.predicted_step_s is not None else "",
            pct(r.error_pct, signed=True),
            f"{r.predicted_tokens_per_s_per_gpu:,.0f}" if r.predicted_tokens_per_s_per_gpu else "",
            pct(None if r.mfu is None else 100.0 * r.mfu),
            memory,
        )
    lines = [Text(f"excluded: {r.spec.name}: {r.spec.excluded}", style="dim") for r in excluded]
    if any(r.fits is False for r in results):
        lines.append(Text("✗ the predicted peak memory does not fit the device", style="dim"))
    return Group(table, *lines)


def checks_view(report: ValidationReport) -> Table:
    """Every figure beside its threshold (what fails the command) and its target (issue 13)."""
    table = Table(title="thresholds (fail above) and targets", title_justify="left")
    table.add_column("figure", no_wrap=True)
    for column in ("value", "threshold", "target"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    for check in report.checks:
        status = "ok" if check.passed else "ABOVE"
        if check.value_pct is None:
            status = "no sizes"
        table.add_row(
            check_name(check, report.large_from_bytes),
            pct(check.value_pct),
            pct(check.threshold_pct),
            pct(check.target_pct),
            Text(status, style="" if check.passed else "bold red"),
        )
    return table


def validation_view(report: ValidationReport, *, tables: bool = True) -> RenderableType:
    """The whole report: every table (unless ``tables`` is False), the summary and the checks."""
    parts: list[RenderableType] = [table_view(t) for t in report.tables] if tables else []
    if report.training:
        parts.append(training_view(report.training))
    parts += [summary_view(report), checks_view(report)]
    if report.pruned:
        parts.append(
            Text(
                f"simulated {report.simulations_run} of {report.simulations_possible} (algorithm, size)"
                " pairs: an algorithm is skipped at a size where its time at a smaller size already"
                " exceeds the best there (times never fall as sizes grow)",
                style="dim",
            )
        )
    return Group(*parts)


def failure_messages(report: ValidationReport) -> list[str]:
    """One line per figure above its threshold, naming the threshold."""
    return [
        f"{check_name(c, report.large_from_bytes)} is {pct(c.value_pct)}, above the threshold"
        f" {pct(c.threshold_pct)} in {report.manifest}"
        for c in report.failures
    ]


def _stats(stats: ErrorStats) -> dict[str, Any]:
    return {"count": stats.count, "median_abs_pct": stats.median_abs_pct, "max_abs_pct": stats.max_abs_pct}


def _bands(stats: BandStats) -> dict[str, Any]:
    return {band: _stats(stats.band(band)) for band in BANDS}


def _table(result: TableResult) -> dict[str, Any]:
    spec = result.spec
    return {
        "name": spec.name,
        "system": spec.system,
        "csv": spec.csv,
        "cluster": spec.cluster,
        "cluster_name": result.cluster_name,
        "ranks": result.ranks,
        "measured_column": spec.measured,
        "nccl_algo": spec.nccl_algo,
        "algorithm_forced": result.algorithm_forced,
        "note": spec.note,
        "rounding_pct": result.rounding_pct,
        "stats": _bands(result.stats),
        "rows": [
            {
                "size_bytes": r.size_bytes,
                "line": r.line,
                "measured_s": r.measured_s,
                "predicted_s": r.predicted_s,
                "error_pct": r.error_pct,
                "algorithm": r.algorithm,
                "simulated": list(r.simulated),
            }
            for r in result.rows
        ],
    }


def validation_document(report: ValidationReport) -> dict[str, Any]:
    """The ``--json`` document (layout in the module docstring)."""
    from parplan.report.json_report import tool_name

    return {
        "version": VERSION,
        "tool": tool_name(),
        "command": "validate",
        "manifest": report.manifest,
        "passed": report.passed,
        "large_from_bytes": report.large_from_bytes,
        "simulations": {
            "pruned": report.pruned,
            "run": report.simulations_run,
            "possible": report.simulations_possible,
        },
        "tables": [_table(t) for t in report.tables],
        "summary": {
            "overall": _bands(report.overall),
            "systems": {name: _bands(stats) for name, stats in report.systems.items()},
        },
        "checks": [
            {
                "band": c.band,
                "statistic": c.statistic,
                "value_pct": c.value_pct,
                "threshold_pct": c.threshold_pct,
                "target_pct": c.target_pct,
                "passed": c.passed,
            }
            for c in report.checks
        ],
        "training": {
            "stats": {
                "count": report.training_stats.count,
                "median_abs_pct": report.training_stats.median_pct,
                "max_abs_pct": report.training_stats.max_pct,
            },
            "rows": [_training_row(r) for r in report.training],
        },
    }


def _training_row(r: TrainingResult) -> dict[str, Any]:
    spec = r.spec
    return {
        "name": spec.name,
        "system": spec.system,
        "scenario": spec.scenario,
        "plan": spec.plan,
        "measured": spec.measured,
        "value": spec.value,
        "source": spec.source,
        "note": spec.note,
        "excluded": spec.excluded,
        "devices": r.devices,
        "measured_step_s": r.measured_step_s,
        "predicted_step_s": r.predicted_step_s,
        "error_pct": r.error_pct,
        "predicted_tokens_per_s_per_gpu": r.predicted_tokens_per_s_per_gpu,
        "mfu": r.mfu,
        "peak_memory_bytes": r.peak_memory_bytes,
        "fits": r.fits,
    }


CSV_COLUMNS = (
    "table",
    "system",
    "ranks",
    "size_bytes",
    "measured_s",
    "predicted_s",
    "error_pct",
    "algorithm",
)
"""Columns of ``validate --csv``."""


def validation_csv(report: ValidationReport) -> str:
    """One CSV row per table and size: measured beside predicted."""
    rows = [
        {
            "table": t.spec.name,
            "system": t.spec.system,
            "ranks": t.ranks,
            "size_bytes": r.size_bytes,
            "measured_s": r.measured_s,
            "predicted_s": r.predicted_s,
            "error_pct": r.error_pct,
            "algorithm": r.algorithm,
        }
        for t in report.tables
        for r in t.rows
    ]
    return rows_csv(CSV_COLUMNS, rows)
