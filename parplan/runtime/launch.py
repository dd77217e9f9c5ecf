"""Start the ranks of a ``parplan measure`` run with torchrun and always clean them up.

:func:`launch` runs one ``python -m torch.distributed.run`` per :class:`HostSlot` (c10d
rendezvous at the first slot's address, ``--nnodes len(slots) --node-rank i --nproc-per-node
slot.nproc``, the slot's argv ``wrapper`` in front and ``GLOO_SOCKET_IFNAME=slot.ifname`` when
set) with :mod:`parplan.runtime.measure_worker` as the module each rank runs, and returns the JSON
document the workers wrote. For a real multi-machine run, :class:`Rendezvous` passes torchrun's
own ``--nnodes``/``--node-rank``/``--rdzv-endpoint`` through and this machine runs one node.

Cleanup is the point of this module: every torchrun gets a session (process group) of its own,
and the processes under it (torchrun puts its workers in sessions of their own too) are tracked
while it runs; on success, error, timeout and Ctrl-C they are sent SIGTERM and then SIGKILL, and
the temporary directory that carried the results is removed. Every wait is bounded by
``timeout_s``. Linux only for the process tracking (``/proc``); elsewhere only the process
groups are signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parplan.errors import RuntimeCheckError
from parplan.runtime.hosts import LOOPBACK, HostSlot

WORKER_MODULE = "parplan.runtime.measure_worker"
MISSING_TORCH = "parplan measure needs the torch extra: pip install 'parplan[torch]'"
_POLL_S = 0.1
_GRACE_S = 5.0
_TRACK_S = 1.0


@dataclass(frozen=True)
class Rendezvous:
    """torchrun's multi-machine options, passed through for a real cluster: this machine is node
    ``node_rank`` of ``nnodes`` and the rendezvous is at ``endpoint`` (``host:port``)."""

    nnodes: int
    node_rank: int
    endpoint: str


def require_torch() -> None:
    """Raise :class:`RuntimeCheckError` with the install hint when torch (with torch.distributed)
    cannot be imported."""
    try:
        import torch.distributed as dist
    except ImportError:
        raise RuntimeCheckError(MISSING_TORCH) from None
    if not dist.is_available():
        raise RuntimeCheckError("this torch build has no torch.distributed")


def free_port(address: str = LOOPBACK) -> int:
    """A TCP port free now at ``address`` (bind port 0 and read it back); for an address this
    machine does not have (a network namespace's), one free on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((address, 0))
        except OSError:
            s.bind((LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


def loopback_interface() -> str | None:
    """The name of the loopback network interface (``lo`` on Linux, ``lo0`` on macOS), if found."""
    names = {name for _, name in socket.if_nameindex()}
    return next((n for n in ("lo", "lo0") if n in names), None)


def torchrun_command(
    slot: HostSlot,
    node_rank: int,
    nnodes: int,
    endpoint: str,
    run_id: str,
    worker_args: Sequence[str],
    timeout_s: float,
) -> list[str]:
    """The argv that starts ``slot``'s ranks: its wrapper, then torchrun with the worker module.

    A wrapped slot (a network namespace) names its own address (``--local-addr``) and says whether
    it hosts the rendezvous (``is_host``): torchrun would otherwise match the endpoint against this
    machine's hostname, which no namespace has, and every rank would wait until the timeout."""
    conf = f"join_timeout={max(int(timeout_s), 1)}"
    if slot.wrapper:
        conf += f",is_host={int(node_rank == 0)}"
    return [
        *slot.wrapper,
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(nnodes),
        "--node-rank",
        str(node_rank),
        "--nproc-per-node",
        str(slot.nproc),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        endpoint,
        "--rdzv-id",
        run_id,
        "--rdzv-conf",
        conf,
        *(["--local-addr", slot.address] if slot.wrapper else []),
        "--max-restarts",
        "0",
        "--monitor-interval",
        "0.2",
        "-m",
        WORKER_MODULE,
        *worker_args,
    ]


@dataclass
class _Started:
    slot: HostSlot
    proc: subprocess.Popen[bytes]
    log: Path
    out: Path


def launch(
    worker_args: Sequence[str],
    slots: Sequence[HostSlot],
    *,
    timeout_s: float = 300.0,
    rendezvous: Rendezvous | None = None,
    port: int | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run the worker on every slot (or, with ``rendezvous``, this machine's node of a real
    cluster) and return the JSON document rank 0's host wrote. Raises
    :class:`RuntimeCheckError` when a rank fails or dies (naming it, with the end of its log),
    when the run exceeds ``timeout_s``, or when torch is missing; every process it started is
    gone when it returns or raises (Ctrl-C included)."""
    require_torch()
    if not slots:
        raise RuntimeCheckError("no host to run the ranks on")
    if timeout_s <= 0:
        raise RuntimeCheckError(f"the timeout must be > 0 s, got {timeout_s:g}")
    if rendezvous is not None and len(slots) != 1:
        raise RuntimeCheckError("with --nnodes/--rdzv-endpoint this machine runs one node: give one host")
    run_id = f"parplan-{uuid.uuid4().hex[:12]}"
    if rendezvous is None:
        endpoint = f"{slots[0].address}:{port if port is not None else free_port(slots[0].address)}"
        nnodes = len(slots)
    else:
        endpoint, nnodes = rendezvous.endpoint, rendezvous.nnodes
    workdir = Path(tempfile.mkdtemp(prefix="parplan-measure-"))
    started: list[_Started] = []
    tracked: dict[int, str] = {}
    try:
        for i, slot in enumerate(slots):
            node_rank = i if rendezvous is None else rendezvous.node_rank
            out, log = workdir / f"result-{i}.json", workdir / f"log-{i}.txt"
            args = [*worker_args, "--timeout", str(timeout_s), "--out", str(out)]
            argv = torchrun_command(slot, node_rank, nnodes, endpoint, run_id, args, timeout_s)
            started.append(_start(argv, slot, log, out, env))
        _wait(started, tracked, timeout_s)
        return _result(started, rendezvous)
    finally:
        _stop(started, tracked)
        shutil.rmtree(workdir, ignore_errors=True)


def _start(argv: list[str], slot: HostSlot, log: Path, out: Path, extra: dict[str, str] | None) -> _Started:
    env = dict(os.environ)
    env.update(extra or {})
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    ifname = slot.ifname
    if ifname is None and slot.address == LOOPBACK:
        ifname = loopback_interface()  # keep the ranks' traffic on the loopback interface
    if ifname is not None:
        env["GLOO_SOCKET_IFNAME"] = ifname
    with open(log, "wb") as sink:
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            raise RuntimeCheckError(
                f"host {slot.name}: cannot start {argv[0]}: {exc.strerror or exc}"
            ) from None
    return _Started(slot, proc, log, out)


def _wait(started: list[_Started], tracked: dict[int, str], timeout_s: float) -> None:
    """Wait for every torchrun to exit 0; the first failure or the deadline raises."""
    deadline = time.monotonic() + timeout_s
    next_track = 0.0
    while True:
        if time.monotonic() >= next_track:  # a /proc scan costs milliseconds: not while timing often
            for item in started:
                _track(item.proc.pid, tracked)
            next_track = time.monotonic() + _TRACK_S
        codes = [item.proc.poll() for item in started]
        failed = [(item, code) for item, code in zip(started, codes, strict=True) if code not in (None, 0)]
        if failed:
            item, code = failed[0]
            raise RuntimeCheckError(_failure(item, code))
        if all(code == 0 for code in codes):
            return
        if time.monotonic() > deadline:
            hosts = ", ".join(i.slot.name for i, c in zip(started, codes, strict=True) if c is None)
            raise RuntimeCheckError(
                f"the measurement did not finish within {timeout_s:g} s (still running on {hosts}:"
                " a rank hung or a peer is unreachable); every rank was stopped"
            )
        time.sleep(_POLL_S)


def _failure(item: _Started, code: int) -> str:
    """A message for a torchrun that exited with ``code``: which rank failed and how, and the
    last error lines of the ranks' output."""
    text = item.log.read_text(errors="replace") if item.log.exists() else ""
    if "No module named 'torch'" in text:
        return f"host {item.slot.name}: {MISSING_TORCH}"
    ranks = re.findall(r"rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", text, flags=re.S)
    culprit = next(((r, int(c)) for r, c in ranks if int(c) != -signal.SIGTERM), None)
    if culprit is None and ranks:
        culprit = (ranks[0][0], int(ranks[0][1]))
    if culprit is None:
        message = f"the ranks on host {item.slot.name} failed (torchrun exit code {code})"
    elif culprit[1] < 0:
        name = signal.Signals(-culprit[1]).name if -culprit[1] in signal.valid_signals() else culprit[1]
        message = f"rank {culprit[0]} on host {item.slot.name} died: killed by {name}"
    else:
        message = f"rank {culprit[0]} on host {item.slot.name} failed with exit code {culprit[1]}"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [
        ln
        for ln in lines
        if re.search(r"\w+Error\b|error:", ln) and "elastic" not in ln and not ln.startswith("raise")
    ]
    detail = "\n".join(errors[-3:] if errors else lines[-5:])
    return f"{message}; the other ranks were stopped\n{detail}".rstrip()


def _result(started: list[_Started], rendezvous: Rendezvous | None) -> dict[str, Any]:
    """The document the workers wrote (slot 0's copy)."""
    out = started[0].out
    if not out.exists():
        where = "rank 0's machine" if rendezvous is not None else f"host {started[0].slot.name}"
        raise RuntimeCheckError(f"the ranks finished but wrote no results on {where}")
    try:
        document: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RuntimeCheckError(f"unreadable results from the ranks: {exc}") from None
    return document


# -- process tracking and cleanup -------------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    """Every process's children, from /proc (empty where there is none)."""
    out: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            stat = _stat(int(entry.name))
            if stat is not None:
                out.setdefault(stat[0], []).append(int(entry.name))
    return out


def _stat(pid: int) -> tuple[int, str] | None:
    """The parent pid and start time of ``pid`` (from /proc/PID/stat), or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    return int(fields[1]), fields[19]


def descendants(pid: int) -> Iterator[int]:
    """The processes under ``pid`` (children, their children, ...)."""
    tree = _children()
    todo = list(tree.get(pid, []))
    while todo:
        child = todo.pop()
        yield child
        todo.extend(tree.get(child, []))


def _track(pid: int, tracked: dict[int, str]) -> None:
    """Remember ``pid``'s descendants with their start times (so a reused pid is never signalled)."""
    for child in descendants(pid):
        stat = _stat(child)
        if stat is not None:
            tracked.setdefault(child, stat[1])


def _alive(tracked: dict[int, str]) -> list[int]:
    alive = []
    for pid, start in tracked.items():
        stat = _stat(pid)
        if stat is not None and stat[1] == start and not _zombie(pid):
            alive.append(pid)
    return alive


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return False


def _signal(started: list[_Started], tracked: dict[int, str], sig: signal.Signals) -> None:
    for item in started:
        if item.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(item.proc.pid, sig)
    for pid in _alive(tracked):
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def _stop(started: list[_Started], tracked: dict[int, str]) -> None:
    """SIGTERM everything started (torchrun, then its workers), SIGKILL what is left after a grace
    period; reap the torchruns."""
    with _no_interrupts():
        for item in started:
            _track(item.proc.pid, tracked)
        _signal(started, tracked, signal.SIGTERM)
        _reap(started, tracked)


@contextlib.contextmanager
def _no_interrupts() -> Iterator[None]:
    """Ignore Ctrl-C while cleaning up (a second one must not leave ranks behind)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _reap(started: list[_Started], tracked: dict[int, str]) -> None:
    """Wait a grace period for everything to exit, SIGKILL what is left, reap the torchruns."""
    deadline = time.monotonic() + _GRACE_S
    while time.monotonic() < deadline:
        running = [i for i in started if i.proc.poll() is None]
        if not running and not _alive(tracked):
            break
        time.sleep(_POLL_S)
    _signal(started, tracked, signal.SIGKILL)
    for item in started:
        with contextlib.suppress(subprocess.TimeoutExpired):
            item.proc.wait(timeout=_GRACE_S)
