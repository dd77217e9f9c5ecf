"""Data-parallel training of a small numpy model, to prove the runtime pieces and the collective
schedules right on real numbers.

The model is linear or logistic regression trained by full-batch gradient descent on seeded
synthetic data. Data-parallel training splits each batch with :func:`split_batch`; each worker
computes its mean gradient ``g_i`` over its ``n_i`` samples and contributes ``[n_i g_i, n_i]``;
after the all-reduce (sum or mean, either works) every worker applies
``sum(n_i g_i) / sum(n_i)``, the full-batch gradient. So with exact arithmetic the weights equal
single-worker training on the whole batch; in floating point they agree to rounding, and every
worker's replica is bitwise identical to the others'.

>>> X, y = make_regression(64, 3, seed=1)
>>> w1 = train_full_batch(X, y, steps=5)
>>> ws = train_threaded(X, y, 4, steps=5)
>>> bool(np.allclose(ws[0], w1, rtol=1e-10, atol=1e-12))
True
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from parplan.collectives.dataplane import run_schedule
from parplan.collectives.schedule import Schedule
from parplan.errors import RuntimeCheckError
from parplan.runtime.batching import split_batch
from parplan.runtime.synchronizer import GradientSynchronizer
from parplan.runtime.updates import WorkerUpdate, merge_worker_updates

Kind = Literal["logistic", "linear"]
Reducer = Callable[[list[np.ndarray]], list[np.ndarray]]


def make_regression(
    num_samples: int, num_features: int, *, kind: Kind = "logistic", seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded synthetic features ``X`` (with a bias column last) and targets ``y``."""
    rng = np.random.default_rng(seed)
    X = np.hstack([rng.normal(size=(num_samples, num_features)), np.ones((num_samples, 1))])
    true_w = rng.normal(size=num_features + 1)
    logits = X @ true_w
    if kind == "logistic":
        y = (rng.random(num_samples) < 1.0 / (1.0 + np.exp(-logits))).astype(np.float64)
    else:
        y = logits + 0.1 * rng.normal(size=num_samples)
    return X, y


def loss_gradient(weights: np.ndarray, X: np.ndarray, y: np.ndarray, kind: Kind = "logistic") -> np.ndarray:
    """Mean gradient of the log loss (logistic) or half squared error (linear); zeros for no samples."""
    if len(X) == 0:
        return np.zeros_like(weights)
    z: np.ndarray = X @ weights
    residual: np.ndarray = 1.0 / (1.0 + np.exp(-z)) - y if kind == "logistic" else z - y
    grad: np.ndarray = (X.T @ residual) / len(X)
    return grad


def train_full_batch(
    X: np.ndarray, y: np.ndarray, *, kind: Kind = "logistic", steps: int = 20, learning_rate: float = 0.5
) -> np.ndarray:
    """Single-worker gradient descent on the whole batch: the reference."""
    w = np.zeros(X.shape[1])
    for _ in range(steps):
        w = w - learning_rate * loss_gradient(w, X, y, kind)
    return w


def _payload(w: np.ndarray, X: np.ndarray, y: np.ndarray, kind: Kind) -> np.ndarray:
    """``[n_i g_i, n_i]``: a worker's gradient sum and its sample count, one vector to all-reduce."""
    return np.append(loss_gradient(w, X, y, kind) * len(X), float(len(X)))


def _apply(w: np.ndarray, reduced: np.ndarray, learning_rate: float) -> np.ndarray:
    """One descent step with the full-batch gradient ``sum(n_i g_i) / sum(n_i)``."""
    count = float(reduced[-1])
    if count <= 0:
        raise RuntimeCheckError("the all-reduced sample count is zero; there is nothing to train on")
    updated: np.ndarray = w - learning_rate * (reduced[:-1] / count)
    return updated


def schedule_reducer(schedule: Schedule, *, op: Literal["sum", "mean"] = "sum") -> Reducer:
    """A reducer that all-reduces the workers' vectors by running ``schedule`` on the data plane."""

    def reduce(vectors: list[np.ndarray]) -> list[np.ndarray]:
        return run_schedule(schedule, vectors, op=op).arrays

    return reduce


def train_data_parallel(
    X: np.ndarray,
    y: np.ndarray,
    num_workers: int,
    reducer: Reducer,
    *,
    kind: Kind = "logistic",
    steps: int = 20,
    learning_rate: float = 0.5,
) -> list[np.ndarray]:
    """Data-parallel gradient descent with ``reducer`` as the all-reduce; every worker's weights."""
    shards = list(zip(split_batch(X, num_workers), split_batch(y, num_workers), strict=True))
    weights = [np.zeros(X.shape[1]) for _ in range(num_workers)]
    for _ in range(steps):
        reduced = reducer([_payload(w, xs, ys, kind) for w, (xs, ys) in zip(weights, shards, strict=True)])
        weights = [_apply(w, r, learning_rate) for w, r in zip(weights, reduced, strict=True)]
    return weights


def train_merged(
    X: np.ndarray,
    y: np.ndarray,
    num_workers: int,
    *,
    kind: Kind = "logistic",
    steps: int = 20,
    learning_rate: float = 0.5,
) -> np.ndarray:
    """Parameter-server style: merge the workers' updates (weighted by samples) each step."""
    shards = [
        (xs, ys)
        for xs, ys in zip(split_batch(X, num_workers), split_batch(y, num_workers), strict=True)
        if len(xs)
    ]
    w = np.zeros(X.shape[1])
    for _ in range(steps):
        merged = merge_worker_updates(
            [WorkerUpdate(loss_gradient(w, xs, ys, kind), len(xs)) for xs, ys in shards]
        )
        w = w - learning_rate * merged.gradient
    return w


def train_threaded(
    X: np.ndarray,
    y: np.ndarray,
    num_workers: int,
    *,
    kind: Kind = "logistic",
    steps: int = 20,
    learning_rate: float = 0.5,
    timeout_s: float = 30.0,
) -> list[np.ndarray]:
    """Data-parallel training with one real thread per worker and a :class:`GradientSynchronizer`.

    Returns every worker's final weights; raises the first worker error, if any.
    """
    sync = GradientSynchronizer(num_workers)
    shards: Sequence[tuple[np.ndarray, np.ndarray]] = list(
        zip(split_batch(X, num_workers), split_batch(y, num_workers), strict=True)
    )
    results: list[np.ndarray | None] = [None] * num_workers
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        xs, ys = shards[i]
        w = np.zeros(X.shape[1])
        try:
            for _ in range(steps):
                w = _apply(
                    w, sync.all_reduce_mean(_payload(w, xs, ys, kind), timeout_s=timeout_s), learning_rate
                )
        except BaseException as exc:  # reported to the caller below
            errors.append(exc)
        results[i] = w

    threads = [threading.Thread(target=worker, args=(i,), name=f"worker-{i}") for i in range(num_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [w for w in results if w is not None]
