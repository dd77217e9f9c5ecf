"""What the commands that evaluate many plans share (``compare-strategies``, ``search``): the
``--backend`` choices and their check, and the progress bar on stderr."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import typer

from parplan.api.parallel import BACKENDS
from parplan.cli.common import STATE, console

if TYPE_CHECKING:
    BackendChoice = str
    from rich.progress import Progress

if not TYPE_CHECKING:
    BackendChoice = Literal[BACKENDS]  # the backends' names, offered as the option's choices

PROGRESS_DELAY_S = 0.5
"""The progress bar appears only once the work has run this long."""


def check_backend(backend: str, address: str | None) -> None:
    """``--address`` only with ``--backend ray`` (a usage error otherwise)."""
    if address is not None and backend != "ray":
        raise typer.BadParameter("--address joins a Ray cluster; add --backend ray", param_hint="--address")


class progress_bar:
    """A transient progress bar on stderr, shown once the work has run :data:`PROGRESS_DELAY_S`.

    Off with --quiet, when stderr is not a terminal, or for a single variant; stopped (and, being
    transient, erased) when the last variant finishes.
    """

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.bar: Progress | None = None
        self.task: Any = None
        err = console(stderr=True)
        self.enabled = not STATE.quiet and err.is_terminal
        self.console = err

    def __enter__(self) -> Callable[[int, int], None] | None:
        return self.tick if self.enabled else None

    def tick(self, done: int, total: int) -> None:
        if self.bar is None:
            if total <= 1 or time.monotonic() - self.started < PROGRESS_DELAY_S or done >= total:
                return
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(
                TextColumn("evaluating plans"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("plans", total=total)
        self.bar.update(self.task, completed=done)
        if done >= total:  # gone before the ranking's messages print
            self.bar.stop()

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
