"""Hypothesis strategies and checkers shared by the collective tests."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

from parplan.collectives.dataplane import RunResult, output_region, reference_outputs, run_schedule
from parplan.collectives.schedule import Schedule

INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32]
FLOAT_DTYPES = [np.float32, np.float64]


@st.composite
def sizes(draw: st.DrawFn, max_ranks: int = 64) -> tuple[int, int]:
    """(p, n) with p in 1..max_ranks and n drawn to hit n = 0, n < p, n not divisible by p, n >= p."""
    p = draw(st.integers(1, max_ranks))
    n = draw(
        st.one_of(
            st.integers(0, max(p - 1, 0)), st.integers(p, 4 * p + 3), st.just(p * draw(st.integers(1, 3)))
        )
    )
    return p, n


@st.composite
def random_groups(draw: st.DrawFn, p: int) -> list[list[int]]:
    """A random partition of 0..p-1 into non-empty groups, each in a random order."""
    perm = draw(st.permutations(range(p)))
    cuts = sorted(draw(st.sets(st.integers(1, max(p - 1, 1)), max_size=min(p - 1, 8)))) if p > 1 else []
    bounds = [0, *[c for c in cuts if c < p], p]
    return [list(perm[a:b]) for a, b in itertools.pairwise(bounds) if b > a]


@st.composite
def algorithm_specs(draw: st.DrawFn, name: str, p: int) -> tuple[dict[str, Any], list[list[int]] | None]:
    """A spec mapping for ``name`` with random parameters, plus groups for hierarchical and ring."""
    if name == "centralized":
        return {"name": name, "root": draw(st.integers(0, p - 1))}, None
    if name == "tree":
        return {"name": name, "arity": draw(st.integers(2, 5)), "segments": draw(st.integers(1, 4))}, None
    if name == "ring":
        # Channels multiply the steps; stay within the data plane's race-check limit, and quick.
        limit = max(1, 10_000 // max(1, 2 * (p - 1) * p))
        groups = draw(random_groups(p)) if draw(st.booleans()) else None
        auto = max((len(g) for g in groups), default=1) if groups else 1
        choices = st.integers(1, min(4, limit))
        channels = draw(st.one_of(st.none(), choices) if auto <= limit else choices)
        return ({"name": name} if channels is None else {"name": name, "channels": channels}), groups
    if name in ("nvls", "nvls_tree"):
        spec = {"name": name, "segments": draw(st.one_of(st.none(), st.integers(1, 5)))}
        return spec, draw(random_groups(p)) if draw(st.booleans()) else None
    if name in ("collnet_direct", "collnet_chain"):
        spec: dict[str, Any] = {"name": name, "segments": draw(st.one_of(st.none(), st.integers(1, 4)))}
        if name == "collnet_chain":
            spec["channels"] = draw(st.integers(1, 3))
        return spec, draw(random_groups(p)) if draw(st.booleans()) else None
    if name == "hierarchical":
        if draw(st.booleans()):
            return {"name": name, "group_size": draw(st.integers(1, p))}, None
        return {"name": name}, draw(random_groups(p))
    return {"name": name}, None


SEEDS = st.integers(0, 2**32 - 1)


def inputs(seed: int, p: int, n: int, dtype: Any) -> list[np.ndarray]:
    """One random array per rank; integers over the whole range (sums wrap like the reference)."""
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return [rng.integers(info.min, info.max, size=n, dtype=dtype, endpoint=True) for _ in range(p)]
    return [rng.uniform(-1.0, 1.0, size=n).astype(dtype) for _ in range(p)]


def assert_correct(
    schedule: Schedule, arrays: Sequence[np.ndarray], result: RunResult, op: str = "sum"
) -> None:
    """Every rank's defined output equals the reference: exactly for integers, to rounding for floats."""
    expected = reference_outputs(schedule, arrays, op=op)  # type: ignore[arg-type]
    for r in range(schedule.num_ranks):
        region = output_region(schedule, r)
        if region is None:
            continue
        got = result.arrays[r][region[0] : region[1]]
        want = expected[r]
        assert want is not None
        if np.issubdtype(arrays[0].dtype, np.integer) and op == "sum":
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want, err_msg=f"rank {r}")
        else:
            tol = 1e-4 if arrays[0].dtype == np.float32 else 1e-11
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"rank {r}")


def run_and_check(schedule: Schedule, arrays: Sequence[np.ndarray], op: str = "sum") -> RunResult:
    result = run_schedule(schedule, arrays, op=op)  # type: ignore[arg-type]
    assert_correct(schedule, arrays, result, op)
    return result


def with_deps(schedule: Schedule, deps: Sequence[Sequence[int]]) -> Schedule:
    """A copy of ``schedule`` with other dependency lists (to break it on purpose)."""
    counts = [len(d) for d in deps]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    flat = np.array([x for d in deps for x in d], dtype=np.int64)
    return dataclasses.replace(schedule, dep_offsets=offsets, dep_indices=flat)


def dep_lists(schedule: Schedule) -> list[list[int]]:
    return [schedule.deps(i).tolist() for i in range(schedule.num_steps)]


Step = tuple[int, int, int, int, bool, Sequence[int]]
"""(src, dst, offset, length, reduce, deps) of one hand-written step."""


def hand_schedule(
    steps: Sequence[Step],
    *,
    num_ranks: int,
    num_elements: int,
    collective: str = "all_reduce",
    root: int | None = None,
) -> Schedule:
    """A schedule from ``(src, dst, offset, length, reduce, deps)`` tuples."""
    cols = list(zip(*steps, strict=True)) if steps else [()] * 6
    counts = [len(d) for d in cols[5]]
    return Schedule(
        algorithm="hand",
        collective=collective,
        num_ranks=num_ranks,
        num_elements=num_elements,
        src=np.array(cols[0], dtype=np.int32),
        dst=np.array(cols[1], dtype=np.int32),
        offset=np.array(cols[2], dtype=np.int64),
        length=np.array(cols[3], dtype=np.int64),
        reduce=np.array(cols[4], dtype=np.bool_),
        dep_offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        dep_indices=np.array([x for d in cols[5] for x in d], dtype=np.int64),
        phase=np.zeros(len(steps), dtype=np.int8),
        root=root,
    )
