"""The recorder on its own: per-route figures spread over channels, NaN arrivals, collective stats."""

from __future__ import annotations

import numpy as np
import pytest

from parplan.engine.recorder import Recorder
from parplan.engine.routes import RouteTable
from parplan.taskgraph import COMPUTE, MARKER, TRANSFER
from tests.engine.nets import chain_network

GB = 1e9


def _recorder() -> tuple[Recorder, RouteTable]:
    net = chain_network([1 * GB, 2 * GB], [0.0, 0.0])
    routes = RouteTable(net, net.devices)
    rids = routes.ids(np.array([0, 0]), np.array([1, 2]))  # one hop (padded), two hops
    rec = Recorder(3, routes.num_channels)
    rec.grow_routes(routes.num_routes)
    rec.route_bytes[rids] = [10.0, 5.0]
    rec.route_busy_s[rids] = [1.0, 0.5]
    rec.channel_busy_s[:] = 0.25  # the shared regime's, padding channel included
    rec.start_s[:] = [0.0, 1.0, 2.0]
    rec.end_s[:] = [1.0, 3.0, 2.0]
    rec.arrive_s[:] = [7.0, 2.5, 7.0]
    return rec, routes


def test_routes_figures_land_on_their_channels_and_padding_is_dropped() -> None:
    rec, routes = _recorder()
    names = routes.network.channel_names
    d0d1, d1d2 = names.index("d0->d1"), names.index("d1->d2")
    by_bytes = rec.channel_bytes(routes)
    assert len(by_bytes) == routes.num_channels
    assert by_bytes[d0d1] == 15.0 and by_bytes[d1d2] == 5.0 and by_bytes.sum() == 20.0
    busy = rec.channel_busy(routes)
    assert busy[d0d1] == 1.75 and busy[d1d2] == 0.75
    assert busy.sum() == pytest.approx(1.75 + 0.75 + 0.25 * (routes.num_channels - 2))


def test_grow_routes_keeps_what_is_booked() -> None:
    rec = Recorder(0, 4)
    rec.grow_routes(2)
    rec.route_bytes[1] = 3.0
    rec.grow_routes(5)
    rec.grow_routes(3)  # never shrinks
    assert rec.route_bytes.tolist() == [0.0, 3.0, 0.0, 0.0, 0.0]
    assert len(rec.route_busy_s) == 5


def test_result_has_nan_arrivals_for_other_kinds_and_collective_stats() -> None:
    rec, routes = _recorder()
    kind = np.array([COMPUTE, TRANSFER, MARKER], dtype=np.int8)
    result = rec.result(
        kind=kind, devices=("d0", "d1", "d2"), routes=routes, compute_busy_s=np.ones(3),
        reduction_busy_s=np.zeros(3), num_events=4,
        collective={"algorithm": "ring", "ranks": 3, "size_bytes": 6.0},
    )  # fmt: skip
    assert result.makespan_s == 3.0 and result.num_events == 4
    assert np.isnan(result.arrive_s[[0, 2]]).all() and result.arrive_s[1] == 2.5
    assert result.collective is not None and result.collective.time_s == 3.0
    assert result.collective.algbw_Bps == 2.0
    assert result.channel_bandwidth_Bps.tolist() == routes.bandwidth_Bps.tolist()
    plain = Recorder(0, 1).result(
        kind=np.zeros(0, dtype=np.int8), devices=(), routes=routes, compute_busy_s=np.zeros(0),
        reduction_busy_s=np.zeros(0), num_events=0, collective=None,
    )  # fmt: skip
    assert plain.makespan_s == 0.0 and plain.collective is None
