"""Replayed collectives (parplan/engine/replay.py) give the full simulation's results bit for bit.

Data-parallel steps on the dp-algorithms sample (GPT-1.3B on two DGX A100 nodes) all-reduce
many buckets of one size; each is compared with ``PARPLAN_FULL_SIMULATION=1`` (every transfer
simulated) on every per-task time and every per-link and per-device figure, with ``==`` on the
floats, not a tolerance. The cases cover replays that run clean, buckets that meet the next one
(a conflict, run again), no overlap with backward (buckets back to back), the NCCL transport,
and link sharing off.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parplan.api.evaluate import build_context
from parplan.api.knobs import apply_overrides
from parplan.config.cluster import TransportSpec
from parplan.config.loader import load_scenario
from parplan.engine.blocks import MIN_BLOCK_TRANSFERS, FlowLog, _tie, _ties, find_blocks
from parplan.engine.replay import FULL_SIMULATION_ENV, NO_REPLAY_ENV
from parplan.engine.result import SimResult
from parplan.engine.simulate import simulate
from parplan.engine.tasks import Dependencies, TaskView
from parplan.plan.base import PlanContext
from parplan.plan.strategies import expand
from parplan.taskgraph import TaskGraph

SCENARIO = "sample_configs/scenarios/dp-algorithms.yaml"
FIELDS = (
    "start_s",
    "end_s",
    "arrive_s",
    "compute_busy_s",
    "reduction_busy_s",
    "channel_bytes",
    "channel_busy_s",
)


@cache
def _context() -> tuple[PlanContext, Any]:
    spec = load_scenario(SCENARIO)
    return build_context(spec), spec


def _graph(overrides: dict[str, Any], transport: str | None = None) -> tuple[TaskGraph, PlanContext]:
    ctx, spec = _context()
    if transport is not None:
        cluster = spec.cluster.model_copy(update={"transport": TransportSpec(kind=transport)})
        ctx = build_context(spec.model_copy(update={"cluster": cluster}))
    strategy = apply_overrides(spec.plans[0].strategy, overrides)
    return expand(ctx, strategy).graph, ctx


def _same(a: SimResult, b: SimResult) -> None:
    assert a.makespan_s == b.makespan_s
    for name in FIELDS:
        assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name


def _both(
    graph: TaskGraph, ctx: PlanContext, monkeypatch: pytest.MonkeyPatch, **kwargs: Any
) -> tuple[SimResult, SimResult]:
    replayed = simulate(graph, ctx.network, **kwargs)
    with monkeypatch.context() as m:
        m.setenv(FULL_SIMULATION_ENV, "1")
        full = simulate(graph, ctx.network, **kwargs)
    return replayed, full


@pytest.mark.parametrize(
    "overrides",
    [
        {"num_replicas": 8, "bucket_size": "25MiB"},
        {"num_replicas": 8, "bucket_size": "100MiB"},
        {"num_replicas": 4, "bucket_size": "25MiB"},
        {"num_replicas": 8, "bucket_size": "25MiB", "algorithm": "halving_doubling"},
        {"num_replicas": 8, "bucket_size": "25MiB", "overlap": False},
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
def test_replay_equals_full_simulation(overrides: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    graph, ctx = _graph(overrides)
    replayed, full = _both(graph, ctx, monkeypatch)
    _same(replayed, full)
    assert replayed.num_events <= full.num_events


def test_replay_cuts_events_of_repeated_buckets(monkeypatch: pytest.MonkeyPatch) -> None:
    graph, ctx = _graph({"num_replicas": 8, "bucket_size": "25MiB"})
    replayed, full = _both(graph, ctx, monkeypatch)
    _same(replayed, full)
    assert replayed.num_events * 2 < full.num_events


def test_replay_without_link_sharing(monkeypatch: pytest.MonkeyPatch) -> None:
    graph, ctx = _graph({"num_replicas": 8, "bucket_size": "25MiB"})
    replayed, full = _both(graph, ctx, monkeypatch, link_sharing=False)
    _same(replayed, full)


def test_replay_under_nccl_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    graph, ctx = _graph({"num_replicas": 8, "bucket_size": "25MiB"}, transport="nccl")
    replayed, full = _both(graph, ctx, monkeypatch)
    _same(replayed, full)


def test_blocks_are_repeated_collectives() -> None:
    graph, _ = _graph({"num_replicas": 8, "bucket_size": "25MiB"})
    view = TaskView.of(graph)
    lo, hi, keys, changes = find_blocks(view, Dependencies(view))
    assert len(lo) > 2 and np.all(hi - lo >= MIN_BLOCK_TRANSFERS)
    assert len(set(keys)) < len(keys)  # some content repeats
    # The last block of a size, followed by another collective, is simulated, not replayed.
    assert changes and all(keys[i] != keys[i + 1] for i in changes if i + 1 < len(keys))


def test_a_met_replay_runs_again_with_that_block_simulated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the rule that simulates the last bucket of a size at once, its replayed window is
    met by the next bucket (ReplayConflict): the run starts again with it simulated, and the
    result is still the full simulation's."""
    import parplan.engine.replay as replay
    import parplan.engine.simulate as engine

    graph, ctx = _graph({"num_replicas": 8, "bucket_size": "25MiB"})
    found = replay.find_blocks
    monkeypatch.setattr(replay, "find_blocks", lambda tasks, deps: (*found(tasks, deps)[:3], []))
    runs: list[frozenset[int]] = []
    init = engine._Engine.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        runs.append(kwargs.get("excluded", frozenset()))
        init(self, *args, **kwargs)

    monkeypatch.setattr(engine._Engine, "__init__", counting)
    replayed, full = _both(graph, ctx, monkeypatch)
    _same(replayed, full)
    assert len(runs) == 3 and runs[1]  # replayed, met, run again; then the full run
    assert replayed.num_events * 2 < full.num_events


def _odd_shift_replays(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Per replay of the run to come: whether it lays its recording down an odd number of ulps away."""
    import math

    import parplan.engine.replay as replay

    shifts: list[bool] = []
    lay_down = replay.Replays._replay

    def noting(self: Any, blk: int, memo: Any, t0: float) -> None:
        shifts.append(((t0 - memo.t0) / math.ulp(t0)) % 2.0 != 0.0)
        lay_down(self, blk, memo, t0)

    monkeypatch.setattr(replay.Replays, "_replay", noting)
    return shifts


def test_replay_at_an_odd_shift_equals_full_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Buckets an odd number of ulps after a recording whose sums had no rounding tie replay
    too, and still give the full simulation's bits."""
    graph, ctx = _graph({"num_replicas": 8, "bucket_size": "25MiB"})
    shifts = _odd_shift_replays(monkeypatch)
    replayed, full = _both(graph, ctx, monkeypatch)
    _same(replayed, full)
    assert any(shifts)


def test_a_recording_with_a_rounding_tie_replays_at_even_shifts_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import parplan.engine.blocks as blocks

    graph, ctx = _graph({"num_replicas": 8, "bucket_size": "25MiB"})
    monkeypatch.setattr(blocks, "_ties", lambda a, b, s: np.ones(np.shape(s), dtype=bool))
    shifts = _odd_shift_replays(monkeypatch)
    replayed, full = _both(graph, ctx, monkeypatch)
    _same(replayed, full)
    assert shifts and not any(shifts)


def test_no_replay_switch_simulates_every_transfer(monkeypatch: pytest.MonkeyPatch) -> None:
    graph, ctx = _graph({"num_replicas": 8, "bucket_size": "25MiB"})
    replayed, full = _both(graph, ctx, monkeypatch)
    monkeypatch.setenv(NO_REPLAY_ENV, "1")
    unreplayed = simulate(graph, ctx.network)
    _same(unreplayed, full)
    assert unreplayed.num_events == full.num_events > replayed.num_events


def test_the_log_finds_rounding_ties() -> None:
    """1 + 2^-53 lies halfway between 1 and the next float (a tie); 1 + 3 x 2^-54 does not."""
    log = FlowLog()
    log.sums(1.0, 3 * 2.0**-54, 1.0 + 3 * 2.0**-54)
    log.sums(np.array([0.75, 1.5]), np.array([1e-3, 2e-7]), np.array([0.75, 1.5]) + np.array([1e-3, 2e-7]))
    assert not log.ties and log.sum_max_s == 1.5 + 2e-7
    log.sums(1.0, 2.0**-53, 1.0 + 2.0**-53)
    assert log.ties
    pending = FlowLog()  # a tied finish time counts only once it is read
    tasks = np.array([7, 8])
    pending.finishes(
        tasks, 1.0, np.array([2.0**-53, 2.0**-10]), 1.0 + np.array([2.0**-53, 2.0**-10]), every=True
    )
    pending.used(np.array([8]), np.array([1.0 + 2.0**-10]))
    assert not pending.ties
    pending.used(np.array([7]), np.array([1.0]))
    assert pending.ties


def test_ties_at_a_power_of_two() -> None:
    """Below 2^k the floats are twice as dense: 2 - 2^-53 is a tie (between 2 - 2^-52 and 2),
    2 - 2^-52 x 3/4 is not; above 2, 2 + 2^-52 is a tie."""
    for b, tie in (
        (-(2.0**-53), True),
        (-0.75 * 2.0**-52, False),
        (2.0**-52, True),
        (0.75 * 2.0**-51, False),
    ):
        log, arrays = FlowLog(), FlowLog()
        log.sums(2.0, b, 2.0 + b)
        arrays.sums(np.array([2.0]), np.array([b]), np.array([2.0 + b]))
        assert log.ties == arrays.ties == tie, b


@given(
    a=st.floats(1e-6, 1e3),
    b=st.floats(0.0, 1e-2),
    ulps=st.integers(-3, 3),
)
def test_the_scalar_tie_check_equals_the_array_one(a: float, b: float, ulps: int) -> None:
    """A pending finish time read alone is checked in Python floats (``_tie``): the same answer as
    the array check, on sums rounded as the engine rounds them and on sums nudged off by a few ulps."""
    s = a + b
    for _ in range(abs(ulps)):
        s = math.nextafter(s, math.inf if ulps > 0 else -math.inf)
    assert _tie(a, b, s) == bool(_ties(a, np.array([b]), np.array([s]))[0])
    for a2, b2 in ((1.0, 2.0**-53), (2.0, -(2.0**-53)), (2.0, 2.0**-52), (1.0, 3 * 2.0**-54)):
        assert _tie(a2, b2, a2 + b2) == bool(_ties(a2, np.array([b2]), np.array([a2 + b2]))[0])


def test_pending_ties_read_one_or_many_at_a_time() -> None:
    """Finish times noted for every moving flow are checked when read: one flow by a scalar
    check, several by the whole set; a later note for every flow replaces them unread."""
    tasks = np.array([7, 8])
    times = 1.0 + np.array([2.0**-53, 2.0**-10])
    many = FlowLog()
    many.finishes(tasks, 1.0, np.array([2.0**-53, 2.0**-10]), times, every=True)
    many.used(np.array([8, 9]), np.array([1.0 + 2.0**-10, 1.5]))
    assert not many.ties and many.tied == {7}
    many.used(np.array([7]), np.array([1.0]))
    assert many.ties
    replaced = FlowLog()
    replaced.finishes(tasks, 1.0, np.array([2.0**-53, 2.0**-10]), times, every=True)
    replaced.finishes(
        tasks, 1.0, np.array([2.0**-10, 2.0**-9]), 1.0 + np.array([2.0**-10, 2.0**-9]), every=True
    )
    replaced.used(tasks, np.array([1.5, 1.5]))
    assert not replaced.ties
