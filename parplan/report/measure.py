"""``parplan measure`` results: an nccl-tests-shaped table, the JSON document, nccl-tests' printed text.

:func:`step_view` and :func:`step_document` show ``--step``'s DDP step.
:func:`measure_view` is the table: size, count, type, redop, time, algbw, busbw and ``#wrong`` as
nccl-tests prints them (numbers for people), an algorithm column when several were timed, and
``predicted`` and ``error`` columns when a cluster file was given. :func:`measure_document` is
the ``--json`` document. :func:`nccl_tests_text` writes one algorithm's rows in nccl-tests' own
printed format (``#`` header lines, fixed-width rows, the out-of-place column group only, since
measure times out of place) so that :mod:`parplan.config.nccltests` and ``parplan calibrate``
read it back like a log of ``all_reduce_perf``.
"""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from parplan.report import humanize as hz
from parplan.report.layout import FitLog, FitNote, Fitted

if TYPE_CHECKING:
    from parplan.api.measure import MeasuredRow, Measurement, StepMeasurement

NCCL_TYPE_NAMES = {
    "float32": "float",
    "float64": "double",
    "float16": "half",
    "bfloat16": "bfloat16",
    "int32": "int32",
    "int64": "int64",
    "int8": "int8",
    "uint8": "uint8",
}
"""nccl-tests' names of the element types (its ``type`` column)."""
PERF_BINARIES = {"all_reduce": "all_reduce_perf", "all_gather": "all_gather_perf",
                 "reduce_scatter": "reduce_scatter_perf", "all_to_all": "alltoall_perf"}  # fmt: skip


def redop(collective: str) -> str:
    """nccl-tests' ``redop`` column: ``sum`` for reducing collectives, ``none`` for all-gather and
    all-to-all."""
    return "none" if collective in ("all_gather", "all_to_all") else "sum"


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def row_document(row: MeasuredRow) -> dict[str, Any]:
    """The JSON form of a row (``error``: predicted / measured - 1; null without a cluster)."""
    return {
        "collective": row.collective,
        "algorithm": row.algorithm,
        "ranks": row.ranks,
        "size_bytes": row.size_bytes,
        "count": row.count,
        "time_s": row.time_s,
        "algbw_GBps": _finite(row.algbw_GBps),
        "busbw_GBps": _finite(row.busbw_GBps),
        "wrong": row.wrong,
        "predicted_s": row.predicted_s,
        "predicted_as": row.predicted_as,
        "error": row.error,
    }


def measure_document(result: Measurement) -> dict[str, Any]:
    """The ``--json`` document: ``{"results": [...]}`` and how they were taken."""
    from parplan.report.json_report import tool_name

    request = result.request
    return {
        "tool": tool_name(),
        "command": "measure",
        "results": [row_document(r) for r in result.rows],
        "collective": request.collective,
        "backend": result.backend,
        "ranks": result.ranks,
        "hosts": list(result.hosts),
        "dtype": request.dtype,
        "warmup_iters": request.warmup_iters,
        "iters": request.iters,
        "torch": result.torch_version,
        "cluster": result.cluster,
        "timing": "out-of-place; per rank the mean of the timed iterations, the largest over ranks",
    }


def _time_us(time_s: float) -> str:
    """nccl-tests' time field: ``%7.0f`` from 10 ms, ``%7.1f`` from 100 us, else ``%7.2f``."""
    us = time_s * 1e6
    if us >= 10000.0:
        return f"{us:7.0f}"
    if us >= 100.0:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


def nccl_tests_text(result: Measurement, algorithm: str) -> str:
    """``algorithm``'s rows as nccl-tests prints them (out-of-place group), with ``#`` notes."""
    request = result.request
    rows = [r for r in result.rows if r.algorithm == algorithm]
    sizes = [r.size_bytes for r in rows] or [0]
    how = (
        "the backend's own collective" if algorithm == "backend" else f"parplan's {algorithm} over send/recv"
    )
    kind = NCCL_TYPE_NAMES[request.dtype]
    lines = [
        f"# parplan measure: {PERF_BINARIES[request.collective]} shape, {how}, backend {result.backend},"
        f" torch {result.torch_version}",
        f"# nThread 1 nGpus 1 minBytes {min(sizes)} maxBytes {max(sizes)}"
        f" step: {request.step_factor:g}(factor) warmup iters: {request.warmup_iters}"
        f" iters: {request.iters} agg iters: 1 validation: 1 graph: 0",
        "#",
        f"# Using {result.ranks} ranks on {', '.join(result.hosts)}",
        *_rank_lines(result),
        "#",
        "#                                                              out-of-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       ",
    ]
    for r in rows:
        lines.append(
            f"{r.size_bytes:12d}  {r.count:12d}  {kind:>8s}  {redop(r.collective):>6s}  {-1:6d}"
            f"  {_time_us(r.time_s)}  {r.algbw_GBps:6.2f}  {r.busbw_GBps:6.2f}  {r.wrong:5d}"
        )
    wrong = sum(r.wrong for r in rows)
    average = statistics.fmean(r.busbw_GBps for r in rows) if rows else 0.0
    lines += [
        f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}",
        f"# Avg bus bandwidth    : {average:.6g} ",
        "#",
    ]
    return "\n".join(lines) + "\n"


def _rank_lines(result: Measurement) -> list[str]:
    """nccl-tests' ``#  Rank  N Group  0 ...`` lines, one per rank (``parplan calibrate`` counts
    the ranks from them); hosts are spread over the ranks in order, as the launcher starts them."""
    hosts = result.hosts or ("local",)
    device = "cpu" if result.backend == "gloo" else "cuda"
    return [
        f"#  Rank {r:2d} Group  0 on {hosts[r * len(hosts) // result.ranks]} device {r:2d} [{device}]"
        f" {result.backend}"
        for r in range(result.ranks)
    ]


def _error_cell(row: MeasuredRow) -> str:
    error = row.error
    if error is None:
        return "-"
    return f"{error * 100:+.0f}%"


def measure_view(result: Measurement) -> RenderableType:
    """The run as a titled nccl-tests-shaped table (see the module docstring)."""
    request = result.request
    several = len(request.algorithms) > 1
    predicted = result.cluster is not None
    title = (
        f"{request.collective} measured on {result.backend}: {result.ranks} ranks, {request.dtype},"
        f" {request.iters} iterations after {request.warmup_iters} warm-up"
    )
    table = Table(title=title)
    if several:
        table.add_column("algorithm", no_wrap=True)
    for name in ("size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong"):
        justify = "left" if name in ("type", "redop") else "right"
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    if predicted:
        table.add_column("predicted", justify="right", no_wrap=True)
        table.add_column("error", justify="right", no_wrap=True)
    for row in result.rows:
        cells: list[str | Text] = [
            hz.size(row.size_bytes),
            str(row.count),
            NCCL_TYPE_NAMES[request.dtype],
            redop(row.collective),
            hz.seconds(row.time_s),
            hz.bandwidth(row.algbw_GBps * 1e9),
            hz.bandwidth(row.busbw_GBps * 1e9),
            Text(str(row.wrong), style="bold red" if row.wrong else ""),
        ]
        if predicted:
            cells += ["-" if row.predicted_s is None else hz.seconds(row.predicted_s), _error_cell(row)]
        table.add_row(*([row.algorithm] if several else []), *cells)
    log = FitLog()
    parts: list[RenderableType] = [Fitted(table, "table", log), FitNote(log)]
    if predicted:
        models = {r.algorithm: r.predicted_as for r in result.rows if r.algorithm != r.predicted_as}
        note = f"predicted: parplan collective on {result.cluster}"
        if models:
            note += "; " + ", ".join(f"{a} as {m}" for a, m in models.items())
        parts.append(Text(note + "; error = predicted / measured - 1", style="dim"))
    wrong = sum(r.wrong for r in result.rows)
    if wrong:
        parts.append(
            Text(f"{wrong} wrong elements: a result differs from the exact reference", style="bold red")
        )
    return Group(*parts)


def step_document(step: StepMeasurement) -> dict[str, Any]:
    """The ``--json`` document of ``measure --step``."""
    from parplan.report.json_report import tool_name

    return {
        "tool": tool_name(),
        "command": "measure",
        "step": {
            "scenario": step.scenario,
            "plan": step.plan,
            "ranks": step.ranks,
            "parameters": step.parameters,
            "bucket_bytes": step.bucket_bytes,
            "batch_per_rank": step.batch_per_rank,
            "times_s": list(step.times_s),
            "median_s": step.median_s,
            "predicted_step_s": step.predicted_step_s,
            "predicted_exposed_comm_s": step.predicted_exposed_comm_s,
            "error": step.error,
            "cluster": step.cluster,
        },
    }


def step_view(step: StepMeasurement) -> RenderableType:
    """A measured DDP step beside ``simulate``'s prediction, as a small table."""
    table = Table(
        title=f"one data-parallel step of {step.scenario} / {step.plan}: DDP on {step.ranks} ranks,"
        f" {step.parameters:,} parameters, {hz.size(step.bucket_bytes)} buckets,"
        f" batch {step.batch_per_rank}/rank"
    )
    for name in (
        "measured (median)",
        "min",
        "max",
        f"predicted on {step.cluster}",
        "of which exposed comm",
        "error",
    ):
        table.add_column(name, justify="right", no_wrap=True)
    error = "-" if step.error is None else f"{step.error * 100:+.0f}%"
    table.add_row(
        hz.seconds(step.median_s),
        hz.seconds(min(step.times_s)),
        hz.seconds(max(step.times_s)),
        "-" if step.predicted_step_s is None else hz.seconds(step.predicted_step_s),
        "-" if step.predicted_exposed_comm_s is None else hz.seconds(step.predicted_exposed_comm_s),
        error,
    )
    log = FitLog()
    note = Text(
        "the synthetic model has the scenario's parameter count, not its layers: its compute is not the"
        " model's, so compare the communication the step exposes",
        style="dim",
    )
    return Group(Fitted(table, "table", log), FitNote(log), note)
