"""Reduce-scatter, all-gather, reduce and broadcast on their own."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.collectives.registry import build_schedule
from parplan.collectives.ring_halves import ring_all_gather, ring_reduce_scatter
from parplan.collectives.schedule import chunk_bounds
from parplan.collectives.tree import tree_all_reduce
from parplan.collectives.tree_broadcast import tree_broadcast
from parplan.collectives.tree_reduce import tree_reduce
from parplan.collectives.volumes import collective_traffic
from parplan.errors import CollectiveError
from tests.collectives.cases import FLOAT_DTYPES, INT_DTYPES, SEEDS, inputs, run_and_check, sizes

STANDALONE = ("all_gather", "broadcast", "reduce", "reduce_scatter")


@pytest.mark.parametrize("collective", STANDALONE)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_standalone_collectives(collective: str, data: st.DataObject) -> None:
    p, n = data.draw(sizes())
    kwargs: dict[str, object] = {}
    if collective in ("reduce", "broadcast"):
        kwargs = {
            "root": data.draw(st.integers(0, p - 1)),
            "arity": data.draw(st.one_of(st.none(), st.integers(2, 4))),
            "segments": data.draw(st.integers(1, 3)),
        }
    name = "ring" if collective in ("all_gather", "reduce_scatter") else "tree"
    schedule = build_schedule({"name": name, **kwargs}, p, n, collective=collective)
    assert schedule.collective == collective
    schedule.validate()
    dtype = data.draw(st.sampled_from(INT_DTYPES + FLOAT_DTYPES))
    arrays = inputs(data.draw(SEEDS), p, n, dtype)
    result = run_and_check(schedule, arrays)
    sent, received = collective_traffic(collective, p, n, {"name": name, **kwargs})
    itemsize = np.dtype(dtype).itemsize
    np.testing.assert_array_equal(result.bytes_sent, sent * itemsize)
    np.testing.assert_array_equal(result.bytes_received, received * itemsize)
    assert result.bytes_received.sum() == (p - 1) * n * itemsize
    if collective in ("reduce", "reduce_scatter"):
        run_and_check(schedule, arrays, op="mean")


def test_reduce_scatter_leaves_rank_r_with_chunk_r() -> None:
    p, n = 5, 13
    arrays = [np.arange(n) * (r + 1) for r in range(p)]
    result = run_and_check(ring_reduce_scatter(p, n), arrays)
    bounds = chunk_bounds(n, p)
    total = np.sum(arrays, axis=0)
    for r in range(p):
        np.testing.assert_array_equal(
            result.arrays[r][bounds[r] : bounds[r + 1]], total[bounds[r] : bounds[r + 1]]
        )


def test_binomial_tree_depth_is_logarithmic() -> None:
    schedule = tree_broadcast(37, 5, root=4)
    depth = {4: 0}
    for i in range(schedule.num_steps):
        depth[int(schedule.dst[i])] = depth[int(schedule.src[i])] + 1
    # Depth is the largest popcount below 37 (31 = 0b11111); the root has ceil(log2 37) children,
    # so a broadcast takes ceil(log2 p) rounds.
    assert max(depth.values()) == 5
    assert int((schedule.src == 4).sum()) == 6 == (37 - 1).bit_length()
    parents = schedule.meta["parents"]
    assert isinstance(parents, tuple) and parents[4] == -1


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: tree_reduce(4, 4, root=4), "root 4 is not a rank"),
        (lambda: tree_all_reduce(4, 4, arity=1), "arity must be >= 2"),
        (lambda: tree_all_reduce(4, 4, segments=0), "segments must be >= 1"),
        (lambda: tree_broadcast(0, 4), "at least one rank"),
        (lambda: ring_all_gather(3, -1), "num_elements must be >= 0"),
    ],
)
def test_builder_parameter_errors(call: object, message: str) -> None:
    with pytest.raises(CollectiveError, match=message):
        call()  # type: ignore[operator]
