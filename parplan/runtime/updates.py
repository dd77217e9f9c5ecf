"""Merging data-parallel worker updates: the gradient average weighted by samples processed.

>>> import numpy as np
>>> merged = merge_worker_updates([WorkerUpdate(np.array([1.0]), 1), WorkerUpdate(np.array([4.0]), 2)])
>>> merged.gradient.tolist(), merged.num_samples
([3.0], 3)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from parplan.errors import RuntimeCheckError


@dataclass(frozen=True, eq=False)
class WorkerUpdate:
    """One worker's result for a step: its mean gradient over ``num_samples`` samples."""

    gradient: np.ndarray
    num_samples: int


def merge_worker_updates(updates: Sequence[WorkerUpdate]) -> WorkerUpdate:
    """One update whose gradient is ``sum(n_i g_i) / sum(n_i)``: the mean over every sample.

    Raises :class:`RuntimeCheckError` for no updates, an update from fewer than one sample (its
    mean gradient is undefined; leave it out) or gradients of different shapes.
    """
    if not updates:
        raise RuntimeCheckError("no worker updates to merge")
    shape = np.shape(updates[0].gradient)
    for i, u in enumerate(updates):
        if int(u.num_samples) != u.num_samples or u.num_samples < 1:
            raise RuntimeCheckError(
                f"worker {i} reports {u.num_samples} samples; every update must come from at least one sample"
            )
        if np.shape(u.gradient) != shape:
            raise RuntimeCheckError(
                f"worker {i}'s gradient has shape {np.shape(u.gradient)}, but worker 0's has {shape}"
            )
    total = sum(int(u.num_samples) for u in updates)
    acc = np.zeros(shape, dtype=np.result_type(updates[0].gradient, np.float64))
    for u in updates:
        acc += np.asarray(u.gradient) * u.num_samples
    acc /= total
    return WorkerUpdate(gradient=acc, num_samples=total)
