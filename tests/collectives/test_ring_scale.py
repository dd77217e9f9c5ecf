"""The vectorised ring at a size the data plane does not reach: structure checked with numpy."""

from __future__ import annotations

import numpy as np

from parplan.collectives.ring import ring_all_reduce
from parplan.collectives.schedule import chunk_bounds


def test_ring_1024_structure() -> None:
    p, n = 1024, 1024 * 5 + 17
    s = ring_all_reduce(p, n)
    s.validate()
    steps = 2 * (p - 1) * p
    assert s.num_steps == steps
    assert s.src.dtype == np.int32 and s.phase.dtype == np.int8 and s.dep_indices.dtype == np.int32
    assert s.dep_offsets.dtype == np.int32  # compact step indices (issue 15)
    k = np.arange(steps)
    rank, row = k % p, k // p
    np.testing.assert_array_equal(s.src, rank)
    np.testing.assert_array_equal(s.dst, (rank + 1) % p)
    shift = np.where(row < p - 1, row + 1, row - (p - 1))
    chunk = (rank - shift) % p
    bounds = chunk_bounds(n, p)
    np.testing.assert_array_equal(s.offset, bounds[chunk])
    np.testing.assert_array_equal(s.length, bounds[chunk + 1] - bounds[chunk])
    np.testing.assert_array_equal(s.reduce, row < p - 1)
    # Each step after the first round depends on exactly the step that delivered its chunk.
    dep = s.dep_indices
    later = k[p:]
    assert (s.dep_counts[:p] == 0).all() and (s.dep_counts[p:] == 1).all()
    np.testing.assert_array_equal(s.dst[dep], s.src[later])
    np.testing.assert_array_equal(s.offset[dep], s.offset[later])
    np.testing.assert_array_equal(dep // p, later // p - 1)
    # Reduce-scatter ends with rank r owning chunk r: its last reduction carries chunk r into r.
    last_rs = k[(row == p - 2)]
    np.testing.assert_array_equal(chunk[last_rs], s.dst[last_rs])
    # Every chunk crosses every ring link once per phase: 2 (p - 1) n elements in all.
    assert int(s.length.sum()) == 2 * (p - 1) * n


def test_step_indices_beyond_int32_are_refused() -> None:
    import dataclasses

    import pytest

    s = ring_all_reduce(2, 4)
    with pytest.raises(ValueError, match="beyond int32"):
        dataclasses.replace(s, dep_indices=np.full(len(s.dep_indices), 2**31, dtype=np.int64))
