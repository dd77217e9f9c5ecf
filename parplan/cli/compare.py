"""``parplan compare-strategies SCENARIO``: every plan and sweep variant, ranked.

Plans are crossed with the sweeps of the scenario file and of ``--sweep knob=v1,v2`` (the
command line replaces a scenario sweep of the same knob; a sweep applies to the plans whose
strategy has the knob), evaluated, and ranked by step time per sample processed (so steps,
federated rounds and PBT generations compare fairly) with the speed-up against the baseline
(``--baseline``, else the scenario's ``baseline``, else the first local plan, else the first plan;
the legend and the JSON's ``baseline_rule`` say which). Plans that do not fit in memory are ranked
last and marked with the reason; the plans on the time/memory Pareto front are marked.
``--jobs N`` spreads the variants over N processes (the ranking is the same as with one); a
progress bar shows on stderr when a terminal is attached and the work takes more than a moment.
``--top N`` limits the table; ``--json`` and ``--csv`` always hold every variant.
``--plot FILE`` draws step time against replicas, one line per all-reduce algorithm;
``--html FILE`` writes one self-contained page (ranking, time against memory with the Pareto
front, the best plans' timelines, busiest links and memory; the ``html`` extra).
``--backend ray`` evaluates the variants as Ray tasks (the ``ray`` extra): on a local Ray
instance, or on the running cluster at ``--address``; the ranking is the same as here. A cluster
that cannot be reached is an error before any work; one lost mid-sweep stops the sweep: what was
evaluated is shown and written (the rest listed as not evaluated) and the exit code is 1.

Exit codes: 0 when at least one plan was evaluated (variants that cannot be built, e.g. more
replicas than devices, are listed with the reason); 1 for an invalid file or when no plan could
be evaluated; 2 for usage errors, checked before anything is evaluated: a bad sweep, an unknown
plan or baseline, an output that cannot be written.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer

from parplan.api.knobs import KNOBS
from parplan.cli.common import STATE, console, show
from parplan.cli.evaluation import BackendChoice, check_backend, progress_bar
from parplan.cli.outputs import (
    check_outputs,
    emit_document,
    emit_html,
    stdout_taken,
    warn,
    write_file,
    wrote,
)

if TYPE_CHECKING:
    from parplan.api.compare import Comparison
    from parplan.api.parallel import Backend


def compare_strategies(
    scenario: Annotated[
        Path,
        typer.Argument(
            help="Scenario file (.yaml, .yml, .toml or .json).", metavar="SCENARIO", show_default=False
        ),
    ],
    sweep: Annotated[
        list[str] | None,
        typer.Option(
            "--sweep",
            "-s",
            metavar="KNOB=V1,V2",
            help=f"Try each value of a knob (repeat for a grid): {', '.join(KNOBS)}.",
        ),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline", "-b", metavar="NAME", help="Plan (or variant) to compute speed-ups against."
        ),
    ] = None,
    jobs: Annotated[
        int, typer.Option("--jobs", "-j", min=0, metavar="N", help="Worker processes (0: one per CPU).")
    ] = 1,
    top: Annotated[
        int | None, typer.Option("--top", "-n", min=1, metavar="N", help="Show only the N best plans.")
    ] = None,
    plan: Annotated[
        list[str] | None,
        typer.Option("--plan", "-p", metavar="NAME", help="Compare only these plans (repeat for several)."),
    ] = None,
    json_path: Annotated[
        str | None, typer.Option("--json", metavar="FILE|-", help="Write the ranking as JSON ('-': stdout).")
    ] = None,
    csv_path: Annotated[
        str | None,
        typer.Option("--csv", metavar="FILE|-", help="Write one CSV row per variant ('-': stdout)."),
    ] = None,
    plot_path: Annotated[
        str | None,
        typer.Option(
            "--plot",
            metavar="FILE",
            help="Draw step time against replicas per algorithm (needs the plot extra).",
        ),
    ] = None,
    html_path: Annotated[
        str | None,
        typer.Option(
            "--html",
            metavar="FILE",
            help="Write one self-contained HTML page: the ranking, time against memory with the Pareto"
            " front, and the best plans' timelines, links and memory (needs the html extra).",
        ),
    ] = None,
    backend: Annotated[
        BackendChoice,
        typer.Option(
            "--backend",
            help="Where variants are evaluated: here (--jobs processes) or on Ray (needs the ray extra).",
        ),
    ] = "local",
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            metavar="ADDR",
            help="With --backend ray: a running Ray cluster (host:port or ray://...); default: a local"
            " Ray instance.",
        ),
    ] = None,
    analytic: Annotated[
        bool,
        typer.Option("--analytic", help="Evaluate sharded plans in closed form instead of simulating them."),
    ] = False,
) -> None:
    """Rank every plan and sweep variant of a scenario by time per sample.

    Shows the speed-up against the baseline, marks plans that do not fit in memory with the
    reason and the plans on the time/memory Pareto front.
    """
    outputs = {"--json": json_path, "--csv": csv_path, "--plot": plot_path, "--html": html_path}
    check_outputs(
        outputs, files_only=("--plot", "--html"), pictures=("--plot",), pages=("--html",), inputs=[scenario]
    )
    check_backend(backend, address)

    from parplan.api.compare import compare_scenario
    from parplan.errors import ParplanError

    with progress_bar() as tick:
        comparison = compare_scenario(
            scenario,
            sweeps=sweep or [],
            plans=plan or [],
            baseline=baseline,
            jobs=jobs,
            progress=tick,
            warn=warn,
            backend=cast("Backend", backend),
            address=address,
            analytic=analytic,
        )
    if not comparison.ranked and comparison.interrupted is None:
        for name, error in comparison.failed:
            console(stderr=True).print(f"error: {name}: {error}", style="red", markup=False)
        raise ParplanError("no plan could be evaluated")

    if not stdout_taken(outputs) and not (STATE.quiet and any(outputs.values())):
        from parplan.report.tables import compare_view

        spec = comparison.scenario
        view = compare_view(
            spec.name,
            spec.description,
            comparison.ranked,
            comparison.failed,
            baseline=comparison.baseline,
            baseline_rule=comparison.baseline_rule,
            top=top,
            duplicates=len(comparison.duplicates),
        )
        show(view)
    else:
        for name, error in comparison.failed:
            warn(f"{name} cannot be planned: {error}")
    write_outputs(comparison, outputs)
    if comparison.interrupted is not None:  # what was gathered is shown and written; then fail
        raise ParplanError(f"{comparison.interrupted}; the results above cover the variants evaluated")


def write_outputs(comparison: Comparison, outputs: dict[str, str | None]) -> None:
    """JSON, CSV, the HTML page and the scaling plot, as asked."""
    json_path, csv_path, plot_path = outputs["--json"], outputs["--csv"], outputs["--plot"]
    html_path = outputs.get("--html")
    spec = comparison.scenario
    if json_path or csv_path or html_path:
        from parplan.report.json_report import comparison_document

        document = comparison_document(comparison)
        emit_document(document, json_path, csv_path)
        if html_path:
            emit_html(html_path, document, {r.variant_name: r.result for r in comparison.ranked})
    if plot_path:
        from parplan.report.plot import ScalingPoint, finite_points, plot_scaling

        points = [ScalingPoint(*p) for p in comparison.scaling_points()]
        title = f"{spec.name}: step time against replicas"
        write_file(plot_path, lambda target: plot_scaling(finite_points(points), target, title=title))
        wrote("plot", plot_path)
