"""``parplan simulate SCENARIO``: time each plan of a scenario and say what bounds it.

For each plan (or only those named with ``--plan``) the step is expanded into its task graph and
simulated (:func:`parplan.api.simulate.simulate_scenario` does all of that), then reported: a
summary table, then per plan the split of the step into compute, exposed communication and idle
time, throughput, the all-reduces' algbw/busbw, the busiest link, memory per device against capacity
and the line saying what bounds the step; federated and population-based plans add their quality
figures (loss per round, best score per generation).

Knobs can be overridden without editing files (``--algorithm``, ``--replicas``,
``--microbatches``, ``--schedule``, ``--bucket-size``, ``--overlap/--no-overlap``, and any other
with ``--set knob=value``); each applies to the plans whose strategy has it.

Outputs: ``--json FILE|-`` (schema :mod:`parplan.report.json_report`), ``--csv FILE|-``,
``--trace FILE`` (Chrome trace, open in Perfetto), ``--plot FILE`` (timeline picture, needs
the ``plot`` extra) and ``--html FILE`` (one self-contained page with every plan's timeline per
device, busiest links and memory; needs the ``html`` extra, :mod:`parplan.report.html`). With
several plans, ``--trace`` and ``--plot`` write one file per plan: ``trace.json`` becomes
``trace.<plan>.json``. When ``-`` sends JSON or CSV to stdout the tables are not printed; with
``--quiet`` they are not printed when any output file is asked for.

Exit codes: 0 when every plan was simulated (plans that do not fit in memory are marked, not
errors); 1 for an invalid file, a plan that cannot be built (e.g. more replicas than devices) and
an infeasible request: a plan named with ``--plan`` that does not fit in memory (the results are
still printed and written first); 2 for usage errors, checked before anything is simulated: an
unknown plan, a bad override value, an output that cannot be written.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from parplan.api.knobs import knobs_by_kind
from parplan.cli.common import EXIT_INVALID, STATE, console, show
from parplan.cli.outputs import (
    check_outputs,
    emit_document,
    emit_html,
    per_plan_paths,
    stdout_taken,
    warn,
    write_file,
    wrote,
)
from parplan.pipeline import schedule_names

if TYPE_CHECKING:
    from parplan.api.results import PlanResult
    from parplan.api.simulate import Simulation
    from parplan.topology.network import Network


OPTION_KNOBS = ("algorithm", "num_replicas", "microbatches", "schedule", "bucket_size", "overlap")
"""The knobs with an option of their own (the rest take ``--set``)."""

if TYPE_CHECKING:
    Schedule = str
else:
    Schedule = Literal[schedule_names()]  # the registry's names, offered as the option's choices


def simulate(
    scenario: Annotated[
        Path,
        typer.Argument(
            help="Scenario file (.yaml, .yml, .toml or .json).", metavar="SCENARIO", show_default=False
        ),
    ],
    plan: Annotated[
        list[str] | None,
        typer.Option("--plan", "-p", metavar="NAME", help="Simulate only this plan (repeat for several)."),
    ] = None,
    algorithm: Annotated[
        str | None,
        typer.Option(
            "--algorithm",
            "-a",
            metavar="ALGO",
            help="All-reduce algorithm of data-parallel plans, e.g. ring or tree:4 (a bad name lists every"
            " registered one; 'parplan collective -a all' times them all).",
        ),
    ] = None,
    replicas: Annotated[
        int | None,
        typer.Option("--replicas", "-r", min=1, metavar="N", help="Replicas of data-parallel plans."),
    ] = None,
    microbatches: Annotated[
        int | None,
        typer.Option(
            "--microbatches", "-m", min=1, metavar="M", help="Micro-batches of pipeline and 2-D plans."
        ),
    ] = None,
    schedule: Annotated[
        Schedule | None, typer.Option("--schedule", help="Pipeline schedule of pipeline and 2-D plans.")
    ] = None,
    bucket_size: Annotated[
        str | None,
        typer.Option(
            "--bucket-size", metavar="SIZE", help="Gradient bucket size of data-parallel plans, e.g. 25MiB."
        ),
    ] = None,
    overlap: Annotated[
        bool | None,
        typer.Option(
            "--overlap/--no-overlap",
            help="Overlap gradient all-reduces with backward (data-parallel plans).",
            show_default=False,
        ),
    ] = None,
    settings: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="KNOB=VALUE",
            help=f"Any other knob: {knobs_by_kind(skip=OPTION_KNOBS)}.",
        ),
    ] = None,
    json_path: Annotated[
        str | None, typer.Option("--json", metavar="FILE|-", help="Write the results as JSON ('-': stdout).")
    ] = None,
    csv_path: Annotated[
        str | None, typer.Option("--csv", metavar="FILE|-", help="Write one CSV row per plan ('-': stdout).")
    ] = None,
    trace_path: Annotated[
        str | None,
        typer.Option(
            "--trace",
            metavar="FILE",
            help="Write a Chrome trace of the step (ui.perfetto.dev); several plans: FILE.<plan>.json.",
        ),
    ] = None,
    plot_path: Annotated[
        str | None,
        typer.Option(
            "--plot", metavar="FILE", help="Draw the step's timeline (PNG, SVG or PDF; needs the plot extra)."
        ),
    ] = None,
    html_path: Annotated[
        str | None,
        typer.Option(
            "--html",
            metavar="FILE",
            help="Write one self-contained HTML page: the plans, timelines per device, busiest links and"
            " memory (needs the html extra).",
        ),
    ] = None,
) -> None:
    """Simulate the plans of a scenario and show what bounds each step.

    Prints per plan the step time split into compute, exposed communication and idle time,
    throughput, all-reduce algbw/busbw, the busiest link, memory per device against capacity
    and what bounds the step. Plans that do not fit in memory are marked; one named with --plan
    that does not fit makes the exit code 1.
    """
    outputs = {
        "--json": json_path,
        "--csv": csv_path,
        "--trace": trace_path,
        "--plot": plot_path,
        "--html": html_path,
    }
    check_outputs(
        outputs,
        files_only=("--trace", "--plot", "--html"),
        pictures=("--plot",),
        pages=("--html",),
        inputs=[scenario],
    )

    from parplan.api.knobs import KnobOptions
    from parplan.api.simulate import simulate_scenario

    knobs = KnobOptions(
        options={  # in the order of OPTION_KNOBS
            "algorithm": ("--algorithm", algorithm),
            "num_replicas": ("--replicas", replicas),
            "microbatches": ("--microbatches", microbatches),
            "schedule": ("--schedule", schedule),
            "bucket_size": ("--bucket-size", bucket_size),
            "overlap": ("--overlap", overlap),
        },
        settings=settings or [],
    )
    run = simulate_scenario(scenario, plans=plan or [], knobs=knobs, warn=warn)

    if not stdout_taken(outputs) and not (STATE.quiet and any(outputs.values())):
        from parplan.report.tables import simulate_view

        spec = run.scenario
        show(simulate_view(spec.name, spec.description, run.results, run.failed))
    write_outputs(run, outputs)
    finish(run.problems())


def write_outputs(run: Simulation, outputs: dict[str, str | None]) -> None:
    """JSON, CSV, the HTML page, traces and timelines, as asked."""
    json_path, csv_path, html_path = outputs["--json"], outputs["--csv"], outputs.get("--html")
    if json_path or csv_path or html_path:
        from parplan.report.json_report import scenario_info, simulate_document

        spec = run.scenario
        document = simulate_document(
            scenario_info(spec.name, spec.description, run.scenario_file),
            run.results,
            overrides=run.overrides,
            failed=run.failed,
        )
        emit_document(document, json_path, csv_path)
        if html_path:
            emit_html(html_path, document, {r.name: r for r in run.results})
    names = [r.name for r in run.results]
    trace_path = outputs["--trace"]
    if trace_path and run.results:
        for r, path in zip(run.results, per_plan_paths(trace_path, names), strict=True):
            write_file(path, functools.partial(write_trace, r, run.network))
            wrote(f"trace of {r.name}", path)
    plot_path = outputs["--plot"]
    if plot_path and run.results:
        from parplan.report.plot import plot_timeline

        for r, path in zip(run.results, per_plan_paths(plot_path, names), strict=True):
            write_file(path, functools.partial(plot_timeline, r))
            wrote(f"timeline of {r.name}", path)


def write_trace(result: PlanResult, network: Network, path: str | Path) -> None:
    """The Chrome trace of one simulated plan (written atomically by the trace writer)."""
    from parplan.errors import ParplanError
    from parplan.report.output import atomic_target
    from parplan.report.trace import write_chrome_trace

    if result.graph is None or result.sim is None:
        raise ParplanError(f"plan {result.name} has no timeline to trace")
    with atomic_target(path) as tmp:  # also keeps /dev/null and FIFOs what they are
        write_chrome_trace(result.sim, result.graph, network, tmp)


def finish(problems: list[str]) -> None:
    """Exit 1 after reporting plans that could not be built, or named plans that do not fit."""
    from rich.text import Text

    err = console(stderr=True)
    for line in problems:
        err.print(Text("error: ", style="bold red") + Text(line))
    if problems:
        raise typer.Exit(EXIT_INVALID)
