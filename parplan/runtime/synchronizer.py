"""A threaded in-process all-reduce: worker threads average their gradients through shared state.

Each round, every one of ``num_workers`` threads calls :meth:`GradientSynchronizer.all_reduce_mean`
with its gradient. Under one lock the callers add into a shared accumulator; the last to arrive
computes the element-wise mean and wakes the others (a condition variable serves as the barrier);
every worker copies the mean out; the last to leave resets the state, so the same object serves
round after round. A thread arriving early for the next round waits until the previous one has
fully drained.

A worker whose gradient's length differs from the round's (set by the first arrival) gets a
:class:`~parplan.errors.RuntimeCheckError`, and the round is aborted: the workers already waiting
are woken with an error too and those still to come get it on arrival, so nobody hangs. The round
still completes (every worker passes through once) and the next round starts clean. A ``timeout_s``
bounds every wait; a worker that times out aborts the round the same way.

>>> sync = GradientSynchronizer(1)
>>> sync.all_reduce_mean(np.array([1.0, 2.0])).tolist(), sync.is_distributed
([1.0, 2.0], False)
"""

from __future__ import annotations

import threading

import numpy as np

from parplan.errors import RuntimeCheckError


class GradientSynchronizer:
    """Averages one gradient per worker thread per round (see the module docstring)."""

    def __init__(self, num_workers: int) -> None:
        if num_workers < 1:
            raise RuntimeCheckError(f"num_workers must be >= 1, got {num_workers}")
        self._num_workers = num_workers
        self._cond = threading.Condition(threading.Lock())
        self._reset()
        self.rounds_completed = 0

    @property
    def num_workers(self) -> int:
        """How many workers take part in every round."""
        return self._num_workers

    @property
    def is_distributed(self) -> bool:
        """Whether more than one worker takes part (one worker needs no communication)."""
        return self._num_workers > 1

    def _reset(self) -> None:
        self._sum: np.ndarray | None = None
        self._length = -1
        self._arrived = 0
        self._departed = 0
        self._participants: set[int] = set()
        self._mean: np.ndarray | None = None
        self._error: str | None = None
        self._draining = False

    def all_reduce_mean(self, gradient: np.ndarray, *, timeout_s: float | None = None) -> np.ndarray:
        """Contribute ``gradient`` (1-D) to this round and return a fresh copy of the round's mean.

        Floating inputs keep their dtype (accumulated in float64); integers give float64.
        Raises :class:`RuntimeCheckError` on a length mismatch (for every worker of the round), a
        second call by the same thread within one round, or a timeout.
        """
        grad = np.asarray(gradient)
        if grad.ndim != 1:
            raise RuntimeCheckError(f"gradient must be 1-D, got shape {grad.shape}")
        me = threading.get_ident()
        with self._cond:
            # Wait until the previous round has drained and this thread has not joined the current one.
            if not self._cond.wait_for(
                lambda: not self._draining and me not in self._participants, timeout_s
            ):
                raise RuntimeCheckError(
                    f"timed out after {timeout_s} s waiting for the previous round to finish"
                )
            self._participants.add(me)
            self._arrived += 1
            own_error: str | None = None
            if self._error is None:
                if self._sum is None:
                    self._length = len(grad)
                    self._sum = grad.astype(np.float64, copy=True)
                elif len(grad) != self._length:
                    own_error = (
                        f"gradient length {len(grad)} differs from the {self._length} of the other workers"
                    )
                    self._error = (
                        f"round aborted: a worker passed a gradient of length {len(grad)}, not {self._length}"
                    )
                    self._cond.notify_all()
                else:
                    self._sum += grad
            if self._arrived == self._num_workers:
                if self._error is None and self._sum is not None:
                    self._mean = self._sum / self._num_workers
                self._draining = True
                self._cond.notify_all()
            elif self._error is None and not self._cond.wait_for(
                lambda: self._draining or self._error is not None, timeout_s
            ):
                self._error = f"round aborted: a worker timed out after {timeout_s} s waiting for the others"
                own_error = f"timed out after {timeout_s} s waiting for the other workers"
                self._cond.notify_all()
            error = own_error or self._error
            result = None if error is not None or self._mean is None else self._mean.copy()
            self._departed += 1
            if self._departed == self._num_workers:
                if self._error is None:
                    self.rounds_completed += 1
                self._reset()
                self._cond.notify_all()
        if error is not None:
            raise RuntimeCheckError(error)
        assert result is not None
        if np.issubdtype(grad.dtype, np.floating):
            return result.astype(grad.dtype, copy=False)
        return result
