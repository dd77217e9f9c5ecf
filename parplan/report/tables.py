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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from parplan.api.ranking import BASELINE_RULES
from parplan.api.results import bound_of
from parplan.report import humanize as hz
from parplan.report.layout import FitLog, FitNote, Fitted

if TYPE_CHECKING:
    from parplan.api.ranking import Ranked
    from parplan.api.results import PlanResult
    from parplan.plan.base import MemoryBreakdown

PARETO_MARK = "●"
"""Marks plans on the time/memory Pareto front in the comparison table."""

MAX_SERIES = 12
"""Longest per-round / per-generation series printed in full; longer ones are elided in the middle."""


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
    """The summary table, one block per plan, and a line saying what was wrapped to fit (if anything)."""
    log = FitLog()
    parts: list[RenderableType] = [title(scenario_name, description)]
    if results:
        parts.append(summary_table(results, log))
    for name, error in failed:
        parts.append(Text(f"✗ {name}: cannot be planned: {error}", style="red"))
    for r in results:
        parts.append(Text(""))
        parts.append(plan_block(r, log))
    parts.append(FitNote(log))
    return Group(*parts)


def summary_table(results: Sequence[PlanResult], log: FitLog | None = None) -> Fitted:
    """One row per plan: the unit time and how it splits, throughput, peak memory (✗: does not fit).

    Every column always shows; the strategy column wraps when the table is too wide.
    """
    table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1))
    table.add_column("plan", no_wrap=True)
    table.add_column("strategy", overflow="fold", min_width=12)
    for col in ("time", "compute", "exposed", "idle", "samples/s", "peak memory"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in results:
        style = "" if r.fits else "bold red"
        table.add_row(
            Text(r.name, style=style),
            r.description,
            f"{hz.seconds(r.step_time_s)}/{r.unit}",
            hz.seconds(r.compute_s),
            hz.seconds(r.exposed_comm_s),
            hz.seconds(r.idle_s),
            hz.rate(r.throughput_samples_per_s),
            Text(hz.size(r.peak_memory_bytes) + ("" if r.fits else " ✗"), style=style),
        )
    return Fitted(table, "summary table", log)


def plan_block(r: PlanResult, log: FitLog | None = None) -> Group:
    """Everything about one plan, as label/value rows (values wrap like prose to fit)."""
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
        grid.add_row("memory", memory_table(r.memory, log))
    for label, value in quality_rows(r.quality):
        grid.add_row(label, value)
    for note in r.notes:
        grid.add_row("note", Text(note, style="dim"))
    style = "bold red" if not r.fits else "bold yellow"
    grid.add_row(Text("bound by", style=style), Text(r.bottleneck, style=style))
    head = Text(r.name, style="bold cyan")
    head.append(f"  {r.description}", style="dim")
    return Group(head, Fitted(grid, "plan details", log, note=False))


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


def memory_table(memory: Sequence[MemoryBreakdown], log: FitLog | None = None) -> Fitted:
    """Memory per device group: the breakdown, the total against capacity and the share used.

    Every column always shows; the devices column wraps when the table is too wide.
    """
    headers = ["devices", "params", "grads", "optimizer", "activations", "buffers"]
    headers += ["total", "capacity", "used"]
    table = Table(box=None, pad_edge=False, padding=(0, 1), header_style="dim")
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i == 0 else "right", no_wrap=i != 0, overflow="fold")
    for row in group_memory(memory):
        m = row.memory
        used = m.total_bytes / m.capacity_bytes if m.capacity_bytes > 0 else float("inf")
        style = "" if m.fits else "bold red"
        table.add_row(
            row.label,
            hz.size(m.params_bytes),
            hz.size(m.grads_bytes),
            hz.size(m.optimizer_bytes),
            hz.size(m.activations_bytes),
            hz.size(m.buffers_bytes),
            Text(hz.size(m.total_bytes), style=style),
            hz.size(m.capacity_bytes),
            Text(hz.percent(used) if m.fits else f"{hz.percent(used)} ✗", style=style),
        )
    return Fitted(table, "memory table", log)


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
    """Federated loss/accuracy per round, PBT best score per generation and a sharded plan's model
    FLOPs utilisation, one line each."""
    rows: list[tuple[str, str]] = []
    if quality.get("mfu") is not None:
        text = f"{hz.percent(quality['mfu'])} model FLOPs utilisation"
        if quality.get("model_tflops_per_gpu") is not None:
            text += f", {quality['model_tflops_per_gpu']:.0f} model TFLOP/s per GPU"
        if quality.get("hfu") is not None:
            text += f" (hardware FLOPs with recomputation: {hz.percent(quality['hfu'])})"
        rows.append(("MFU", text))
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
                text += f" (distance {_short(quality['hyperparameter_error'])})"
            rows.append(("found", text))
    return rows


def _vector(values: Sequence[float]) -> str:
    return "(" + ", ".join(_short(v) for v in values) + ")"


def _short(value: float) -> str:
    """Up to 3 significant digits without trailing zeros, never an exponent.

    >>> _short(0.6), _short(0.277), _short(1e-05), _short(1500.0)
    ('0.6', '0.277', '0.00001', '1500')
    """
    text = hz.sig3(value)
    return text.rstrip("0").rstrip(".") if "." in text else text


# -- compare-strategies ----------------------------------------------------------------------------
def compare_view(
    scenario_name: str,
    description: str | None,
    ranked: Sequence[Ranked],
    failed: Sequence[tuple[str, str]] = (),
    *,
    baseline: str | None = None,
    baseline_rule: str | None = None,
    top: int | None = None,
    duplicates: int = 0,
) -> Group:
    """The heading, the ranked table (the first ``top`` plans), what could not be planned, a legend."""
    shown = list(ranked if top is None else ranked[:top])
    log = FitLog()
    parts: list[RenderableType] = [title(scenario_name, description), compare_table(shown, log)]
    for error, names in group_failures(failed).items():
        line = Text("✗ cannot be planned: ", style="bold red")
        line.append(f"{error}: ", style="red")
        line.append(", ".join(display_name(n) for n in names))
        parts.append(line)
    legend = ["ranked by time per sample"]
    if baseline:
        how = f" ({BASELINE_RULES[baseline_rule]})" if baseline_rule in BASELINE_RULES else ""
        legend.append(f"speed-up against {display_name(baseline)}{how}")
    legend.append("compute/comm/idle: shares of the time on the device computing longest (comm: exposed)")
    marks = []
    if any(r.pareto for r in ranked):
        marks.append(f"{PARETO_MARK} on the time/memory Pareto front")
    if any(not r.result.fits for r in ranked):
        marks.append("✗ does not fit in memory")
    if len(shown) < len(ranked):
        marks.append(f"{len(ranked) - len(shown)} more plan(s) not shown (--top {top})")
    if duplicates:
        marks.append(f"{duplicates} sweep variant(s) identical to one above not repeated")
    text = Text("; ".join(legend), style="dim")
    if marks:
        text.append("\n" + "; ".join(marks), style="dim")
    parts += [text, FitNote(log)]
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


def compare_table(ranked: Sequence[Ranked], log: FitLog | None = None) -> Fitted:
    """One row per plan in rank order; the plan and "bound by" columns wrap when it is too wide.

    The time column is per step when every plan's unit is a step (per round or generation
    otherwise, with the unit on each row); compute / comm / idle are shares of the unit time on
    the critical device (comm: exposed communication).
    """
    units = {r.result.unit for r in ranked}
    single_unit = next(iter(units)) if len(units) == 1 else None
    longest = max((len(part) for r in ranked for part in display_name(r.variant_name).split()), default=4)
    table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1))
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("plan", overflow="fold", min_width=min(longest, 24), max_width=40)
    table.add_column(single_unit or "time", justify="right", no_wrap=True)
    table.add_column("per sample", justify="right", no_wrap=True)
    table.add_column("speed-up", justify="right", no_wrap=True)
    for col in ("compute", "comm", "idle"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("memory", justify="right", no_wrap=True)
    mfu = any(r.result.quality.get("mfu") is not None for r in ranked)
    if mfu:
        table.add_column("MFU", justify="right", no_wrap=True)
    table.add_column(PARETO_MARK, justify="center", no_wrap=True)
    table.add_column("bound by", overflow="fold", min_width=16)
    for r in ranked:
        res = r.result
        style = "" if res.fits else "red"
        mem = hz.size(res.peak_memory_bytes) + ("" if res.fits else " ✗")
        time_text = hz.seconds(res.step_time_s) + ("" if single_unit else f"/{res.unit}")
        utilisation = res.quality.get("mfu")
        table.add_row(
            str(r.rank),
            Text(display_name(r.variant_name), style="bold" if r.rank == 1 and res.fits else style),
            time_text,
            hz.seconds(r.time_per_sample_s),
            hz.speedup(r.speedup),
            _share(res.compute_s, res.step_time_s),
            _share(res.exposed_comm_s, res.step_time_s),
            _share(res.idle_s, res.step_time_s),
            Text(mem, style=style),
            *([hz.percent(utilisation) if utilisation is not None else "-"] if mfu else []),
            PARETO_MARK if r.pareto else "",
            Text(short_bound(res), style=style),
        )
    return Fitted(table, "ranking table", log)
