"""The engine's scalar and batched shortcuts against the general code they stand for: the busy
time the allocation cache books in one pass, a known route's id by scalars, one reduction booked
by scalars, the zero-stride columns a task-graph block leaves out."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.engine.allocator import AllocationCache
from parplan.engine.routes import RouteTable
from parplan.engine.streams import fifo_book, fifo_book_one
from parplan.taskgraph import COMPUTE, TaskGraphBuilder, constant
from tests.engine.nets import switch_network

GB = 1e9


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(st.integers(0, 3), min_size=1, max_size=4), st.floats(1e-9, 1e3)),
        min_size=1,
        max_size=12,
    )
)
def test_flush_books_what_one_increment_per_allocation_would(states: list[tuple[list[int], float]]) -> None:
    """One np.add.at over every allocation in cache order gives each channel the same terms in
    the same order, so the same bits, as the increment per allocation it replaced."""
    net = switch_network(4, bandwidth_Bps=1 * GB, latency_s=0.0)
    routes = RouteTable(net, net.devices)
    busy = np.zeros(routes.num_channels + 1)
    cache = AllocationCache(routes, busy, sharing=True)
    for senders, seconds in states:
        rids = routes.ids(np.array(senders), np.array([(s + 1) % 4 for s in senders]))
        cache.get(rids).busy_s += seconds
    expected = np.zeros_like(busy)
    for alloc in list(cache._cache.values()):
        if alloc.busy_s:
            expected[alloc.channels] += alloc.busy_s
    cache.flush_busy()
    assert busy.tobytes() == expected.tobytes()
    assert all(alloc.busy_s == 0.0 for alloc in cache._cache.values())


def test_a_known_route_id_by_scalars_is_the_batched_lookup() -> None:
    net = switch_network(4, bandwidth_Bps=1 * GB, latency_s=1e-6)
    routes = RouteTable(net, net.devices)
    src, dst = np.array([0, 1, 2, 3]), np.array([1, 2, 3, 0])
    rids = routes.ids(src, dst)
    for s, d, rid in zip(src.tolist(), dst.tolist(), rids.tolist(), strict=True):
        assert routes.id_of(s, d) == rid
        assert routes.ids(np.array([s]), np.array([d])).tolist() == [rid]
    assert routes.id_of(0, 2) == -1  # a pair not routed yet


@settings(max_examples=40, deadline=None)
@given(st.floats(0.0, 10.0), st.floats(0.0, 10.0), st.floats(0.0, 5.0))
def test_one_reduction_booked_by_scalars_is_fifo_book(free_s: float, now: float, dur_s: float) -> None:
    free_a, busy_a = np.array([0.0, free_s]), np.array([0.0, 0.25])
    free_b, busy_b = free_a.copy(), busy_a.copy()
    starts, ends = fifo_book(free_a, busy_a, np.array([7]), np.array([1]), np.array([dur_s]), now)
    start, end = fifo_book_one(free_b, busy_b, 1, dur_s, now)
    assert (starts.tolist(), ends.tolist()) == ([start], [end])
    assert free_a.tobytes() == free_b.tobytes() and busy_a.tobytes() == busy_b.tobytes()


def test_columns_a_block_leaves_out_are_their_defaults_read_only() -> None:
    b = TaskGraphBuilder(["a"])
    for _ in range(2):  # the second block of a size reuses the kept views
        n = 3
        first = b.num_tasks
        b.add_block(
            {"kind": constant(n, COMPUTE, np.int8), "seconds": np.ones(n)},
            np.array([0, 0, 1, 2], dtype=np.int64),  # a chain
            np.arange(first, first + n - 1, dtype=np.int64),
        )
    g = b.build()
    assert g.max_rate_Bps.tolist() == [float("inf")] * 6
    assert g.flops.tolist() == [0.0] * 6 and g.priority.tolist() == [0] * 6
    assert not g.flops.flags.writeable
    view = constant(5, 0.0, np.float64)
    assert (
        view.strides == (0,)
        and not view.flags.writeable
        and constant(5, -0.0, np.float64)[0].hex() == "-0x0.0p+0"
    )
