"""Every registry algorithm, checked at once: exact results, byte counts, exact dependencies."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.collectives.dataplane import DEP_KINDS
from parplan.collectives.registry import ALGORITHMS, build_schedule, get
from parplan.collectives.volumes import allreduce_total_lower_bound, expected_traffic
from tests.collectives.cases import (
    FLOAT_DTYPES,
    INT_DTYPES,
    SEEDS,
    algorithm_specs,
    inputs,
    run_and_check,
    sizes,
)

NAMES = sorted(ALGORITHMS)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_all_reduce_exact_and_volumes(name: str, data: st.DataObject) -> None:
    p, n = data.draw(sizes())
    spec, groups = data.draw(algorithm_specs(name, p))
    dtype = data.draw(st.sampled_from(INT_DTYPES + FLOAT_DTYPES))
    schedule = build_schedule(spec, p, n, groups=groups)
    assert (schedule.algorithm, schedule.collective) == (name, "all_reduce")
    schedule.validate()  # every dependency is an earlier step (topological order)
    arrays = inputs(data.draw(SEEDS), p, n, dtype)
    result = run_and_check(schedule, arrays)  # exact deps, contributions exactly once, no races

    sent, received = expected_traffic(spec, p, n, groups=groups)
    itemsize = np.dtype(dtype).itemsize
    np.testing.assert_array_equal(result.bytes_sent, sent * itemsize)
    np.testing.assert_array_equal(result.bytes_received, received * itemsize)
    if get(name).switch_capabilities:
        # In-network: the switches do the merging, and the ranks still receive at least every
        # other rank's share, (p - 1) n in total, and send at least (p - 1) n into the merges.
        assert result.bytes_received[:p].sum() >= (p - 1) * n * itemsize
        assert result.bytes_sent[:p].sum() >= (p - 1) * n * itemsize
    else:
        assert result.bytes_received.sum() == allreduce_total_lower_bound(p, n) * itemsize
    assert sum(result.phase_bytes.values()) == result.step_bytes.sum() == result.bytes_sent.sum()
    assert result.race_checked


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_all_reduce_mean(name: str, data: st.DataObject) -> None:
    p, n = data.draw(sizes(max_ranks=24))
    spec, groups = data.draw(algorithm_specs(name, p))
    dtype = data.draw(st.sampled_from([np.int32, np.float64, np.float32]))
    schedule = build_schedule(spec, p, n, groups=groups)
    arrays = inputs(data.draw(SEEDS), p, n, dtype)
    result = run_and_check(schedule, arrays, op="mean")
    for r in range(p):
        assert np.issubdtype(result.arrays[r].dtype, np.floating)


@pytest.mark.parametrize("p", [2, 3, 5, 8, 64])
def test_ring_volume_is_the_textbook_formula(p: int) -> None:
    n = 12 * p
    result = run_and_check(build_schedule("ring", p, n), [np.ones(n, dtype=np.int64)] * p)
    per_rank = 2 * (p - 1) * n // p * 8
    assert (result.bytes_sent == per_rank).all() and (result.bytes_received == per_rank).all()
    assert result.phase_bytes == {"reduce_scatter": per_rank * p // 2, "all_gather": per_rank * p // 2}


@pytest.mark.parametrize("root", [0, 3])
def test_centralized_volume_into_root(root: int) -> None:
    p, n = 6, 10
    result = run_and_check(build_schedule(f"centralized:{root}", p, n), [np.arange(n)] * p)
    assert result.bytes_received[root] == (p - 1) * n * 8
    assert result.bytes_sent[root] == (p - 1) * n * 8
    assert result.bytes_reduced[root] == (p - 1) * n * 8
    assert result.bytes_reduced.sum() == (p - 1) * n * 8


def test_halving_doubling_power_of_two_volume_and_rounds() -> None:
    p, n = 16, 160
    schedule = build_schedule("halving_doubling", p, n)
    assert schedule.num_steps == 2 * p * 4  # log2(16) halving + doubling rounds of p sends
    result = run_and_check(schedule, [np.full(n, r) for r in range(p)])
    assert (result.bytes_sent == 2 * (p - 1) * n // p * 8).all()


@pytest.mark.parametrize("p", [3, 5, 6, 7, 12, 33])
def test_halving_doubling_folds_extra_ranks(p: int) -> None:
    pp = 1 << (p.bit_length() - 1)
    extra = p - pp
    schedule = build_schedule("halving_doubling", p, 4 * p)
    fold = schedule.phase == schedule.phase_names.index("fold")
    assert sorted(zip(schedule.src[fold].tolist(), schedule.dst[fold].tolist(), strict=True)) == [
        (2 * i + 1, 2 * i) for i in range(extra)
    ]
    folded = {2 * i + 1 for i in range(extra)}
    rs = schedule.phase == schedule.phase_names.index("reduce_scatter")
    assert not folded & (set(schedule.src[rs].tolist()) | set(schedule.dst[rs].tolist()))


@pytest.mark.parametrize("p", [1, 2, 4, 7, 16])
def test_ring_steps_and_single_dependencies(p: int) -> None:
    schedule = build_schedule("ring", p, 3 * p)
    assert schedule.num_steps == 2 * (p - 1) * p
    counts = schedule.dep_counts
    assert (counts[:p] == 0).all() and (counts[p:] == 1).all()
    deps = schedule.dep_indices
    later = np.arange(p, schedule.num_steps)
    # A step forwards what its left neighbour sent it one round before.
    np.testing.assert_array_equal(schedule.dst[deps], schedule.src[later])
    np.testing.assert_array_equal(schedule.offset[deps], schedule.offset[later])


def test_tree_segments_pipeline() -> None:
    p, n, segments = 7, 30, 3
    schedule = build_schedule({"name": "tree", "arity": 2, "segments": segments}, p, n)
    assert schedule.num_steps == 2 * (p - 1) * segments
    result = run_and_check(schedule, [np.arange(n) * r for r in range(p)])
    parent = [-1, 0, 0, 1, 1, 2, 2]
    seg = (schedule.offset // (n // segments)).tolist()
    up = {}  # (child, segment) -> its reduce step into its parent
    down = {}  # (child, segment) -> the broadcast step into it
    for i in range(schedule.num_steps):
        src, dst = int(schedule.src[i]), int(schedule.dst[i])
        if schedule.reduce[i]:
            assert parent[src] == dst
            up[src, seg[i]] = i
        else:
            assert parent[dst] == src
            down[dst, seg[i]] = i
    kids = {u: [v for v in range(p) if parent[v] == u] for u in range(p)}
    expected: dict[int, tuple[set[int], set[int]]] = {}  # step -> (data deps, program-order deps)
    for (v, g), i in up.items():
        # Data: the children's segment g into v. Order: the parent took segment g - 1 from all
        # its children (v included) before it takes segment g from any.
        order = {up[w, g - 1] for w in kids[parent[v]]} if g else set()
        expected[i] = ({up[c, g] for c in kids[v]}, order)
    for (v, g), i in down.items():
        u = parent[v]
        data = {up[c, g] for c in kids[0]} if u == 0 else {down[u, g]}
        # Order: u's segment g - 1 to v; the root's first segment waits for the whole reduce.
        first = {up[c, segments - 1] for c in kids[0]} if u == 0 else set()
        order = {down[v, g - 1]} if g else first
        expected[i] = (data, order)
    for i in range(schedule.num_steps):
        data, order = expected[i]
        assert set(schedule.deps(i).tolist()) == data | order
        for k in range(int(schedule.dep_offsets[i]), int(schedule.dep_offsets[i + 1])):
            d = int(schedule.dep_indices[k])
            assert DEP_KINDS[result.dep_kinds[k]] == ("data" if d in data else "order")


@pytest.mark.parametrize(
    ("spec", "p"),
    [
        ("ring", 7),
        ("centralized", 5),
        ("hierarchical:3", 7),
        ("tree", 9),
        ("tree:3", 9),
        ("double_binary_tree", 7),
    ],
)
def test_unsegmented_schedules_have_only_data_dependencies(spec: str, p: int) -> None:
    n = 3 * p + 1
    result = run_and_check(build_schedule(spec, p, n), [np.arange(n) + r for r in range(p)])
    assert (result.dep_kinds == DEP_KINDS.index("data")).all()


@pytest.mark.parametrize("p", [4, 5, 6, 7, 8, 12])
def test_halving_doubling_follows_the_round_structure(p: int) -> None:
    n = 8 * p
    schedule = build_schedule("halving_doubling", p, n)
    result = run_and_check(schedule, [np.arange(n) * (r + 1) for r in range(p)])
    kinds = result.dep_kinds
    assert set(DEP_KINDS[k] for k in kinds.tolist()) <= {"data", "anti", "order"}
    # Rounds in step order: the fold, log2(p') halving rounds, as many doubling rounds, the unfold.
    pp = 1 << (p.bit_length() - 1)
    extra = p - pp
    sizes = ([extra] if extra else []) + [pp] * 2 * (pp.bit_length() - 1) + ([extra] if extra else [])
    round_of = np.repeat(np.arange(len(sizes)), sizes)
    assert len(round_of) == schedule.num_steps
    for i in range(schedule.num_steps):
        ranks = {int(schedule.src[i]), int(schedule.dst[i])}
        deps = schedule.deps(i).tolist()
        # Each step waits for every step of the rank's latest earlier round, for both its ranks.
        for r in ranks:
            earlier = [
                x for x in range(i) if r in (schedule.src[x], schedule.dst[x]) and round_of[x] < round_of[i]
            ]
            if earlier:
                last = max(round_of[x] for x in earlier)
                assert {x for x in earlier if round_of[x] == last} <= set(deps), (i, r)
        # ... and never on a step of its own round.
        assert all(round_of[d] < round_of[i] for d in deps)


@pytest.mark.parametrize("p", list(range(2, 40)))
def test_double_binary_trees_are_complementary(p: int) -> None:
    from parplan.collectives.double_binary_tree import double_binary_trees

    first, second = double_binary_trees(p)
    interior = [{u for u in tree if u >= 0} for tree in (first, second)]
    assert interior[0] == {r for r in range(p) if r % 2 == 0 and (r > 0 or p > 1)}
    both = interior[0] & interior[1]
    assert both == (set() if p % 2 == 0 else {0} & interior[1])
    for tree in (first, second):
        assert sum(u < 0 for u in tree) == 1
        assert all(sum(1 for u in tree if u == v) <= 2 for v in range(p))  # binary
        depth = max(_depth(tree, v) for v in range(p))
        assert depth <= 2 * p.bit_length()


def _depth(tree: list[int], v: int) -> int:
    d = 0
    while tree[v] >= 0:
        v, d = tree[v], d + 1
    return d


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_double_binary_tree_segments(data: st.DataObject) -> None:
    from parplan.collectives.double_binary_tree import double_binary_tree_all_reduce

    p, n = data.draw(sizes(max_ranks=32))
    segments = data.draw(st.integers(1, 5))
    schedule = double_binary_tree_all_reduce(p, n, segments=segments)
    result = run_and_check(schedule, inputs(data.draw(SEEDS), p, n, np.int64))
    half = (n + 1) // 2
    tree = np.asarray(schedule.meta["tree"])
    assert (schedule.offset[tree == 0] + schedule.length[tree == 0] <= half).all()
    assert (schedule.offset[tree == 1] >= half).all()
    assert result.bytes_received.sum() == allreduce_total_lower_bound(p, n) * 8


def test_hierarchical_default_is_one_group_and_groups_drive_leaders() -> None:
    one = build_schedule("hierarchical", 6, 12)
    assert one.meta["leaders"] == (0,)
    groups = [[5, 1], [0, 2, 4], [3]]
    s = build_schedule("hierarchical", 6, 12, groups=groups)
    assert s.meta["leaders"] == (5, 0, 3)
    ring = np.isin(s.phase, [1, 2])
    assert set(s.src[ring].tolist()) | set(s.dst[ring].tolist()) == {5, 0, 3}
    run_and_check(s, [np.arange(12) + r for r in range(6)])
    # group_size in the spec wins over groups from the cluster
    assert build_schedule("hierarchical:2", 6, 12, groups=groups).meta["leaders"] == (0, 2, 4)


def test_p1_and_n0_move_nothing() -> None:
    for name in NAMES:
        assert build_schedule(name, 1, 100).num_steps == 0
        assert build_schedule(name, 8, 0).num_steps == 0
        run_and_check(build_schedule(name, 1, 5), [np.arange(5)])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", [37, 64 * 3 + 5])
def test_largest_p_in_the_tests(name: str, n: int) -> None:
    p = 64
    spec = {"hierarchical": "hierarchical:8", "tree": "tree:3", "centralized": "centralized:63"}.get(
        name, name
    )
    schedule = build_schedule(spec, p, n)
    rng = np.random.default_rng(n)
    arrays = [rng.integers(-(2**40), 2**40, size=n) for _ in range(p)]
    result = run_and_check(schedule, arrays)
    assert result.race_checked
    sent, received = expected_traffic(spec, p, n)
    np.testing.assert_array_equal(result.bytes_sent, sent * 8)
    np.testing.assert_array_equal(result.bytes_received, received * 8)
