"""What ``parplan validate-config`` does, as one call: :func:`validate_paths`.

Each file is loaded (its kind detected unless given) with every file it references, and every
check runs (:func:`parplan.api.checks.check_spec`); a valid scenario is then checked for memory fit
(:func:`memory_issues`). Directories give their .yaml, .yml, .toml and .json files, sorted. Nothing
wrong with a file raises: every problem is an :class:`~parplan.errors.Issue` in its
:class:`FileReport`.

Memory fit is the plan stage's part of validation: each plan is expanded and every plan whose peak
memory exceeds a device's capacity is reported, with the figures. A plan that does not fit is a
warning, not an error: the file is valid and ``simulate`` still times the plan, marked infeasible.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from parplan.api.checks import check_spec
from parplan.api.evaluate import build_context
from parplan.api.kinds import detected_kind
from parplan.config.issues import make_issue
from parplan.config.loader import load_file
from parplan.config.readers import FORMATS
from parplan.errors import ConfigError, Issue, ParplanError
from parplan.plan.memory import infeasible_message
from parplan.plan.strategies import plan_memory


@dataclass(frozen=True)
class FileReport:
    """The outcome of validating one file: its kind (None if it could not be told) and its issues."""

    path: str
    kind: str | None
    issues: tuple[Issue, ...]

    @property
    def errors(self) -> tuple[Issue, ...]:
        """The issues that make the file invalid."""
        return tuple(i for i in self.issues if i.severity == "error")

    @property
    def valid(self) -> bool:
        """True when no issue is an error (warnings and notes allowed)."""
        return not self.errors


def validate_paths(paths: Sequence[str | Path], kind: str | None = None) -> list[FileReport]:
    """One report per file named or found in a directory named, in order (``kind``: read every
    file as this kind instead of detecting it); a directory without config files is an issue."""
    reports: list[FileReport] = []
    for path, found in expand_paths(paths):
        if not found:
            issue = Issue(path, "", "directory holds no .yaml, .yml, .toml or .json files")
            reports.append(FileReport(path, None, (issue,)))
            continue
        report = validate_file(path, kind)
        if report.kind == "scenario" and report.valid:
            report = dataclasses.replace(report, issues=(*report.issues, *memory_issues(path)))
        reports.append(report)
    return reports


def expand_paths(paths: Sequence[str | Path]) -> list[tuple[str, bool]]:
    """Files to check, in order: ``(path, found)``; a directory gives its config files, sorted."""
    out: list[tuple[str, bool]] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in FORMATS)
            out.extend((str(p), True) for p in found)
            if not found:
                out.append((str(path), False))
        else:
            out.append((str(path), True))
    return out


def validate_file(path: str | Path, kind: str | None = None) -> FileReport:
    """Load a file (and everything it references) and run every check (memory fit aside).

    Never raises for anything wrong with the file; every problem is an issue in the report.
    """
    try:
        loaded = load_file(path, kind)
    except ConfigError as exc:
        found = detected_kind(path)
        if kind is not None and found is not None and found != kind:
            # --kind overrode the detection: say so first, then what reading it as `kind` found
            hint = Issue(
                str(path),
                "",
                f"is a {found} file, read as a {kind} because of --kind"
                f" (drop --kind to check it as a {found})",
            )
            return FileReport(str(path), kind, (hint, *exc.issues))
        return FileReport(str(path), kind if kind is not None else found, tuple(exc.issues))
    issues = check_spec(loaded.kind, loaded.spec, loaded.source)
    return FileReport(str(path), loaded.kind, tuple(issues))


def memory_issues(path: str | Path) -> list[Issue]:
    """One warning per plan of the scenario at ``path`` that does not fit, placed at the plan.

    Plans that cannot be expanded at all are skipped: the other checks already report why.
    """
    loaded = load_file(path, "scenario")
    scenario = loaded.spec
    ctx = build_context(scenario)
    issues: list[Issue] = []
    for i, plan in enumerate(scenario.plans):
        try:
            memory = plan_memory(ctx, plan.strategy)
        except ParplanError:
            continue
        message = infeasible_message(memory)
        if message is not None:
            issues.append(
                make_issue(
                    loaded.source,
                    ("plans", i),
                    f"plan {plan.name!r} does not fit in device memory: {message}",
                    "warning",
                )
            )
    return issues
