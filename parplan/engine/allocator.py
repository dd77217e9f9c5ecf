"""Max-min fair rates for the flows on the network, and the cache that makes them cheap to look up.

:func:`max_min_rates` is progressive filling: raise every unfrozen flow's rate together until a
channel saturates, freeze the flows crossing it, repeat. Flows on one route cross the same
channels, so they freeze together at one rate: the allocation is a function of how many flows
each route carries. :class:`AllocationCache` memoises it on that count vector, which in a
collective's steady state takes few distinct values (the 8-channel rings of
sample_configs/scenarios/dp-algorithms.yaml make 92,000 recomputations of 7,000 distinct states).
Each cached :class:`Allocation` also accrues the time it was in force, booked on its channels
when the cache is emptied or the run ends (:meth:`AllocationCache.flush_busy`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt

from parplan.engine.arrays import FloatArray, IntArray, largest, smallest
from parplan.engine.routes import RouteTable
from parplan.errors import SimulationError

# Channels whose fair share is within this factor of the smallest saturate together.
_SHARE_REL = 1e-12
# Cache keys list the count of every route id up to the largest in use while that is this short,
# else only the routes in use.
_DENSE_KEY_ROUTES = 512
# Memoised allocations are dropped past this size.
_ALLOC_CACHE_BYTES = 64 << 20
# Sets of routes remembered as sharing no channel (or not), at most.
_APART_ENTRIES = 1 << 16


@dataclass(slots=True)
class Allocation:
    """The allocation for one multiset of moving flows' routes (its cache key).

    ``route_rate_Bps[r]`` is the rate of each flow on route id ``r``; ``channels`` are the channels
    in use; ``shared`` tells whether any channel carries two flows or more. ``busy_s`` is the time
    this allocation has been in force and not yet booked on its channels.
    """

    key: bytes
    route_rate_Bps: FloatArray
    channels: IntArray
    shared: bool
    busy_s: float = 0.0

    @property
    def nbytes(self) -> int:
        """Memory held, roughly: the arrays, the key and ~500 bytes of Python objects."""
        return len(self.key) + self.route_rate_Bps.nbytes + self.channels.nbytes + 500


def max_min_rates(
    route_channels: IntArray,
    counts: IntArray,
    bandwidth_Bps: FloatArray,
    narrowest_Bps: FloatArray,
    sharing: bool = True,
    pair_weight: FloatArray | None = None,
) -> tuple[FloatArray, IntArray, bool]:
    """Max-min fair rate of each flow on routes carrying ``counts`` flows each.

    ``route_channels`` holds each route's channels (one row per route, padded with the dummy
    channel ``len(bandwidth_Bps)``), ``narrowest_Bps`` each route's narrowest bandwidth. Returns
    the rate per route, the channels in use (sorted) and whether any carries two flows or more.
    Without ``sharing``, or when no channel is shared, each flow gets its narrowest link.

    ``pair_weight`` (shaped like ``route_channels``; None: all 1) is how many flows each flow of
    a route stands for on each of its channels: in a symmetric run (:mod:`parplan.engine.symmetry`)
    a route is an orbit of routes and a channel an orbit of channels, and each flow of the orbit
    loads each channel of a channel orbit ``weight`` times. A route with a weight above 1 is
    filled like one that shares its channels with others (as its translates do in the full run).

    >>> # Links of 1 and 2 GB/s in a line: A crosses both, B the first, C the second.
    >>> rate, used, shared = max_min_rates(
    ...     np.array([[0, 1], [0, 2], [1, 2]]), np.array([1, 1, 1]), np.array([1e9, 2e9]), np.array([1e9] * 3)
    ... )
    >>> rate.tolist(), used.tolist(), shared
    ([500000000.0, 500000000.0, 1500000000.0], [0, 1], True)
    """
    nr = len(route_channels)
    num_ch = len(bandwidth_Bps)
    # Channels are indexed in the network's own numbering (no np.unique to compact them: the
    # arrays over every channel are short, and the sums per channel add the same terms in the
    # same order, so the rates have the bits a compacted numbering gives).
    pc = route_channels.ravel()
    real = pc < num_ch
    pcl = pc[real]
    pr = np.repeat(np.arange(nr), route_channels.shape[1])[real]
    weight = counts[pr].astype(np.float64)  # flows of each (route, channel) pair
    pw = None if pair_weight is None else pair_weight.ravel()[real]
    if pw is not None:
        weight *= pw
    n_on = cast(FloatArray, np.bincount(pcl, weights=weight, minlength=num_ch))  # flows per channel
    pairs_on = np.bincount(pcl, minlength=num_ch)  # routes per channel
    used = np.flatnonzero(pairs_on)
    shared = bool(n_on.max() >= 2)
    if not shared or not sharing:
        return narrowest_Bps, used, shared
    # A route that shares none of its channels with another route is a component of its
    # own: its flows split its narrowest channel evenly (what filling would give it).
    rate = np.empty(nr)
    crowded = pairs_on[pcl] > 1  # pairs on a channel other routes use
    if pw is not None:
        crowded |= pw > 1.0  # an orbit's translates share the channel among themselves
    alone = np.bincount(pr[crowded], minlength=nr) == 0
    if alone.any():
        rate[alone] = narrowest_Bps[alone] / counts[alone]
        if not rate[alone].min() > 0:
            raise SimulationError("progressive filling found a channel with no capacity left")
        if alone.all():
            return rate, used, shared
    idle = pairs_on == 0  # channels out of use drop out of the minimum
    cap = np.where(idle, math.inf, bandwidth_Bps)
    n_on[idle] = 1.0
    _fill(rate, ~alone, cap, n_on, pr, pcl, weight)
    return rate, used, shared


def _fill(
    rate: FloatArray,
    unfrozen: npt.NDArray[np.bool_],
    cap: FloatArray,
    n_on: FloatArray,
    pr: IntArray,
    pcl: IntArray,
    weight: FloatArray,
) -> None:
    """Progressive filling of the ``unfrozen`` routes' rates (in place) over the channels.

    (route, channel) pairs are ``pr``/``pcl`` with ``weight`` flows each; channel ``c`` has
    capacity ``cap[c]`` and ``n_on[c]`` flows. Each round, the smallest fair share among channels
    with unfrozen flows saturates its channels and their flows freeze at it. Channels without
    unfrozen flows (those out of use, those of lone routes from the start) get an infinite
    capacity and one flow, so that they drop out of the minimum.
    """
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
        hit[pr[(share <= m * (1.0 + _SHARE_REL))[pcl]]] = True
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


@dataclass(frozen=True, slots=True)
class _Apart:
    """A set of routes no two of which share a channel: their channels (sorted) and narrowest
    bandwidths, and whether those are large enough that no split among flows rounds to 0."""

    channels: IntArray
    narrowest_Bps: FloatArray
    divisible: bool


# A memo miss (None is an answer: the routes share a channel).
_UNSEEN = _Apart(np.zeros(0, dtype=np.int64), np.zeros(0), False)
_DIVISIBLE_BPS = 1e-280
"""Bandwidths above this stay > 0 split among any number of flows a run can hold (< 1e15)."""


def _apart_rates(
    counts: IntArray, apart: _Apart, shared: bool, sharing: bool
) -> tuple[FloatArray, IntArray, bool]:
    """:func:`max_min_rates` of routes no two of which share a channel, ``counts`` flows each
    (``shared``: some route carries two or more): each route's flows split its narrowest channel
    evenly, the same divisions filling makes."""
    if not shared or not sharing:
        return apart.narrowest_Bps, apart.channels, shared
    rate: FloatArray = apart.narrowest_Bps / counts
    if not apart.divisible and not smallest(rate) > 0:
        raise SimulationError("progressive filling found a channel with no capacity left")
    return rate, apart.channels, shared


class AllocationCache:
    """Allocations by the number of moving flows per route, for one run.

    Busy time that cached allocations accrue is booked on ``channel_busy_s`` (per channel, with
    the padding channel last) by :meth:`flush_busy`, which runs before the cache is emptied.
    """

    def __init__(self, routes: RouteTable, channel_busy_s: FloatArray, *, sharing: bool) -> None:
        self.routes = routes
        self.channel_busy_s = channel_busy_s
        self.sharing = sharing
        self._cache: dict[bytes, Allocation] = {}
        self._bytes = 0
        self.flushes = 0  # times the cache was emptied (a recorded window must see none)
        self._apart_by_routes: dict[bytes, _Apart | None] = {}

    def __len__(self) -> int:
        return len(self._cache)

    def get(self, rids: IntArray) -> Allocation:
        """The allocation for moving flows on routes ``rids`` (one entry per flow).

        The key is the count per route id up to the largest one in use, or b"s" + ids + counts
        when that is long; the two cannot collide (their lengths are multiples of 8 and odd
        respectively). The cache is emptied when it would outgrow ``_ALLOC_CACHE_BYTES``; the
        allocation in force has had its time booked by then and is about to be replaced, so
        every allocation with time to book is in the cache, for :meth:`flush_busy`.
        """
        per_route = np.bincount(rids)
        routes = None
        if len(per_route) <= _DENSE_KEY_ROUTES:
            key = per_route.tobytes()
        else:
            routes = per_route.nonzero()[0]
            key = b"s" + routes.tobytes() + per_route[routes].tobytes()
        alloc = self._cache.get(key)
        if alloc is not None:
            return alloc
        return self._miss(key, per_route, per_route.nonzero()[0] if routes is None else routes, len(rids))

    def _miss(self, key: bytes, per_route: IntArray, routes: IntArray, num_flows: int) -> Allocation:
        """:meth:`get` for a count vector not in the cache: fill (or split apart routes), keep."""
        table = self.routes
        apart = None if table.weights is not None else self._apart(routes)
        if apart is not None:  # no channel carries two of these routes: no filling to do
            # Every route in use carries a flow: one carries two or more iff there are more flows.
            shared = num_flows > len(routes)
            rate, channels, shared = _apart_rates(per_route[routes], apart, shared, self.sharing)
        else:
            rate, channels, shared = max_min_rates(
                table.channels[routes], per_route[routes], table.bandwidth_Bps, table.narrowest_Bps[routes],
                self.sharing, None if table.weights is None else table.weights[routes],
            )  # fmt: skip
        route_rate = np.zeros(len(per_route))
        route_rate[routes] = rate
        alloc = Allocation(key, route_rate, channels, shared)
        size = alloc.nbytes
        if self._bytes + size > _ALLOC_CACHE_BYTES:
            self.flush_busy()
            self._cache.clear()
            self._bytes = 0
            self.flushes += 1
        self._cache[key] = alloc
        self._bytes += size
        return alloc

    def _apart(self, routes: IntArray) -> _Apart | None:
        """``routes`` as :class:`_Apart` when no channel is on two of them, else None; memoised
        by the set of routes, which recurs far more often than the counts on them."""
        key = routes.tobytes()
        found = self._apart_by_routes.get(key, _UNSEEN)
        if found is not _UNSEEN:
            return found
        pc = self.routes.channels[routes].ravel()
        pc = pc[pc < self.routes.num_channels]
        on = np.bincount(pc)
        apart = None
        if not (len(pc) and largest(on) > 1):
            narrowest = self.routes.narrowest_Bps[routes]
            apart = _Apart(on.nonzero()[0], narrowest, smallest(narrowest) > _DIVISIBLE_BPS)
        if len(self._apart_by_routes) >= _APART_ENTRIES:
            self._apart_by_routes.clear()
        self._apart_by_routes[key] = apart
        return apart

    def flush_busy(self) -> None:
        """Book the time each cached allocation was in force on its channels: one ``np.add.at``
        over them all in cache order adds to each channel the same terms in the same order as one
        increment per allocation would (an allocation's channels are distinct)."""
        booked = [alloc for alloc in self._cache.values() if alloc.busy_s]
        if not booked:
            return
        channels = [alloc.channels for alloc in booked]
        seconds = np.repeat([alloc.busy_s for alloc in booked], [len(c) for c in channels])
        np.add.at(self.channel_busy_s, np.concatenate(channels), seconds)
        for alloc in booked:
            alloc.busy_s = 0.0
