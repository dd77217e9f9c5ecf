"""Splitting a batch across data-parallel workers: round-robin, or in proportion to speed.

>>> split_batch(list(range(7)), 3)
[[0, 3, 6], [1, 4], [2, 5]]
>>> speed_shares(10, [1.0, 1.0, 2.0])
[3, 2, 5]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar, overload

import numpy as np

from parplan.errors import RuntimeCheckError

T = TypeVar("T")


@overload
def split_batch(data: np.ndarray, n_workers: int) -> list[np.ndarray]: ...
@overload
def split_batch(data: Sequence[T], n_workers: int) -> list[list[T]]: ...
def split_batch(data: np.ndarray | Sequence[T], n_workers: int) -> list[np.ndarray] | list[list[T]]:
    """Deal samples round-robin: worker ``i`` gets samples ``i, i + n, i + 2n, ...``.

    Sizes differ by at most one, every sample goes to exactly one worker, and each worker keeps
    the samples in their original order. Arrays are split along their first axis (as views).
    """
    if n_workers < 1:
        raise RuntimeCheckError(f"n_workers must be >= 1, got {n_workers}")
    if isinstance(data, np.ndarray):
        if data.ndim == 0:
            raise RuntimeCheckError("cannot split a 0-d array into samples")
        return [data[i::n_workers] for i in range(n_workers)]
    return [list(data[i::n_workers]) for i in range(n_workers)]


def speed_shares(num_samples: int, speeds: Sequence[float]) -> list[int]:
    """Sample counts proportional to ``speeds`` that sum to ``num_samples`` (largest remainder).

    Each worker first gets ``floor(num_samples * speed / total)``; the samples left over go one
    each to the workers with the largest fractional parts (ties to the lower index), so no worker
    is ever more than one sample from its exact share.
    """
    if num_samples < 0:
        raise RuntimeCheckError(f"num_samples must be >= 0, got {num_samples}")
    if not speeds:
        raise RuntimeCheckError("need at least one worker speed")
    for i, s in enumerate(speeds):
        if not (math.isfinite(s) and s > 0):
            raise RuntimeCheckError(f"worker {i}'s speed must be a positive finite number, got {s}")
    total = math.fsum(speeds)
    exact = [num_samples * s / total for s in speeds]
    counts = [math.floor(x) for x in exact]
    left = num_samples - sum(counts)
    order = sorted(range(len(speeds)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[:left]:
        counts[i] += 1
    return counts


@overload
def split_by_speed(data: np.ndarray, speeds: Sequence[float]) -> list[np.ndarray]: ...
@overload
def split_by_speed(data: Sequence[T], speeds: Sequence[float]) -> list[list[T]]: ...
def split_by_speed(
    data: np.ndarray | Sequence[T], speeds: Sequence[float]
) -> list[np.ndarray] | list[list[T]]:
    """Split into contiguous, in-order parts sized by :func:`speed_shares`, so a worker twice as
    fast gets twice the samples (heterogeneous devices finish together)."""
    counts = speed_shares(len(data), speeds)
    bounds = np.concatenate([[0], np.cumsum(counts)]).tolist()
    if isinstance(data, np.ndarray):
        return [data[bounds[i] : bounds[i + 1]] for i in range(len(counts))]
    return [list(data[bounds[i] : bounds[i + 1]]) for i in range(len(counts))]
