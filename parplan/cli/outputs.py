"""Where ``simulate``, ``compare-strategies`` and ``schema`` put their results: stdout, files, per-plan files.

- :func:`check_outputs`: run before any work, so a long simulation never ends in "cannot write":
  ``-`` (stdout) may be used by one machine-readable output only; every file must be writable
  (its directory exists and takes files, it is not a directory, not one of the command's input
  files, not an option-looking ``-x``); pictures need a format parplan draws (PNG, SVG, PDF) and
  matplotlib, an HTML page (``--html``) plotly. A bad output is a usage error (exit code 2), a
  missing matplotlib or plotly exit code 1.
- :func:`emit`: write text to stdout (``-``) or atomically to a file, and say so on stderr unless
  ``--quiet``; a file that cannot be written is a :class:`~parplan.errors.ConfigError` naming it.
- :func:`emit_html`: the ``--html`` page of a report document, written atomically.
- :func:`write_into`: ``schema --output DIR`` writes one file per kind into a directory.
- :func:`per_plan_paths`: ``--trace FILE`` / ``--plot FILE`` with several plans write one file per
  plan, the plan name inserted before the suffix: ``out.json`` -> ``out.dp-ring.json``; with one
  plan the file is ``FILE`` itself.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from parplan.cli.common import STATE, console
from parplan.errors import ConfigError, Issue

if TYPE_CHECKING:
    from parplan.api.results import PlanResult

STDOUT = "-"
"""The path that means standard output."""


def check_outputs(
    options: dict[str, str | None],
    *,
    files_only: Sequence[str] = (),
    pictures: Sequence[str] = (),
    pages: Sequence[str] = (),
    inputs: Sequence[str | Path] = (),
) -> None:
    """Usage checks on output options (``{"--json": value, ...}``) before any work (see the module
    docstring): ``files_only`` options need a file name, ``pictures`` a picture format and
    matplotlib, ``pages`` (HTML reports) plotly; no output may overwrite one of ``inputs``."""
    to_stdout = [name for name, value in options.items() if value == STDOUT]
    if len(to_stdout) > 1:
        raise typer.BadParameter(f"only one output can go to stdout ('-'), not {' and '.join(to_stdout)}")
    for name in files_only:
        if options.get(name) == STDOUT:
            raise typer.BadParameter(f"{name} needs a file name, not '-'", param_hint=name)
    for name, value in options.items():
        if value is not None and value != STDOUT:
            problem = output_problem(value, inputs)
            if problem is not None:
                raise typer.BadParameter(f"{value}: {problem}", param_hint=name)
    for name in pictures:
        value = options.get(name)
        if value is not None:
            from parplan.errors import ParplanError
            from parplan.report.plot import plot_format

            try:
                plot_format(value)
            except ParplanError as exc:
                raise typer.BadParameter(str(exc), param_hint=name) from None
    if any(options.get(name) is not None for name in pictures):
        from parplan.report.plot import require_matplotlib

        require_matplotlib()
    if any(options.get(name) is not None for name in pages):
        from parplan.report.html import require_plotly

        require_plotly()


def output_problem(path: str | Path, inputs: Sequence[str | Path] = ()) -> str | None:
    """Why ``path`` cannot take an output file, or None when it can (a usage check, not a promise:
    the disk may still fill up).

    >>> output_problem("no/such/dir/out.json")
    'directory no/such/dir does not exist'
    >>> output_problem("-c")
    'looks like an option, not a file name (write ./-c for a file named so)'
    """
    import os

    text = str(path)
    if text.startswith("-"):
        return f"looks like an option, not a file name (write ./{text} for a file named so)"
    target = Path(path)
    if target.is_dir():
        return "is a directory; give a file name"
    if target.exists() and any(_same_file(target, Path(i)) for i in inputs):
        return "is one of the command's input files; it would be overwritten"
    kind = _config_kind(target)
    if kind is not None:  # e.g. `validate-config --json a.yaml b.yaml`: a.yaml was taken as the output
        return f"is a parplan {kind} file; an output would overwrite it (give another file name)"
    parent = target.parent
    if not parent.exists():
        return f"directory {parent} does not exist"
    if not parent.is_dir():
        return f"{parent} is not a directory"
    if target.exists() and not target.is_file():
        return None if os.access(target, os.W_OK) else "cannot be written (permission denied)"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot write into directory {parent} (permission denied)"
    return None


def _config_kind(path: Path) -> str | None:
    """The kind of parplan input file at ``path`` (cluster, scenario, ...), or None when it is not
    one: missing, not a config format, unreadable, or a parplan report (``"tool": "parplan ..."``)."""
    if not path.is_file() or path.suffix.lower() not in (".yaml", ".yml", ".toml", ".json"):
        return None
    from parplan.config.loader import detect_kind
    from parplan.config.readers import read_file
    from parplan.errors import ParplanError

    try:
        data = read_file(path)[0]
        if isinstance(data, dict) and str(data.get("tool", "")).startswith("parplan"):
            return None
        return detect_kind(data, str(path))
    except ParplanError:
        return None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return b.exists() and a.samefile(b)
    except OSError:
        return False


def check_directory(name: str, directory: Path) -> None:
    """Usage check of an output directory (``schema --output DIR``): it is a directory or can be
    created (its nearest existing ancestor is a writable directory)."""
    import os

    if directory.exists():
        if not directory.is_dir():
            raise typer.BadParameter(f"{directory} is not a directory", param_hint=name)
        if not os.access(directory, os.W_OK | os.X_OK):
            raise typer.BadParameter(f"cannot write into {directory} (permission denied)", param_hint=name)
        return
    ancestor = directory.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir() or not os.access(ancestor, os.W_OK | os.X_OK):
        raise typer.BadParameter(f"cannot create {directory} (in {ancestor})", param_hint=name)


def stdout_taken(options: dict[str, str | None]) -> bool:
    """Whether a machine-readable output goes to stdout (then the tables are not printed)."""
    return any(value == STDOUT for value in options.values())


def emit(path: str, data: str | bytes, what: str) -> None:
    """Write ``data`` to stdout (``-``) or atomically to ``path``; report ``wrote <what> <path>``."""
    if path == STDOUT:
        if isinstance(data, bytes):
            sys.stdout.buffer.write(data)
        else:
            sys.stdout.write(data)
        sys.stdout.flush()
        return
    write_file(path, lambda target: _write(target, data))
    wrote(what, path)


def emit_document(document: dict[str, object], json_path: str | None, csv_path: str | None) -> None:
    """Write a report document as JSON and/or CSV, each to a file or ``-`` (stdout)."""
    if json_path:
        from parplan.report.json_report import dumps

        emit(json_path, dumps(document), "JSON")
    if csv_path:
        from parplan.report.csv_report import document_csv

        emit(csv_path, document_csv(document), "CSV")


def emit_html(path: str, document: dict[str, object], results: Mapping[str, PlanResult]) -> None:
    """Write the self-contained HTML page of a report document (:mod:`parplan.report.html`)
    atomically to ``path``; ``results`` (by plan name) give the timelines they kept."""
    from parplan.report.html import html_page

    emit(path, html_page(document, results), "HTML report")


def _write(target: str, data: str | bytes) -> None:
    from parplan.report.output import write_atomic

    write_atomic(target, data)


def write_file(path: str, writer: Callable[[str], None]) -> None:
    """Run ``writer(path)``, turning an OSError into a ConfigError that names the file."""
    if Path(path).is_dir():
        raise ConfigError(Issue(path, "", "is a directory; give a file name"))
    try:
        writer(path)
    except OSError as exc:
        raise ConfigError(Issue(path, "", f"cannot write: {exc.strerror or exc}")) from None


def write_into(directory: Path, files: dict[str, str]) -> Iterator[Path]:
    """Write ``{name: text}`` into ``directory`` (created if missing), yielding each path once written.

    A directory that is a file, or cannot be created or written into, is a ConfigError naming it.
    """
    if not directory.is_dir():
        if directory.exists():
            raise ConfigError(Issue(str(directory), "", "is not a directory"))
        try:
            directory.mkdir(parents=True)
        except OSError as exc:
            raise ConfigError(Issue(str(directory), "", f"cannot create: {exc.strerror or exc}")) from None
    for name, text in files.items():
        target = directory / name
        try:
            target.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(Issue(str(target), "", f"cannot write: {exc.strerror or exc}")) from None
        yield target


def wrote(what: str, path: str) -> None:
    """``wrote <what> <path>`` on stderr, unless --quiet."""
    if not STATE.quiet:
        console(stderr=True).print(f"wrote {what} {path}", style="dim")


def warn(message: str) -> None:
    """A yellow warning on stderr, unless --quiet."""
    if not STATE.quiet:
        from rich.text import Text

        console(stderr=True).print(Text("warning: ", style="bold yellow") + Text(message))


def slug(name: str) -> str:
    """A plan name made safe for a file name.

    >>> slug("ring[algorithm=tree:4]")
    'ring_algorithm=tree_4_'
    """
    return re.sub(r"[^A-Za-z0-9._=+-]", "_", name) or "plan"


def per_plan_paths(path: str, names: Sequence[str]) -> list[str]:
    """One file per plan (see the module docstring); names that clash get ``-2``, ``-3``, ...

    >>> per_plan_paths("out/trace.json", ["local", "dp-ring"])
    ['out/trace.local.json', 'out/trace.dp-ring.json']
    """
    if len(names) == 1:
        return [path]
    p = Path(path)
    suffix = p.suffix
    stem = p.name[: -len(suffix)] if suffix else p.name
    out: list[str] = []
    for name in names:
        candidate = str(p.with_name(f"{stem}.{slug(name)}{suffix}"))
        n = 2
        while candidate in out:
            candidate = str(p.with_name(f"{stem}.{slug(name)}-{n}{suffix}"))
            n += 1
        out.append(candidate)
    return out
