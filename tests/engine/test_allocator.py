"""Max-min fair rates by progressive filling, against first principles, and the allocation cache."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import parplan.engine.allocator as allocator
from parplan.engine.allocator import AllocationCache, max_min_rates
from parplan.engine.routes import RouteTable
from parplan.errors import SimulationError
from tests.engine.nets import chain_network, switch_network

GB = 1e9


def _padded(routes: list[list[int]], num_channels: int) -> np.ndarray:
    width = max(len(r) for r in routes)
    mat = np.full((len(routes), width), num_channels, dtype=np.int64)
    for i, r in enumerate(routes):
        mat[i, : len(r)] = r
    return mat


def _rates(routes: list[list[int]], counts: list[int], bw: list[float], sharing: bool = True) -> list[float]:
    bandwidth = np.array(bw)
    narrowest = np.array([min(bw[c] for c in r) for r in routes])
    rate, _, _ = max_min_rates(_padded(routes, len(bw)), np.array(counts), bandwidth, narrowest, sharing)
    return rate.tolist()


def _plain_filling(routes: list[list[int]], counts: list[int], bw: list[float]) -> list[float]:
    """One object per flow, every channel re-examined each round: the textbook algorithm."""
    flows = [r for r, c in zip(routes, counts, strict=True) for _ in range(c)]
    cap = list(bw)
    rate = [0.0] * len(flows)
    unfrozen = set(range(len(flows)))
    while unfrozen:
        users = {c: sum(1 for f in unfrozen if c in flows[f]) for f in unfrozen for c in flows[f]}
        share = min(cap[c] / k for c, k in users.items())
        full = {c for c, k in users.items() if cap[c] / k <= share * (1 + 1e-12)}
        for f in [f for f in unfrozen if full & set(flows[f])]:
            rate[f] = share
            for c in flows[f]:
                cap[c] -= share
            unfrozen.discard(f)
    per_route, i = [], 0
    for c in counts:
        per_route.append(rate[i])
        i += c
    return per_route


def test_textbook_example() -> None:
    # L0 (1 GB/s) and L1 (2 GB/s) in a line; A crosses both, B only L0, C only L1.
    assert _rates([[0, 1], [0], [1]], [1, 1, 1], [1 * GB, 2 * GB]) == pytest.approx([0.5e9, 0.5e9, 1.5e9])


def test_flows_on_one_route_share_it_and_count_on_its_channels() -> None:
    # Three flows on route 0 and one on route 1 share channel 0: a quarter each.
    assert _rates([[0, 1], [0]], [3, 1], [4 * GB, 10 * GB]) == pytest.approx([1e9, 1e9])
    # Route 2 shares nothing: its two flows split its narrowest channel.
    rates = _rates([[0], [0], [2, 3]], [1, 1, 2], [4 * GB, 1, 6 * GB, 3 * GB])
    assert rates == pytest.approx([2e9, 2e9, 1.5e9])


def test_without_sharing_or_contention_each_flow_gets_its_narrowest_link() -> None:
    routes, bw = [[0, 1], [0]], [1 * GB, 2 * GB]
    assert _rates(routes, [1, 1], bw, sharing=False) == [1 * GB, 1 * GB]
    narrowest = np.array([1 * GB, 1 * GB])
    _, used, shared = max_min_rates(_padded([[0], [1]], 2), np.array([1, 1]), np.array(bw), narrowest)
    assert used.tolist() == [0, 1] and not shared
    _, _, shared = max_min_rates(_padded([[0], [1]], 2), np.array([2, 1]), np.array(bw), narrowest)
    assert shared


def test_a_channel_without_capacity_is_an_error() -> None:
    with pytest.raises(SimulationError, match="no capacity"):
        _rates([[0], [0, 1]], [1, 1], [1 * GB, 0.0])


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    num_channels=st.integers(1, 6),
    num_routes=st.integers(1, 6),
)
def test_progressive_filling_matches_the_textbook(
    data: st.DataObject, num_channels: int, num_routes: int
) -> None:
    channels = st.lists(st.integers(0, num_channels - 1), min_size=1, max_size=num_channels)
    routes = [sorted(set(data.draw(channels))) for _ in range(num_routes)]
    counts = data.draw(st.lists(st.integers(1, 3), min_size=num_routes, max_size=num_routes))
    bw = data.draw(st.lists(st.floats(0.5e9, 4e9), min_size=num_channels, max_size=num_channels))
    got = _rates(routes, counts, bw)
    assert got == pytest.approx(_plain_filling(routes, counts, bw), rel=1e-9)
    # Feasible, and every route has a saturated channel on which no flow gets more (max-min).
    on = list(zip(got, counts, routes, strict=True))
    load = [sum(r * c for r, c, route in on if ch in route) for ch in range(len(bw))]
    assert all(load[ch] <= bw[ch] * (1 + 1e-9) for ch in range(len(bw)))
    for r, route in zip(got, routes, strict=True):
        assert any(
            load[ch] >= bw[ch] * (1 - 1e-9)
            and all(r >= o * (1 - 1e-9) for o, other in zip(got, routes, strict=True) if ch in other)
            for ch in route
        )


def _table() -> RouteTable:
    net = switch_network(4, bandwidth_Bps=1 * GB, latency_s=0.0)
    return RouteTable(net, net.devices)


def test_cache_hits_on_the_same_counts_per_route() -> None:
    routes = _table()
    busy = np.zeros(routes.num_channels + 1)
    rids = routes.ids(np.array([0, 1, 2, 0]), np.array([3, 3, 3, 1]))
    cache = AllocationCache(routes, busy, sharing=True)
    first = cache.get(rids)
    assert cache.get(rids[::-1].copy()) is first  # the same multiset of routes
    assert len(cache) == 1
    # Three flows into h3 share sw0->h3 (1 GB/s); h0->h1 gets what h0->h3 leaves of h0->sw0.
    assert first.route_rate_Bps[rids].tolist() == pytest.approx([GB / 3] * 3 + [2 * GB / 3])
    assert first.shared
    other = cache.get(rids[:1])
    assert other is not first and not other.shared and len(cache) == 2


def test_sparse_keys_and_an_emptied_cache_give_the_same_allocations(monkeypatch: pytest.MonkeyPatch) -> None:
    routes = _table()
    rids = routes.ids(np.array([0, 1, 2, 2, 0]), np.array([3, 3, 3, 1, 2]))
    dense = AllocationCache(routes, np.zeros(routes.num_channels + 1), sharing=True).get(rids)
    monkeypatch.setattr(allocator, "_DENSE_KEY_ROUTES", 0)
    sparse = AllocationCache(routes, np.zeros(routes.num_channels + 1), sharing=True).get(rids)
    assert sparse.key != dense.key and sparse.key.startswith(b"s")
    np.testing.assert_array_equal(sparse.route_rate_Bps, dense.route_rate_Bps)
    np.testing.assert_array_equal(sparse.channels, dense.channels)


def test_busy_time_is_booked_on_the_channels_in_use_when_the_cache_is_emptied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    routes = _table()
    busy = np.zeros(routes.num_channels + 1)
    cache = AllocationCache(routes, busy, sharing=True)
    rids = routes.ids(np.array([0]), np.array([1]))
    alloc = cache.get(rids)
    alloc.busy_s = 2.5
    monkeypatch.setattr(allocator, "_ALLOC_CACHE_BYTES", 0)
    cache.get(routes.ids(np.array([2]), np.array([3])))  # a miss past the limit: flush, then empty
    assert len(cache) == 1 and alloc.busy_s == 0.0
    expected = np.zeros_like(busy)
    expected[alloc.channels] = 2.5
    np.testing.assert_array_equal(busy, expected)
    cache.flush_busy()  # nothing left to book
    np.testing.assert_array_equal(busy, expected)


def test_chain_routes_use_their_narrowest_channel() -> None:
    net = chain_network([4 * GB, 1 * GB], [0.0, 0.0])
    routes = RouteTable(net, net.devices)
    rids = routes.ids(np.array([0, 1]), np.array([2, 2]))
    alloc = AllocationCache(routes, np.zeros(routes.num_channels + 1), sharing=True).get(rids)
    # Both cross d1->d2 (1 GB/s).
    assert alloc.route_rate_Bps[rids].tolist() == pytest.approx([0.5e9, 0.5e9])


def _compacted_rates(
    route_channels: np.ndarray,
    counts: np.ndarray,
    bandwidth_Bps: np.ndarray,
    narrowest_Bps: np.ndarray,
    sharing: bool = True,
    pair_weight: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, bool]:
    """The allocator before it worked in the network's channel numbering (np.unique compacted
    the channels in use): the bit-for-bit oracle."""
    nr = len(route_channels)
    num_ch = len(bandwidth_Bps)
    pc = route_channels.ravel()
    real = pc < num_ch
    used, pcl = np.unique(pc[real], return_inverse=True)
    nu = len(used)
    pr = np.repeat(np.arange(nr), route_channels.shape[1])[real]
    weight = counts[pr].astype(np.float64)  # flows of each (route, channel) pair
    pw = None if pair_weight is None else pair_weight.ravel()[real]
    if pw is not None:
        weight *= pw
    n_on = np.bincount(pcl, weights=weight, minlength=nu)  # flows per channel
    shared = bool(n_on.max() >= 2)
    if not shared or not sharing:
        return narrowest_Bps, used, shared
    # A route that shares none of its channels with another route is a component of its
    # own: its flows split its narrowest channel evenly (what filling would give it).
    rate = np.empty(nr)
    crowded = np.bincount(pcl, minlength=nu)[pcl] > 1  # pairs on a channel other routes use
    if pw is not None:
        crowded |= pw > 1.0  # an orbit's translates share the channel among themselves
    alone = np.bincount(pr[crowded], minlength=nr) == 0
    if alone.any():
        rate[alone] = narrowest_Bps[alone] / counts[alone]
        if not rate[alone].min() > 0:
            raise SimulationError("progressive filling found a channel with no capacity left")
        if alone.all():
            return rate, used, shared
    _compacted_fill(rate, ~alone, bandwidth_Bps[used], n_on, pr, pcl, weight)
    return rate, used, shared


def _compacted_fill(
    rate: np.ndarray,
    unfrozen: np.ndarray,
    cap: np.ndarray,
    n_on: np.ndarray,
    pr: np.ndarray,
    pcl: np.ndarray,
    weight: np.ndarray,
) -> None:
    nr, nu = len(rate), len(cap)
    frozen = ~unfrozen
    if frozen.any():
        frozen_pair = frozen[pr]
        cap[pcl[frozen_pair]] = math.inf
        n_on[pcl[frozen_pair]] = 1.0
        keep = ~frozen_pair
        pr, pcl, weight = pr[keep], pcl[keep], weight[keep]
    while True:
        share = cap / n_on
        m = float(share.min())
        if not m > 0:
            raise SimulationError("progressive filling found a channel with no capacity left")
        hit = np.zeros(nr, dtype=bool)
        hit[pr[(share <= m * (1.0 + allocator._SHARE_REL))[pcl]]] = True
        hit &= unfrozen
        rate[hit] = m
        unfrozen ^= hit
        if not unfrozen.any():
            return
        pair_hit = hit[pr]
        frozen_flows = np.bincount(pcl[pair_hit], weights=weight[pair_hit], minlength=nu)
        cap -= frozen_flows * m
        n_on -= frozen_flows
        np.maximum(cap, 0.0, out=cap)
        done = n_on <= 0.0
        cap[done] = math.inf
        n_on[done] = 1.0


@settings(max_examples=80, deadline=None)
@given(data=st.data(), num_channels=st.integers(2, 12), num_routes=st.integers(2, 8), weighted=st.booleans())
def test_filling_in_network_numbering_has_the_bits_of_the_compacted_one(
    data: st.DataObject, num_channels: int, num_routes: int, weighted: bool
) -> None:
    # Routes over a few of many channels (most channels out of use), some sharing: every route
    # gets exactly the bits (and the channels in use) of filling over the channels in use alone.
    channels = st.lists(st.integers(0, num_channels - 1), min_size=1, max_size=3, unique=True)
    routes = [sorted(data.draw(channels)) for _ in range(num_routes)]
    counts = np.array(data.draw(st.lists(st.integers(1, 4), min_size=num_routes, max_size=num_routes)))
    bw = np.array(
        data.draw(
            st.lists(st.sampled_from([1e9, 3e9, 25e9, 300e9]), min_size=num_channels, max_size=num_channels)
        )
    )
    mat = _padded(routes, num_channels)
    weights = None
    if weighted:
        weights = np.where(
            mat < num_channels,
            np.array(
                data.draw(st.lists(st.sampled_from([1.0, 2.0]), min_size=mat.size, max_size=mat.size))
            ).reshape(mat.shape),
            0.0,
        )
    narrowest = np.array([bw[r].min() for r in routes])
    rate, used, shared = max_min_rates(mat, counts, bw, narrowest, True, weights)
    assert used.tolist() == sorted({c for r in routes for c in r})
    oracle, oracle_used, oracle_shared = _compacted_rates(mat, counts, bw, narrowest, True, weights)
    assert (
        rate.tolist() == oracle.tolist() and used.tolist() == oracle_used.tolist() and shared == oracle_shared
    )


@settings(max_examples=60, deadline=None)
@given(data=st.data(), num_routes=st.integers(1, 6))
def test_routes_sharing_no_channel_get_what_filling_gives(data: st.DataObject, num_routes: int) -> None:
    # The cache skips filling when no channel carries two of the routes in use: each route's
    # flows split its narrowest channel. The rates, channels and sharing flag are filling's bits.
    routes = _table()
    pairs = [(s, d) for s in range(4) for d in range(4) if s != d]
    chosen = data.draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=num_routes))
    counts = data.draw(st.lists(st.integers(1, 3), min_size=len(chosen), max_size=len(chosen)))
    src = np.repeat([s for s, _ in chosen], counts)
    dst = np.repeat([d for _, d in chosen], counts)
    rids = routes.ids(src, dst)
    for sharing in (True, False):
        alloc = AllocationCache(routes, np.zeros(routes.num_channels + 1), sharing=sharing).get(rids)
        per_route = np.bincount(rids)
        used = per_route.nonzero()[0]
        rate, channels, shared = max_min_rates(
            routes.channels[used], per_route[used], routes.bandwidth_Bps, routes.narrowest_Bps[used], sharing
        )
        assert alloc.route_rate_Bps[used].tolist() == rate.tolist()
        assert alloc.channels.tolist() == channels.tolist() and alloc.shared == shared
