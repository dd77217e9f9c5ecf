"""``parplan collective`` results as nccl-tests-shaped tables, JSON, and Chrome traces.

:func:`collective_view` is a row per size with the size, the element count, the time and
nccl-tests' algbw and busbw; with several algorithms, a column of times per algorithm (its table
abbreviation as the header, the fastest marked ``*``) and the fastest one's busbw. Numbers are
for people (:mod:`parplan.report.humanize`); the table follows the width rule of
:mod:`parplan.report.layout`. :func:`collective_document` is the ``--json`` document (sizes and
counts as integers), :func:`collective_csv` the ``--csv`` rows, :func:`write_collective_trace`
one algorithm's Chrome trace.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from parplan.collectives.registry import algorithms
from parplan.report import humanize as hz
from parplan.report.csv_report import rows_csv
from parplan.report.layout import FitLog, FitNote, Fitted

if TYPE_CHECKING:
    from parplan.api.analytic_fit import AnalyticCheck
    from parplan.api.collective import CollectiveRow, CollectiveSweep, CollectiveTrace
    from parplan.api.uniform import UniformParameters


def describe_parameters(params: UniformParameters) -> str:
    """One line saying which figures the closed forms use (a rate per byte as ``1/(rate)``)."""
    text = (
        f"alpha = {hz.seconds(params.alpha_s)}, beta = {_per_byte(params.beta_s_per_byte)} from the"
        f" bottleneck path {params.bottleneck[0]} -> {params.bottleneck[1]}"
    )
    if (
        params.intra_alpha_s is not None
        and params.intra_beta_s_per_byte is not None
        and params.intra_bottleneck
    ):
        text += (
            f"; within groups alpha = {hz.seconds(params.intra_alpha_s)},"
            f" beta = {_per_byte(params.intra_beta_s_per_byte)}"
            f" ({params.intra_bottleneck[0]} -> {params.intra_bottleneck[1]})"
        )
    text += f"; gamma = {_per_byte(params.gamma_s_per_byte)}"
    text += "; one port per rank" if params.shared_port else "; a link per pair of ranks"
    return text


def _per_byte(s_per_byte: float) -> str:
    """Seconds per byte as the inverse of a bandwidth: ``1/(24.9 GB/s)``; 0 s/B is ``0``."""
    return f"1/({hz.bandwidth(1.0 / s_per_byte)})" if s_per_byte > 0 else "0"


# -- JSON and CSV ------------------------------------------------------------------------------------


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def row_document(row: CollectiveRow) -> dict[str, Any]:
    """The JSON form of a row."""
    doc: dict[str, Any] = {
        "algorithm": row.algorithm,
        "ranks": row.ranks,
        "size_bytes": row.size_bytes,
        "count": row.count,
        "time_s": row.time_s,
        "algbw_GBps": _finite(row.algbw_GBps),
        "busbw_GBps": _finite(row.busbw_GBps),
    }
    if row.chosen is not None:
        doc["chosen"] = row.chosen
    if row.symmetry is not None:
        doc["symmetry"] = row.symmetry
    return doc


def collective_document(sweep: CollectiveSweep) -> dict[str, Any]:
    """The ``--json`` document: ``{"results": [...]}`` plus what produced them (``tool`` and
    ``command`` as in every parplan report, so a later run may write over it)."""
    from parplan.report.json_report import tool_name

    out: dict[str, Any] = {
        "tool": tool_name(),
        "command": "collective",
        "results": [row_document(r) for r in sweep.rows],
        "cluster": sweep.cluster,
        "collective": sweep.collective,
        "mode": "analytic" if sweep.analytic else "simulated",
        "ranks": len(sweep.devices),
        "element_bytes": sweep.element_bytes,
    }
    if sweep.parameters is not None:
        p = sweep.parameters
        out["analytic_parameters"] = {
            "alpha_s": p.alpha_s,
            "beta_s_per_byte": p.beta_s_per_byte,
            "gamma_s_per_byte": p.gamma_s_per_byte,
            "shared_port": p.shared_port,
            "bottleneck": list(p.bottleneck),
        }
        out["analytic_checks"] = [check_document(c) for c in sweep.checks]
    return out


def check_document(check: AnalyticCheck) -> dict[str, Any]:
    """The JSON form of one closed-form-against-engine check (``difference``: simulated / analytic
    - 1; ``agrees``: within the stated ``tolerance``; ``warning``: the line the table prints)."""
    from parplan.api.analytic_fit import TOLERANCE

    return {
        "algorithm": check.algorithm,
        "size_bytes": check.size_bytes,
        "analytic_s": check.analytic_s,
        "simulated_s": check.simulated_s,
        "difference": check.difference,
        "tolerance": TOLERANCE,
        "agrees": check.agrees,
        "assumes": check.assumes,
        "reason": check.reason,
        "warning": None if check.agrees else check.warning(),
    }


CSV_COLUMNS = ("algorithm", "ranks", "size_bytes", "count", "time_s", "algbw_GBps", "busbw_GBps")
"""Columns of ``collective --csv``: the ``results`` rows of the JSON document."""


def collective_csv(sweep: CollectiveSweep) -> str:
    """The ``--csv`` text: a header and one row per (algorithm, size)."""
    return rows_csv(CSV_COLUMNS, [row_document(r) for r in sweep.rows])


def write_collective_trace(trace: CollectiveTrace, path: str | Path) -> None:
    """The Chrome trace of one algorithm's simulation (written atomically by the trace writer)."""
    from parplan.report.trace import write_chrome_trace

    write_chrome_trace(trace.result, trace.graph, trace.network, path)


# -- tables ----------------------------------------------------------------------------------------


def short_label(label: str, collective: str = "all_reduce") -> str:
    """An algorithm label with its name abbreviated for a column header: ``hd``, ``central:0``."""
    name, sep, arg = label.partition(":")
    algorithm = algorithms(collective).get(name)
    return f"{algorithm.column_label if algorithm is not None else name}{sep}{arg}"


def collective_view(sweep: CollectiveSweep, dtype: str, *, note: bool = True) -> RenderableType:
    """The sweep as a titled table (see the module docstring); ``note``: say above it which
    figures the closed forms used."""
    mode = "closed forms" if sweep.analytic else "simulated"
    log = FitLog()
    parts: list[RenderableType] = []
    if sweep.parameters is not None and note:
        parts.append(Text(f"analytic: {describe_parameters(sweep.parameters)}", style="dim"))
    table = Table(title=f"{sweep.collective} on {sweep.cluster}: {len(sweep.devices)} ranks, {dtype}, {mode}")
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("count", justify="right", no_wrap=True)
    names = sweep.algorithms
    if len(names) == 1:
        for col in ("time", "algbw", "busbw"):
            table.add_column(col, justify="right", no_wrap=True)
        chosen = any(row.chosen for row in sweep.rows)
        if chosen:
            table.add_column("ran", no_wrap=True)
        for row in sweep.rows:
            table.add_row(
                hz.size(row.size_bytes),
                hz.rate(row.count),
                hz.seconds(row.time_s),
                hz.bandwidth(row.algbw_GBps * 1e9),
                hz.bandwidth(row.busbw_GBps * 1e9),
                *([row.chosen or ""] if chosen else []),
            )
        return Group(*parts, Fitted(table, "table", log), FitNote(log), *_warnings(sweep))
    for name in names:
        table.add_column(short_label(name, sweep.collective), justify="right", no_wrap=True)
    table.add_column("fastest", no_wrap=True)
    table.add_column("busbw", justify="right", no_wrap=True)
    by_size: dict[int, list[CollectiveRow]] = {}
    for row in sweep.rows:
        by_size.setdefault(row.size_bytes, []).append(row)
    for size_bytes, rows in by_size.items():
        best = next((r for r in rows if r.fastest), rows[0])
        cells = [f"{hz.seconds(r.time_s)}{'*' if r.fastest else ' '}" for r in rows]
        fastest = short_label(best.algorithm, sweep.collective)
        table.add_row(
            hz.size(size_bytes), hz.rate(rows[0].count), *cells, fastest, hz.bandwidth(best.busbw_GBps * 1e9)
        )
    shorts = {n: short_label(n, sweep.collective) for n in names}
    legend = ", ".join(f"{shorts[n]} = {n}" for n in names if shorts[n] != n)
    caption = Text(f"* fastest at that size; busbw of the fastest{'; ' + legend if legend else ''}")
    caption.stylize("dim")
    return Group(*parts, Fitted(table, "table", log), caption, FitNote(log), *_warnings(sweep))


def _warnings(sweep: CollectiveSweep) -> list[Text]:
    """Under an analytic table: each algorithm whose closed form the engine does not confirm."""
    return [Text(f"warning: {line}", style="yellow") for line in sweep.warnings()]
