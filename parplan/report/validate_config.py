"""What ``validate-config`` prints: a line per valid file and per problem, a summary, or JSON.

Text: ``✓ path (kind)`` for each valid file and each issue as ``path:line:column field: message``
(with the severity before the message unless it is an error), coloured by severity; with
``quiet`` only errors. The summary line (``3 files: 2 valid, 1 invalid``; ``1 file: valid``)
ends every text report, whatever the number of files.

JSON (:func:`validation_json`, version :data:`JSON_SCHEMA_VERSION`)::

    {"version": 1, "valid": bool, "files": [{"path", "kind", "valid",
     "issues": [{"path", "line", "column", "field", "message", "severity"}]}]}

``line`` and ``column`` are 1-based (0: unknown); ``severity`` is error, warning or info.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.text import Text

if TYPE_CHECKING:
    from parplan.api.validate_config import FileReport
    from parplan.errors import Issue

JSON_SCHEMA_VERSION = 1
"""Version of the ``validate-config --json`` output; bumped on any incompatible change."""

_STYLES = {"error": "red", "warning": "yellow", "info": "cyan"}


def issue_line(issue: Issue) -> str:
    """``path:line:column field: message``, with the severity before the message unless an error."""
    if issue.severity == "error":
        return str(issue)
    where = issue.path + (f":{issue.line}:{issue.column or 1}" if issue.line else "")
    field = f" {issue.field}:" if issue.field else ""
    return f"{where}{field} {issue.severity}: {issue.message}"


def validation_lines(reports: Sequence[FileReport], *, quiet: bool = False) -> list[Text]:
    """The lines for standard output: a check mark per valid file, then each of its issues."""
    lines: list[Text] = []
    for report in reports:
        if report.valid and not quiet:
            lines.append(Text("✓ ", style="bold green") + Text(f"{report.path} ({report.kind})"))
        for issue in report.issues:
            if quiet and issue.severity != "error":
                continue
            lines.append(Text(issue_line(issue), style=_STYLES.get(issue.severity, "")))
    return lines


def validation_summary(reports: Sequence[FileReport]) -> Text:
    """``N files: V valid, I invalid``; for one file ``1 file: valid`` (or ``invalid``).

    >>> str(validation_summary([]))
    '0 files: 0 valid, 0 invalid'
    """
    invalid = sum(1 for r in reports if not r.valid)
    if len(reports) == 1:
        summary = f"1 file: {'invalid' if invalid else 'valid'}"
    else:
        summary = f"{len(reports)} files: {len(reports) - invalid} valid, {invalid} invalid"
    return Text(summary, style="bold red" if invalid else "bold green")


def validation_json(reports: Sequence[FileReport]) -> str:
    """The JSON report (layout in the module docstring), ending with a newline."""
    payload = {
        "version": JSON_SCHEMA_VERSION,
        "valid": all(r.valid for r in reports),
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
    return json.dumps(payload, indent=2) + "\n"


def _issue_data(issue: Issue) -> dict[str, Any]:
    return {
        "path": issue.path,
        "line": issue.line,
        "column": issue.column,
        "field": issue.field,
        "message": issue.message,
        "severity": issue.severity,
    }
