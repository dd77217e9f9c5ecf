"""The data plane's checks catch broken schedules: missing or spurious dependencies, races,
double counting, sending data not yet received, malformed structure and bad inputs; and it
accepts, and names, the program-order dependencies of a rank's own sends and receives."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from parplan.collectives.dataplane import DEP_DATA, DEP_KINDS, DEP_SPURIOUS, run_schedule
from parplan.collectives.registry import ALGORITHMS, build_schedule
from parplan.collectives.ring_halves import ring_all_gather
from parplan.collectives.schedule import Schedule
from parplan.errors import CollectiveError
from tests.collectives.cases import Step, dep_lists, hand_schedule, with_deps

NAMES = sorted(ALGORITHMS)
PARAMS = {
    "tree": {"name": "tree", "arity": 2, "segments": 2},
    "hierarchical": {"name": "hierarchical", "group_size": 3},
    # Nodes of 3: steps inside different nodes share no rank (flat, every step meets the switch).
    "collnet_direct": {"name": "collnet_direct", "group_size": 3, "segments": 2},
    "collnet_chain": {"name": "collnet_chain", "group_size": 3, "segments": 2},
    "nvls_tree": {"name": "nvls_tree", "group_size": 3, "segments": 2},
}


def _schedule(name: str, p: int = 7, n: int = 23) -> Schedule:
    return build_schedule(PARAMS.get(name, name), p, n)


def _arrays(p: int = 7, n: int = 23) -> list[np.ndarray]:
    return [np.arange(n, dtype=np.int64) * (r + 1) for r in range(p)]


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_removing_any_data_dependency_is_caught(name: str, data: st.DataObject) -> None:
    schedule = _schedule(name)
    kinds = run_schedule(schedule, _arrays()).dep_kinds
    deps = dep_lists(schedule)
    data_deps = [
        (i, int(schedule.dep_indices[k]))
        for i in range(schedule.num_steps)
        for k in range(int(schedule.dep_offsets[i]), int(schedule.dep_offsets[i + 1]))
        if kinds[k] == DEP_DATA
    ]
    step, dropped = data.draw(st.sampled_from(data_deps))
    deps[step] = [d for d in deps[step] if d != dropped]
    with pytest.raises(CollectiveError, match=rf"step {step} .*missing dependency"):
        run_schedule(with_deps(schedule, deps), _arrays())


def _shares_a_rank(schedule: Schedule, x: int, step: int) -> bool:
    ranks = {int(schedule.src[step]), int(schedule.dst[step])}
    return bool({int(schedule.src[x]), int(schedule.dst[x])} & ranks)


# Every step of these shares a rank with every other: the root (centralized), the switch (nvls).
@pytest.mark.parametrize("name", [n for n in NAMES if n not in ("centralized", "nvls")])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_adding_a_spurious_dependency_is_caught(name: str, data: st.DataObject) -> None:
    schedule = _schedule(name)
    deps = dep_lists(schedule)
    step = data.draw(st.integers(1, schedule.num_steps - 1))
    # Steps sharing no rank with this one: neither a writer of what it sends, nor a use of what it
    # writes, nor an earlier operation of its own ranks.
    candidates = [x for x in range(step) if not _shares_a_rank(schedule, x, step)]
    assume(candidates)
    extra = data.draw(st.sampled_from(candidates))
    deps[step] = [*deps[step], extra]
    broken = with_deps(schedule, deps)
    with pytest.raises(CollectiveError, match=rf"step {step} depends on step {extra}.*spurious"):
        run_schedule(broken, _arrays())
    # A spurious dependency only costs concurrency: the lenient mode still runs it correctly,
    # and names it.
    result = run_schedule(broken, _arrays(), exact_deps=False)
    np.testing.assert_array_equal(result.arrays[0], sum(_arrays()))
    position = int(broken.dep_offsets[step]) + len(deps[step]) - 1
    assert DEP_KINDS[result.dep_kinds[position]] == "spurious"
    assert (result.dep_kinds == DEP_SPURIOUS).sum() == 1


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_a_program_order_dependency_is_accepted(data: st.DataObject) -> None:
    # The ring has only data dependencies; making a step also wait for any earlier step of its
    # sender or receiver (that is not already a dependency) is legitimate program order.
    schedule = _schedule("ring")
    deps = dep_lists(schedule)
    step = data.draw(st.integers(1, schedule.num_steps - 1))
    candidates = [x for x in range(step) if x not in deps[step] and _shares_a_rank(schedule, x, step)]
    assume(candidates)
    extra = data.draw(st.sampled_from(candidates))
    deps[step] = [*deps[step], extra]
    result = run_schedule(with_deps(schedule, deps), _arrays())
    np.testing.assert_array_equal(result.arrays[3], sum(_arrays()))
    added = int(schedule.dep_offsets[step + 1])  # the position of the extra dependency
    assert DEP_KINDS[result.dep_kinds[added]] in ("anti", "order")


def test_dependency_listed_twice_is_caught() -> None:
    schedule = _schedule("ring")
    deps = dep_lists(schedule)
    deps[9] = deps[9] * 2
    with pytest.raises(CollectiveError, match="twice"):
        run_schedule(with_deps(schedule, deps), _arrays())


def test_race_that_sequential_order_hides_is_caught() -> None:
    # Rank 2's value is read by step 0 and overwritten by step 1, which does not wait for step 0:
    # run in index order the result is right, but the engine could run step 1 first.
    steps: list[Step] = [
        (2, 0, 0, 1, True, []),  # 0: rank 0 = a + c
        (1, 2, 0, 1, False, []),  # 1: rank 2 = b   (races with step 0's read)
        (2, 0, 0, 1, True, [1]),  # 2: rank 0 = a + b + c
        (0, 1, 0, 1, False, [0, 2]),
        (0, 2, 0, 1, False, [0, 2]),
    ]
    racy = hand_schedule(steps, num_ranks=3, num_elements=1)
    arrays = [np.array([1]), np.array([10]), np.array([100])]
    with pytest.raises(CollectiveError, match="race: step 1 writes data of rank 2 that step 0"):
        run_schedule(racy, arrays)
    # Ordering the overwrite after the read (an anti-dependency) fixes it, and is not spurious.
    fixed = hand_schedule([*steps[:1], (1, 2, 0, 1, False, [0]), *steps[2:]], num_ranks=3, num_elements=1)
    assert [a.tolist() for a in run_schedule(fixed, arrays).arrays] == [[111]] * 3
    # Above the limit the race check is skipped (and reported as such).
    assert not run_schedule(racy, arrays, race_check_limit=2).race_checked


def test_double_counting_is_caught() -> None:
    steps: list[Step] = [(1, 0, 0, 2, True, []), (1, 0, 0, 2, True, []), (0, 1, 0, 2, False, [0, 1])]
    with pytest.raises(CollectiveError, match=r"adds rank\(s\) \[1\]'s contribution .* second time"):
        run_schedule(hand_schedule(steps, num_ranks=2, num_elements=2), [np.ones(2)] * 2)


def test_missing_contribution_is_caught_at_the_end() -> None:
    steps: list[Step] = [
        (1, 0, 0, 2, True, []),
        (0, 1, 0, 1, False, [0]),
    ]  # rank 1 never gets element 1's sum
    with pytest.raises(CollectiveError, match=r"rank 1 ends with elements \[1, 2\) holding .* \[1\]"):
        run_schedule(hand_schedule(steps, num_ranks=2, num_elements=2), [np.ones(2)] * 2)


def test_sending_data_not_yet_received_is_caught() -> None:
    # All-gather on 2 ranks: rank 0 forwards chunk 1, which it never received.
    steps: list[Step] = [(0, 1, 1, 1, False, [])]
    gather = hand_schedule(steps, num_ranks=2, num_elements=2, collective="all_gather")
    with pytest.raises(CollectiveError, match=r"step 0 sends elements \[1, 2\) that rank 0 has not received"):
        run_schedule(gather, [np.ones(2)] * 2)


def test_all_gather_reordered_without_deps_is_caught() -> None:
    schedule = ring_all_gather(5, 10)
    deps = dep_lists(schedule)
    deps[7] = []  # step 7 forwards a chunk delivered by an earlier step
    with pytest.raises(CollectiveError, match="missing dependency"):
        run_schedule(with_deps(schedule, deps), [np.ones(10)] * 5)


def test_malformed_schedules_are_rejected() -> None:
    later = hand_schedule([(0, 1, 0, 1, True, [1]), (1, 0, 0, 1, False, [])], num_ranks=2, num_elements=1)
    with pytest.raises(CollectiveError, match="depends on step 1, which is not earlier"):
        run_schedule(later, [np.ones(1)] * 2)
    self_send = hand_schedule([(0, 0, 0, 1, True, [])], num_ranks=2, num_elements=1)
    with pytest.raises(CollectiveError, match="sends to itself"):
        run_schedule(self_send, [np.ones(1)] * 2)
    out_of_range = hand_schedule([(0, 1, 0, 5, True, [])], num_ranks=2, num_elements=1)
    with pytest.raises(CollectiveError, match="range past the tensor"):
        run_schedule(out_of_range, [np.ones(1)] * 2)


def test_bad_inputs_are_rejected() -> None:
    schedule = build_schedule("ring", 3, 4)
    with pytest.raises(CollectiveError, match="3 ranks but 2 arrays"):
        run_schedule(schedule, [np.ones(4)] * 2)
    with pytest.raises(CollectiveError, match=r"shape \(5,\), want \(4,\)"):
        run_schedule(schedule, [np.ones(4), np.ones(4), np.ones(5)])
    with pytest.raises(CollectiveError, match="share one dtype"):
        run_schedule(schedule, [np.ones(4), np.ones(4), np.ones(4, dtype=np.int32)])
    with pytest.raises(CollectiveError, match="non-numeric"):
        run_schedule(schedule, [np.array(["a"] * 4)] * 3)
    with pytest.raises(CollectiveError, match="op must be"):
        run_schedule(schedule, [np.ones(4)] * 3, op="max")  # type: ignore[arg-type]
    with pytest.raises(CollectiveError, match=r"mean.*all_gather"):
        run_schedule(ring_all_gather(3, 4), [np.ones(4)] * 3, op="mean")


def test_inputs_are_not_modified_and_element_size_scales_bytes() -> None:
    arrays = _arrays()
    before = [a.copy() for a in arrays]
    result = run_schedule(_schedule("ring"), arrays, element_size_bytes=2)
    for a, b in zip(arrays, before, strict=True):
        np.testing.assert_array_equal(a, b)
    assert result.element_size_bytes == 2
    assert result.bytes_sent.sum() == 2 * 6 * 23 * 2
