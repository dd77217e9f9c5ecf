"""The search's evaluation spread over chunks: the candidate table cut into consecutive slices
(:func:`chunk_bounds`), each evaluated where the backend runs it (worker processes or Ray tasks,
through :func:`parplan.api.parallel.evaluate_chunks`), and the parts joined back in table order
(:func:`concat_evaluations`); when a Ray cluster is lost mid-search, the chunks gathered and their
rows. Split from :mod:`.run`, which orders the command's steps."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING

import numpy as np

from parplan.api.parallel import Backend, SweepInterrupted, evaluate_chunks
from parplan.api.search.space import CandidateTable
from parplan.api.search.vector import Evaluation, evaluate_candidates
from parplan.config.search import SearchSpec

if TYPE_CHECKING:
    from parplan.config.scenario import ScenarioSpec
    from parplan.plan.base import PlanContext

CHUNK_ROWS = 65_536
"""Most candidates per chunk: progress moves at least this often, and a chunk's arrays stay small."""

CHUNKS_PER_WORKER = 4
"""Chunks per worker (process or Ray CPU), so uneven chunks still balance."""


def _evaluate_slice(ctx: PlanContext, payload: tuple[SearchSpec, CandidateTable]) -> Evaluation:
    """Chunk work (module-level, so it travels to workers and Ray tasks): one slice of the table."""
    search, chunk = payload
    return evaluate_candidates(ctx, search, chunk)


def chunk_bounds(rows: int, workers: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of each chunk: :data:`CHUNKS_PER_WORKER` per worker, at most
    :data:`CHUNK_ROWS` rows each, consecutive and covering every row.

    >>> chunk_bounds(10, 1)
    [(0, 3), (3, 6), (6, 9), (9, 10)]
    """
    if rows <= 0:
        return []
    count = max(workers * CHUNKS_PER_WORKER, math.ceil(rows / CHUNK_ROWS))
    size = max(1, math.ceil(rows / count))
    return [(start, min(rows, start + size)) for start in range(0, rows, size)]


def evaluate_spread(
    scenario: ScenarioSpec,
    ctx: PlanContext,
    search: SearchSpec,
    table: CandidateTable,
    workers: int,
    *,
    backend: Backend,
    address: str | None,
    jobs: int,
    progress: Callable[[int, int], None] | None,
) -> tuple[Evaluation, np.ndarray, str | None]:
    """Every candidate's evaluation, in table order; when the backend is lost, those of the chunks
    gathered, their table rows, and why."""
    bounds = chunk_bounds(len(table), workers)
    chunks = [(search, table.take(slice(a, b))) for a, b in bounds]
    sizes = [b - a for a, b in bounds]
    try:
        parts: list[Evaluation | None] = list(
            evaluate_chunks(
                scenario,
                _evaluate_slice,
                chunks,
                sizes=sizes,
                what="candidates",
                jobs=jobs,
                progress=progress,
                backend=backend,
                address=address,
                context=ctx,
            )
        )
        interrupted = None
    except SweepInterrupted as exc:
        parts, interrupted = list(exc.results), str(exc)
    kept = [i for i, part in enumerate(parts) if part is not None]
    rows = (
        np.concatenate([np.arange(*bounds[i], dtype=np.int64) for i in kept])
        if kept
        else np.zeros(0, np.int64)
    )
    return concat_evaluations([p for p in parts if p is not None]), rows, interrupted


def concat_evaluations(parts: Sequence[Evaluation]) -> Evaluation:
    """One :class:`Evaluation` of consecutive chunks (empty columns over no chunk)."""
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return Evaluation(
            step_time_s=np.zeros(0, np.float64),
            peak_memory_bytes=np.zeros(0, np.float64),
            mfu=np.zeros(0, np.float64),
            fits=np.zeros(0, bool),
            bound=np.zeros(0, np.int8),
        )
    columns = {f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Evaluation)}
    return Evaluation(**columns)
