"""The ``parplan`` command: a typer app whose commands live in their own modules.

Adding a command is one line in :data:`COMMANDS`: its name, its module under ``parplan.cli`` and
the function. The function is a plain typer command (typed with ``Annotated``, docstring = help
text) that raises :class:`~parplan.errors.ParplanError` for user mistakes; :func:`register` wraps
it so such errors print as red messages with exit code 1, or as usage errors with exit code 2 for
a :class:`~parplan.errors.UsageError` (:mod:`parplan.cli.common`), and gives its ``--help`` the
exit codes as an epilog: 0 done, 1 invalid input files or an infeasible request, 2 usage error (a
bad option or argument value included), 3 a bug in parplan, 130 interrupted.

Start-up stays short (issue 15: <= 0.15 s, ``benchmarks/startup.py``): nothing heavy is imported
here or in the command modules at import time, and :func:`main` builds an app holding only the
command it is asked for (typer builds a pydantic adapter for every option of every command it
registers), so ``parplan collective`` imports and builds nothing of ``simulate``. The full app,
:data:`app`, is built on first use (``parplan --help``, an unknown command, tests).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from parplan import __version__
from parplan.cli.common import EXIT_CODES_HELP, STATE, guarded

if TYPE_CHECKING:
    app: typer.Typer

COMMANDS: dict[str, tuple[str, str]] = {
    "validate-config": ("validate", "validate_config"),
    "schema": ("validate", "schema"),
    "simulate": ("simulate", "simulate"),
    "compare-strategies": ("compare", "compare_strategies"),
    "search": ("search", "search"),
    "collective": ("collective", "collective"),
    "validate": ("accuracy", "validate"),
    "calibrate": ("calibrate", "calibrate"),
    "emulate": ("emulate", "emulate"),
    "measure": ("measure", "measure"),
}
"""Every command, in ``parplan --help``'s order: name -> (module in ``parplan.cli``, function)."""

APP_HELP = "Plan and simulate distributed deep-learning training before you rent the cluster."


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"parplan {__version__}")
        raise typer.Exit()


def _global_options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_show_version, is_eager=True, help="Show the version and exit."),
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show a traceback when something fails.")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print only errors and the results asked for.")
    ] = False,
) -> None:
    """Plan and simulate distributed deep-learning training before you rent the cluster."""
    STATE.debug = debug
    STATE.quiet = quiet


def register(target: typer.Typer, func: Callable[..., Any], name: str, **options: Any) -> None:
    """Add a command to an app, with parplan's error handling around it and the exit codes in
    its help."""
    options.setdefault("epilog", EXIT_CODES_HELP)
    target.command(name, **options)(guarded(func))


def build_app(names: Iterable[str] = COMMANDS) -> typer.Typer:
    """The ``parplan`` app with the named commands (all by default), each module imported only
    here."""
    built = typer.Typer(
        name="parplan",
        help=APP_HELP,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    built.callback()(_global_options)
    for name in names:
        module, function = COMMANDS[name]
        # __import__ rather than importlib.import_module: the same import, but one that
        # ``python -X importtime`` reports (the start-up tests read it).
        register(built, getattr(__import__(f"parplan.cli.{module}", fromlist=[function]), function), name)
    return built


_FULL_APP: list[typer.Typer] = []


def __getattr__(name: str) -> Any:
    """``app``: the app with every command, built on first use."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _FULL_APP:
        _FULL_APP.append(build_app())
    return _FULL_APP[0]


GLOBAL_FLAGS = frozenset({"--debug", "--quiet", "-q"})
"""Options of the app itself that users also write after the command (``parplan simulate X -q``)."""


def hoist_global_flags(args: list[str]) -> list[str]:
    """Move global flags written after the command to the front, where click expects them.

    Anything after a ``--`` is left alone (it may be a file named ``-q``).

    >>> hoist_global_flags(["simulate", "s.yaml", "-q", "--", "-q"])
    ['-q', 'simulate', 's.yaml', '--', '-q']
    """
    end = args.index("--") if "--" in args else len(args)
    flags = [a for a in args[:end] if a in GLOBAL_FLAGS]
    rest = [a for a in args[:end] if a not in GLOBAL_FLAGS]
    return flags + rest + args[end:]


def invoked_command(args: list[str]) -> str | None:
    """The command hoisted ``args`` name, when it is one of :data:`COMMANDS` and comes before any
    other option than the global flags (which take no value); otherwise None.

    >>> invoked_command(["-q", "collective", "--help"]), invoked_command(["--version", "simulate"])
    ('collective', None)
    """
    for arg in args:
        if arg in GLOBAL_FLAGS:
            continue
        return arg if arg in COMMANDS else None
    return None


def main() -> None:
    """Entry point of the ``parplan`` console script and ``python -m parplan``: an app holding
    just the invoked command, or every command when none is named."""
    # OpenBLAS starts a thread per core when numpy loads: ~30 ms of CPU and more wall time on a
    # busy machine, for the few small products parplan computes. A user's own setting wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    args = hoist_global_flags(sys.argv[1:])
    command = invoked_command(args)
    chosen = build_app([command]) if command is not None else __getattr__("app")
    chosen(args=args, prog_name="parplan")
