"""split_batch, speed_shares and split_by_speed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.errors import RuntimeCheckError
from parplan.runtime import speed_shares, split_batch, split_by_speed


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(), max_size=60), st.integers(1, 20))
def test_split_batch_round_robin(data: list[int], n: int) -> None:
    parts = split_batch(data, n)
    assert len(parts) == n
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    assert sorted(x for p in parts for x in p) == sorted(data)
    for i, part in enumerate(parts):
        assert part == data[i::n]  # round-robin, order kept within a worker


def test_split_batch_arrays_split_rows() -> None:
    X = np.arange(20).reshape(10, 2)
    parts = split_batch(X, 3)
    assert [len(p) for p in parts] == [4, 3, 3]
    np.testing.assert_array_equal(parts[1], X[[1, 4, 7]])
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)[:, 0]), X[:, 0])


def test_split_batch_errors() -> None:
    with pytest.raises(RuntimeCheckError, match="n_workers must be >= 1"):
        split_batch([1, 2], 0)
    with pytest.raises(RuntimeCheckError, match="0-d"):
        split_batch(np.array(3), 2)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 500), st.lists(st.floats(0.01, 100.0), min_size=1, max_size=12))
def test_speed_shares_fair(total: int, speeds: list[float]) -> None:
    counts = speed_shares(total, speeds)
    assert sum(counts) == total and all(c >= 0 for c in counts)
    exact = [total * s / sum(speeds) for s in speeds]
    assert all(abs(c - e) < 1 for c, e in zip(counts, exact, strict=True))


def test_speed_shares_examples() -> None:
    assert speed_shares(10, [1, 1, 2]) == [3, 2, 5]  # the leftover goes to the lower index on a tie
    assert speed_shares(7, [3, 1]) == [5, 2]
    assert speed_shares(0, [1, 2]) == [0, 0]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-(2**62), 2**62), max_size=80),
    st.lists(st.floats(0.1, 10.0), min_size=1, max_size=8),
)
def test_split_by_speed_every_sample_once_in_order(data: list[int], speeds: list[float]) -> None:
    parts = split_by_speed(data, speeds)
    assert [x for p in parts for x in p] == data
    assert [len(p) for p in parts] == speed_shares(len(data), speeds)
    arr_parts = split_by_speed(np.array(data, dtype=np.int64), speeds)
    assert [p.tolist() for p in arr_parts] == parts


@pytest.mark.parametrize("speeds", [[], [1.0, 0.0], [1.0, -2.0], [float("nan")], [float("inf")]])
def test_speed_errors(speeds: list[float]) -> None:
    with pytest.raises(RuntimeCheckError):
        split_by_speed([1, 2, 3], speeds)
