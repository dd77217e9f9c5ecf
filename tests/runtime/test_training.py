"""The proof: data-parallel training through every registry algorithm's schedule on the data
plane, through the threaded synchronizer, and through merged updates, matches single-worker
full-batch training."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pytest

from parplan.collectives.registry import ALGORITHMS, build_schedule
from parplan.runtime.training import (
    Kind,
    make_regression,
    schedule_reducer,
    train_data_parallel,
    train_full_batch,
    train_merged,
    train_threaded,
)

STEPS, LR = 25, 0.4


def assert_tight(got: np.ndarray, want: np.ndarray) -> None:
    """Equal to rounding: the only difference is the order of floating-point additions."""
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


Problem = tuple[Kind, np.ndarray, np.ndarray, np.ndarray]


@pytest.fixture(scope="module", params=["logistic", "linear"])
def problem(request: pytest.FixtureRequest) -> Problem:
    kind: Kind = request.param
    X, y = make_regression(101, 4, kind=kind, seed=7)  # 101 samples: uneven shards
    reference = train_full_batch(X, y, kind=kind, steps=STEPS, learning_rate=LR)
    return kind, X, y, reference


def test_training_actually_learns(problem: Problem) -> None:
    from parplan.runtime.training import loss_gradient

    kind, X, y, w = problem
    start = np.linalg.norm(loss_gradient(np.zeros_like(w), X, y, kind))
    assert np.linalg.norm(loss_gradient(w, X, y, kind)) < 0.5 * start


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
@pytest.mark.parametrize("workers", [1, 3, 4, 6])
def test_every_algorithm_matches_full_batch(name: str, workers: int, problem: Problem) -> None:
    kind, X, y, reference = problem
    spec = "hierarchical:2" if name == "hierarchical" else name
    schedule = build_schedule(spec, workers, X.shape[1] + 1)
    ops: tuple[Literal["sum", "mean"], ...] = ("sum", "mean")
    for op in ops:
        weights = train_data_parallel(
            X,
            y,
            workers,
            schedule_reducer(schedule, op=op),
            kind=kind,
            steps=STEPS,
            learning_rate=LR,
        )
        for w in weights:
            np.testing.assert_array_equal(w, weights[0])  # replicas stay bitwise identical
        assert_tight(weights[0], reference)


@pytest.mark.parametrize("workers", [1, 2, 5, 8])
def test_threaded_synchronizer_matches_full_batch(workers: int, problem: Problem) -> None:
    kind, X, y, reference = problem
    weights = train_threaded(X, y, workers, kind=kind, steps=STEPS, learning_rate=LR, timeout_s=20.0)
    assert len(weights) == workers
    for w in weights:
        np.testing.assert_array_equal(w, weights[0])
    assert_tight(weights[0], reference)


def test_merged_updates_match_full_batch(problem: Problem) -> None:
    kind, X, y, reference = problem
    assert_tight(train_merged(X, y, 7, kind=kind, steps=STEPS, learning_rate=LR), reference)


def test_more_workers_than_samples() -> None:
    X, y = make_regression(5, 2, seed=1)
    reference = train_full_batch(X, y, steps=10)
    weights = train_data_parallel(X, y, 8, schedule_reducer(build_schedule("ring", 8, 4)), steps=10)
    assert_tight(weights[0], reference)
    assert_tight(train_threaded(X, y, 8, steps=10)[0], reference)
