"""Array types and the small numpy helpers every part of the engine uses.

The engine works on whole batches of tasks at once; batches of a few tasks take scalar paths,
where numpy's per-call cost would dominate the work (:data:`SMALL_BATCH`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
IdArray = npt.NDArray[np.int32] | IntArray
"""Device ids as the task graph holds them (int32), or as the engine computes them (int64)."""

_Array = TypeVar("_Array", bound=npt.NDArray[Any])

EMPTY_I: IntArray = np.zeros(0, dtype=np.int64)
EMPTY_F: FloatArray = np.zeros(0, dtype=np.float64)


def smallest(values: npt.NDArray[np.generic]) -> float:
    """The smallest of a non-empty array by its index (``argmin`` costs a fifth of ``min``'s ufunc
    reduction, run at most events); the value ``min`` gives but for which of two signed zeros
    (the engine's times are never -0.0).

    >>> smallest(np.array([3.0, 1.0, np.inf]))
    1.0
    """
    least: float = values.item(values.argmin())
    return least


def largest(values: npt.NDArray[np.generic]) -> float:
    """The largest of a non-empty array by its index (as :func:`smallest`)."""
    most: float = values.item(values.argmax())
    return most


# Batches of at most this many tasks take scalar paths (numpy's per-call cost dominates there).
SMALL_BATCH = 8


def sorted_copy(values: _Array) -> _Array:
    """``np.sort(values)`` (a sorted copy, the same default sort) without its Python-level
    wrapper, a third of the cost on the few-element batches the engine sorts.

    >>> sorted_copy(np.array([3, 1, 2])).tolist()
    [1, 2, 3]
    """
    out = values.copy()
    out.sort()
    return out


def min_max(values: npt.NDArray[np.generic]) -> tuple[float, float]:
    """Smallest and largest of a non-empty array; a Python pass on short ones, where two numpy
    reductions would cost more than the work.

    >>> min_max(np.array([3.0, 1.0, 2.0]))
    (1.0, 3.0)
    """
    if len(values) <= SMALL_BATCH:
        listed = values.tolist()
        return min(listed), max(listed)
    return smallest(values), largest(values)


def runs(sorted_values: npt.NDArray[np.generic]) -> list[tuple[int, int]]:
    """``(start, stop)`` of each run of equal values in a sorted array.

    >>> runs(np.array([1.0, 1.0, 2.0, 5.0, 5.0]))
    [(0, 2), (2, 3), (3, 5)]
    """
    cuts = (sorted_values[1:] != sorted_values[:-1]).nonzero()[0] + 1
    return list(itertools.pairwise([0, *cuts.tolist(), len(sorted_values)]))


@dataclass(frozen=True, eq=False)
class TaskColumn:
    """A float per task, read by batches of task ids: ``values[tasks]``, divided by
    ``per_code[codes[tasks]]`` when ``per_code`` is given.

    Bytes on the wire are a transfer's payload over its protocol's efficiency: read per batch,
    the same floats as a whole column of quotients, without the 8 bytes per task that column
    costs (268 MB for a ring at p = 4096).

    >>> TaskColumn(np.array([4.0, 6.0]), np.array([1, 0], dtype=np.int8), np.array([1.0, 0.5])).take(
    ...     np.array([1, 0])
    ... ).tolist()
    [6.0, 8.0]
    """

    values: FloatArray
    codes: npt.NDArray[np.int8] | None = None
    per_code: FloatArray | None = None

    def take(self, tasks: IntArray) -> FloatArray:
        """The column's values for ``tasks``."""
        out = self.values[tasks]
        if self.codes is None or self.per_code is None:
            return out
        quotient: FloatArray = out / self.per_code[self.codes[tasks]]
        return quotient
