"""Cross-check parplan against PyTorch's own distributed engine: gloo all-reduce and DDP training.

parplan proves its all-reduce schedules on numpy arrays (:mod:`parplan.collectives.dataplane`)
and its data-parallel training rule in :mod:`parplan.runtime.training`. This module runs the same
computations through ``torch.distributed`` (gloo backend, CPU) in real worker processes joined
over the loopback interface, so tests can compare the numbers with an engine parplan did not
write.

:class:`GlooGroup` starts ``p`` spawned processes once and serves many requests to them (process
start-up and importing torch dominate, so tests reuse one group); :func:`run_gloo_allreduce` and
:func:`train_ddp_regression` are one-shot wrappers. Only ``127.0.0.1`` is used (the rendezvous
port is found by binding port 0, and gloo is pinned to the loopback interface), every wait is
bounded by ``timeout_s``, and the workers are always stopped, terminated if need be.

torch is an optional extra, imported lazily; without it these functions raise
:class:`~parplan.errors.RuntimeCheckError` saying how to install it.
"""

from __future__ import annotations

import contextlib
import datetime
import multiprocessing as mp
import os
import statistics
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import TracebackType
from typing import Any

import numpy as np

from parplan.errors import RuntimeCheckError
from parplan.runtime.batching import split_batch
from parplan.runtime.launch import free_port, loopback_interface
from parplan.runtime.training import Kind

LOOPBACK = "127.0.0.1"
MISSING_TORCH = "the torch cross-check needs the torch extra: pip install 'parplan[torch]'"


def require_torch() -> Any:
    """Import torch and check its gloo backend; raises :class:`RuntimeCheckError` when unusable."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        raise RuntimeCheckError(f"{MISSING_TORCH} ({exc})") from None
    if not dist.is_available() or not dist.is_gloo_available():
        raise RuntimeCheckError(f"this torch {torch.__version__} build has no gloo distributed backend")
    return torch


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 now (bind port 0 and read it back)."""
    return free_port(LOOPBACK)


# ---------------------------------------------------------------------------------------------
# Worker side: runs in the spawned processes.


_GROUPS: dict[int, Any] = {}
"""In a worker: the process group of ranks ``0 .. k-1`` by ``k`` (``k`` = the world: the default)."""


def _handle_all_reduce(payload: np.ndarray, group: Any) -> np.ndarray:
    import torch
    import torch.distributed as dist

    tensor = torch.from_numpy(np.ascontiguousarray(payload).copy())
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    result: np.ndarray = tensor.numpy()
    return result


def _handle_train(payload: tuple[np.ndarray, np.ndarray, Kind, int, float], group: Any) -> np.ndarray:
    """DDP training of this rank's round-robin shard; the loss is scaled so DDP's gradient mean is
    the full-batch gradient even when shards are uneven (see :func:`train_ddp_regression`)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    X, y, kind, steps, learning_rate = payload
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    xs = torch.from_numpy(np.ascontiguousarray(split_batch(X, world)[rank], dtype=np.float64))
    ys = torch.from_numpy(np.ascontiguousarray(split_batch(y, world)[rank], dtype=np.float64))
    model = torch.nn.Linear(X.shape[1], 1, bias=False, dtype=torch.float64)  # X carries a bias column
    with torch.no_grad():
        model.weight.zero_()
    ddp = DistributedDataParallel(model, process_group=group)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=learning_rate)
    scale = world / len(X)  # DDP divides the summed gradients by world: sum(n_i g_i) / N overall
    for _ in range(steps):
        optimizer.zero_grad()
        z = ddp(xs).squeeze(1)
        if kind == "logistic":
            loss = torch.nn.functional.binary_cross_entropy_with_logits(z, ys, reduction="sum")
        else:
            loss = 0.5 * torch.sum((z - ys) ** 2)
        torch.autograd.backward(loss * scale)
        optimizer.step()
    weights: np.ndarray = model.weight.detach().numpy()[0].copy()
    return weights


def _handle_time(payload: tuple[int, str, int, int], group: Any) -> list[float]:
    """Seconds of each of ``reps`` all-reduces (after ``warmup``), each started after a barrier."""
    import torch
    import torch.distributed as dist

    num_elements, dtype, reps, warmup = payload
    tensor = torch.ones(num_elements, dtype=getattr(torch, dtype))
    for _ in range(warmup):
        dist.all_reduce(tensor, group=group)
    times = []
    for _ in range(reps):
        dist.barrier(group=group)
        t0 = time.perf_counter()
        dist.all_reduce(tensor, group=group)
        times.append(time.perf_counter() - t0)
    return times


_HANDLERS: dict[str, Callable[[Any, Any], Any]] = {
    "all_reduce": _handle_all_reduce,
    "train": _handle_train,
    "time": _handle_time,
}


def _worker_main(rank: int, world_size: int, port: int, timeout_s: float, conn: Connection) -> None:
    """Join the gloo group (and make the prefix subgroups), then serve ``(command, (size,
    payload))`` requests until ``stop`` or an error; ranks ``>= size`` sit a request out."""
    try:
        os.environ.update(MASTER_ADDR=LOOPBACK, MASTER_PORT=str(port), RANK=str(rank))
        os.environ["WORLD_SIZE"] = str(world_size)
        lo = loopback_interface()
        if lo is not None:
            os.environ.setdefault("GLOO_SOCKET_IFNAME", lo)
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        dist.init_process_group(
            "gloo",
            init_method="env://",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        for size in range(1, world_size):  # collective: every rank creates every subgroup, in order
            _GROUPS[size] = dist.new_group(list(range(size)))
        _GROUPS[world_size] = dist.group.WORLD
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    try:
        conn.send(("ok", None))
        while True:
            command, (size, payload) = conn.recv()
            if command == "stop":
                break
            try:
                result = _HANDLERS[command](payload, _GROUPS[size]) if rank < size else None
                conn.send(("ok", result))
            except BaseException:
                conn.send(("error", traceback.format_exc()))
                break
    except (EOFError, OSError):  # the parent went away
        pass
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
        conn.close()


# ---------------------------------------------------------------------------------------------
# Parent side.


class GlooGroup:
    """``world_size`` worker processes in one gloo process group over loopback.

    Use as a context manager; the processes are started once and run every request in lock step.
    Each request waits at most ``timeout_s`` for all ranks; on a timeout or a worker error the
    group is shut down and :class:`RuntimeCheckError` is raised with the worker's traceback.
    """

    def __init__(self, world_size: int, *, timeout_s: float = 60.0) -> None:
        if world_size < 1:
            raise RuntimeCheckError(f"world_size must be >= 1, got {world_size}")
        if timeout_s <= 0:
            raise RuntimeCheckError(f"timeout_s must be > 0, got {timeout_s}")
        require_torch()
        self.world_size = world_size
        self.timeout_s = timeout_s
        self.port = free_loopback_port()
        ctx = mp.get_context("spawn")  # never fork a process that may hold torch threads
        self._conns: list[Connection] = []
        self._procs: list[BaseProcess] = []
        try:
            for rank in range(world_size):
                parent_end, child_end = ctx.Pipe()
                proc = ctx.Process(
                    target=_worker_main,
                    args=(rank, world_size, self.port, timeout_s, child_end),
                    name=f"parplan-gloo-{rank}",
                    daemon=True,
                )
                proc.start()
                child_end.close()  # so a dead worker shows up as EOF on our end
                self._conns.append(parent_end)
                self._procs.append(proc)
            self._gather("start")
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> GlooGroup:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _gather(self, what: str) -> list[Any]:
        """Every rank's reply to the current request, waiting at most ``timeout_s`` in all."""
        deadline = time.monotonic() + self.timeout_s
        replies: dict[int, Any] = {}
        pending = {conn: rank for rank, conn in enumerate(self._conns)}
        while pending:
            remaining = deadline - time.monotonic()
            ready = wait(list(pending), timeout=max(remaining, 0.0)) if remaining > 0 else []
            if not ready:
                self.close()
                raise RuntimeCheckError(
                    f"gloo {what}: ranks {sorted(pending.values())} did not answer within {self.timeout_s} s"
                )
            for conn in ready:
                assert isinstance(conn, Connection)
                rank = pending.pop(conn)
                try:
                    status, value = conn.recv()
                except (EOFError, OSError):
                    self.close()
                    raise RuntimeCheckError(f"gloo {what}: worker rank {rank} died") from None
                if status != "ok":
                    self.close()
                    raise RuntimeCheckError(f"gloo {what}: worker rank {rank} failed:\n{value}")
                replies[rank] = value
        return [replies[r] for r in range(self.world_size)]

    def _size(self, size: int) -> int:
        if not 1 <= size <= self.world_size:
            raise RuntimeCheckError(f"this GlooGroup has {self.world_size} ranks; cannot run on {size}")
        return size

    def _request(self, command: str, payloads: list[Any]) -> list[Any]:
        """Send ``payloads[r]`` to rank ``r`` (ranks past the payloads sit out); their replies."""
        if not self._procs:
            raise RuntimeCheckError("this GlooGroup is closed")
        size = self._size(len(payloads))
        for rank, conn in enumerate(self._conns):
            conn.send((command, (size, payloads[rank] if rank < size else None)))
        return self._gather(command)[:size]

    def all_reduce(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """``dist.all_reduce(SUM)`` of one 1-D array per rank on the first ``len(arrays)`` ranks
        (a subgroup when fewer than the group's); every participating rank's result."""
        self._size(len(arrays))
        if len({(a.shape, a.dtype) for a in arrays}) > 1:
            raise RuntimeCheckError("all-reduce inputs must share one shape and dtype")
        return self._request("all_reduce", [np.asarray(a) for a in arrays])

    def train_regression(
        self,
        X: np.ndarray,
        y: np.ndarray,
        num_workers: int | None = None,
        *,
        kind: Kind = "logistic",
        steps: int = 20,
        learning_rate: float = 0.5,
    ) -> list[np.ndarray]:
        """DDP training on the first ``num_workers`` ranks (default: all; see
        :func:`train_ddp_regression`); every participating rank's weights."""
        workers = self._size(self.world_size if num_workers is None else num_workers)
        if len(X) != len(y) or len(X) == 0:
            raise RuntimeCheckError(f"X and y need the same non-zero sample count, got {len(X)} and {len(y)}")
        payload = (
            np.asarray(X, dtype=np.float64),
            np.asarray(y, dtype=np.float64),
            kind,
            steps,
            learning_rate,
        )
        return self._request("train", [payload] * workers)

    def time_all_reduce(
        self,
        num_elements: int,
        *,
        num_ranks: int | None = None,
        dtype: str = "float32",
        reps: int = 10,
        warmup: int = 2,
    ) -> list[float]:
        """Seconds of each of ``reps`` all-reduces of ``num_elements`` on the first ``num_ranks``
        ranks (default: all): per repetition the slowest rank's time (the collective is done when
        the last rank is), after ``warmup`` untimed runs."""
        size = self._size(self.world_size if num_ranks is None else num_ranks)
        per_rank: list[list[float]] = self._request("time", [(num_elements, dtype, reps, warmup)] * size)
        return [max(times) for times in zip(*per_rank, strict=True)]

    def close(self) -> None:
        """Stop the workers (politely, then by force); safe to call twice."""
        for conn in self._conns:
            with contextlib.suppress(Exception):
                conn.send(("stop", (0, None)))
        deadline = time.monotonic() + 5.0
        for proc in self._procs:
            proc.join(timeout=max(deadline - time.monotonic(), 0.0))
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=2.0)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=2.0)
        for conn in self._conns:
            conn.close()
        self._conns, self._procs = [], []


def run_gloo_allreduce(arrays: list[np.ndarray], *, timeout_s: float = 60.0) -> list[np.ndarray]:
    """All-reduce (sum) ``arrays``, one per rank, with torch's gloo backend in ``len(arrays)``
    spawned processes over loopback; returns each rank's result."""
    with GlooGroup(len(arrays), timeout_s=timeout_s) as group:
        return group.all_reduce(arrays)


def train_ddp_regression(
    X: np.ndarray,
    y: np.ndarray,
    num_workers: int,
    *,
    kind: Kind = "logistic",
    steps: int = 20,
    learning_rate: float = 0.5,
    timeout_s: float = 60.0,
) -> list[np.ndarray]:
    """Train :mod:`parplan.runtime.training`'s model with torch ``DistributedDataParallel`` (gloo,
    CPU, float64) over ``num_workers`` processes; returns every rank's final weights.

    Same problem, shards (:func:`split_batch`, round-robin), zero start and plain SGD as
    :func:`~parplan.runtime.training.train_data_parallel`. DDP all-reduces and *averages* the
    ranks' gradients, which is the full-batch gradient only when shards are equal; so each rank's
    loss is its samples' summed loss times ``num_workers / N``, making the average
    ``sum(n_i g_i) / N`` for any shard sizes (with equal shards this is the usual mean loss).
    """
    with GlooGroup(num_workers, timeout_s=timeout_s) as group:
        return group.train_regression(X, y, kind=kind, steps=steps, learning_rate=learning_rate)


def median_all_reduce_seconds(
    group: GlooGroup,
    num_elements: int,
    *,
    num_ranks: int | None = None,
    dtype: str = "float32",
    reps: int = 10,
    warmup: int = 2,
) -> float:
    """Median over ``reps`` of :meth:`GlooGroup.time_all_reduce`."""
    times = group.time_all_reduce(num_elements, num_ranks=num_ranks, dtype=dtype, reps=reps, warmup=warmup)
    return statistics.median(times)
