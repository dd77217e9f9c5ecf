"""validate-config's lines, summary and JSON, from file reports."""

from __future__ import annotations

import json

from parplan.api.validate_config import FileReport
from parplan.errors import Issue
from parplan.report.validate_config import (
    JSON_SCHEMA_VERSION,
    issue_line,
    validation_json,
    validation_lines,
    validation_summary,
)

ERROR = Issue("s.yaml", "plans[0].strategy.num_replicas", "too many", line=7, column=5)
WARNING = Issue("s.yaml", "plans[1]", "does not fit", line=9, severity="warning")
NOTE = Issue("c.yaml", "", "a note", severity="info")
REPORTS = [
    FileReport("s.yaml", "scenario", (ERROR, WARNING)),
    FileReport("c.yaml", "cluster", (NOTE,)),
]


def test_issue_lines_put_the_severity_before_the_message_unless_an_error() -> None:
    assert issue_line(ERROR) == "s.yaml:7:5 plans[0].strategy.num_replicas: too many"
    assert issue_line(WARNING) == "s.yaml:9:1 plans[1]: warning: does not fit"
    assert issue_line(NOTE) == "c.yaml info: a note"


def test_lines_and_summary() -> None:
    assert [t.plain for t in validation_lines(REPORTS)] == [
        "s.yaml:7:5 plans[0].strategy.num_replicas: too many",
        "s.yaml:9:1 plans[1]: warning: does not fit",
        "✓ c.yaml (cluster)",
        "c.yaml info: a note",
    ]
    assert [t.plain for t in validation_lines(REPORTS, quiet=True)] == [issue_line(ERROR)]
    summary = validation_summary(REPORTS)
    assert summary.plain == "2 files: 1 valid, 1 invalid"
    # one file gets a summary too (every text report ends with one)
    assert validation_summary(REPORTS[:1]).plain == "1 file: invalid"
    assert validation_summary(REPORTS[1:]).plain == "1 file: valid"


def test_json() -> None:
    data = json.loads(validation_json(REPORTS))
    assert data["version"] == JSON_SCHEMA_VERSION and data["valid"] is False
    assert [f["valid"] for f in data["files"]] == [False, True]
    assert data["files"][0]["issues"][0] == {
        "path": "s.yaml",
        "line": 7,
        "column": 5,
        "field": "plans[0].strategy.num_replicas",
        "message": "too many",
        "severity": "error",
    }
