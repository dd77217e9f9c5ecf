"""What every command shares: the global options, consoles that honour NO_COLOR, and the one place
that turns a :class:`~parplan.errors.ParplanError` into a red message and exit code 1.

Command modules import from here (never from :mod:`parplan.cli.app`, which imports them), keep
their heavy imports (numpy, networkx, pydantic, the simulator) inside the command function so
``parplan --help`` stays fast, and raise errors rather than printing them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import typer

from parplan.errors import ConfigError, ParplanError

if TYPE_CHECKING:
    from rich.console import Console

EXIT_OK = 0
"""Everything asked for was done."""
EXIT_INVALID = 1
"""Invalid input (a bad file, an infeasible request): the message says what."""
EXIT_USAGE = 2
"""The command line itself is wrong (unknown option, missing argument); typer reports it."""
EXIT_INTERNAL = 3
"""A bug in parplan: an exception that is not a :class:`ParplanError`."""


@dataclass
class CliState:
    """The global options, set by the app's callback before any command runs."""

    debug: bool = False
    quiet: bool = False


STATE = CliState()


def console(stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr). Colour is off when NO_COLOR is set or the output is
    not a terminal (rich's own detection); lines are never wrapped, so messages stay greppable."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True, emoji=False)


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
    """Wrap a command so a ParplanError becomes a red message and exit code 1 (a traceback only
    with ``--debug``), and any other exception is reported as a bug (exit code 3)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except ParplanError as exc:
            if STATE.debug:
                raise
            print_error(exc)
            raise typer.Exit(EXIT_INVALID) from None
        except KeyboardInterrupt:
            console(stderr=True).print("interrupted")
            raise typer.Exit(130) from None
        except Exception as exc:
            if STATE.debug:
                raise
            from rich.text import Text

            console(stderr=True).print(
                Text("internal error: ", style="bold red")
                + Text(f"{type(exc).__name__}: {exc}\n")
                + Text("this is a bug in parplan; rerun with --debug for the traceback")
            )
            raise typer.Exit(EXIT_INTERNAL) from None

    return wrapper
