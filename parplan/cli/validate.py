"""``parplan validate-config`` and ``parplan schema``: check files before anything runs.

``validate-config FILE...`` loads each file (detecting its kind unless ``--kind`` says it), every
file it references, and runs every check; it prints ``✓ path (kind)`` per valid file and each
problem as ``path:line:column field.path: message``. Directories are searched for .yaml, .yml,
.toml and .json files. Exit code 0 when all files are valid, 1 when any is not, 2 for usage
errors. ``--json`` prints a report for machines instead (schema: :data:`JSON_SCHEMA_VERSION`,
documented on :func:`validate_config`).

``schema [KIND] [--output DIR]`` prints (or writes) the JSON Schema of each file kind.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from parplan.cli.common import EXIT_INVALID, STATE, console

if TYPE_CHECKING:
    from parplan.config.checks import FileReport
    from parplan.errors import Issue

JSON_SCHEMA_VERSION = 1
"""Version of the ``validate-config --json`` output; bumped on any incompatible change."""


class Kind(StrEnum):
    """The kinds of file parplan reads (mirrors :data:`parplan.config.loader.KINDS`)."""

    CLUSTER = "cluster"
    MODEL = "model"
    STRATEGY = "strategy"
    PARTITION = "partition"
    SCENARIO = "scenario"


def _expand(paths: list[Path]) -> list[tuple[str, bool]]:
    """Files to check, in order: ``(path, found)``; a directory gives its config files, sorted."""
    from parplan.config.readers import FORMATS

    out: list[tuple[str, bool]] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in FORMATS)
            out.extend((str(p), True) for p in found)
            if not found:
                out.append((str(path), False))
        else:
            out.append((str(path), True))
    return out


def _issue_data(issue: Issue) -> dict[str, Any]:
    return {
        "path": issue.path,
        "line": issue.line,
        "column": issue.column,
        "field": issue.field,
        "message": issue.message,
        "severity": issue.severity,
    }


def _line(issue: Issue) -> str:
    """``path:line:column field: message``, with the severity before the message unless an error."""
    if issue.severity == "error":
        return str(issue)
    where = issue.path + (f":{issue.line}:{issue.column or 1}" if issue.line else "")
    field = f" {issue.field}:" if issue.field else ""
    return f"{where}{field} {issue.severity}: {issue.message}"


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
    json_output: Annotated[bool, typer.Option("--json", help="Print a JSON report instead of text.")] = False,
) -> None:
    """Check files and all they reference.

    Prints a check mark per valid file and every problem as path:line:column field: message.
    Exit code 0: all valid; 1: any invalid; 2: usage error.

    The --json report: {"version": 1, "valid": bool, "files": [{"path", "kind", "valid",
    "issues": [{"path", "line", "column", "field", "message", "severity"}]}]}; line and column
    are 1-based (0: unknown); severity is error, warning or info.
    """
    from parplan.config.checks import FileReport, validate_file
    from parplan.errors import Issue

    reports: list[FileReport] = []
    for path, found in _expand(files):
        if not found:
            issue = Issue(path, "", "directory holds no .yaml, .yml, .toml or .json files")
            reports.append(FileReport(path, None, (issue,)))
        else:
            report = validate_file(path, kind.value if kind is not None else None)
            if report.kind == "scenario" and report.valid:
                from parplan.api.feasibility import memory_issues

                report = dataclasses.replace(report, issues=(*report.issues, *memory_issues(path)))
            reports.append(report)
    all_valid = all(r.valid for r in reports)
    if json_output:
        payload = {
            "version": JSON_SCHEMA_VERSION,
            "valid": all_valid,
            "files": [
                {
                    "path": r.path,
                    "kind": r.kind,
                    "valid": r.valid,
                    "issues": [_issue_data(i) for i in r.issues],
                }
                for r in reports
            ],
        }
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        _print_reports(reports)
    if not all_valid:
        raise typer.Exit(EXIT_INVALID)


def _print_reports(reports: list[FileReport]) -> None:
    from rich.text import Text

    out = console()
    styles = {"error": "red", "warning": "yellow", "info": "cyan"}
    for report in reports:
        if report.valid and not STATE.quiet:
            out.print(Text("✓ ", style="bold green") + Text(f"{report.path} ({report.kind})"))
        for issue in report.issues:
            if STATE.quiet and issue.severity != "error":
                continue
            out.print(Text(_line(issue), style=styles.get(issue.severity, "")))
    if len(reports) > 1 and not STATE.quiet:
        invalid = sum(1 for r in reports if not r.valid)
        summary = f"{len(reports)} files: {len(reports) - invalid} valid, {invalid} invalid"
        console(stderr=True).print(Text(summary, style="bold red" if invalid else "bold green"))


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
    from parplan.config.loader import KINDS
    from parplan.config.schema import json_schema, schema_text
    from parplan.errors import ConfigError, Issue

    kinds = [kind.value] if kind is not None else list(KINDS)
    if output is None:
        if len(kinds) == 1:
            sys.stdout.write(schema_text(kinds[0]))
        else:
            sys.stdout.write(json.dumps({k: json_schema(k) for k in kinds}, indent=2) + "\n")
        return
    if not output.is_dir():
        if output.exists():
            raise ConfigError(Issue(str(output), "", "is not a directory"))
        try:
            output.mkdir(parents=True)
        except OSError as exc:
            raise ConfigError(Issue(str(output), "", f"cannot create: {exc.strerror or exc}")) from None
    for k in kinds:
        target = output / f"{k}.schema.json"
        try:
            target.write_text(schema_text(k), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(Issue(str(target), "", f"cannot write: {exc.strerror or exc}")) from None
        if not STATE.quiet:
            console().print(f"wrote {target}")
