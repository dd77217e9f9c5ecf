"""Interleaved 1F1B: Megatron-LM's order written out by hand, its memory, its rules, its bubble.

The reference orders below were written from Megatron-LM's
``forward_backward_pipelining_with_interleaving`` (schedule table of groups of ``p``
micro-batches, chunk-major; warm-up ``2 (p - i - 1) + (v - 1) p``; then one forward and one
backward; backwards run the table with the chunk mirrored) and agree with Figure 4 of Narayanan
et al. (2021). The bubble is checked by running every stage's order strictly (as Megatron's
blocking schedule does) with uniform chunk times and no communication.
"""

from __future__ import annotations

import itertools

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.errors import PlanError
from parplan.pipeline import Stage, Unit, get, peak_inflight
from parplan.pipeline.interleaved import Interleaved1F1B, unit_table, warmup_units

SCHEDULE = Interleaved1F1B()


def _text(order: tuple[Unit, ...]) -> str:
    return " ".join(f"{d}{j}.{c}" for d, j, c in order)


def test_the_orders_are_megatrons() -> None:
    s0, s1 = Stage(0, 2, 4, 2), Stage(1, 2, 4, 2)
    assert _text(SCHEDULE.worker_order(s0)) == (
        "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0"
    )
    assert _text(SCHEDULE.worker_order(s1)) == (
        "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0"
    )
    assert _text(SCHEDULE.worker_order(Stage(3, 4, 4, 2))) == (
        "F0.0 F1.0 F2.0 F3.0 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 B0.0 B1.0 B2.0 B3.0"
    )
    # stage 0 of p = 4, v = 2, m = 4 warms up with every unit (w = 10 >= 8)
    assert _text(SCHEDULE.worker_order(Stage(0, 4, 4, 2))) == (
        "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 B0.1 B1.1 B2.1 B3.1 B0.0 B1.0 B2.0 B3.0"
    )
    assert unit_table(4, 2, 2) == ((0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (3, 0), (2, 1), (3, 1))


def test_warmup_and_inflight_follow_megatron() -> None:
    assert [warmup_units(Stage(i, 4, 8, 2)) for i in range(4)] == [10, 8, 6, 4]
    assert [SCHEDULE.inflight_microbatches(Stage(i, 4, 8, 2)) for i in range(4)] == [11, 9, 7, 5]
    # stage 0 holds 11 chunks of 1/2 stage: 5.5 micro-batches' worth against 1F1B's 4
    assert SCHEDULE.inflight_microbatches(Stage(0, 4, 8, 2)) / 2 == 4 * (1 + 3 / 8)
    assert SCHEDULE.inflight_microbatches(Stage(0, 4, 4, 2)) == 8  # capped at m v
    assert SCHEDULE.waits_for(Unit("F", 4, 1), Stage(3, 4, 8, 2)) == (Unit("B", 3, 0),)
    assert SCHEDULE.waits_for(Unit("F", 0, 1), Stage(3, 4, 8, 2)) == ()
    assert SCHEDULE.waits_for(Unit("B", 4, 1), Stage(3, 4, 8, 2)) == ()


@pytest.mark.parametrize(("m", "s"), [(1, 1), (1, 4), (4, 1), (4, 4), (8, 4), (3, 5), (16, 3)])
def test_one_chunk_is_1f1b(m: int, s: int) -> None:
    for i in range(s):
        stage = Stage(i, s, m)
        assert SCHEDULE.worker_order(stage) == get("1f1b").worker_order(stage)
        assert SCHEDULE.inflight_microbatches(stage) == get("1f1b").inflight_microbatches(stage)


def _units(m: int, v: int) -> list[Unit]:
    return sorted(Unit(d, j, c) for j in range(m) for c in range(v) for d in ("F", "B"))


def _check(p: int, v: int, m: int) -> None:
    """Every invariant of every stage, and no deadlock across stages (the stages' orders plus the
    data dependencies between chunks form no cycle)."""
    built = {u: k for k, u in enumerate(SCHEDULE.build_order(m, v, p))}
    assert sorted(built) == _units(m, v)
    dag = nx.DiGraph()
    for i in range(p):
        stage = Stage(i, p, m, v)
        order = SCHEDULE.worker_order(stage)
        assert sorted(order) == _units(m, v)
        place = {u: k for k, u in enumerate(order)}
        assert all(place[Unit("F", j, c)] < place[Unit("B", j, c)] for j in range(m) for c in range(v))
        assert SCHEDULE.inflight_microbatches(stage) == peak_inflight(order)
        for unit in order:
            for other in SCHEDULE.waits_for(unit, stage):
                assert place[other] < place[unit] and built[other] < built[unit]
                assert other.direction == "B" and other.microbatch < unit.microbatch
        dag.add_edges_from(((i, a), (i, b)) for a, b in itertools.pairwise(order))
    last = p * v - 1
    for j in range(m):  # model chunk g = c p + i feeds g + 1 forward; gradients flow back
        chain = [(g % p, g // p) for g in range(p * v)]
        for g in range(last):
            (i, c), (i2, c2) = chain[g], chain[g + 1]
            dag.add_edge((i, Unit("F", j, c)), (i2, Unit("F", j, c2)))
            dag.add_edge((i2, Unit("B", j, c2)), (i, Unit("B", j, c)))
        i, c = chain[last]
        dag.add_edge((i, Unit("F", j, c)), (i, Unit("B", j, c)))
    assert nx.is_directed_acyclic_graph(dag)


@pytest.mark.parametrize(("p", "v", "m"), [(2, 2, 4), (4, 2, 8), (4, 3, 8), (3, 2, 6), (4, 2, 4), (8, 4, 16)])
def test_invariants_and_no_deadlock(p: int, v: int, m: int) -> None:
    _check(p, v, m)


@given(p=st.integers(1, 6), v=st.integers(1, 4), groups=st.integers(1, 4))
@settings(max_examples=60, deadline=None)
def test_invariants_hold_for_any_shape(p: int, v: int, groups: int) -> None:
    _check(p, v, p * groups)


def test_a_last_partial_group_is_refused() -> None:
    # the order a partial last group would get deadlocks (p = 5, v = 2, m = 7): refuse the shape
    with pytest.raises(PlanError, match="multiple of the 5 pipeline stages, got 7"):
        SCHEDULE.worker_order(Stage(0, 5, 7, 2))


def _step(p: int, v: int, m: int, forward_s: float, backward_s: float) -> float:
    """Every stage runs its order strictly; a chunk's forward takes ``forward_s / v``, its
    backward ``backward_s / v``; communication is free."""
    orders = [list(SCHEDULE.worker_order(Stage(i, p, m, v))) for i in range(p)]
    end: dict[tuple[int, Unit], float] = {}
    free = [0.0] * p
    pos = [0] * p
    while any(pos[i] < len(orders[i]) for i in range(p)):
        moved = False
        for i in range(p):
            if pos[i] == len(orders[i]):
                continue
            u = orders[i][pos[i]]
            g = u.chunk * p + i
            if u.direction == "F":
                dep = None if g == 0 else ((g - 1) % p, Unit("F", u.microbatch, (g - 1) // p))
            else:
                dep = (
                    (i, Unit("F", u.microbatch, u.chunk))
                    if g == p * v - 1
                    else ((g + 1) % p, Unit("B", u.microbatch, (g + 1) // p))
                )
            if dep is not None and dep not in end:
                continue
            start = max(free[i], end[dep] if dep else 0.0)
            free[i] = end[(i, u)] = start + (forward_s if u.direction == "F" else backward_s) / v
            pos[i] += 1
            moved = True
        assert moved
    return max(free)


@pytest.mark.parametrize(("p", "v", "m"), [(2, 2, 4), (4, 2, 8), (4, 4, 8), (8, 2, 16), (4, 1, 8)])
def test_the_bubble_is_p_minus_1_over_v_m(p: int, v: int, m: int) -> None:
    forward_s, backward_s = 1.0, 2.0
    ideal = m * (forward_s + backward_s)
    bubble = _step(p, v, m, forward_s, backward_s) / ideal - 1
    assert bubble == pytest.approx((p - 1) / (v * m), rel=1e-12)
