"""Evaluating many variants of a scenario: in this process, over worker processes, or on Ray.

Backends (:data:`BACKENDS`): ``local`` (this process, or ``jobs`` worker processes) and ``ray``
(tasks on a Ray cluster: a local instance started on first use, or the running cluster at
``address``; the optional extra ``parplan[ray]``). Each worker builds the scenario's network and
model once (on Ray: once per chunk of variants); results come back in variant order, so the
ranking is the same whatever the backend, and those evaluated elsewhere come without their
timeline (``work``/``sim`` are None) to keep the traffic small.

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
from typing import TYPE_CHECKING, Any, Literal, cast

from parplan.errors import ParplanError

if TYPE_CHECKING:
    from parplan.api.results import PlanResult
    from parplan.api.variants import Variant
    from parplan.config.scenario import ScenarioSpec

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
    order, None for variants not evaluated)."""

    def __init__(self, message: str, results: list[PlanResult | str | None]) -> None:
        super().__init__(message)
        self.results = results


_WORKER_CONTEXT: dict[str, Any] = {}
"""Per worker process: the scenario's :class:`~parplan.plan.base.PlanContext`, built once."""


def _init_worker(scenario: ScenarioSpec) -> None:
    from parplan.api.evaluate import build_context

    _WORKER_CONTEXT["ctx"] = build_context(scenario)


def _evaluate_in_worker(variant: Variant) -> PlanResult | str:
    """Evaluate one variant in a worker; the timeline and task graph stay behind (only figures travel)."""
    from parplan.api.evaluate import evaluate_plan

    try:
        result = evaluate_plan(_WORKER_CONTEXT["ctx"], variant.plan, overrides=variant.overrides or None)
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
) -> list[PlanResult | str]:
    """Evaluate each variant; a variant that cannot be planned yields its error message instead.

    With ``jobs > 1`` variants are spread over worker processes (each builds the scenario's
    network and model once); results come back in variant order, so the ranking is the same as
    with one process, and without their timeline (``work``/``sim`` are None) to keep the traffic
    between processes small. ``backend="ray"`` evaluates them as Ray tasks instead (``address``:
    a running cluster; default a local instance, see :func:`evaluate_on_ray`).
    ``progress(done, total)`` is called as variants finish.
    """
    from parplan.api.evaluate import build_context, evaluate_plan

    if backend == "ray":
        return evaluate_on_ray(scenario, variants, address=address, progress=progress)
    if backend != "local":
        raise BackendError(f"unknown backend {backend!r}; choose from: {', '.join(BACKENDS)}")
    total = len(variants)
    workers = max(1, min(jobs, total, os.cpu_count() or 1))
    if workers <= 1:
        results: list[PlanResult | str] = []
        ctx = build_context(scenario)
        for i, variant in enumerate(variants):
            try:
                results.append(evaluate_plan(ctx, variant.plan, overrides=variant.overrides or None))
            except ParplanError as exc:
                results.append(str(exc))
            if progress:
                progress(i + 1, total)
        return results
    slots: list[PlanResult | str | None] = [None] * total
    with ProcessPoolExecutor(max_workers=workers, initializer=_init_worker, initargs=(scenario,)) as pool:
        futures = {pool.submit(_evaluate_in_worker, v): i for i, v in enumerate(variants)}
        for done, future in enumerate(as_completed(futures), start=1):
            slots[futures[future]] = future.result()
            if progress:
                progress(done, total)
    return cast("list[PlanResult | str]", slots)  # every slot was filled above


# -- Ray ------------------------------------------------------------------------------------------
def _evaluate_chunk(scenario: ScenarioSpec, chunk: Sequence[Variant]) -> list[PlanResult | str]:
    """A Ray task: build the scenario's context once and evaluate a chunk of variants (figures only)."""
    from parplan.api.evaluate import build_context, evaluate_plan

    ctx = build_context(scenario)
    out: list[PlanResult | str] = []
    for variant in chunk:
        try:
            result = evaluate_plan(ctx, variant.plan, overrides=variant.overrides or None)
        except ParplanError as exc:
            out.append(str(exc))
            continue
        out.append(replace(result, work=None, sim=None))
    return out


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
) -> list[PlanResult | str]:
    """Evaluate variants as Ray tasks, a chunk of consecutive variants per task
    (:data:`CHUNKS_PER_CPU` chunks per CPU of the cluster); results in variant order.

    Raises :class:`BackendError` when Ray cannot be used, and :class:`SweepInterrupted` (with the
    results gathered so far) when the cluster is lost or a task fails for a reason of Ray's.
    """
    ray = connect_ray(address)
    total = len(variants)
    if total == 0:
        return []
    try:
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        size = max(1, math.ceil(total / (cpus * CHUNKS_PER_CPU)))
        task = ray.remote(max_retries=1)(_evaluate_chunk)
        scenario_ref = ray.put(scenario)
        pending = {
            task.remote(scenario_ref, list(variants[start : start + size])): start
            for start in range(0, total, size)
        }
    except Exception as exc:
        raise BackendError(f"cannot submit work to Ray: {_first_line(exc)}") from None
    slots: list[PlanResult | str | None] = [None] * total
    done = 0
    while pending:
        try:
            ready, _ = ray.wait(list(pending), num_returns=1)
            chunk = ray.get(ready[0])
        except Exception as exc:  # the cluster went away, a node died, the task could not run
            raise SweepInterrupted(
                f"the Ray cluster was lost after {done} of {total} variants: {_first_line(exc)}", slots
            ) from None
        start = pending.pop(ready[0])
        slots[start : start + len(chunk)] = chunk
        done += len(chunk)
        if progress:
            progress(done, total)
    return cast("list[PlanResult | str]", slots)  # every slot was filled above
