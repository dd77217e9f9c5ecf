"""Evaluating many variants of a scenario: in this process, over worker processes, or on Ray.

Backends (:data:`BACKENDS`): ``local`` (this process, or ``jobs`` worker processes) and ``ray``
(tasks on a Ray cluster: a local instance started on first use, or the running cluster at
``address``; the optional extra ``parplan[ray]``). Each worker builds the scenario's network and
model once (on Ray: once per chunk of variants); results come back in variant order, so the
ranking is the same whatever the backend, and those evaluated elsewhere come without their
timeline (``work``/``sim`` are None) to keep the traffic small.

Two entries: :func:`evaluate_variants` (compare-strategies: one result per variant) and
:func:`evaluate_chunks` (any module-level ``work(ctx, chunk)`` over chunks of a job, e.g. slices of
``parplan search``'s candidate table); compare's Ray path is :func:`evaluate_chunks` too, so there is
one way work reaches Ray.

A Ray cluster that cannot be reached is a :class:`BackendError` before any work; one that is lost
mid-sweep raises :class:`SweepInterrupted`, which carries the results gathered so far (None for
variants not evaluated) so the caller can keep them. The evaluation stack (numpy, networkx) is
imported inside the functions: the CLI imports this module for :data:`BACKENDS` at start-up.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from parplan.errors import ParplanError

if TYPE_CHECKING:
    from parplan.api.results import PlanResult
    from parplan.api.variants import Variant
    from parplan.config.scenario import ScenarioSpec
    from parplan.plan.base import PlanContext

R = TypeVar("R")

Backend = Literal["local", "ray"]
BACKENDS: tuple[Backend, ...] = ("local", "ray")
"""Where variants can be evaluated."""

RAY_MISSING = (
    "the ray backend needs Ray, which is not installed; install the ray extra: pip install 'parplan[ray]'"
)
"""The error message when Ray is missing."""

CHUNKS_PER_CPU = 4
"""Ray tasks per CPU of the cluster: enough to balance uneven variants, few enough that each
task's context build (network and model) stays a small part of it."""


class BackendError(ParplanError):
    """Raised when the evaluation backend cannot be used: Ray missing, or a cluster unreachable."""


class SweepInterrupted(ParplanError):
    """Raised when the backend is lost mid-sweep; ``results`` holds what was gathered (in variant
    order, None for variants not evaluated; from :func:`evaluate_chunks`: per chunk)."""

    def __init__(self, message: str, results: list[Any]) -> None:
        super().__init__(message)
        self.results = results


_WORKER_CONTEXT: dict[str, Any] = {}
"""Per worker process: the scenario's :class:`~parplan.plan.base.PlanContext`, built once."""


def _init_worker(scenario: ScenarioSpec, analytic: bool = False) -> None:
    from parplan.api.evaluate import build_context

    _WORKER_CONTEXT["ctx"] = build_context(scenario)
    _WORKER_CONTEXT["analytic"] = analytic


def _evaluate_in_worker(variant: Variant) -> PlanResult | str:
    """Evaluate one variant in a worker; the timeline and task graph stay behind (only figures travel)."""
    from parplan.api.evaluate import evaluate_plan

    try:
        result = evaluate_plan(
            _WORKER_CONTEXT["ctx"],
            variant.plan,
            overrides=variant.overrides or None,
            analytic=bool(_WORKER_CONTEXT.get("analytic")),
        )
    except ParplanError as exc:
        return str(exc)
    return replace(result, work=None, sim=None)


def evaluate_variants(
    scenario: ScenarioSpec,
    variants: Sequence[Variant],
    *,
    jobs: int = 1,
    progress: Callable[[int, int], None] | None = None,
    backend: Backend = "local",
    address: str | None = None,
    analytic: bool = False,
) -> list[PlanResult | str]:
    """Evaluate each variant; a variant that cannot be planned yields its error message instead.

    With ``jobs > 1`` variants are spread over worker processes (each builds the scenario's
    network and model once); results come back in variant order, so the ranking is the same as
    with one process, and without their timeline (``work``/``sim`` are None) to keep the traffic
    between processes small. ``backend="ray"`` evaluates them as Ray tasks instead (``address``:
    a running cluster; default a local instance, see :func:`evaluate_on_ray`).
    ``progress(done, total)`` is called as variants finish. ``analytic``
    evaluates sharded plans in closed form (:func:`~parplan.api.evaluate.evaluate_plan`).
    """
    from parplan.api.evaluate import build_context, evaluate_plan

    if backend == "ray":
        return evaluate_on_ray(scenario, variants, address=address, progress=progress, analytic=analytic)
    if backend != "local":
        raise BackendError(f"unknown backend {backend!r}; choose from: {', '.join(BACKENDS)}")
    total = len(variants)
    workers = max(1, min(jobs, total, os.cpu_count() or 1))
    if workers <= 1:
        results: list[PlanResult | str] = []
        ctx = build_context(scenario)
        for i, variant in enumerate(variants):
            try:
                results.append(
                    evaluate_plan(ctx, variant.plan, overrides=variant.overrides or None, analytic=analytic)
                )
            except ParplanError as exc:
                results.append(str(exc))
            if progress:
                progress(i + 1, total)
        return results
    slots: list[PlanResult | str | None] = [None] * total
    with ProcessPoolExecutor(
        max_workers=workers, initializer=_init_worker, initargs=(scenario, analytic)
    ) as pool:
        futures = {pool.submit(_evaluate_in_worker, v): i for i, v in enumerate(variants)}
        for done, future in enumerate(as_completed(futures), start=1):
            slots[futures[future]] = future.result()
            if progress:
                progress(done, total)
    return cast("list[PlanResult | str]", slots)  # every slot was filled above


# -- chunks of any work -----------------------------------------------------------------------
def _variant_chunk(ctx: PlanContext, payload: tuple[Sequence[Variant], bool]) -> list[PlanResult | str]:
    """Chunk work of :func:`evaluate_on_ray`: evaluate a chunk of variants (figures only)."""
    from parplan.api.evaluate import evaluate_plan

    chunk, analytic = payload
    out: list[PlanResult | str] = []
    for variant in chunk:
        try:
            result = evaluate_plan(ctx, variant.plan, overrides=variant.overrides or None, analytic=analytic)
        except ParplanError as exc:
            out.append(str(exc))
            continue
        out.append(replace(result, work=None, sim=None))
    return out


def _chunk_task(scenario: ScenarioSpec, work: Callable[[PlanContext, Any], Any], payload: Any) -> Any:
    """A Ray task: build the scenario's context and run ``work`` on one chunk."""
    from parplan.api.evaluate import build_context

    return work(build_context(scenario), payload)


def _chunk_in_worker(work: Callable[[PlanContext, Any], Any], payload: Any) -> Any:
    """A worker process's share: ``work`` on one chunk, with the context the worker built once."""
    return work(_WORKER_CONTEXT["ctx"], payload)


def available_workers(backend: Backend = "local", jobs: int = 1, address: str | None = None) -> int:
    """How many chunks can run at once: ``jobs`` here (0: one per CPU), or the CPUs of the Ray
    cluster (connecting to it, so an unreachable ``address`` is a :class:`BackendError` now)."""
    if backend == "ray":
        ray = connect_ray(address)
        try:
            return max(1, int(ray.cluster_resources().get("CPU", 1)))
        except Exception as exc:
            raise BackendError(f"cannot read the Ray cluster's resources: {_first_line(exc)}") from None
    if backend != "local":
        raise BackendError(f"unknown backend {backend!r}; choose from: {', '.join(BACKENDS)}")
    return jobs if jobs > 0 else (os.cpu_count() or 1)


def evaluate_chunks(
    scenario: ScenarioSpec,
    work: Callable[[PlanContext, Any], R],
    chunks: Sequence[Any],
    *,
    sizes: Sequence[int] | None = None,
    what: str = "items",
    jobs: int = 1,
    progress: Callable[[int, int], None] | None = None,
    backend: Backend = "local",
    address: str | None = None,
    context: PlanContext | None = None,
) -> list[R]:
    """``work(ctx, chunk)`` for every chunk, results in chunk order, wherever the backend says.

    ``work`` is a module-level function (it travels to worker processes and Ray tasks by name);
    each worker builds the scenario's context once (a Ray task: once per chunk); in this process
    (``jobs`` 1) ``context`` is used when given. ``sizes`` (items per chunk, default 1 each)
    drive ``progress(done, total)`` and the message of :class:`SweepInterrupted`, which carries
    the chunk results gathered so far (None for chunks not done) when a Ray cluster is lost;
    ``what`` names the items in it (``variants``, ``candidates``).
    """
    counts = list(sizes) if sizes is not None else [1] * len(chunks)
    if backend == "ray":
        return _chunks_on_ray(scenario, work, chunks, counts, what, address=address, progress=progress)
    if backend != "local":
        raise BackendError(f"unknown backend {backend!r}; choose from: {', '.join(BACKENDS)}")
    total = sum(counts)
    workers = max(1, min(jobs, len(chunks), os.cpu_count() or 1))
    if workers <= 1:
        from parplan.api.evaluate import build_context

        ctx = context if context is not None else build_context(scenario)
        out: list[R] = []
        done = 0
        for chunk, size in zip(chunks, counts, strict=True):
            out.append(work(ctx, chunk))
            done += size
            if progress:
                progress(done, total)
        return out
    slots: list[R | None] = [None] * len(chunks)
    done = 0
    with ProcessPoolExecutor(max_workers=workers, initializer=_init_worker, initargs=(scenario,)) as pool:
        futures = {pool.submit(_chunk_in_worker, work, chunk): i for i, chunk in enumerate(chunks)}
        for future in as_completed(futures):
            i = futures[future]
            slots[i] = future.result()
            done += counts[i]
            if progress:
                progress(done, total)
    return cast("list[R]", slots)  # every slot was filled above


def connect_ray(address: str | None = None) -> Any:
    """The ``ray`` module, connected: to the cluster at ``address``, else to the instance this
    process already uses, else to a new local instance. Raises :class:`BackendError` when Ray is
    missing or the cluster cannot be reached."""
    if importlib.util.find_spec("ray") is None:
        raise BackendError(RAY_MISSING)
    import ray

    if ray.is_initialized():
        return ray
    if address:
        _check_reachable(address)
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError... by case
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        raise BackendError(f"cannot reach {where}: {_first_line(exc)}") from None
    return ray


CONNECT_TIMEOUT_S = 5.0
"""How long to wait for a Ray cluster's head to accept a connection before giving up (Ray's own
client keeps retrying an address that does not answer for minutes)."""


def _check_reachable(address: str) -> None:
    """Raise :class:`BackendError` unless ``host:port`` (optionally ``ray://host:port``) accepts a
    TCP connection; ``auto`` and other forms are left to Ray."""
    import socket

    host_port = address.split("://", 1)[-1]
    host, sep, port = host_port.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise BackendError(f"cannot reach the Ray cluster at {address}: {reason}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def evaluate_on_ray(
    scenario: ScenarioSpec,
    variants: Sequence[Variant],
    *,
    address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    analytic: bool = False,
) -> list[PlanResult | str]:
    """Evaluate variants as Ray tasks, a chunk of consecutive variants per task
    (:data:`CHUNKS_PER_CPU` chunks per CPU of the cluster); results in variant order.

    Raises :class:`BackendError` when Ray cannot be used, and :class:`SweepInterrupted` (with the
    results gathered so far, per variant) when the cluster is lost or a task fails for a reason
    of Ray's. The chunks run through :func:`evaluate_chunks`, the one Ray path.
    """
    cpus = available_workers("ray", address=address)
    total = len(variants)
    if total == 0:
        return []
    size = max(1, math.ceil(total / (cpus * CHUNKS_PER_CPU)))
    chunks = [(list(variants[start : start + size]), analytic) for start in range(0, total, size)]
    sizes = [len(c) for c, _ in chunks]
    try:
        done = evaluate_chunks(
            scenario,
            _variant_chunk,
            chunks,
            sizes=sizes,
            what="variants",
            progress=progress,
            backend="ray",
            address=address,
        )
    except SweepInterrupted as exc:
        flat: list[PlanResult | str | None] = []
        for part, n in zip(exc.results, sizes, strict=True):
            flat.extend(part if part is not None else [None] * n)
        raise SweepInterrupted(str(exc), flat) from None
    return [r for part in done for r in part]


def _chunks_on_ray(
    scenario: ScenarioSpec,
    work: Callable[[PlanContext, Any], R],
    chunks: Sequence[Any],
    sizes: Sequence[int],
    what: str,
    *,
    address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[R]:
    """One Ray task per chunk (the scenario shipped once); results in chunk order."""
    ray = connect_ray(address)
    if not chunks:
        return []
    try:
        task = ray.remote(max_retries=1)(_chunk_task)
        scenario_ref = ray.put(scenario)
        pending = {task.remote(scenario_ref, work, chunk): i for i, chunk in enumerate(chunks)}
    except Exception as exc:
        raise BackendError(f"cannot submit work to Ray: {_first_line(exc)}") from None
    total = sum(sizes)
    slots: list[Any] = [None] * len(chunks)
    done = 0
    while pending:
        try:
            ready, _ = ray.wait(list(pending), num_returns=1)
            result = ray.get(ready[0])
        except Exception as exc:  # the cluster went away, a node died, the task could not run
            raise SweepInterrupted(
                f"the Ray cluster was lost after {done} of {total} {what}: {_first_line(exc)}", slots
            ) from None
        i = pending.pop(ready[0])
        slots[i] = result
        done += sizes[i]
        if progress:
            progress(done, total)
    return cast("list[R]", slots)  # every slot was filled above
