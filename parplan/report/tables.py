"""Rich renderables for ``simulate`` and ``compare-strategies`` (built here, printed by the CLI).

:func:`simulate_view` is a summary table of every plan followed by one block per plan: how the
step splits into compute, exposed communication and idle time, throughput, the all-reduces with
their nccl-tests algbw/busbw, the busiest link, memory per device against capacity (devices with
identical figures on one row) and the line saying what bounds the step; federated and PBT plans
add their quality figures. :func:`compare_view` is the ranked table with speed-ups and the
Pareto front. Numbers go through :mod:`parplan.report.humanize`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from parplan.api.results import bound_of
from parplan.report import humanize as hz

if TYPE_CHECKING:
    from parplan.api.ranking import Ranked
    from parplan.api.results import PlanResult
    from parplan.plan.base import MemoryBreakdown

PARETO_MARK = "●"
"""Marks plans on the time/memory Pareto front in the comparison table."""

MAX_SERIES = 12
"""Longest per-round / per-generation series printed in full; longer ones are elided in the middle."""


WIDE_TABLE = 110
"""Console width from which the comparison table shows the compute/comm/idle split."""


class ByWidth:
    """A renderable built for the width it gets (narrow terminals get fewer columns)."""

    def __init__(self, build: Callable[[int], RenderableType]) -> None:
        self.build = build

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.build(options.max_width)


# -- simulate --------------------------------------------------------------------------------------
def title(name: str, description: str | None) -> Text:
    """The scenario heading."""
    text = Text(name, style="bold")
    if description:
        text.append(f" · {description}", style="dim")
    return text


def simulate_view(
    scenario_name: str,
    description: str | None,
    results: Sequence[PlanResult],
    failed: Sequence[tuple[str, str]] = (),
) -> Group:
    """The summary table and one block per plan."""
    parts: list[RenderableType] = [title(scenario_name, description)]
    if results:
        parts.append(summary_table(results))
    for name, error in failed:
        parts.append(Text(f"✗ {name}: cannot be planned: {error}", style="red"))
    for r in results:
        parts.append(Text(""))
        parts.append(plan_block(r))
    return Group(*parts)


def summary_table(results: Sequence[PlanResult], width: int | None = None) -> RenderableType:
    """One row per plan: the unit time and how it splits, throughput, peak memory (✗: does not fit).

    The strategy column is left out below :data:`WIDE_TABLE` columns (each plan's block names it).
    """
    if width is None:
        return ByWidth(lambda w: summary_table(results, w))
    table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1))
    table.add_column("plan", no_wrap=True)
    wide = width >= WIDE_TABLE
    if wide:
        table.add_column("strategy", overflow="fold", ratio=1, min_width=20)
    for col in ("time", "compute", "exposed", "idle", "samples/s", "peak memory"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in results:
        style = "" if r.fits else "bold red"
        table.add_row(
            Text(r.name, style=style),
            *([r.description] if wide else []),
            f"{hz.seconds(r.step_time_s)}/{r.unit}",
            hz.seconds(r.compute_s),
            hz.seconds(r.exposed_comm_s),
            hz.seconds(r.idle_s),
            hz.rate(r.throughput_samples_per_s),
            Text(hz.size(r.peak_memory_bytes) + ("" if r.fits else " ✗"), style=style),
        )
    return table


def plan_block(r: PlanResult) -> Group:
    """Everything about one plan, as label/value rows."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    unit = r.unit
    split = (
        f"{hz.seconds(r.step_time_s)} = compute {hz.seconds(r.compute_s)}"
        f" + exposed comm {hz.seconds(r.exposed_comm_s)} + idle {hz.seconds(r.idle_s)}\n"
        f"on {r.critical_device}, the device computing longest"
    )
    if r.hidden_comm_s > 0:
        split += f"; {hz.seconds(r.hidden_comm_s)} of communication overlapped with its compute"
    grid.add_row(unit, split)
    if r.bubble_fraction is not None:
        grid.add_row(
            "bubble",
            f"stages idle {hz.percent(r.bubble_fraction)} of the pipeline span"
            " (fill and drain, and waiting for activations and gradients)",
        )
    grid.add_row("throughput", _throughput(r))
    for text, groups in collective_lines(r).items():
        grid.add_row("all-reduce", text + (f"  (×{groups} groups)" if groups > 1 else ""))
    if r.busiest_link:
        grid.add_row(
            "busiest link",
            f"{r.busiest_link}: {hz.percent(r.busiest_link_utilisation)} of its bandwidth over the {unit}, "
            f"{hz.size(r.busiest_link_bytes)} carried",
        )
    if r.memory:
        grid.add_row("memory", memory_table(r.memory))
    for label, value in quality_rows(r.quality):
        grid.add_row(label, value)
    for note in r.notes:
        grid.add_row("note", Text(note, style="dim"))
    style = "bold red" if not r.fits else "bold yellow"
    grid.add_row(Text("bound by", style=style), Text(r.bottleneck, style=style))
    head = Text(r.name, style="bold cyan")
    head.append(f"  {r.description}", style="dim")
    return Group(head, grid)


def collective_lines(r: PlanResult) -> dict[str, int]:
    """One line per distinct all-reduce figure set, with how many groups share it (2-D plans
    all-reduce each stage's gradients in its own group, often with identical figures)."""
    lines: dict[str, int] = {}
    for c in r.collectives:
        buckets = f"{c.count} buckets" if c.count != 1 else "1 call"
        text = (
            f"{c.algorithm} over {c.num_ranks} ranks: {hz.size(c.size_bytes)} in {buckets}, "
            f"{hz.seconds(c.time_s)}, algbw {hz.bandwidth(c.algbw_Bps)}, busbw {hz.bandwidth(c.busbw_Bps)}"
        )
        lines[text] = lines.get(text, 0) + 1
    return lines


def _throughput(r: PlanResult) -> str:
    text = f"{hz.rate(r.throughput_samples_per_s)} samples/s"
    if r.tokens_per_s:
        text += f", {hz.rate(r.tokens_per_s)} tokens/s"
    plural = "" if r.units_per_run == 1 else "s"
    text += f"; {r.units_per_run} {r.unit}{plural} in {hz.seconds(r.run_time_s)}"
    return text


@dataclass(frozen=True)
class MemoryRow:
    """Devices with identical memory figures, shown as one row."""

    devices: tuple[str, ...]
    memory: MemoryBreakdown

    @property
    def label(self) -> str:
        """Up to four names (``n0.d0, n0.d4, n1.d0, n1.d4``), else ``h0, h1, …, h15 (16)``."""
        if len(self.devices) <= 4:
            return ", ".join(self.devices)
        return f"{self.devices[0]}, {self.devices[1]}, …, {self.devices[-1]} ({len(self.devices)})"


def group_memory(memory: Sequence[MemoryBreakdown]) -> list[MemoryRow]:
    """Aggregate devices whose breakdown and capacity are identical, keeping first-seen order."""
    groups: dict[tuple[float, ...], list[MemoryBreakdown]] = {}
    for m in memory:
        key = (
            m.capacity_bytes,
            m.params_bytes,
            m.grads_bytes,
            m.optimizer_bytes,
            m.activations_bytes,
            m.buffers_bytes,
        )
        groups.setdefault(key, []).append(m)
    return [MemoryRow(tuple(m.device for m in ms), ms[0]) for ms in groups.values()]


def memory_table(memory: Sequence[MemoryBreakdown], width: int | None = None) -> RenderableType:
    """Memory per device group: the breakdown, the total against capacity and the share used.

    When the breakdown does not fit in ``width`` columns only devices, total, capacity and the
    share used are shown.
    """
    if width is None:
        return ByWidth(lambda w: memory_table(memory, w))
    headers = ["devices", "params", "grads", "optimizer", "activations", "buffers"]
    headers += ["total", "capacity", "used"]
    rows: list[list[str]] = []
    fits: list[bool] = []
    for row in group_memory(memory):
        m = row.memory
        used = m.total_bytes / m.capacity_bytes if m.capacity_bytes > 0 else float("inf")
        rows.append(
            [
                row.label,
                hz.size(m.params_bytes),
                hz.size(m.grads_bytes),
                hz.size(m.optimizer_bytes),
                hz.size(m.activations_bytes),
                hz.size(m.buffers_bytes),
                hz.size(m.total_bytes),
                hz.size(m.capacity_bytes),
                hz.percent(used) if m.fits else f"{hz.percent(used)} ✗",
            ]
        )
        fits.append(m.fits)
    keep = list(range(len(headers)))
    if _natural_width(headers, rows) > width:
        keep = [0, 6, 7, 8]
    table = Table(box=None, pad_edge=False, padding=(0, 1), header_style="dim")
    for i in keep:
        table.add_column(headers[i], justify="left" if i == 0 else "right", no_wrap=i != 0, overflow="fold")
    for cells, ok in zip(rows, fits, strict=True):
        style = "" if ok else "bold red"
        table.add_row(*[Text(cells[i], style=style if i in (6, 8) else "") for i in keep])
    return table


def _natural_width(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> int:
    """Columns a padding-1 table of these cells needs without wrapping."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    return sum(widths) + len(widths) - 1


def series(values: Sequence[float]) -> str:
    """A per-round or per-generation series with common decimals (3 significant digits for the
    largest value), elided in the middle past :data:`MAX_SERIES` values.

    >>> series([0.693, 0.49, 0.4567])
    '0.693 0.490 0.457'
    """
    finite = [abs(v) for v in values if math.isfinite(v) and v != 0]
    decimals = max(0, 2 - math.floor(math.log10(max(finite)))) if finite else 0
    texts = [f"{v:.{decimals}f}" for v in values]
    if len(texts) > MAX_SERIES:
        texts = [*texts[:6], "…", *texts[-5:]]
    return " ".join(texts)


def quality_rows(quality: dict[str, Any]) -> list[tuple[str, str]]:
    """Federated loss/accuracy per round and PBT best score per generation, one line each."""
    rows: list[tuple[str, str]] = []
    losses = quality.get("loss_per_round")
    if losses:
        start = quality.get("initial_loss")
        text = series(losses)
        if start is not None:
            text = f"{series([start, *losses]).split(' ', 1)[0]} → {text}"
        rows.append(("loss/round", text))
        if quality.get("accuracy") is not None:
            problem = quality.get("problem")
            acc = f"{hz.percent(quality['accuracy'])} after the last round"
            rows.append(("accuracy", acc + (f"  ({problem})" if problem else "")))
    best = quality.get("best_score_per_generation")
    if best:
        rows.append(("best/gen", series(best)))
        found = quality.get("best_hyperparameters")
        optimum = quality.get("known_optimum") or {}
        if found is not None:
            text = f"best hyperparameters {_vector(found)}"
            if optimum.get("hyperparameters") is not None:
                text += f", known optimum {_vector(optimum['hyperparameters'])}"
            if quality.get("hyperparameter_error") is not None:
                text += f" (distance {quality['hyperparameter_error']:.3g})"
            rows.append(("found", text))
    return rows


def _vector(values: Sequence[float]) -> str:
    return "(" + ", ".join(f"{v:.3g}" for v in values) + ")"


# -- compare-strategies ----------------------------------------------------------------------------
def compare_view(
    scenario_name: str,
    description: str | None,
    ranked: Sequence[Ranked],
    failed: Sequence[tuple[str, str]] = (),
    *,
    baseline: str | None = None,
    top: int | None = None,
    duplicates: int = 0,
) -> Group:
    """The heading, the ranked table (the first ``top`` plans), what could not be planned, a legend."""
    shown = list(ranked if top is None else ranked[:top])
    parts: list[RenderableType] = [title(scenario_name, description), compare_table(shown)]
    for error, names in group_failures(failed).items():
        line = Text("✗ cannot be planned: ", style="bold red")
        line.append(f"{error}: ", style="red")
        line.append(", ".join(display_name(n) for n in names))
        parts.append(line)
    legend = ["ranked by time per sample"]
    if baseline:
        legend.append(f"speed-up against {display_name(baseline)}")
    marks = []
    if any(r.pareto for r in ranked):
        marks.append(f"{PARETO_MARK} on the time/memory Pareto front")
    if any(not r.result.fits for r in ranked):
        marks.append("✗ does not fit in memory")
    if len(shown) < len(ranked):
        marks.append(f"{len(ranked) - len(shown)} more plan(s) not shown (--top {top})")
    if duplicates:
        marks.append(f"{duplicates} sweep variant(s) identical to one above not repeated")

    def legend_text(width: int) -> Text:
        lines = legend + (
            ["compute/comm/idle: shares of the time on the device computing longest (comm: exposed)"]
            if width >= WIDE_TABLE
            else []
        )
        text = Text("; ".join(lines), style="dim")
        if marks:
            text.append("\n" + "; ".join(marks), style="dim")
        return text

    parts.append(ByWidth(legend_text))
    return Group(*parts)


def display_name(variant_name: str) -> str:
    """A variant name with a space after each comma, so long names wrap between overrides.

    >>> display_name("dp[num_replicas=8,algorithm=ring]")
    'dp[num_replicas=8, algorithm=ring]'
    """
    return variant_name.replace(",", ", ")


def group_failures(failed: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    """Variant names by the error that stopped them, in first-seen order."""
    groups: dict[str, list[str]] = {}
    for name, error in failed:
        groups.setdefault(error, []).append(name)
    return groups


def short_bound(r: PlanResult) -> str:
    """A few words on what bounds a plan, for the comparison table (the full line is in simulate).

    The rule is :func:`parplan.api.results.bound_of`, the one the plan's ``bottleneck`` line uses:
    memory if it does not fit, else the largest of compute, exposed communication and idle time on
    the critical device.
    """
    bound = bound_of(r)
    if bound.kind == "memory":
        worst = bound.worst
        if worst is None:
            return r.infeasible_reason or "does not fit"
        more = bound.short_devices - 1
        extra = f" (+{more})" if more > 0 else ""
        return f"memory: {worst.device} {hz.size(worst.total_bytes)} > {hz.size(worst.capacity_bytes)}{extra}"
    if bound.kind == "compute":
        return f"compute on {r.critical_device}"
    if bound.kind == "link":
        return f"link {r.busiest_link} ({hz.percent(r.busiest_link_utilisation)} busy)"
    if bound.kind == "latency":
        return "communication latency"
    if bound.kind == "bubble":
        return f"pipeline bubble ({hz.percent(r.bubble_fraction or 0.0)})"
    return "waiting for other devices"


def _share(part_s: float, step_s: float) -> str:
    return hz.percent(part_s / step_s) if step_s > 0 else "—"


def compare_table(ranked: Sequence[Ranked], width: int | None = None) -> RenderableType:
    """One row per plan in rank order (built for the console's width unless ``width`` is given).

    The time column is per step when every plan's unit is a step (per round or generation
    otherwise, with the unit on each row); compute / comm / idle are shares of the unit time on
    the critical device (comm: exposed communication), shown from :data:`WIDE_TABLE` columns.
    """
    if width is None:
        return ByWidth(lambda w: compare_table(ranked, w))
    units = {r.result.unit for r in ranked}
    single_unit = next(iter(units)) if len(units) == 1 else None
    split = width >= WIDE_TABLE
    longest = max((len(part) for r in ranked for part in display_name(r.variant_name).split()), default=4)
    table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1))
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("plan", overflow="fold", min_width=min(longest, 24), max_width=40)
    table.add_column(single_unit or "time", justify="right", no_wrap=True)
    table.add_column("per sample", justify="right", no_wrap=True)
    table.add_column("speed-up", justify="right", no_wrap=True)
    if split:
        for col in ("compute", "comm", "idle"):
            table.add_column(col, justify="right", no_wrap=True)
    table.add_column("memory", justify="right", no_wrap=True)
    table.add_column(PARETO_MARK, justify="center", no_wrap=True)
    table.add_column("bound by", overflow="fold", ratio=1, min_width=16)
    for r in ranked:
        res = r.result
        style = "" if res.fits else "red"
        mem = hz.size(res.peak_memory_bytes) + ("" if res.fits else " ✗")
        time_text = hz.seconds(res.step_time_s) + ("" if single_unit else f"/{res.unit}")
        shares = (
            [
                _share(res.compute_s, res.step_time_s),
                _share(res.exposed_comm_s, res.step_time_s),
                _share(res.idle_s, res.step_time_s),
            ]
            if split
            else []
        )
        table.add_row(
            str(r.rank),
            Text(display_name(r.variant_name), style="bold" if r.rank == 1 and res.fits else style),
            time_text,
            hz.seconds(r.time_per_sample_s),
            hz.speedup(r.speedup),
            *shares,
            Text(mem, style=style),
            PARETO_MARK if r.pareto else "",
            Text(short_bound(res), style=style),
        )
    return table
