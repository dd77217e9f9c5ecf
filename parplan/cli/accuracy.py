"""``parplan validate``: predictions against every nccl-tests table shipped in the repository.

    parplan validate                                  # the whole set in validation/manifest.toml
    parplan validate --table h100x4-nvswitch-algo-ring --table rtx2080ti-x2-pcie-nop2p-autodl
    parplan validate --json out/validate.json         # also the JSON document ('-': stdout only)
    parplan validate --csv -                          # one CSV row per table and size, on stdout
    parplan validate --cross                          # calibrate on one table, predict the others

Prints measured beside predicted per size for every table, a summary per system and overall
(median and max |error|, all sizes and per size band) and the thresholds kept in the manifest with
issue 13's targets beside them. Progress goes to stderr (not with ``--quiet``). ``--cross``
instead calibrates the cluster file on each table of a hardware with several tables and predicts
the others, spec-sheet errors beside calibrated ones (:mod:`parplan.api.cross_validation`); it
reports and has no thresholds.

Exit codes: 0 when every figure is within its threshold, 1 when one is above it (a red line on
stderr names the threshold) or the input is bad (manifest, cluster file or table, with
file:line), 2 for usage errors (an unknown table, an output that cannot be written: checked
before anything runs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from parplan.cli.common import EXIT_INVALID, STATE, console, show

DEFAULT_MANIFEST = "validation/manifest.toml"
"""Kept equal to :data:`parplan.api.accuracy.DEFAULT_MANIFEST` (a test checks); not imported from
there so that ``parplan --help`` stays fast."""


def validate(
    manifest: Annotated[
        Path,
        typer.Option("--manifest", "-m", help="The validation set: tables, cluster files, thresholds."),
    ] = Path(DEFAULT_MANIFEST),
    table: Annotated[
        list[str] | None,
        typer.Option("--table", "-t", help="Only this table (by its manifest name); repeat for more."),
    ] = None,
    json_path: Annotated[
        str | None,
        typer.Option("--json", metavar="FILE|-", help="Write the results as JSON ('-': stdout)."),
    ] = None,
    csv_path: Annotated[
        str | None,
        typer.Option("--csv", metavar="FILE|-", help="Write one CSV row per table and size ('-': stdout)."),
    ] = None,
    cross: Annotated[
        bool,
        typer.Option("--cross", help="Calibrate on one table of a hardware, predict its other tables."),
    ] = False,
) -> None:
    """Compare predicted all-reduce times with published nccl-tests tables; fail above thresholds."""
    from parplan.cli.outputs import check_outputs, emit, stdout_taken

    outputs = {"--json": json_path, "--csv": csv_path}
    check_outputs(outputs, inputs=[manifest])
    if cross:
        _cross(manifest, table, json_path, csv_path)
        return

    from rich.text import Text

    from parplan.api.accuracy import run_validation
    from parplan.report.accuracy import failure_messages, validation_csv, validation_document, validation_view

    def progress(message: str) -> None:
        console(stderr=True).print(message, style="dim")

    report = run_validation(manifest, tables=table, progress=None if STATE.quiet else progress)
    if not stdout_taken(outputs) and not (STATE.quiet and any(outputs.values())):
        show(validation_view(report))
    if json_path is not None:
        from parplan.report.json_report import dumps

        emit(json_path, dumps(validation_document(report)), "JSON")
    if csv_path is not None:
        emit(csv_path, validation_csv(report), "CSV")
    if not report.passed:
        err = console(stderr=True)
        for line in failure_messages(report):
            err.print(Text("error: ", style="bold red") + Text(line))
        raise typer.Exit(EXIT_INVALID)


def _cross(manifest: Path, table: list[str] | None, json_path: str | None, csv_path: str | None) -> None:
    """``--cross``: the cross table, and its JSON document."""
    import typer as _typer

    from parplan.api.cross_validation import run_cross_validation
    from parplan.cli.outputs import emit
    from parplan.report.calibrate import cross_document, cross_view

    if csv_path is not None:
        raise _typer.BadParameter("--csv is not available with --cross (use --json)", param_hint="--csv")

    def progress(message: str) -> None:
        console(stderr=True).print(message, style="dim")

    report = run_cross_validation(manifest, tables=table, progress=None if STATE.quiet else progress)
    if json_path != "-":
        show(cross_view(report))
    if json_path is not None:
        from parplan.report.json_report import dumps

        emit(json_path, dumps(cross_document(report)), "JSON")
