"""One self-contained HTML page of a ``simulate``, ``compare-strategies`` or ``search`` run (``--html FILE``).

The page is built from the command's ``--json`` document (:mod:`parplan.report.json_report`) and,
where the run kept them, the simulated timelines of its plans:

- the ranked table of plans (every plan of the document, in its order);
- with two or more plans that fit, time per sample against peak memory, one point per plan, the
  Pareto front over (time per sample, peak memory, devices) marked (:mod:`parplan.api.pareto`);
- per plan (the first :data:`MAX_DETAILED_PLANS`): what bounds it, a Gantt of compute,
  communication and idle time per device (:mod:`parplan.report.timeline_bars`), the busiest links,
  and memory per device against its capacity.

``search`` has a page of its own (:func:`search_page`): the counts, the winner and its bound, the
ranked candidates, the scenario's plans beside them, step time against memory with the front, and
the re-simulated best plans' sections as above.

Charts are drawn by plotly.js (the ``html`` extra: ``pip install 'parplan[html]'``), chosen because
its Python package ships the JavaScript bundle, so the page inlines it and opens without a network,
and because it draws Gantt bars, stacked bars and scatter plots with hover and zoom from plain JSON.
Bokeh would also inline its JS but pulls in pandas, pillow and tornado; Altair needs a CDN or a
separate bundler to work offline. plotly is imported only when a page is built; without it,
:func:`require_plotly` raises a :class:`~parplan.errors.ParplanError` saying how to install it.

Identical inputs give byte-identical pages: figure ids are numbered in page order, nothing comes
from the clock, and figures are serialised with plotly's JSON encoder without uids.
"""

from __future__ import annotations

import html
import importlib.util
import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from parplan.api.pareto import non_dominated
from parplan.errors import ParplanError
from parplan.report import humanize
from parplan.report.timeline_bars import KINDS, DeviceLanes, LinkLoad, busiest_links, device_lanes

if TYPE_CHECKING:
    from parplan.api.results import PlanResult

MISSING_MESSAGE = (
    "HTML reports need plotly, which is not installed; install the html extra: pip install 'parplan[html]'"
)
"""The error message when plotly is missing."""

MAX_DETAILED_PLANS = 12
"""Plans (in the document's order: best first in a comparison) that get a section of their own."""

MAX_DEVICES = 32
"""Device lanes per Gantt and devices per memory chart; the rest are left out and the page says so."""

KIND_COLOURS = {"compute": "#1f77b4", "communication": "#d62728", "idle": "#d9d9d9"}
MEMORY_PARTS = ("params", "grads", "optimizer", "activations", "buffers")
_MEMORY_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b")
_GIB = 1024.0**3


def html_available() -> bool:
    """Whether plotly can be imported (without importing it)."""
    return importlib.util.find_spec("plotly") is not None


def require_plotly() -> None:
    """Raise :class:`ParplanError` with :data:`MISSING_MESSAGE` when plotly is missing."""
    if not html_available():
        raise ParplanError(MISSING_MESSAGE)


class _Figures:
    """The page's figures, numbered in page order (so div ids are the same on every run)."""

    def __init__(self) -> None:
        self.scripts: list[str] = []

    def add(self, data: list[dict[str, Any]], layout: dict[str, Any], height_px: int) -> str:
        import plotly.graph_objects as go
        import plotly.io as pio

        div_id = f"parplan-figure-{len(self.scripts) + 1}"
        layout = {"template": "plotly_white", "height": height_px, "margin": {"t": 40, "b": 40}, **layout}
        figure = go.Figure(data=data, layout=layout)
        text = pio.to_json(figure, validate=False, pretty=False, remove_uids=True, engine="json")
        config = json.dumps({"responsive": True, "displaylogo": False})
        self.scripts.append(
            f"(function (f) {{ Plotly.newPlot({json.dumps(div_id)}, f.data, f.layout, {config}); }})"
            f"({_script_safe(text)});"
        )
        return f'<div id="{div_id}" class="figure"></div>'


def _script_safe(text: str) -> str:
    """JSON text safe inside a <script> element (a plan named ``</script>`` cannot end it)."""
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def html_page(document: Mapping[str, Any], results: Mapping[str, PlanResult] | None = None) -> str:
    """The page for ``document`` (a ``simulate`` or ``compare-strategies`` JSON document);
    ``results`` maps plan names of the document to their results, whose timelines (when kept)
    give the Gantt charts and busiest links. Raises :class:`ParplanError` without plotly."""
    require_plotly()

    results = results or {}
    figures = _Figures()
    scenario = document.get("scenario") or {}
    plans: list[Mapping[str, Any]] = list(document.get("plans") or [])
    title = f"parplan {document.get('command', '')}: {scenario.get('name', '')}"
    body = [f"<h1>{_e(title)}</h1>"]
    if scenario.get("description"):
        body.append(f"<p class='lead'>{_e(scenario['description'])}</p>")
    body.append(_summary_line(document))
    body.append("<h2>Plans</h2>")
    body.append(_ranked_table(document, plans))
    body.extend(_failed(document))
    front = _front(plans)
    if sum(1 for p in plans if p.get("fits")) >= 2:
        body.append("<h2>Time against memory</h2>")
        body.append(
            "<p>Each plan that fits; the Pareto front over time per sample, peak memory and devices "
            "is marked (no other plan is at least as good in all three and better in one).</p>"
        )
        body.append(_scatter(figures, plans, front))
    for i, plan in enumerate(plans[:MAX_DETAILED_PLANS]):
        body.append(_plan_section(figures, i + 1, plan, results.get(str(plan.get("name")))))
    if len(plans) > MAX_DETAILED_PLANS:
        body.append(
            f"<p class='note'>{len(plans) - MAX_DETAILED_PLANS} more plans are in the table only.</p>"
        )
    return _page(title, document, body, figures)


def _page(title: str, document: Mapping[str, Any], body: list[str], figures: _Figures) -> str:
    """The whole page: ``body``'s sections and the figures' scripts, plotly.js inlined."""
    import plotly.offline

    return _PAGE.format(
        title=_e(title),
        style=_STYLE,
        plotly_js=plotly.offline.get_plotlyjs(),
        body="\n".join(body),
        scripts="\n".join(figures.scripts),
        tool=_e(document.get("tool", "parplan")),
    )


def _summary_line(document: Mapping[str, Any]) -> str:
    parts = [f"scenario file {_e((document.get('scenario') or {}).get('file'))}"]
    if document.get("baseline"):
        parts.append(f"speed-ups against {_e(document['baseline'])}")
    for sweep in document.get("sweeps") or []:
        parts.append(f"sweep {_e(sweep['knob'])} = {_e(', '.join(map(str, sweep['values'])))}")
    for knob, value in (document.get("overrides") or {}).items():
        parts.append(f"{_e(knob)} = {_e(value)}")
    return f"<p class='meta'>{'; '.join(parts)}</p>"


def _per_sample(plan: Mapping[str, Any]) -> float:
    if plan.get("time_per_sample_s") is not None:
        return float(plan["time_per_sample_s"])
    samples = plan.get("samples_per_step") or 0
    step = plan.get("step_time_s")
    return float(step) / float(samples) if samples and step is not None else math.inf


def _front(plans: Sequence[Mapping[str, Any]]) -> list[bool]:
    """Which plans are on the (time per sample, peak memory, devices) front; infeasible ones never."""
    feasible = [i for i, p in enumerate(plans) if p.get("fits")]
    points = [
        (_per_sample(plans[i]), float(plans[i].get("peak_memory_bytes") or 0), float(plans[i]["num_devices"]))
        for i in feasible
    ]
    on = {i for i, flag in zip(feasible, non_dominated(points), strict=True) if flag}
    return [i in on for i in range(len(plans))]


def _seconds(value: Any) -> str:
    return humanize.seconds(float(value)) if value is not None else "—"


def _ranked_table(document: Mapping[str, Any], plans: Sequence[Mapping[str, Any]]) -> str:
    compare = document.get("command") == "compare-strategies"
    head = ["#", "plan", "strategy", "step time", "time / sample", "throughput", "peak memory", "devices"]
    head += ["speed-up", "front"] if compare else []
    head += ["fits", "bound by"]
    rows = ["<tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    front = _front(plans)
    for i, p in enumerate(plans):
        cells = [
            str(p.get("rank", i + 1)),
            f"<a href='#plan-{i + 1}'>{_e(p['name'])}</a>" if i < MAX_DETAILED_PLANS else _e(p["name"]),
            _e(p.get("strategy", "")),
            _seconds(p.get("step_time_s")),
            _seconds(_per_sample(p)) if math.isfinite(_per_sample(p)) else "—",
            f"{humanize.rate(float(p.get('throughput_samples_per_s') or 0))} samples/s",
            humanize.size(float(p.get("peak_memory_bytes") or 0)),
            str(p.get("num_devices", "")),
        ]
        if compare:
            cells += [humanize.speedup(p.get("speedup")), "★" if front[i] else ""]
        cells += ["yes" if p.get("fits") else "<span class='bad'>no</span>", _e(p.get("bottleneck", ""))]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return "<table class='plans'>" + "\n".join(rows) + "</table>"


def _failed(document: Mapping[str, Any]) -> list[str]:
    failed = document.get("failed") or []
    if not failed:
        return []
    items = "".join(f"<li><b>{_e(f['name'])}</b>: {_e(f['error'])}</li>" for f in failed)
    return [f"<h3>Plans that could not be built</h3><ul class='failed'>{items}</ul>"]


def _scatter(
    figures: _Figures,
    plans: Sequence[Mapping[str, Any]],
    front: list[bool],
    x_title: str = "time per sample",
) -> str:
    """Each plan that fits at (``x_title`` in ms, peak memory), the front marked."""
    data = []
    groups = (("on the Pareto front", True, "#d62728", 12), ("dominated", False, "#7f7f7f", 9))
    for label, flag, colour, size in groups:
        chosen = [p for p, on in zip(plans, front, strict=True) if on == flag and p.get("fits")]
        if not chosen:
            continue
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": label,
                "x": [_per_sample(p) * 1e3 for p in chosen],
                "y": [float(p.get("peak_memory_bytes") or 0) / _GIB for p in chosen],
                "text": [f"{p['name']} ({p['num_devices']} devices)" for p in chosen],
                "marker": {"color": colour, "size": size},
                "hovertemplate": "%{text}<br>%{x:.4g} ms "
                + _hover_unit(x_title)
                + "<br>%{y:.3g} GiB<extra></extra>",
            }
        )
    fitting = [p for p in plans if p.get("fits")]
    points = [(_per_sample(p) * 1e3, float(p.get("peak_memory_bytes") or 0) / _GIB) for p in fitting]
    staircase = sorted(pt for pt, on in zip(points, non_dominated(points), strict=True) if on)
    if len(staircase) > 1:
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "front over time and memory",
                "x": [x for x, _ in staircase],
                "y": [y for _, y in staircase],
                "line": {"color": "#d62728", "dash": "dot", "shape": "hv"},
                "hoverinfo": "skip",
            }
        )
    layout = {
        "xaxis": {"title": {"text": f"{x_title} (ms)"}, "type": "log"},
        "yaxis": {"title": {"text": "peak memory per device (GiB)"}},
    }
    return figures.add(data, layout, 420)


def _hover_unit(x_title: str) -> str:
    """``per sample`` for the time-per-sample axis (the words the comparison page always had)."""
    return "per sample" if x_title == "time per sample" else x_title.split()[0]


def _plan_section(figures: _Figures, number: int, plan: Mapping[str, Any], result: PlanResult | None) -> str:
    parts = [f"<section id='plan-{number}'><h2>{_e(plan['name'])}</h2>"]
    if plan.get("description"):
        parts.append(f"<p class='lead'>{_e(plan['description'])}</p>")
    parts.append(
        f"<p><b>{_seconds(plan.get('step_time_s'))}</b> per {_e(plan.get('unit', 'step'))}: "
        f"compute {_seconds(plan.get('compute_s'))}, exposed communication "
        f"{_seconds(plan.get('exposed_comm_s'))}, idle {_seconds(plan.get('idle_s'))} on "
        f"{_e(plan.get('critical_device', ''))}. Bound by {_e(plan.get('bottleneck', ''))}.</p>"
    )
    lanes = device_lanes(result, max_devices=MAX_DEVICES) if result is not None else None
    parts.append("<h3>Timeline per device</h3>")
    if lanes is None:
        parts.append(
            "<p class='note'>No timeline was kept for this plan (plans evaluated in worker processes or "
            "on Ray keep only their figures; run with one job, or simulate it, to see it).</p>"
        )
    else:
        parts.append(_gantt(figures, lanes))
    parts.append("<h3>Busiest links</h3>")
    parts.append(_links(figures, plan, busiest_links(result) if result is not None else []))
    parts.append("<h3>Memory per device</h3>")
    parts.append(_memory(figures, plan))
    parts.append("</section>")
    return "\n".join(parts)


def _gantt(figures: _Figures, lanes: DeviceLanes) -> str:
    data = []
    for kind in KINDS:
        bars = lanes.bars[kind]
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": kind,
                "y": [lanes.devices[d] for d, _, _ in bars],
                "base": [s * 1e3 for _, s, _ in bars],
                "x": [(e - s) * 1e3 for _, s, e in bars],
                "marker": {"color": KIND_COLOURS[kind]},
                "hovertemplate": f"{kind} %{{base:.4g}} ms + %{{x:.4g}} ms<extra>%{{y}}</extra>",
            }
        )
    layout = {
        "barmode": "overlay",
        "bargap": 0.15,
        "showlegend": True,
        "xaxis": {"title": {"text": "time (ms)"}, "range": [0, lanes.makespan_s * 1e3]},
        "yaxis": {"autorange": "reversed", "type": "category", "categoryarray": list(lanes.devices)},
    }
    note = ""
    if lanes.devices_left_out:
        note = f"<p class='note'>{lanes.devices_left_out} more devices are not drawn.</p>"
    return figures.add(data, layout, 120 + 24 * len(lanes.devices)) + note


def _links(figures: _Figures, plan: Mapping[str, Any], links: list[LinkLoad]) -> str:
    if not links:
        if plan.get("busiest_link"):
            return (
                f"<p>{_e(plan['busiest_link'])}: {humanize.percent(float(plan['busiest_link_utilisation']))} "
                f"busy, {humanize.size(float(plan.get('busiest_link_bytes') or 0))} carried.</p>"
            )
        return "<p class='note'>No traffic between devices.</p>"
    rows = ["<tr><th>link</th><th>utilisation</th><th>carried</th><th>busy</th><th>bandwidth</th></tr>"]
    for link in links:
        rows.append(
            f"<tr><td>{_e(link.name)}</td><td>{humanize.percent(link.utilisation)}</td>"
            f"<td>{humanize.size(link.size_bytes)}</td><td>{humanize.seconds(link.busy_s)}</td>"
            f"<td>{humanize.bandwidth(link.bandwidth_Bps)}</td></tr>"
        )
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "y": [link.name for link in links],
            "x": [link.utilisation * 100 for link in links],
            "marker": {"color": "#d62728"},
            "hovertemplate": "%{y}: %{x:.3g}% busy<extra></extra>",
        }
    ]
    layout = {
        "xaxis": {"title": {"text": "average utilisation over the step (%)"}, "range": [0, 100]},
        "yaxis": {"autorange": "reversed", "type": "category", "automargin": True},
        "showlegend": False,
    }
    chart = figures.add(data, layout, 100 + 28 * len(links))
    return "<div class='side'>" + chart + "<table>" + "".join(rows) + "</table></div>"


def _memory(figures: _Figures, plan: Mapping[str, Any]) -> str:
    memory = list(plan.get("memory") or [])
    if not memory:
        return "<p class='note'>No memory figures for this plan.</p>"
    shown = memory[:MAX_DEVICES]
    devices = [str(m["device"]) for m in shown]
    peak = max(float(m.get("total_bytes") or 0) for m in shown)
    capacity = max(float(m.get("capacity_bytes") or 0) for m in shown)
    draw_capacity = capacity <= 4 * peak  # else the capacity would flatten the bars to nothing
    top = max(peak, capacity if draw_capacity else 0.0)
    scale, unit = (_GIB, "GiB") if top >= _GIB else (1024.0**2, "MiB")
    data: list[dict[str, Any]] = [
        {
            "type": "bar",
            "name": part,
            "x": devices,
            "y": [float(m.get(f"{part}_bytes") or 0) / scale for m in shown],
            "marker": {"color": colour},
            "hovertemplate": f"{part} %{{y:.3g}} {unit}<extra>%{{x}}</extra>",
        }
        for part, colour in zip(MEMORY_PARTS, _MEMORY_COLOURS, strict=True)
    ]
    caption = ""
    if draw_capacity:
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "capacity",
                "x": devices,
                "y": [float(m.get("capacity_bytes") or 0) / scale for m in shown],
                "marker": {"symbol": "line-ew-open", "size": 30, "color": "#000000", "line": {"width": 2}},
                "hovertemplate": f"capacity %{{y:.3g}} {unit}<extra>%{{x}}</extra>",
            }
        )
    elif capacity > 0:
        caption = (
            f"<p class='note'>Capacity {humanize.size(capacity)} per device; the plan uses at most "
            f"{humanize.percent(peak / capacity)} of it.</p>"
        )
    layout = {"barmode": "stack", "yaxis": {"title": {"text": unit}}, "xaxis": {"type": "category"}}
    if len(memory) > len(shown):
        caption += f"<p class='note'>{len(memory) - len(shown)} more devices are not drawn.</p>"
    return figures.add(data, layout, 360) + caption


# -- parplan search --------------------------------------------------------------------------------
MAX_SEARCH_ROWS = 100
"""Candidates in the search page's ranked table (the JSON and CSV hold every one)."""

MAX_SEARCH_POINTS = 2000
"""Candidates in the search page's scatter besides the front (the fastest that fit)."""

_SEARCH_COLUMNS = (
    ("devices", "devices"), ("dp", "dp"), ("tp", "tp"), ("pp", "pp"), ("v", "virtual_stages"),
    ("mbs", "microbatch_size"), ("zero", "zero"), ("fsdp", "fsdp"), ("recompute", "recompute"),
    ("sp", "sequence_parallel"),
)  # fmt: skip


def search_page(document: Mapping[str, Any], results: Mapping[str, PlanResult] | None = None) -> str:
    """The page of a ``parplan search`` JSON document (:mod:`parplan.report.search`): counts, the
    winner and its bound, the ranked candidates, the scenario's own plans, step time against memory
    with the Pareto front, and per re-simulated plan its event timeline, busiest links and memory
    (``results``: the event results by plan name, whose timelines give the Gantt charts)."""
    require_plotly()

    results = results or {}
    figures = _Figures()
    scenario = document.get("scenario") or {}
    title = f"parplan search: {scenario.get('name', '')}"
    body = ["<style>.search td { white-space: nowrap; }</style>", f"<h1>{_e(title)}</h1>"]
    if scenario.get("description"):
        body.append(f"<p class='lead'>{_e(scenario['description'])}</p>")
    body.append(_search_summary(document))
    plans: list[Mapping[str, Any]] = list(document.get("plans") or [])
    if document.get("hand_written"):
        body.append("<h2>The scenario's plans</h2>")
        body.append(_checked_table(document["hand_written"], True))
    points = _search_points(plans)
    if sum(1 for p in points if p.get("fits")) >= 2:
        body.append("<h2>Step time against memory</h2>")
        body.append(
            "<p>The fastest candidates that fit and the Pareto front over step time, peak memory and "
            "devices (no other candidate is at least as good in all three and better in one).</p>"
        )
        body.append(_scatter(figures, points, [bool(p.get("pareto")) for p in points], "step time"))
    body.append("<h2>Ranked candidates (closed form)</h2>")
    body.append(_search_table(plans[:MAX_SEARCH_ROWS]))
    if len(plans) > MAX_SEARCH_ROWS:
        more = len(plans) - MAX_SEARCH_ROWS
        body.append(f"<p class='note'>{more:,} more candidates are in the JSON and CSV.</p>")
    if document.get("top"):
        body.append("<h2>Event engine against closed form, best plans</h2>")
        body.append(_checked_table(document["top"], False))
    for i, entry in enumerate(document.get("top") or []):
        event = entry.get("event")
        if event:
            body.append(_plan_section(figures, i + 1, event, results.get(str(entry.get("name")))))
    return _page(title, document, body, figures)


def _search_summary(document: Mapping[str, Any]) -> str:
    counts = document.get("counts") or {}
    pruned = sum((counts.get("pruned") or {}).values())
    parts = [
        f"scenario file {_e((document.get('scenario') or {}).get('file'))}",
        f"{counts.get('enumerated', 0):,} candidates enumerated, {pruned:,} pruned, "
        f"{counts.get('evaluated', 0):,} evaluated, {counts.get('over_memory', 0):,} over memory",
        f"seed {_e(document.get('seed'))}",
    ]
    lines = [f"<p class='meta'>{'; '.join(parts)}</p>"]
    if document.get("interrupted"):
        lines.append(f"<p class='bad'>{_e(document['interrupted'])}</p>")
    winner = document.get("winner")
    if winner:
        lines.append(
            f"<p><b>Winner: {_e(winner['label'])}</b>, {_seconds(winner.get('step_time_s'))} per step; "
            f"{_e(winner.get('bound') or '')}.</p>"
        )
    else:
        lines.append("<p class='bad'>No candidate fits in memory.</p>")
    return "\n".join(lines)


def _search_table(plans: Sequence[Mapping[str, Any]]) -> str:
    head = ["#", "plan", *(h for h, _ in _SEARCH_COLUMNS), "step", "memory", "MFU", "front", "bound by"]
    rows = ["<tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for p in plans:
        cells = [str(p.get("rank", "")), _e(p.get("label", ""))]
        cells += [_e(_cell(p.get(key, ""))) for _, key in _SEARCH_COLUMNS]
        memory = humanize.size(float(p.get("peak_memory_bytes") or 0))
        cells += [
            _seconds(p.get("step_time_s")),
            memory if p.get("fits") else f"<span class='bad'>{memory} (does not fit)</span>",
            humanize.percent(float(p.get("mfu") or 0)),
            "★" if p.get("pareto") else "",
            _e(p.get("bound", "")),
        ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return "<table class='plans search'>" + "\n".join(rows) + "</table>"


def _checked_table(entries: Sequence[Mapping[str, Any]], rank: bool) -> str:
    head = ["plan", "closed form", "event", "differ", "memory", *(["would rank"] if rank else []), "bound by"]
    rows = ["<tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for c in entries:
        differ = c.get("disagreement")
        memory = (
            humanize.size(float(c["peak_memory_bytes"])) if c.get("peak_memory_bytes") is not None else "—"
        )
        cells = [
            _e(c.get("name", "")),
            _seconds(c.get("closed_form_step_time_s")),
            _seconds(c.get("event_step_time_s")),
            f"{float(differ) * 100:+.1f}%" if differ is not None else "—",
            memory if c.get("fits") is not False else f"<span class='bad'>{memory} (does not fit)</span>",
        ]
        if rank:
            cells.append(f"#{c['would_rank']}" if c.get("would_rank") and c.get("fits") else "—")
        cells.append(_e(c.get("error") or c.get("bound") or ""))
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return "<table class='search'>" + "\n".join(rows) + "</table>"


def _cell(value: Any) -> Any:
    """A table cell's value: booleans as yes / no."""
    return ("yes" if value else "no") if isinstance(value, bool) else value


def _search_points(plans: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The candidates the scatter draws (the fastest that fit, and the front), as the scatter wants
    them: step time in the time-per-sample slot (every candidate runs the same batch)."""
    chosen = [p for p in plans if p.get("fits")][:MAX_SEARCH_POINTS]
    labels = {p.get("label") for p in chosen}
    chosen += [p for p in plans if p.get("pareto") and p.get("label") not in labels]
    return [
        {
            "name": p.get("label"),
            "num_devices": p.get("devices"),
            "fits": True,
            "pareto": bool(p.get("pareto")),
            "peak_memory_bytes": p.get("peak_memory_bytes"),
            "time_per_sample_s": p.get("step_time_s"),
        }
        for p in chosen
    ]


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.6em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; }
th { background: #f4f4f4; }
.meta, .note { color: #666; } .bad { color: #c00; font-weight: bold; }
.figure { width: 100%; }
footer { margin-top: 3em; color: #888; font-size: 0.8em; }
"""

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>{style}</style>
<script>{plotly_js}</script>
</head>
<body>
{body}
<footer>Made by {tool}. Charts: plotly.js, inlined (no network needed).</footer>
<script>
{scripts}
</script>
</body>
</html>
"""
