"""Multi-channel ring all-reduce: the ring layouts, exact results and volumes, and the effect the
channels exist for, measured by the engine on two DGX A100 nodes (8 NICs per node)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.collectives.registry import build_schedule
from parplan.collectives.ring import (
    AUTO_CHANNEL_STEP_BUDGET,
    ring_all_reduce,
    ring_channels,
    ring_orders,
)
from parplan.collectives.schedule import chunk_bounds
from parplan.collectives.volumes import allreduce_total_lower_bound, ring_traffic
from parplan.errors import CollectiveError
from tests.collectives.cases import SEEDS, inputs, random_groups, run_and_check, sizes

DGX = Path(__file__).resolve().parents[2] / "sample_configs" / "clusters" / "dgx-a100-2nodes.yaml"


def _node_groups(nodes: int, per_node: int) -> list[list[int]]:
    return [list(range(i * per_node, (i + 1) * per_node)) for i in range(nodes)]


def _channel_of(schedule_offsets: np.ndarray, channel_bounds: object) -> np.ndarray:
    """The channel of each step, from the ``channel_bounds`` a ring schedule records in its meta."""
    return np.searchsorted(np.asarray(channel_bounds), schedule_offsets, side="right") - 1


# -- layouts ------------------------------------------------------------------------------------


def test_orders_keep_nodes_together_and_leave_each_node_through_every_device() -> None:
    nodes, m = 3, 8
    groups = _node_groups(nodes, m)
    orders = ring_orders(nodes * m, m, groups)
    # Channel 0 of contiguous nodes: the plain ring with every other node visited backwards.
    assert orders[0] == [*range(0, 8), *range(15, 7, -1), *range(16, 24)]
    node_of = {r: i for i, g in enumerate(groups) for r in g}
    exits: list[set[int]] = [set() for _ in range(nodes)]
    entries: list[set[int]] = [set() for _ in range(nodes)]
    for order in orders:
        assert sorted(order) == list(range(nodes * m))
        hops = list(zip(order, order[1:] + order[:1], strict=True))
        crossing = [(a, b) for a, b in hops if node_of[a] != node_of[b]]
        assert len(crossing) == nodes  # each node is entered and left exactly once per ring
        for a, b in crossing:
            exits[node_of[a]].add(a)
            entries[node_of[b]].add(b)
        # Between nodes i and i+1 the ring stays on one local index (one rail); only the
        # wrap-around of an odd number of nodes changes it.
        same_rail = [a % m == b % m for a, b in crossing if node_of[b] == node_of[a] + 1]
        assert len(same_rail) == nodes - 1 and all(same_rail)
    for i in range(nodes):  # m channels leave (and enter) every node through all m devices
        assert exits[i] == set(groups[i]) and entries[i] == set(groups[i])


def test_orders_without_groups_or_with_singletons_are_the_plain_ring() -> None:
    assert ring_orders(5, 3) == [[0, 1, 2, 3, 4]] * 3
    assert ring_orders(4, 2, [[0], [1], [2], [3]]) == [[0, 1, 2, 3]] * 2
    assert ring_orders(4, 1, [[3], [1], [0], [2]]) == [[3, 1, 0, 2]]  # groups in the order given


def test_automatic_channel_count() -> None:
    eight = _node_groups(2, 8)
    assert ring_channels(16, None, eight) == 8
    assert ring_channels(16, None, None) == 1
    assert ring_channels(16, None, [[r] for r in range(16)]) == 1
    assert ring_channels(9, None, [[0, 1, 2, 3], [4, 5, 6, 7], [8]]) == 4  # the largest node
    assert ring_channels(16, 3, eight) == 3  # an explicit count wins
    # The automatic count never builds more than the budget of steps (one ring at p = 4096).
    assert ring_channels(1024, None, _node_groups(128, 8)) == 8
    assert ring_channels(2048, None, _node_groups(256, 8)) == 4
    assert ring_channels(4096, None, _node_groups(512, 8)) == 1
    for p in (1024, 2048, 4096):
        c = ring_channels(p, None, _node_groups(p // 8, 8))
        assert c * 2 * (p - 1) * p <= AUTO_CHANNEL_STEP_BUDGET
    with pytest.raises(CollectiveError, match="channels must be >= 1"):
        ring_all_reduce(4, 8, channels=0)


def test_one_channel_on_contiguous_nodes_is_the_plain_ring_on_its_order() -> None:
    """One grouped channel is the plain ring relabelled by its order (every other node backwards):
    the same steps, dependencies and chunks, on the ranks of :func:`ring_orders`."""
    p, n = 16, 16 * 7 + 3
    plain = ring_all_reduce(p, n)
    grouped = build_schedule("ring:1", p, n, groups=_node_groups(2, 8))
    order = np.asarray(ring_orders(p, 1, _node_groups(2, 8))[0])
    assert order.tolist() == [*range(8), *range(15, 7, -1)]
    np.testing.assert_array_equal(grouped.src, order[plain.src])
    np.testing.assert_array_equal(grouped.dst, order[plain.dst])
    for name in ("offset", "length", "reduce", "phase", "dep_offsets", "dep_indices"):
        np.testing.assert_array_equal(getattr(grouped, name), getattr(plain, name))


def test_channel_structure_at_256_ranks() -> None:
    """Vectorised checks where the data plane does not reach: 8 rings of 256 ranks on 32 nodes."""
    nodes, m = 32, 8
    p, n, c = nodes * m, 10**6 + 11, 8
    s = build_schedule("ring", p, n, groups=_node_groups(nodes, m))
    s.validate()
    per_ring = 2 * (p - 1) * p
    assert s.meta["channels"] == c and s.num_steps == c * per_ring
    assert s.dep_counts.max() == 1  # one dependency per step, as in one ring
    channel = _channel_of(s.offset, s.meta["channel_bounds"])
    np.testing.assert_array_equal(channel, np.arange(s.num_steps) // per_ring)  # rings one after another
    bounds = np.asarray(s.meta["channel_bounds"])
    assert (s.offset + s.length <= bounds[channel + 1]).all()  # no step strays out of its part
    # A dependency stays inside its ring and forwards what the left neighbour received.
    later = np.flatnonzero(s.dep_counts == 1)
    dep = s.dep_indices
    np.testing.assert_array_equal(channel[dep], channel[later])
    np.testing.assert_array_equal(s.dst[dep], s.src[later])
    # Each ring: its sends follow its rank order; 32 node crossings, each from a different device.
    rings = np.asarray(s.meta["rings"])
    for k in range(c):
        ring = np.asarray(rings[k])
        first = s.src[k * per_ring : k * per_ring + p]
        np.testing.assert_array_equal(first, ring)
        np.testing.assert_array_equal(s.dst[k * per_ring : k * per_ring + p], np.roll(ring, -1))
        leaving = first[(first // m) != (np.roll(ring, -1) // m)]
        # Even nodes are left through member k-1 (visited forwards from k), odd ones through k.
        expected = np.where(np.arange(nodes) % 2 == 0, (k - 1) % m, k % m)
        np.testing.assert_array_equal(leaving % m, expected)
    # Every device sends the same: 2 (p-1)/p n up to chunk rounding (8 rings x 2 chunks).
    sent = np.bincount(s.src, weights=s.length, minlength=p)
    assert np.abs(sent - 2 * (p - 1) / p * n).max() <= 2 * c
    assert int(s.length.sum()) == 2 * (p - 1) * n


# -- exact results, exact dependencies, volumes ---------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_channels_exact_sums_and_volumes(data: st.DataObject) -> None:
    p, n = data.draw(sizes(max_ranks=20))
    groups = data.draw(st.one_of(st.none(), random_groups(p)))
    limit = max(1, 12_000 // max(1, 2 * (p - 1) * p))
    channels = data.draw(st.integers(1, min(6, limit)))
    schedule = ring_all_reduce(p, n, channels=channels, groups=groups)
    assert schedule.meta["channels"] == channels
    dtype = data.draw(st.sampled_from([np.int64, np.uint8, np.int32]))
    arrays = inputs(data.draw(SEEDS), p, n, dtype)
    result = run_and_check(schedule, arrays)  # exact sums; exact deps; contributions once; no races
    assert result.race_checked
    sent, received = ring_traffic(p, n, channels=channels, groups=groups)
    item = np.dtype(dtype).itemsize
    np.testing.assert_array_equal(result.bytes_sent, sent * item)
    np.testing.assert_array_equal(result.bytes_received, received * item)
    assert result.bytes_sent.sum() == allreduce_total_lower_bound(p, n) * item
    if p > 1:  # 2 (p-1)/p n per rank, up to the rounding of channels x chunks
        per_rank = 2 * (p - 1) / p * n
        assert np.abs(sent - per_rank).max() <= 2 * channels
        assert np.abs(received - per_rank).max() <= 2 * channels
        if n % (channels * p) == 0:
            assert (sent == 2 * (p - 1) * n // p).all() and (received == sent).all()


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_auto_channels_through_the_registry(data: st.DataObject) -> None:
    p = data.draw(st.integers(1, 12))
    n = data.draw(st.integers(0, 5 * p))
    groups = data.draw(random_groups(p))
    schedule = build_schedule("ring", p, n, groups=groups)
    assert schedule.meta["channels"] == max(len(g) for g in groups)
    run_and_check(schedule, inputs(data.draw(SEEDS), p, n, np.int64))


def test_empty_channels_are_dropped() -> None:
    s = ring_all_reduce(4, 3, channels=5)  # parts of 1, 1, 1, 0, 0 elements
    assert s.meta["channel_bounds"] == tuple(chunk_bounds(3, 5).tolist())
    assert (s.length > 0).all()
    run_and_check(s, [np.arange(3) + r for r in range(4)])


# -- the effect, end to end ---------------------------------------------------------------------


def test_channels_use_every_nic_of_a_dgx_pair() -> None:
    """1 GiB over 16 A100s on 2 DGX nodes: one ring leaves each node through one 25 GB/s NIC
    (busbw ~25 GB/s); one ring per GPU spreads the traffic over all 8 NICs (nccl-tests reports
    ~180-190 GB/s here), bounded by 8 x 25 GB/s."""
    from parplan.config.loader import load_cluster
    from parplan.engine.result import bus_bandwidth
    from parplan.engine.simulate import simulate
    from parplan.plan.collective import collective_taskgraph
    from parplan.topology.build import build_network
    from parplan.topology.placement import groups_by_node

    net = build_network(load_cluster(DGX))
    devices = list(net.devices)
    p, size, element = len(devices), 1 << 30, 4
    groups = groups_by_node(net, devices)
    assert p == 16 and [len(g) for g in groups] == [8, 8]
    busbw = {}
    for spec in ("ring:1", "ring"):
        schedule = build_schedule(spec, p, size // element, groups=groups)
        t = simulate(collective_taskgraph(schedule, devices, element), net).makespan_s
        busbw[spec] = bus_bandwidth(size, t, p)
    nic_Bps = 25e9
    assert 0.95 * nic_Bps < busbw["ring:1"] <= nic_Bps
    assert 0.95 * 8 * nic_Bps < busbw["ring"] <= 8 * nic_Bps
    assert busbw["ring"] > 7.5 * busbw["ring:1"]
