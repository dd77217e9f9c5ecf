"""Lanes: a ring's channels spread over a GPU's several NICs (issue 13, item 3).

A p5-like pair of nodes (8 GPUs each, 4 x 100 Gbit/s NICs per GPU) runs a 1 GiB ring all-reduce:
with 32 channels (4 per GPU) every NIC carries its share and the network part is about 4x faster
than with one NIC per GPU; single-NIC clusters route every lane as lane 0.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from parplan.collectives.registry import build_schedule
from parplan.config.cluster import ClusterSpec
from parplan.engine.result import SimResult
from parplan.engine.simulate import simulate
from parplan.errors import SimulationError
from parplan.plan.collective import collective_taskgraph
from parplan.topology.build import build_network
from parplan.topology.network import Network
from parplan.topology.placement import place

GIB_ELEMENTS = 2**28  # 1 GiB of float32


def p5_like(nics_per_device: int = 4, fabric: str = "switch") -> Network:
    """Two nodes of 8 GPUs on NVSwitch (450 GB/s), ``nics_per_device`` 100 Gbit/s NICs per GPU."""
    spec: dict[str, Any] = {
        "name": f"p5-like-{nics_per_device}nic-{fabric}",
        "generator": {
            "kind": "hierarchical",
            "nodes": 2,
            "devices_per_node": 8,
            "device": {"peak_flops": "989 TFLOP/s", "memory": "80 GiB", "efficiency": 0.5},
            "intra": {"bandwidth": "450 GB/s", "latency": "0.7 us"},
            "nics_per_device": nics_per_device,
            "nic": {"bandwidth": "100 Gbit/s", "latency": "1.5 us"},
            "fabric": fabric,
        },
    }
    return build_network(ClusterSpec.model_validate(spec))


def run_ring(net: Network, channels: int, elements: int = GIB_ELEMENTS) -> SimResult:
    placement = place(net, None, count=16)
    groups = [list(g) for g in placement.groups]
    schedule = build_schedule(f"ring:{channels}", 16, elements, groups=groups)
    return simulate(collective_taskgraph(schedule, placement.devices, 4), net)


def nic_bytes(net: Network, result: SimResult) -> dict[str, float]:
    """Bytes through each NIC towards the fabric (its uplink)."""
    names = net.channel_names
    return {
        name: float(result.channel_bytes[i])
        for i, name in enumerate(names)
        if name.split("->")[0].split(".")[-1].startswith("nic") and not name.split("->")[1].startswith("n")
    }


def test_lanes_of_one_pair_leave_and_arrive_through_different_nics() -> None:
    net = p5_like()
    paths = [net.lane_path("n0.d0", "n1.d0", lane) for lane in range(4)]
    assert paths[0] == net.path("n0.d0", "n1.d0")  # lane 0 is the plain route
    assert len({p[1] for p in paths}) == 4 and len({p[-2] for p in paths}) == 4
    assert all(p[1].startswith("n0.nic") and p[-2].startswith("n1.nic") for p in paths)
    assert net.lane_path("n0.d0", "n1.d0", 4) == paths[0]  # lane 4 = lane 0 mod 4 NICs


def test_a_ring_with_a_channel_per_nic_uses_every_nic_and_is_k_times_faster() -> None:
    four = p5_like(4)
    many = run_ring(four, 32)
    uplinks = nic_bytes(four, many)
    assert len(uplinks) == 64 and min(uplinks.values()) > 0  # all 32 NICs of both nodes
    assert max(uplinks.values()) == pytest.approx(min(uplinks.values()), rel=0.02)  # balanced
    one_nic = run_ring(p5_like(1), 32).makespan_s
    eight_channels = run_ring(four, 8).makespan_s  # one channel per GPU: one NIC per GPU
    assert eight_channels == pytest.approx(one_nic, rel=0.02)
    assert 3.5 < one_nic / many.makespan_s <= 4.0 + 1e-9  # the network is 4x as wide


def test_rail_fabric_spreads_channels_over_the_rails_too() -> None:
    rails = p5_like(4, "rails")
    many = run_ring(rails, 32)
    uplinks = nic_bytes(rails, many)
    used = [b for b in uplinks.values() if b > 0]
    assert len(used) >= 48  # most of the 64 rails (the ring's crossings change rails: PXN)
    assert run_ring(rails, 8).makespan_s / many.makespan_s > 3.5
    assert run_ring(p5_like(1, "rails"), 32).makespan_s / many.makespan_s > 1.9


def test_single_nic_clusters_route_every_lane_as_lane_zero() -> None:
    net = p5_like(1)
    assert not net.lanes_differ
    placement = place(net, None, count=16)
    schedule = build_schedule("ring:16", 16, 2**20, groups=[list(g) for g in placement.groups])
    graph = collective_taskgraph(schedule, placement.devices, 4)
    assert graph.lane is not None and set(np.unique(graph.lane).tolist()) == {0, 1}
    plain = simulate(dataclasses.replace(graph, lane=None), net)
    laned = simulate(graph, net)
    assert laned.makespan_s == plain.makespan_s
    np.testing.assert_array_equal(laned.channel_bytes, plain.channel_bytes)


def test_lanes_must_be_non_negative_and_one_per_task() -> None:
    net = p5_like()
    placement = place(net, None, count=16)
    schedule = build_schedule("ring:16", 16, 1024, groups=[list(g) for g in placement.groups])
    graph = collective_taskgraph(schedule, placement.devices, 4)
    assert graph.lane is not None
    with pytest.raises(SimulationError, match="lanes"):
        simulate(dataclasses.replace(graph, lane=-graph.lane), net)
    with pytest.raises(SimulationError, match="lanes"):
        simulate(dataclasses.replace(graph, lane=graph.lane[:-1]), net)
