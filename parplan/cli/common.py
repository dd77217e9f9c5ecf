"""What every command shares: the global options, the exit codes, consoles that follow the
colour, width and stream rules, and the one place that turns errors into messages and exit codes.

The rules (the README's "Output" section says them to users):

- Streams: results go to stdout (tables, issues found in files, summaries, ``-`` outputs);
  stderr carries only messages about the run: errors that stop a command, warnings about the
  command line, progress and ``wrote FILE`` notes. ``2>/dev/null`` never hides a result.
- Colour: none at all (no ANSI styling, bold included) when ``NO_COLOR`` is set and not empty
  (no-color.org); otherwise rich decides (a terminal, or ``FORCE_COLOR``).
- Width: a terminal's width, or ``COLUMNS``; output that is not a terminal with ``COLUMNS``
  unset is rendered at its natural width, so a file or a pipe gets every column in full. Tables
  never drop a column (:mod:`parplan.report.layout`); no line ends in spaces (:func:`show`).

Command modules import from here (never from :mod:`parplan.cli.app`, which imports them), keep
their heavy imports (numpy, networkx, pydantic, the simulator) inside the command function so
``parplan --help`` stays fast, and raise errors rather than printing them.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import typer

from parplan.errors import ConfigError, ParplanError, UsageError

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

EXIT_OK = 0
"""Everything asked for was done."""
EXIT_INVALID = 1
"""Invalid input files, or a request they cannot meet (a plan that does not fit): the message says what."""
EXIT_USAGE = 2
"""The command line is wrong: an unknown option, a missing argument, or a value that cannot be used
(malformed, out of range, naming nothing that exists, an output that cannot be written)."""
EXIT_INTERNAL = 3
"""A bug in parplan: an exception that is not a :class:`ParplanError`."""
EXIT_INTERRUPTED = 130
"""Interrupted (Ctrl-C), as shells report SIGINT."""

EXIT_CODES_HELP = (
    "Exit codes: 0 done; 1 invalid input files or an infeasible request; 2 usage error (unknown option,"
    " bad option or argument value, output that cannot be written; nothing was run); 3 internal error"
    " (a bug in parplan); 130 interrupted."
)
"""The epilog of every command's ``--help``."""

NATURAL_WIDTH = 10_000
"""The console width for output that is not a terminal when ``COLUMNS`` is unset: wide enough that
every table and line is rendered at its natural width."""


@dataclass
class CliState:
    """The global options, set by the app's callback before any command runs."""

    debug: bool = False
    quiet: bool = False


STATE = CliState()


def no_color() -> bool:
    """Whether ``NO_COLOR`` asks for no ANSI styling at all (set and not empty, no-color.org)."""
    return os.environ.get("NO_COLOR", "") != ""


def console(stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr) following the colour and width rules (module
    docstring); lines are never wrapped by the console, so messages stay greppable."""
    from rich.console import Console

    out = Console(
        stderr=stderr,
        highlight=False,
        soft_wrap=True,
        emoji=False,
        color_system=None if no_color() else "auto",
    )
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = NATURAL_WIDTH
    return out


def show(renderable: RenderableType) -> None:
    """Print a view on stdout by the width rule, without trailing spaces on any line."""
    from rich.segment import Segment, Segments

    from parplan.report.layout import trimmed_lines

    out = console()
    segments: list[Segment] = []
    for line in trimmed_lines(out, renderable):
        segments += [*line, Segment.line()]
    out.print(Segments(segments), end="")


def print_error(exc: ParplanError) -> None:
    """One red line per problem, on stderr: every issue of a ConfigError, or the error's message."""
    from rich.text import Text

    err = console(stderr=True)
    lines = [str(i) for i in exc.issues] if isinstance(exc, ConfigError) and exc.issues else [str(exc)]
    for line in lines:
        err.print(Text("error: ", style="bold red") + Text(line))


P = ParamSpec("P")
R = TypeVar("R")


def guarded(func: Callable[P, R]) -> Callable[P, R]:
    """Wrap a command so a :class:`UsageError` becomes the usage message typer gives a bad option
    value (``Invalid value for --x: ...``, exit code 2), any
    other ParplanError a red message and exit code 1 (a traceback only with ``--debug``), Ctrl-C
    exit code 130, and any other exception is reported as a bug (exit code 3)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except UsageError as exc:
            if STATE.debug:
                raise
            message, option = str(exc), exc.option
            if option and message.startswith(f"{option}: "):
                message = message[len(option) + 2 :]
            raise typer.BadParameter(message, param_hint=option) from None
        except ParplanError as exc:
            if STATE.debug:
                raise
            print_error(exc)
            raise typer.Exit(EXIT_INVALID) from None
        except KeyboardInterrupt:
            console(stderr=True).print("interrupted")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Exception as exc:
            if STATE.debug:
                raise
            from rich.text import Text

            console(stderr=True).print(
                Text("internal error: ", style="bold red")
                + Text(f"{type(exc).__name__}: {_condensed(exc)}\n")
                + Text("this is a bug in parplan; rerun with --debug for the traceback")
            )
            raise typer.Exit(EXIT_INTERNAL) from None

    return wrapper


def _condensed(exc: Exception) -> str:
    """An unexpected exception's message; a pydantic ValidationError as ``field: message`` pairs
    instead of its multi-line dump."""
    errors = getattr(exc, "errors", None)
    if type(exc).__name__ == "ValidationError" and callable(errors):
        return "; ".join(
            f"{'.'.join(str(x) for x in e.get('loc', ()))}: {e.get('msg', '')}".lstrip(": ") for e in errors()
        )
    return str(exc)
