"""``parplan emulate``: a cluster file as Linux network namespaces on this machine.

    parplan emulate CLUSTER                 # the hosts it becomes (rate, delay, ranks); builds nothing
    parplan emulate CLUSTER --check         # build, measure RTT and TCP rate per host, tear down
    parplan emulate CLUSTER -- COMMAND ...  # run COMMAND on every host at once, then tear down
    parplan emulate CLUSTER --host 0 -- bash

Building needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2. Each host is a namespace
``pp-<random>-h<i>`` on a bridge in its own namespace, shaped with tc (tbf; netem for delays where
the kernel has it, else the delays are not applied and a warning says so). Commands get
``PARPLAN_HOST_INDEX``, ``PARPLAN_HOST_NAME``, ``PARPLAN_HOST_ADDRESSES``, ``PARPLAN_HOST_NPROC``,
``MASTER_ADDR`` and ``GLOO_SOCKET_IFNAME`` in their environment. Everything is torn down on exit,
error and Ctrl-C.

Exit codes: 0 done (with a command: every host's command exited 0); 1 a cluster that cannot be
emulated, a machine that cannot build it, or a command that failed (the first non-zero code is
reported); 2 usage errors; 130 interrupted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from parplan.cli.common import EXIT_INVALID, STATE, console, show


def _warn(message: str | None) -> None:
    if message and not STATE.quiet:
        console(stderr=True).print(f"warning: {message}", style="yellow")


def emulate(
    cluster: Annotated[Path, typer.Argument(help="A cluster file: hosts on one switch, up to 8.")],
    command: Annotated[
        list[str] | None, typer.Argument(help="A command to run on every host (after '--').")
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Build it, measure RTT and TCP rate per host, tear it down.")
    ] = False,
    host: Annotated[
        int | None, typer.Option("--host", min=0, help="Run COMMAND on this host only (by index).")
    ] = None,
    delay: Annotated[
        str,
        typer.Option(
            "--delay",
            help="How to add the links' latencies: auto (netem, else a user-space relay), netem, relay, off.",
        ),
    ] = "auto",
    size: Annotated[
        str | None,
        typer.Option("--size", "-s", help="Bytes each --check rate probe sends (default: ~2 s of traffic)."),
    ] = None,
) -> None:
    """Emulate a cluster with network namespaces: show, --check or run a command on it."""
    if check and command:
        raise typer.BadParameter("give --check or a command, not both", param_hint="--check")
    if host is not None and not command:
        raise typer.BadParameter("--host needs a command after '--'", param_hint="--host")
    size_bytes = _size(size)
    if delay not in ("auto", "netem", "relay", "off"):
        raise typer.BadParameter(f"{delay!r}: one of auto, netem, relay, off", param_hint="--delay")

    from parplan.api import emulate as api

    if check:
        result = api.check_emulation(cluster, size_bytes=size_bytes, delay_method=delay)
        _warn(_delay_note(result.delay_mode, result.unapplied_delay_s))
        from parplan.report.emulate import check_view

        show(check_view(result))
    elif command:
        run = api.run_on_hosts(cluster, command, host=host, delay_method=delay)
        _warn(_delay_note(run.delay_mode, run.unapplied_delay_s))
        if run.exit_code:
            failed = [s.name for s, c in zip(run.slots, run.exit_codes, strict=False) if c]
            console(stderr=True).print(
                f"error: the command exited {run.exit_code} on {', '.join(failed)}", style="bold red"
            )
            raise typer.Exit(EXIT_INVALID)
    else:
        from parplan.config.loader import load_cluster
        from parplan.report.emulate import hosts_view

        spec = load_cluster(cluster)
        show(hosts_view(spec.name, api.emulated_hosts_of(spec, str(cluster))))


def _delay_note(delay_mode: str, unapplied_delay_s: float) -> str | None:
    from parplan.report.emulate import delay_note

    return delay_note(delay_mode, unapplied_delay_s)


def _size(text: str | None) -> int | None:
    """``--size`` in whole bytes (a usage error when malformed or not positive)."""
    if text is None:
        return None
    from parplan.config.units import parse_bytes

    try:
        value = parse_bytes(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--size") from None
    if value < 1024 or value != int(value):
        raise typer.BadParameter(
            f"{text!r}: give a whole number of bytes, at least 1 KiB", param_hint="--size"
        )
    return int(value)
