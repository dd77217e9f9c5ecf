"""What ``parplan search`` does, as one call: :func:`search_scenario`.

In order, so nothing is evaluated before the request is known to be sound:

1. load the scenario: its ``search:`` block, or the default :class:`~parplan.config.search.SearchSpec`
   for a scenario without one; the caller's ``limit`` / ``top_k`` / ``devices`` replace the block's;
2. size check: :func:`~parplan.api.search.space.space_size` (the product of the allowed values,
   nothing enumerated) against the limit, one message naming both and ``--limit``; with the Ray
   backend the cluster is reached now, so an unreachable address fails before any work;
3. enumerate (divisibility pruning: :func:`~parplan.api.search.space.enumerate_space`);
4. evaluate the table in chunks (:func:`parplan.api.parallel.evaluate_chunks`: here, worker
   processes or Ray tasks that rebuild the context from the scenario; the same numbers either way),
   progress per chunk; a Ray cluster lost mid-search keeps the chunks gathered
   (:attr:`SearchResult.interrupted` says why);
5. rank: plans that fit first, by step time, ties by table row (so identical inputs rank
   identically); the Pareto front over (step time, peak memory, devices) among those that fit
   (:func:`parplan.api.pareto.non_dominated` on the few that can be on it);
6. the best ``top_k`` re-simulated with the event engine beside their closed form, how far the two
   disagree, and what bounds each (the winner's is the headline); the scenario's own plans
   evaluated both ways too, with the rank each would take among the candidates.

Every evaluated candidate stays in the result as numpy columns (:attr:`SearchResult.table`,
:attr:`SearchResult.evaluation`, :attr:`SearchResult.order`), so reports can write millions of
rows without a Python object per plan; :meth:`SearchResult.rows` gives them one by one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from parplan.api.parallel import Backend, available_workers
from parplan.api.pareto import non_dominated
from parplan.api.search.space import (
    CandidateTable,
    SearchError,
    SpaceSize,
    enumerate_space,
    space_size,
)
from parplan.api.search.spread import evaluate_spread
from parplan.api.search.vector import BOUND_NAMES, Evaluation
from parplan.config.search import SearchSpec
from parplan.errors import ParplanError

if TYPE_CHECKING:
    from parplan.api.results import PlanResult
    from parplan.config.scenario import ScenarioSpec
    from parplan.plan.base import PlanContext


@dataclass(frozen=True)
class SearchCounts:
    """How many candidates went where."""

    enumerated: int  # the product of the allowed values
    pruned: dict[str, int]  # reason -> candidates dropped before evaluation
    evaluated: int
    over_memory: int  # evaluated but over capacity x (1 - memory_headroom)
    not_evaluated: int = 0  # left when the backend was lost

    @property
    def fitting(self) -> int:
        """Evaluated candidates that fit in memory."""
        return self.evaluated - self.over_memory


@dataclass(frozen=True)
class CandidateRow:
    """One evaluated candidate as reports show it."""

    rank: int
    row: int  # in :attr:`SearchResult.table`
    label: str
    fields: dict[str, Any]  # the plan's settings (devices, dp, tp, ..., algorithm, bucket_bytes)
    step_time_s: float
    peak_memory_bytes: float
    fits: bool
    mfu: float
    bound: str
    pareto: bool


@dataclass(frozen=True)
class Checked:
    """A plan evaluated both ways: closed form and event engine (either may have failed)."""

    name: str
    analytic: PlanResult | None
    event: PlanResult | None
    error: str | None = None
    bound: str | None = None  # the closed form's bound text (sharded_analytic.bound_text)
    would_rank: int | None = None  # among the candidates that fit, by closed-form step time

    @property
    def disagreement(self) -> float | None:
        """(event - closed form) / closed form step time, or None when either is missing."""
        if self.analytic is None or self.event is None or self.analytic.step_time_s <= 0:
            return None
        return self.event.step_time_s / self.analytic.step_time_s - 1.0


@dataclass(frozen=True)
class SearchResult:
    """Everything :func:`search_scenario` found (module docstring)."""

    scenario: ScenarioSpec
    scenario_file: str
    search: SearchSpec
    size: SpaceSize
    counts: SearchCounts
    table: CandidateTable  # the evaluated candidates (all of them unless interrupted)
    evaluation: Evaluation  # aligned with ``table``
    order: np.ndarray  # table rows in rank order (fitting first, by step time, ties by row)
    pareto: np.ndarray  # bool per table row: on the (step, memory, devices) front
    top: tuple[Checked, ...]  # the best top_k, closed form and event engine
    hand_written: tuple[Checked, ...]  # the scenario's own plans
    winner_bound: str | None
    elapsed_s: float
    seed: int = 0
    closed_form_s: float = 0.0  # enumeration and closed-form evaluation (the rest: event simulations)
    interrupted: str | None = None

    @property
    def winner(self) -> CandidateRow | None:
        """The fastest candidate that fits, or None when none does."""
        if not len(self.order) or not bool(self.evaluation.fits[self.order[0]]):
            return None
        return self.row(0)

    def row(self, rank_index: int) -> CandidateRow:
        """The candidate at 0-based place ``rank_index`` of the ranking."""
        r = int(self.order[rank_index])
        ev = self.evaluation
        return CandidateRow(
            rank=rank_index + 1,
            row=r,
            label=self.table.label(r),
            fields=plan_fields(self.table, r),
            step_time_s=float(ev.step_time_s[r]),
            peak_memory_bytes=float(ev.peak_memory_bytes[r]),
            fits=bool(ev.fits[r]),
            mfu=float(ev.mfu[r]),
            bound=BOUND_NAMES[int(ev.bound[r])],
            pareto=bool(self.pareto[r]),
        )

    def rows(self, limit: int | None = None) -> Iterator[CandidateRow]:
        """The candidates in rank order (the first ``limit``)."""
        n = len(self.order) if limit is None else min(limit, len(self.order))
        for i in range(n):
            yield self.row(i)

    def front(self) -> list[CandidateRow]:
        """The Pareto front, in rank order."""
        return [self.row(int(i)) for i in np.flatnonzero(self.pareto[self.order])]


def plan_fields(table: CandidateTable, row: int) -> dict[str, Any]:
    """The settings of candidate ``row`` as plain values (what a user would write in a plan):
    modes and the algorithm by name, the bucket size in bytes."""
    fields_ = table.row(row)
    fields_["algorithm"] = table.algorithm_labels[fields_["algorithm"]]
    fields_["bucket_bytes"] = int(table.bucket_sizes_bytes[fields_.pop("bucket")])
    return fields_


def search_spec(
    scenario: ScenarioSpec,
    *,
    limit: int | None = None,
    top_k: int | None = None,
    devices: Sequence[int] | None = None,
) -> SearchSpec:
    """The scenario's ``search:`` block (or the defaults) with the caller's limit, top k and devices."""
    search = scenario.search if scenario.search is not None else SearchSpec()
    update: dict[str, Any] = {}
    if limit is not None:
        update["limit"] = limit
    if top_k is not None:
        update["top_k"] = top_k
    if devices is not None:
        update["devices"] = tuple(sorted(set(devices)))
    return search.model_copy(update=update) if update else search


def check_size(ctx: PlanContext, search: SearchSpec) -> int:
    """The size of the space before enumeration; raises :class:`SearchError` over the limit."""
    size = space_size(ctx, search)
    if size > search.limit:
        raise SearchError(
            f"the search space holds {size:,} candidates, over the limit of {search.limit:,}; narrow "
            f"the search: block (fewer values per dimension) or raise the limit with --limit {size}"
        )
    return size


def search_scenario(
    scenario_file: str | Path,
    *,
    limit: int | None = None,
    top_k: int | None = None,
    devices: Sequence[int] | None = None,
    backend: Backend = "local",
    address: str | None = None,
    jobs: int = 1,
    progress: Callable[[int, int], None] | None = None,
    warn: Callable[[str], None] | None = None,
    seed: int = 0,
) -> SearchResult:
    """Search the plan space of a scenario (module docstring for the steps).

    Raises :class:`~parplan.errors.ParplanError` before any evaluation for a bad file, a space over
    the limit, an empty space or contradictory constraints (:class:`SearchError`), or a backend
    that cannot be used. The search is exhaustive and deterministic: ``seed`` is recorded in the
    result (and reports) and changes nothing today; identical inputs give identical results.
    """
    from parplan.api.kinds import load_expected

    started = time.monotonic()
    scenario: ScenarioSpec = load_expected(scenario_file, "scenario", command="parplan search")
    return run_search(
        scenario,
        scenario_file=str(scenario_file),
        limit=limit,
        top_k=top_k,
        devices=devices,
        backend=backend,
        address=address,
        jobs=jobs,
        progress=progress,
        warn=warn,
        seed=seed,
        started=started,
    )


def run_search(
    scenario: ScenarioSpec,
    *,
    scenario_file: str = "",
    limit: int | None = None,
    top_k: int | None = None,
    devices: Sequence[int] | None = None,
    backend: Backend = "local",
    address: str | None = None,
    jobs: int = 1,
    progress: Callable[[int, int], None] | None = None,
    warn: Callable[[str], None] | None = None,
    seed: int = 0,
    started: float | None = None,
) -> SearchResult:
    """:func:`search_scenario` of a scenario already loaded (``scenario_file`` names it in reports;
    ``started``: the clock reading the elapsed time counts from, default now)."""
    from parplan.api.evaluate import build_context

    started = time.monotonic() if started is None else started
    search = search_spec(scenario, limit=limit, top_k=top_k, devices=devices)
    ctx = build_context(scenario)
    check_size(ctx, search)
    workers = available_workers(backend, jobs, address)  # reaches a Ray cluster now, before any work
    enumerating = time.monotonic()
    table, size = enumerate_space(ctx, search)
    evaluation, gathered, interrupted = evaluate_spread(
        scenario, ctx, search, table, workers, backend=backend, address=address, jobs=jobs, progress=progress
    )
    if interrupted is not None:
        table = table.take(gathered)
    order = rank_rows(evaluation)
    pareto = front_rows(table, evaluation)
    closed_form_s = time.monotonic() - enumerating
    counts = SearchCounts(
        enumerated=size.enumerated,
        pruned=dict(size.pruned),
        evaluated=len(table),
        over_memory=int(np.count_nonzero(~evaluation.fits)),
        not_evaluated=size.remaining - len(table),
    )
    if warn is not None and counts.evaluated and not counts.fitting:
        warn("no candidate fits in memory; the ranking shows the closest ones")
    top = tuple(
        _check_candidate(ctx, table, search, int(r)) for r in _best_fitting(order, evaluation, search.top_k)
    )
    hand = tuple(_check_hand_written(ctx, scenario, evaluation, order))
    winner_bound = _winner_bound(ctx, table, search, order, evaluation, top)
    return SearchResult(
        scenario=scenario,
        scenario_file=scenario_file,
        search=search,
        size=size,
        counts=counts,
        table=table,
        evaluation=evaluation,
        order=order,
        pareto=pareto,
        top=top,
        hand_written=hand,
        winner_bound=winner_bound,
        elapsed_s=time.monotonic() - started,
        seed=seed,
        closed_form_s=closed_form_s,
        interrupted=interrupted,
    )


def rank_rows(evaluation: Evaluation) -> np.ndarray:
    """Table rows in rank order: those that fit first, then by step time, ties by row."""
    n = len(evaluation.step_time_s)
    rows = np.arange(n, dtype=np.int64)
    step = np.where(np.isnan(evaluation.step_time_s), np.inf, evaluation.step_time_s)
    return rows[np.lexsort((rows, step, ~evaluation.fits))]


def front_rows(table: CandidateTable, evaluation: Evaluation) -> np.ndarray:
    """Bool per row: on the Pareto front over (step time, peak memory, devices) among those that fit.

    :func:`~parplan.api.pareto.non_dominated` is quadratic, so it runs on the few that can be on
    the front: per device count, sorted by (step, memory), only a candidate whose memory is at
    most every earlier one's can be (an earlier one with less memory dominates it); the union of
    those is a superset of the front, and every candidate it drops is dominated by one it keeps.
    """
    on = np.zeros(len(evaluation.step_time_s), dtype=bool)
    fitting = np.flatnonzero(evaluation.fits)
    if not len(fitting):
        return on
    devices = table.devices[fitting]
    maybe: list[np.ndarray] = []
    for count in np.unique(devices):
        group = fitting[devices == count]
        g_step, g_mem = evaluation.step_time_s[group], evaluation.peak_memory_bytes[group]
        order = np.lexsort((group, g_mem, g_step))
        running = np.minimum.accumulate(g_mem[order])
        maybe.append(group[order][g_mem[order] <= running])
    candidates = np.sort(np.concatenate(maybe))
    points = np.column_stack(
        (
            evaluation.step_time_s[candidates],
            evaluation.peak_memory_bytes[candidates],
            table.devices[candidates].astype(np.float64),
        )
    )
    flags = non_dominated(points.tolist())
    on[candidates[np.asarray(flags, dtype=bool)]] = True
    return on


def _best_fitting(order: np.ndarray, evaluation: Evaluation, k: int) -> np.ndarray:
    """The first ``k`` rows of the ranking that fit."""
    fitting: np.ndarray = order[evaluation.fits[order]]
    return fitting[:k]


def _winner_bound(
    ctx: PlanContext,
    table: CandidateTable,
    search: SearchSpec,
    order: np.ndarray,
    evaluation: Evaluation,
    top: Sequence[Checked],
) -> str | None:
    """What bounds the winner (sharded_analytic's bound text), or None when no candidate fits."""
    from parplan.api.sharded_analytic import evaluate_sharded

    if not len(order) or not bool(evaluation.fits[order[0]]):
        return None
    if top and top[0].bound is not None:
        return top[0].bound
    return evaluate_sharded(ctx, table.strategy(int(order[0]), search)).bound


def _check_candidate(ctx: PlanContext, table: CandidateTable, search: SearchSpec, row: int) -> Checked:
    """Candidate ``row`` in closed form (with its bound) and with the event engine."""
    from parplan.config.scenario import PlanSpec

    label = table.label(row)
    try:
        strategy = table.strategy(row, search)
    except ParplanError as exc:
        return Checked(label, None, None, error=str(exc))
    return _both_ways(ctx, PlanSpec(name=label, strategy=strategy))


def _both_ways(ctx: PlanContext, plan: Any) -> Checked:
    """A plan's closed form (and bound) and its event simulation; an error in either is kept."""
    from parplan.api.evaluate import evaluate_plan
    from parplan.api.sharded_analytic import evaluate_sharded
    from parplan.config.strategy import ShardedStrategy

    analytic = event = None
    bound = error = None
    try:
        analytic = evaluate_plan(ctx, plan, analytic=True)
        if isinstance(plan.strategy, ShardedStrategy):
            bound = evaluate_sharded(ctx, plan.strategy).bound
        event = evaluate_plan(ctx, plan)
    except ParplanError as exc:
        error = str(exc)
    return Checked(plan.name, analytic, event, error=error, bound=bound)


def _check_hand_written(
    ctx: PlanContext, scenario: ScenarioSpec, evaluation: Evaluation, order: np.ndarray
) -> Iterator[Checked]:
    """The scenario's own plans both ways, with the rank each would take among the candidates
    that fit (by closed-form step time; ties go to the candidate)."""
    fitting_steps = evaluation.step_time_s[order[evaluation.fits[order]]]
    for plan in scenario.plans:
        checked = _both_ways(ctx, plan)
        if checked.analytic is not None:
            place = int(np.searchsorted(fitting_steps, checked.analytic.step_time_s, side="right")) + 1
            checked = replace(checked, would_rank=place)
        yield checked
