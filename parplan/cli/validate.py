"""``parplan validate-config`` and ``parplan schema``: check files before anything runs.

``validate-config FILE...`` loads each file (detecting its kind unless ``--kind`` says it), every
file it references, and runs every check; it prints ``✓ path (kind)`` per valid file, each
problem as ``path:line:column field.path: message`` and a summary line, all on stdout (they are
the results). Directories are searched for .yaml, .yml, .toml and .json files. Exit code 0 when
all files are valid, 1 when any is not, 2 for usage errors. ``--json FILE|-`` writes a report for
machines (layout: :mod:`parplan.report.validate_config`; with ``-`` instead of the text). The
work is :func:`parplan.api.validate_config.validate_paths`.

``schema [KIND] [--output DIR]`` prints (or writes) the JSON Schema of each file kind; the
directory is checked before anything is written.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from parplan.cli.common import EXIT_INVALID, STATE, console
from parplan.cli.outputs import check_directory, check_outputs, emit, write_into, wrote


class Kind(StrEnum):
    """The kinds of file parplan reads (mirrors :data:`parplan.config.loader.KINDS`)."""

    CLUSTER = "cluster"
    MODEL = "model"
    STRATEGY = "strategy"
    PARTITION = "partition"
    SCENARIO = "scenario"


def validate_config(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="Files to check (directories: every .yaml/.yml/.toml/.json inside).",
            show_default=False,
            metavar="FILE",
        ),
    ],
    kind: Annotated[
        Kind | None,
        typer.Option("--kind", "-k", help="Read every file as this kind instead of detecting it."),
    ] = None,
    json_path: Annotated[
        str | None,
        typer.Option("--json", metavar="FILE|-", help="Write a JSON report ('-': stdout, instead of text)."),
    ] = None,
) -> None:
    """Check files and all they reference.

    Prints a check mark per valid file, every problem as path:line:column field: message, and a
    summary line, on stdout. Exit code 1 when any file is invalid.

    The --json report: {"version": 1, "valid": bool, "files": [{"path", "kind", "valid",
    "issues": [{"path", "line", "column", "field", "message", "severity"}]}]}; line and column
    are 1-based (0: unknown); severity is error, warning or info.
    """
    check_outputs({"--json": json_path}, inputs=files)

    from parplan.api.validate_config import validate_paths
    from parplan.report.validate_config import validation_json, validation_lines, validation_summary

    reports = validate_paths(files, kind.value if kind is not None else None)
    if json_path != "-" and not (STATE.quiet and json_path is not None):
        out = console()
        for line in validation_lines(reports, quiet=STATE.quiet):
            out.print(line)
        if not STATE.quiet:
            out.print(validation_summary(reports))
    if json_path is not None:
        emit(json_path, validation_json(reports), "JSON report")
    if not all(r.valid for r in reports):
        raise typer.Exit(EXIT_INVALID)


def schema(
    kind: Annotated[
        Kind | None,
        typer.Argument(help="The file kind (default: all of them).", show_default=False, metavar="KIND"),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Write <kind>.schema.json files into this directory instead of printing."
        ),
    ] = None,
) -> None:
    """Print JSON Schemas of the file kinds.

    The schemas are for editors and YAML/JSON language servers: one kind, or all of them as one
    object keyed by kind; --output writes <kind>.schema.json files instead.
    """
    if output is not None:
        check_directory("--output", output)

    from parplan.api.schema import file_schemas

    schemas = file_schemas(kind.value if kind is not None else None)
    if output is None:
        sys.stdout.write(schemas.document())
        return
    for target in write_into(output, schemas.files()):
        wrote("schema", str(target))
