"""``parplan collective`` results as nccl-tests-shaped tables, JSON, and Chrome traces.

:func:`print_collective_table` prints a row per size with the size, the element count, the time
(us) and nccl-tests' algbw and busbw (GB/s); with several algorithms, a column of times per
algorithm (its table abbreviation as the header, the fastest marked ``*``) and the fastest one's
busbw. Tables print at their natural width when the console is narrower, so numbers are never
cut. :func:`collective_json` is the ``--json`` document, :func:`write_collective_trace` one
algorithm's Chrome trace.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from parplan.collectives.registry import algorithms

if TYPE_CHECKING:
    from parplan.api.analytic_fit import AnalyticCheck
    from parplan.api.collective import CollectiveRow, CollectiveSweep, CollectiveTrace, UniformParameters


def describe_parameters(params: UniformParameters) -> str:
    """One line saying which figures the closed forms use."""
    bw = 1.0 / params.beta_s_per_byte / 1e9
    text = (
        f"alpha = {params.alpha_s * 1e6:.3g} us, beta = 1/({bw:.4g} GB/s) from the bottleneck path"
        f" {params.bottleneck[0]} -> {params.bottleneck[1]}"
    )
    if (
        params.intra_alpha_s is not None
        and params.intra_beta_s_per_byte is not None
        and params.intra_bottleneck
    ):
        ibw = 1.0 / params.intra_beta_s_per_byte / 1e9
        text += (
            f"; within groups alpha = {params.intra_alpha_s * 1e6:.3g} us, beta = 1/({ibw:.4g} GB/s)"
            f" ({params.intra_bottleneck[0]} -> {params.intra_bottleneck[1]})"
        )
    text += f"; gamma = {params.gamma_s_per_byte * 1e9:.3g} ns/B"
    text += "; one port per rank" if params.shared_port else "; a link per pair of ranks"
    return text


# -- JSON ------------------------------------------------------------------------------------------


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
    return doc


def collective_document(sweep: CollectiveSweep) -> dict[str, Any]:
    """The ``--json`` document: ``{"results": [...]}`` plus what produced them."""
    out: dict[str, Any] = {
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


def collective_json(sweep: CollectiveSweep) -> str:
    """The ``--json`` document as text (indented by two)."""
    return json.dumps(collective_document(sweep), indent=2)


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


def _gbps(value: float) -> str:
    return f"{value:.2f}" if value < float("inf") else "inf"


def print_unsqueezed(out: Console, table: Table) -> None:
    """Print at the table's natural width when the console is narrower: numbers are never cut."""
    natural = Measurement.get(out, out.options.update_width(10_000), table).maximum
    if natural > out.width:
        out = Console(
            width=natural,
            highlight=False,
            emoji=False,
            soft_wrap=False,
            force_terminal=out.is_terminal,
            no_color=out.no_color,
        )
    out.print(table)


def print_collective_table(out: Console, sweep: CollectiveSweep, dtype: str, *, note: bool = True) -> None:
    """The sweep as a table on ``out`` (see the module docstring); ``note``: say above it which
    figures the closed forms used."""
    mode = "closed forms" if sweep.analytic else "simulated"
    title = f"{sweep.collective} on {sweep.cluster}: {len(sweep.devices)} ranks, {dtype}, {mode}"
    if sweep.parameters is not None and note:
        out.print(f"analytic: {describe_parameters(sweep.parameters)}", style="dim")
    table = Table(title=title)
    table.add_column("size (B)", justify="right", no_wrap=True)
    table.add_column("count", justify="right", no_wrap=True)
    names = sweep.algorithms
    if len(names) == 1:
        for col in ("time (us)", "algbw (GB/s)", "busbw (GB/s)"):
            table.add_column(col, justify="right")
        chosen = any(row.chosen for row in sweep.rows)
        if chosen:
            table.add_column("ran", no_wrap=True)
        for row in sweep.rows:
            table.add_row(
                f"{row.size_bytes:.0f}",
                str(row.count),
                f"{row.time_s * 1e6:.2f}",
                _gbps(row.algbw_GBps),
                _gbps(row.busbw_GBps),
                *([row.chosen or ""] if chosen else []),
            )
        print_unsqueezed(out, table)
        _print_warnings(out, sweep)
        return
    for name in names:
        table.add_column(short_label(name, sweep.collective), justify="right", no_wrap=True)
    table.add_column("fastest", no_wrap=True)
    table.add_column("busbw (GB/s)", justify="right", no_wrap=True)
    by_size: dict[float, list[CollectiveRow]] = {}
    for row in sweep.rows:
        by_size.setdefault(row.size_bytes, []).append(row)
    for size_bytes, rows in by_size.items():
        best = next((r for r in rows if r.fastest), rows[0])
        cells = [f"{r.time_s * 1e6:.6g}{'*' if r.fastest else ' '}" for r in rows]
        fastest = short_label(best.algorithm, sweep.collective)
        table.add_row(f"{size_bytes:.0f}", str(rows[0].count), *cells, fastest, _gbps(best.busbw_GBps))
    print_unsqueezed(out, table)
    legend = ", ".join(
        f"{short_label(n, sweep.collective)} = {n}" for n in names if short_label(n, sweep.collective) != n
    )
    out.print(f"times in us; * fastest at that size{'; ' + legend if legend else ''}", style="dim")
    _print_warnings(out, sweep)


def _print_warnings(out: Console, sweep: CollectiveSweep) -> None:
    """Under an analytic table: each algorithm whose closed form the engine does not confirm."""
    for line in sweep.warnings():
        out.print(f"warning: {line}", style="yellow", soft_wrap=True)
