"""The ``parplan`` command: a typer app whose commands live in their own modules.

Adding a command is one line at the bottom of this file: ``register(module.function, "name")``.
The function is a plain typer command (typed with ``Annotated``, docstring = help text) that
raises :class:`~parplan.errors.ParplanError` for user mistakes; :func:`register` wraps it so such
errors print as red messages with exit code 1, or as usage errors with exit code 2 for a
:class:`~parplan.errors.UsageError` (:mod:`parplan.cli.common`), and gives its ``--help`` the exit
codes as an epilog: 0 done, 1 invalid input files or an infeasible request, 2 usage error (a bad
option or argument value included), 3 a bug in parplan, 130 interrupted.

Nothing heavy is imported here or in the command modules at import time, so ``parplan --help``
answers without loading numpy, networkx or pydantic.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from parplan import __version__
from parplan.cli import accuracy, calibrate, collective, compare, simulate, validate
from parplan.cli.common import EXIT_CODES_HELP, STATE, guarded

app = typer.Typer(
    name="parplan",
    help="Plan and simulate distributed deep-learning training before you rent the cluster.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"parplan {__version__}")
        raise typer.Exit()


@app.callback()
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


def register(func: Callable[..., Any], name: str, **options: Any) -> None:
    """Add a command to the app, with parplan's error handling around it and the exit codes in
    its help."""
    options.setdefault("epilog", EXIT_CODES_HELP)
    app.command(name, **options)(guarded(func))


register(validate.validate_config, "validate-config")
register(validate.schema, "schema")
register(simulate.simulate, "simulate")
register(compare.compare_strategies, "compare-strategies")
register(collective.collective, "collective")
register(accuracy.validate, "validate")
register(calibrate.calibrate, "calibrate")


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


def main() -> None:
    """Entry point of the ``parplan`` console script and ``python -m parplan``."""
    app(args=hoist_global_flags(sys.argv[1:]), prog_name="parplan")
