"""Route ids on their own: dense and sparse lookups agree, routes are padded rows, bad routes fail."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import parplan.engine.routes as routes_module
from parplan.engine.routes import RouteTable
from parplan.errors import SimulationError, TopologyError
from tests.engine.nets import chain_network, leaf_spine_network

GB = 1e9


def test_routes_are_padded_rows_with_their_latency_and_narrowest_link() -> None:
    net = chain_network([4 * GB, 1 * GB, 2 * GB], [1e-6, 2e-6, 3e-6])
    routes = RouteTable(net, net.devices)
    rids = routes.ids(np.array([0, 0, 3]), np.array([1, 3, 1]))
    assert rids.tolist() == [0, 1, 2]  # new routes in (src, dst) order
    assert routes.channels.shape == (3, 3) and routes.padded
    assert routes.channels[0].tolist() == [0, routes.num_channels, routes.num_channels]
    assert routes.latency_s.tolist() == pytest.approx([1e-6, 6e-6, 5e-6])
    assert routes.narrowest_Bps.tolist() == [4 * GB, 1 * GB, 1 * GB]
    # Known pairs keep their ids; a new pair gets the next one.
    assert routes.ids(np.array([3, 1, 0]), np.array([1, 0, 1])).tolist() == [2, 3, 0]
    assert routes.num_routes == 4


@settings(max_examples=25, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11)).filter(lambda p: p[0] != p[1])))
def test_dense_and_sparse_lookups_agree(pairs: list[tuple[int, int]]) -> None:
    net = leaf_spine_network(12, 4, 2)
    src = np.array([p[0] for p in pairs], dtype=np.int64)
    dst = np.array([p[1] for p in pairs], dtype=np.int64)
    dense = RouteTable(net, net.devices)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(routes_module, "_DENSE_ROUTE_TABLE", 0)
        sparse = RouteTable(net, net.devices)
        half = len(pairs) // 2
        sparse.ids(src[:half], dst[:half])  # in two batches: new keys merge into sorted ones
        got = sparse.ids(src, dst)
    dense.ids(src[:half], dst[:half])
    np.testing.assert_array_equal(got, dense.ids(src, dst))
    np.testing.assert_array_equal(sparse.channels, dense.channels)
    np.testing.assert_array_equal(sparse.latency_s, dense.latency_s)
    for rid, (s, d) in zip(got.tolist(), pairs, strict=True):
        channels, latency = net.route(net.devices[s], net.devices[d])
        row = sparse.channels[rid]
        assert row[row < sparse.num_channels].tolist() == channels.tolist()
        assert sparse.latency_s[rid] == latency


@settings(max_examples=25, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11)).filter(lambda p: p[0] != p[1])))
def test_one_pair_at_a_time_gives_the_batch_ids(pairs: list[tuple[int, int]]) -> None:
    """The scalar path for one-transfer batches finds the ids (and routes them in the order) a
    whole batch does."""
    net = leaf_spine_network(12, 4, 2)
    batch, single = RouteTable(net, net.devices), RouteTable(net, net.devices)
    for s, d in pairs:
        batch.ids(np.array([s, s]), np.array([d, d]))  # two at once: the array path
        assert single.ids(np.array([s]), np.array([d])).dtype == np.int64
    np.testing.assert_array_equal(single.channels, batch.channels)
    src = np.array([p[0] for p in pairs], dtype=np.int64)
    dst = np.array([p[1] for p in pairs], dtype=np.int64)
    one = [int(single.ids(src[i : i + 1], dst[i : i + 1])[0]) for i in range(len(pairs))]
    assert one == batch.ids(src, dst).tolist()


def test_graph_devices_map_onto_network_devices() -> None:
    net = chain_network([1 * GB, 2 * GB], [0.0, 0.0])
    routes = RouteTable(net, ("d2", "d0"))  # graph device 0 is the network's d2
    rid = routes.ids(np.array([1]), np.array([0]))
    assert routes.narrowest_Bps[rid].tolist() == [1 * GB]
    assert routes.channels[rid[0]].tolist() == [
        net.channel_names.index("d0->d1"),
        net.channel_names.index("d1->d2"),
    ]


def test_unknown_devices_and_routes_without_links_fail() -> None:
    net = chain_network([1 * GB], [0.0])
    with pytest.raises(TopologyError, match="nope"):
        RouteTable(net, ("d0", "nope"))
    with pytest.raises(SimulationError, match="crosses no link"):
        RouteTable(net, net.devices).ids(np.array([0]), np.array([0]))
