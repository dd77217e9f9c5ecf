"""``parplan compare-strategies SCENARIO``: every plan and sweep variant, ranked.

Plans are crossed with the sweeps of the scenario file and of ``--sweep knob=v1,v2`` (the
command line replaces a scenario sweep of the same knob; a sweep applies to the plans whose
strategy has the knob), evaluated, and ranked by step time per sample processed (so steps,
federated rounds and PBT generations compare fairly) with the speed-up against the baseline
(``--baseline``, else the scenario's ``baseline``, else the first local plan). Plans that do not
fit in memory are ranked last and marked with the reason; the plans on the time/memory Pareto
front are marked. ``--jobs N`` spreads the variants over N processes (the ranking is the same as
with one); a progress bar shows on stderr when a terminal is attached and the work takes more
than a moment. ``--top N`` limits the table; ``--json`` and ``--csv`` always hold every variant.
``--plot FILE`` draws step time against replicas, one line per all-reduce algorithm.

Exit codes: 0 when at least one plan was evaluated (variants that cannot be built, e.g. more
replicas than devices, are listed with the reason); 1 for invalid input (bad file, bad sweep,
unknown baseline) or when no plan could be evaluated; 2 for usage errors.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from parplan.cli.common import STATE, console
from parplan.cli.outputs import check_outputs, emit_document, stdout_taken, warn, write_file, wrote

if TYPE_CHECKING:
    from rich.progress import Progress

    from parplan.config.scenario import ScenarioSpec
    from parplan.plan.compare import Ranked, Variant
    from parplan.plan.evaluate import PlanResult

PROGRESS_DELAY_S = 0.5
"""The progress bar appears only once the comparison has run this long."""


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
            help="Try each value of a knob (repeat for a grid): algorithm, num_replicas, bucket_size, "
            "overlap, batch_split, reduce, microbatches, schedule, num_clients, rounds, local_steps, "
            "population_size, generations.",
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
) -> None:
    """Rank every plan and sweep variant of a scenario by time per sample.

    Shows the speed-up against the baseline, marks plans that do not fit in memory with the
    reason and the plans on the time/memory Pareto front. Exit code 0: at least one plan was
    evaluated; 1: invalid input or nothing could be evaluated; 2: usage error.
    """
    import os

    from parplan.cli.simulate import select_plans
    from parplan.config.loader import load_scenario
    from parplan.errors import ParplanError
    from parplan.plan.compare import (
        applies,
        dedupe_variants,
        evaluate_variants,
        expand_variants,
        merge_sweeps,
        parse_sweep,
        sweeps_from_scenario,
    )

    outputs = {"--json": json_path, "--csv": csv_path, "--plot": plot_path}
    check_outputs(outputs, files_only=("--plot",), pictures=("--plot",))
    sweeps_cli = [parse_sweep(s) for s in sweep or []]
    spec = load_scenario(scenario)
    plans = select_plans(spec, plan or [])
    sweeps = merge_sweeps(sweeps_from_scenario(spec), sweeps_cli)
    for s in sweeps:
        if not any(applies(s.knob, p) for p in plans):
            warn(f"sweep {s.knob} changes none of the plans compared")
    variants, duplicates = dedupe_variants(expand_variants(plans, sweeps))
    base_request = resolve_baseline(baseline if baseline is not None else spec.baseline, variants, duplicates)

    workers = jobs if jobs > 0 else (os.cpu_count() or 1)
    with _progress(len(variants)) as tick:
        results = evaluate_variants(spec, variants, jobs=workers, progress=tick)

    ranked, failed, base_name = rank(variants, results, base_request)
    if not ranked:
        for name, error in failed:
            console(stderr=True).print(f"error: {name}: {error}", style="red", markup=False)
        raise ParplanError("no plan could be evaluated")

    show_table = not stdout_taken(outputs) and not (STATE.quiet and any(outputs.values()))
    if show_table:
        from parplan.report.tables import compare_view

        view = compare_view(
            spec.name,
            spec.description,
            ranked,
            failed,
            baseline=base_name,
            top=top,
            duplicates=len(duplicates),
        )
        console().print(view)
    else:
        for name, error in failed:
            warn(f"{name} cannot be planned: {error}")
    write_outputs(spec, str(scenario), variants, ranked, failed, sweeps, base_name, duplicates, outputs)


def resolve_baseline(
    requested: str | None, variants: list[Variant], duplicates: dict[str, str]
) -> str | None:
    """The variant (or plan) name to measure speed-ups against; an unknown name is an error.

    Spaces are ignored (so a name copied from the table works); a variant dropped as a
    duplicate stands for the variant it duplicates; a plan name stands for the variant that is
    the plan as configured (its sweep values all equal the plan's own), else its first variant.
    """
    from parplan.errors import ParplanError

    if requested is None:
        return None
    from parplan.plan.compare import as_configured

    wanted = requested.replace(" ", "")
    if wanted in duplicates:
        return duplicates[wanted]
    if any(v.name == wanted for v in variants):
        return wanted
    plan_variant = as_configured(wanted, variants)
    if plan_variant is not None:
        return plan_variant.name
    names = ", ".join(v.name for v in variants)
    raise ParplanError(f"baseline {requested!r} is not a plan or variant compared; choose from: {names}")


def rank(
    variants: list[Variant], results: list[PlanResult | str], requested: str | None
) -> tuple[list[Ranked], list[tuple[str, str]], str | None]:
    """Rank the results; returns the ranking, the failed variants and the baseline variant used.

    The baseline is the variant named ``requested`` (or, for a plan name, that plan's first
    variant); without a request, the first local plan. A baseline that could not be evaluated
    leaves the speed-ups empty, with a warning.
    """
    from parplan.plan.compare import rank_results

    evaluated = {v.name: r for v, r in zip(variants, results, strict=True) if not isinstance(r, str)}
    chosen: str | None = None
    if requested is not None:
        exact = [v for v in variants if v.name == requested]
        chosen = (exact or [v for v in variants if v.plan.name == requested])[0].name
    else:
        chosen = next((n for n, r in evaluated.items() if r.strategy_kind == "local"), None)
    usable = chosen if chosen in evaluated else None
    ranked, failed = rank_results(variants, results, baseline=usable)
    if usable is None:
        if chosen is not None:
            warn(f"baseline {chosen} could not be evaluated; no speed-ups shown")
        ranked = [replace(r, speedup=None) for r in ranked]
    return ranked, failed, usable


class _progress:
    """A transient progress bar on stderr, shown once the work has run :data:`PROGRESS_DELAY_S`.

    Off with --quiet, when stderr is not a terminal, or for a single variant.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self.started = time.monotonic()
        self.bar: Progress | None = None
        self.task: Any = None
        err = console(stderr=True)
        self.enabled = total > 1 and not STATE.quiet and err.is_terminal
        self.console = err

    def __enter__(self) -> Callable[[int, int], None] | None:
        return self.tick if self.enabled else None

    def tick(self, done: int, total: int) -> None:
        if self.bar is None:
            if time.monotonic() - self.started < PROGRESS_DELAY_S or done >= total:
                return
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(
                TextColumn("evaluating plans"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("plans", total=total)
        self.bar.update(self.task, completed=done)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def write_outputs(
    spec: ScenarioSpec,
    scenario_file: str,
    variants: list[Variant],
    ranked: list[Ranked],
    failed: list[tuple[str, str]],
    sweeps: list[Any],
    baseline: str | None,
    duplicates: dict[str, str],
    outputs: dict[str, str | None],
) -> None:
    """JSON, CSV and the scaling plot, as asked."""
    json_path, csv_path, plot_path = outputs["--json"], outputs["--csv"], outputs["--plot"]
    if json_path or csv_path:
        from parplan.report.json_report import compare_document, scenario_info

        document = compare_document(
            scenario_info(spec.name, spec.description, scenario_file),
            variants,
            ranked,
            failed,
            sweeps=sweeps,
            baseline=baseline,
            duplicates=duplicates,
        )
        emit_document(document, json_path, csv_path)
    if plot_path:
        from parplan.plan.compare import scaling_key
        from parplan.report.plot import ScalingPoint, finite_points, plot_scaling

        by_name = {v.name: v for v in variants}
        points = []
        for r in ranked:
            series, replicas = scaling_key(by_name[r.variant_name])
            points.append(ScalingPoint(series, replicas, r.result.step_time_s, r.result.fits))
        title = f"{spec.name}: step time against replicas"
        write_file(plot_path, lambda target: plot_scaling(finite_points(points), target, title=title))
        wrote("plot", plot_path)
