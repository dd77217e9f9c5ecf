"""``parplan search``'s outputs: the rich view, the ``--json`` document, ``--csv`` and the front's plot.

The JSON document (``"command": "search"``, the same ``version`` and ``tool`` fields as the other
commands' documents)::

    {
      "version": 1, "tool": "parplan 0.1.0", "command": "search",
      "scenario": {"name", "description", "file"},
      "seed": int,                        # recorded; the exhaustive search does not depend on it
      "search": {...},                    # the SearchSpec searched (limit, top_k, devices applied)
      "counts": {"enumerated", "pruned": {reason: n}, "evaluated", "over_memory", "fitting",
                 "not_evaluated"},
      "interrupted": str | null,          # why the search stopped early (a Ray cluster lost)
      "ranking": "step_time",             # plans that fit first, by step time, ties by table row
      "winner": {"label", "step_time_s", "bound"} | null,
      "plans": [{"rank", "label", <the plan's fields>, "step_time_s", "peak_memory_bytes", "fits",
                 "mfu", "bound", "pareto"}, ...],          # every evaluated candidate, in rank order
      "front": [label, ...],              # the (step time, peak memory, devices) Pareto front
      "top": [checked, ...],              # the best top_k: closed form against the event engine
      "hand_written": [checked, ...]      # the scenario's own plans, the same way, and their rank
    }

The document's JSON Schema ships as ``parplan/report/schema/search-v1.schema.json``
(:func:`~parplan.report.json_report.load_schema` with
:data:`~parplan.report.json_report.SEARCH_SCHEMA_RESOURCE`).

``checked`` is ``{"name", "closed_form_step_time_s", "event_step_time_s", "disagreement"
(event / closed form - 1), "bound", "would_rank", "error", "event"}``, ``event`` being the event
engine's figures as a plan of the simulate / compare-strategies document (with ``plan`` the
checked plan's name and no ``overrides``).
Nothing depends on the clock (the elapsed time is printed on stderr by the CLI, never written), so
identical inputs give identical bytes. The CSV has one row per evaluated candidate
(:data:`CSV_COLUMNS`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from parplan.report import humanize as hz
from parplan.report.layout import FitLog, FitNote, Fitted
from parplan.report.tables import PARETO_MARK, title

if TYPE_CHECKING:
    from parplan.api.search.run import CandidateRow, Checked, SearchResult

SHOWN = 20
"""Candidates in the printed ranking (the JSON and CSV hold every one)."""

FIELDS = (
    "devices", "dp", "tp", "pp", "cp", "ep", "virtual_stages", "microbatch_size", "zero", "fsdp",
    "recompute", "sequence_parallel", "algorithm", "bucket_bytes",
)  # fmt: skip
"""A candidate's settings, in the order of the JSON entries and CSV columns."""

CSV_COLUMNS = ("rank", "label", *FIELDS, "step_time_s", "peak_memory_bytes", "fits", "mfu", "bound", "pareto")
"""Columns of ``search --csv``."""

MAX_PLOTTED = 5000
"""Candidates drawn in the front's plot besides the front itself (the fastest that fit)."""


# -- JSON and CSV ----------------------------------------------------------------------------------
def candidate_entry(row: CandidateRow) -> dict[str, Any]:
    """One evaluated candidate as a JSON object (and CSV row)."""
    return {
        "rank": row.rank,
        "label": row.label,
        **row.fields,
        "step_time_s": row.step_time_s,
        "peak_memory_bytes": row.peak_memory_bytes,
        "fits": row.fits,
        "mfu": row.mfu,
        "bound": row.bound,
        "pareto": row.pareto,
    }


def checked_entry(checked: Checked) -> dict[str, Any]:
    """A plan evaluated in closed form and by the event engine (``event``: a plan object of the
    simulate / compare-strategies report, so one schema definition describes both)."""
    from parplan.report.json_report import plan_entry

    return {
        "name": checked.name,
        "closed_form_step_time_s": checked.analytic.step_time_s if checked.analytic else None,
        "event_step_time_s": checked.event.step_time_s if checked.event else None,
        "disagreement": checked.disagreement,
        "fits": checked.analytic.fits if checked.analytic else None,
        "peak_memory_bytes": checked.analytic.peak_memory_bytes if checked.analytic else None,
        "bound": checked.bound,
        "would_rank": checked.would_rank,
        "error": checked.error,
        "event": plan_entry(checked.event, plan=checked.name) if checked.event else None,
    }


def search_document(result: SearchResult) -> dict[str, Any]:
    """The ``search --json`` document (module docstring)."""
    from parplan.report.json_report import REPORT_VERSION, scenario_info, tool_name

    spec = result.scenario
    counts = result.counts
    winner = result.winner
    return {
        "version": REPORT_VERSION,
        "tool": tool_name(),
        "command": "search",
        "scenario": scenario_info(spec.name, spec.description, result.scenario_file),
        "seed": result.seed,
        "search": result.search.model_dump(mode="json", by_alias=True),
        "counts": {
            "enumerated": counts.enumerated,
            "pruned": dict(counts.pruned),
            "evaluated": counts.evaluated,
            "over_memory": counts.over_memory,
            "fitting": counts.fitting,
            "not_evaluated": counts.not_evaluated,
        },
        "interrupted": result.interrupted,
        "ranking": "step_time",
        "winner": None
        if winner is None
        else {"label": winner.label, "step_time_s": winner.step_time_s, "bound": result.winner_bound},
        "plans": [candidate_entry(row) for row in result.rows()],
        "front": [row.label for row in result.front()],
        "top": [checked_entry(c) for c in result.top],
        "hand_written": [checked_entry(c) for c in result.hand_written],
    }


def search_csv(document: Mapping[str, Any]) -> str:
    """One CSV row per evaluated candidate of a search document."""
    from parplan.report.csv_report import rows_csv
    from parplan.report.json_report import whole_bytes

    return rows_csv(CSV_COLUMNS, whole_bytes(document["plans"]))


# -- the rich view ---------------------------------------------------------------------------------
def search_view(result: SearchResult, *, shown: int = SHOWN) -> Group:
    """Counts, the ranking (first ``shown``) with the scenario's plans, the front, the winner's
    bound, and the event engine against the closed form for the best plans."""
    log = FitLog()
    spec = result.scenario
    parts: list[RenderableType] = [title(spec.name, spec.description), Text(counts_line(result), style="dim")]
    if result.interrupted:
        parts.append(
            Text(f"✗ {result.interrupted}; the ranking covers the candidates evaluated", style="red")
        )
    rows = list(result.rows(shown))
    if rows:
        parts += [Text(""), Text("ranking (closed form)", style="bold"), ranking_table(rows, log)]
        if result.counts.evaluated > len(rows):
            more = f"{result.counts.evaluated - len(rows):,} more candidates in --json / --csv"
            parts.append(
                Text(f"{PARETO_MARK} on the Pareto front (step, memory, devices); {more}", style="dim")
            )
    if result.hand_written:
        parts += [
            Text(""),
            Text("the scenario's plans", style="bold"),
            checked_table(result.hand_written, log, True),
        ]
    front = result.front()
    if front:
        parts += [Text(""), Text("Pareto front: step time, peak memory, devices", style="bold")]
        parts.append(front_table(front, log))
    parts.append(Text(""))
    parts.append(winner_line(result))
    if result.top:
        parts += [Text(""), Text("event engine against closed form, best plans", style="bold")]
        parts.append(checked_table(result.top, log, False))
    parts.append(FitNote(log))
    return Group(*parts)


def counts_line(result: SearchResult) -> str:
    """Where the candidates went: enumerated, pruned (by reason), evaluated, over memory."""
    c = result.counts
    pruned = sum(c.pruned.values())
    text = f"{c.enumerated:,} candidates enumerated, {pruned:,} pruned"
    reasons = sorted(c.pruned.items(), key=lambda kv: (-kv[1], kv[0]))
    if reasons:
        text += " (" + ", ".join(f"{reason}: {n:,}" for reason, n in reasons if n) + ")"
    text += f"; {c.evaluated:,} evaluated, {c.over_memory:,} over memory, {c.fitting:,} fit"
    if c.not_evaluated:
        text += f"; {c.not_evaluated:,} not evaluated"
    return text


def winner_line(result: SearchResult) -> Text:
    """The winner and what bounds it."""
    winner = result.winner
    if winner is None:
        return Text("✗ no candidate fits in memory", style="bold red")
    line = Text("winner: ", style="bold")
    line.append(f"{winner.label} {hz.seconds(winner.step_time_s)} per step", style="bold green")
    if result.winner_bound:
        line.append(f"; {result.winner_bound}")
    return line


def ranking_table(rows: Sequence[CandidateRow], log: FitLog) -> Fitted:
    """One line per candidate: place, label, devices, step, memory, MFU, front, bound."""
    table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1))
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("plan", overflow="fold", min_width=16)
    for name in ("devices", "step", "memory", "MFU"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column(PARETO_MARK, justify="center", no_wrap=True)
    table.add_column("bound by", overflow="fold", min_width=12)
    for row in rows:
        style = "" if row.fits else "red"
        table.add_row(
            str(row.rank),
            Text(row.label, style="bold" if row.rank == 1 and row.fits else style),
            str(row.fields["devices"]),
            hz.seconds(row.step_time_s),
            Text(hz.size(row.peak_memory_bytes) + ("" if row.fits else " ✗"), style=style),
            hz.percent(row.mfu),
            PARETO_MARK if row.pareto else "",
            row.bound,
        )
    return Fitted(table, "ranking table", log)


def front_table(rows: Sequence[CandidateRow], log: FitLog) -> Fitted:
    """The Pareto front, fastest first."""
    table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1))
    for name, justify in (("#", "right"), ("plan", "left"), ("step", "right"), ("memory", "right")):
        table.add_column(name, justify=justify, no_wrap=name != "plan", overflow="fold")  # type: ignore[arg-type]
    table.add_column("devices", justify="right", no_wrap=True)
    for row in rows:
        table.add_row(
            str(row.rank),
            row.label,
            hz.seconds(row.step_time_s),
            hz.size(row.peak_memory_bytes),
            str(row.fields["devices"]),
        )
    return Fitted(table, "front table", log)


def _percent_signed(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value * 100:+.1f}%"


def checked_table(checked: Sequence[Checked], log: FitLog, rank: bool) -> Fitted:
    """Closed form beside the event engine, per plan (with the rank it would take when ``rank``)."""
    table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1))
    table.add_column("plan", overflow="fold", min_width=12)
    for name in ("closed form", "event", "differ", "memory"):
        table.add_column(name, justify="right", no_wrap=True)
    if rank:
        table.add_column("would rank", justify="right", no_wrap=True)
    table.add_column("bound by (closed form)", overflow="fold", min_width=16)
    for c in checked:
        a, e = c.analytic, c.event
        memory = "-" if a is None else hz.size(a.peak_memory_bytes) + ("" if a.fits else " ✗")
        cells: list[str | Text] = [
            c.name,
            hz.seconds(a.step_time_s) if a else "-",
            hz.seconds(e.step_time_s) if e else "-",
            _percent_signed(c.disagreement),
            Text(memory, style="" if a is None or a.fits else "red"),
        ]
        if rank:
            cells.append(f"#{c.would_rank}" if c.would_rank is not None and a is not None and a.fits else "-")
        cells.append(Text(c.error, style="red") if c.error else Text(c.bound or "-"))
        table.add_row(*cells)
    return Fitted(table, "checks table", log)


# -- the front's plot ------------------------------------------------------------------------------
def plotted(result: SearchResult) -> Iterator[CandidateRow]:
    """The candidates the plot draws: the fastest :data:`MAX_PLOTTED` that fit, and the front."""
    seen = set()
    for row in result.rows(MAX_PLOTTED):
        if row.fits:
            seen.add(row.row)
            yield row
    for row in result.front():
        if row.row not in seen:
            yield row


def plot_front(result: SearchResult, path: str | Path) -> None:
    """Step time against peak memory of the candidates that fit, one colour per device count, the
    Pareto front as a red staircase (the ``plot`` extra)."""
    from parplan.errors import ParplanError
    from parplan.report.plot import _figure, _log_time_axis, _palette, _save

    rows = list(plotted(result))
    if not rows:
        raise ParplanError("nothing to plot: no candidate fits in memory")
    fig = _figure(8.0, 5.0)
    ax = fig.add_subplot()
    counts = sorted({int(r.fields["devices"]) for r in rows})
    colours = _palette(len(counts))
    for colour, count in zip(colours, counts, strict=True):
        group = [r for r in rows if r.fields["devices"] == count and not r.pareto]
        if group:
            ax.scatter(
                [r.peak_memory_bytes / 2**30 for r in group],
                [r.step_time_s for r in group],
                s=8,
                color=colour,
                alpha=0.5,
                label=f"{count} devices",
            )
    front = sorted((r for r in rows if r.pareto), key=lambda r: (r.peak_memory_bytes, r.step_time_s))
    ax.plot(
        [r.peak_memory_bytes / 2**30 for r in front],
        [r.step_time_s for r in front],
        "o-",
        color="#d62728",
        drawstyle="steps-post",
        label="Pareto front",
        zorder=3,
    )
    _log_time_axis(ax, [r.step_time_s for r in rows])
    ax.set_xlabel("peak memory per device (GiB)")
    ax.set_ylabel("step time (closed form)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    winner = result.winner
    name = result.scenario.name
    ax.set_title(f"{name}: {winner.label if winner else 'no plan fits'}", fontsize=10)
    _save(fig, path)
