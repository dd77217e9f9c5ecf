"""GradientSynchronizer with real threads: many rounds, reuse, the mismatched-length path.

Every wait has a timeout and every thread is joined with one, so a hang fails the test."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

from parplan.errors import RuntimeCheckError
from parplan.runtime import GradientSynchronizer

JOIN_S = 20.0


def _run_workers(n: int, body: Callable[[int], object]) -> list[object]:
    """Run ``body(i)`` on n threads; return each result or the exception it raised."""
    out: list[object] = [None] * n

    def target(i: int) -> None:
        try:
            out[i] = body(i)
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_S)
        assert not t.is_alive(), "a worker hung"
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_many_rounds_give_the_mean_to_everyone(n: int) -> None:
    sync = GradientSynchronizer(n)
    assert sync.num_workers == n and sync.is_distributed == (n > 1)
    rounds = 60

    def body(i: int) -> list[np.ndarray]:
        got = []
        for k in range(rounds):
            got.append(sync.all_reduce_mean(np.arange(5, dtype=np.float64) * (i + 1) + k, timeout_s=JOIN_S))
        return got

    results = _run_workers(n, body)
    for k in range(rounds):
        want = np.arange(5) * (n + 1) / 2 + k
        for res in results:
            assert isinstance(res, list)
            np.testing.assert_allclose(res[k], want, rtol=1e-15)
    assert sync.rounds_completed == rounds


def test_results_are_private_copies_and_keep_float_dtype() -> None:
    sync = GradientSynchronizer(2)
    results = _run_workers(
        2, lambda i: sync.all_reduce_mean(np.full(3, i, dtype=np.float32), timeout_s=JOIN_S)
    )
    a, b = results
    assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
    assert a.dtype == np.float32 and a is not b
    a[0] = 7
    assert b[0] == 0.5


def test_integer_gradients_give_float_means() -> None:
    sync = GradientSynchronizer(2)
    results = _run_workers(2, lambda i: sync.all_reduce_mean(np.array([i, 1]), timeout_s=JOIN_S))
    for r in results:
        assert isinstance(r, np.ndarray) and r.dtype == np.float64 and r.tolist() == [0.5, 1.0]


def test_mismatched_length_errors_everyone_then_recovers() -> None:
    n = 4
    sync = GradientSynchronizer(n)
    start = threading.Barrier(n)

    def body(i: int) -> object:
        start.wait(JOIN_S)
        first: RuntimeCheckError | None = None
        try:
            sync.all_reduce_mean(np.ones(5 if i == 3 else 4), timeout_s=JOIN_S)
        except RuntimeCheckError as exc:
            first = exc
        # The same synchronizer serves the next rounds.
        ok = [sync.all_reduce_mean(np.full(4, float(i + k)), timeout_s=JOIN_S) for k in range(5)]
        return first, ok

    results = _run_workers(n, body)
    errors = []
    for res in results:
        assert isinstance(res, tuple)
        first, ok = res
        errors.append(first)
        for k, arr in enumerate(ok):
            np.testing.assert_allclose(arr, np.full(4, 1.5 + k))
    assert all(isinstance(e, RuntimeCheckError) for e in errors), errors
    messages = [str(e) for e in errors]
    # Whoever arrived second with the odd length (or everyone, if the odd one set the length) is told why.
    assert any("differs from" in m for m in messages)
    assert sum("differs from" in m for m in messages) == 1
    assert all("differs from" in m or "round aborted" in m for m in messages)
    assert sync.rounds_completed == 5


def test_mismatch_releases_workers_already_waiting() -> None:
    sync = GradientSynchronizer(3)
    waiting = threading.Event()

    def body(i: int) -> object:
        if i == 2:
            waiting.wait(JOIN_S)
            return sync.all_reduce_mean(np.ones(7), timeout_s=JOIN_S)
        if i == 0:
            return sync.all_reduce_mean(np.ones(2), timeout_s=JOIN_S)
        # Worker 1 arrives after worker 0, then worker 2 comes with the wrong length.
        threading.Timer(0.2, waiting.set).start()
        return sync.all_reduce_mean(np.ones(2), timeout_s=JOIN_S)

    results = _run_workers(3, body)
    assert all(isinstance(r, RuntimeCheckError) for r in results), results


def test_missing_worker_times_out_instead_of_hanging() -> None:
    sync = GradientSynchronizer(3)
    results = _run_workers(2, lambda i: sync.all_reduce_mean(np.ones(2), timeout_s=0.3))
    assert all(isinstance(r, RuntimeCheckError) for r in results)
    assert any("timed out" in str(r) for r in results)


def test_same_thread_cannot_join_a_round_twice() -> None:
    sync = GradientSynchronizer(2)
    results = _run_workers(1, lambda i: _twice(sync))
    assert isinstance(results[0], RuntimeCheckError)
    assert "previous round" in str(results[0])


def _twice(sync: GradientSynchronizer) -> None:
    with pytest.raises(RuntimeCheckError, match="timed out"):
        sync.all_reduce_mean(np.ones(1), timeout_s=0.2)
    # This thread already took part in the (aborted, unfinished) round: it may not join it again.
    sync.all_reduce_mean(np.ones(1), timeout_s=0.2)


def test_bad_arguments() -> None:
    with pytest.raises(RuntimeCheckError, match="num_workers must be >= 1"):
        GradientSynchronizer(0)
    with pytest.raises(RuntimeCheckError, match="1-D"):
        GradientSynchronizer(1).all_reduce_mean(np.ones((2, 2)))
