"""The symmetric (quotient) simulation equals the full one: every generator topology, a few rank
counts, both transports, with and without link sharing; asymmetric cases fall back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.api.symmetric import FULL_SIMULATION_ENV, simulate_symmetric
from parplan.collectives.orbits import shift_image
from parplan.collectives.ring import RingAlgorithm, ring_all_reduce
from parplan.config.cluster import ClusterSpec
from parplan.config.loader import load_cluster
from parplan.engine.allocator import max_min_rates
from parplan.engine.result import SimResult
from parplan.engine.simulate import simulate
from parplan.engine.symmetry import find_quotient
from parplan.plan.collective import collective_taskgraph
from parplan.plan.collective_run import call_overhead_s
from parplan.topology.build import build_network
from parplan.topology.network import Network
from parplan.topology.placement import place

ROOT = Path(__file__).resolve().parents[2]
DEVICE = {"peak_flops": "312 TFLOP/s", "memory": "80 GiB", "memory_bandwidth": "2 TB/s"}
LINK = {"bandwidth": "50 GB/s", "latency": "500 ns"}
NVLINK = {"bandwidth": "300 GB/s", "latency": "1 us", "class": "nvlink"}
REL = 1e-12
"""Bytes come out exactly equal. Times agree within this relative tolerance, and are mostly
bit-identical: the full run itself is symmetric only up to rounding (a batch of reductions on
several devices is booked by one cumulative sum across them, so translates may differ by an ulp),
and busy times are sums of the same intervals in another order: differences of instants near the
makespan, so they agree within ``BUSY_ABS`` of the makespan (not relative to their own size)."""
BUSY_ABS = 1e-10


def _network(generator: dict[str, Any], transport: str) -> Network:
    return build_network(
        ClusterSpec.model_validate({"name": "t", "generator": generator, "transport": {"kind": transport}})
    )


def _generators(p: int) -> dict[str, dict[str, Any]]:
    """Every generator at about ``p`` ranks."""
    side = {4: 2, 8: 2, 16: 4, 32: 4}[p]
    return {
        "switch": {"kind": "switch", "hosts": p, "device": DEVICE, "link": LINK},
        "ring": {"kind": "ring", "hosts": p, "device": DEVICE, "link": LINK},
        "torus2d": {"kind": "torus2d", "x": side, "y": p // side, "device": DEVICE, "link": LINK},
        "fat_tree": {
            "kind": "fat_tree", "k": 4 if p <= 16 else 6, "hosts": p, "device": DEVICE, "link": LINK,
        },
        "nodes_switch": {
            "kind": "hierarchical", "nodes": p // 4, "devices_per_node": 4, "device": DEVICE,
            "intra": NVLINK, "nic": LINK, "nics_per_node": 4,
        },
        "nodes_rails": {
            "kind": "hierarchical", "nodes": p // 4, "devices_per_node": 4, "device": DEVICE,
            "intra": NVLINK, "nic": LINK, "nics_per_node": 4, "fabric": "rails",
        },
        "nodes_one_nic": {
            "kind": "hierarchical", "nodes": p // 2, "devices_per_node": 2, "device": DEVICE,
            "intra": NVLINK, "nic": LINK,
            "pcie": {"bandwidth": "32 GB/s", "latency": "1 us", "class": "pcie"},
        },
    }  # fmt: skip


def _both(
    network: Network,
    count: int,
    *,
    channels: int | None = None,
    link_sharing: bool = True,
    protocol: str | None = None,
    devices: list[str] | None = None,
) -> tuple[SimResult, SimResult | None]:
    """The full simulation and the symmetric one (None: no quotient) of a ring all-reduce on the
    placed devices, lowered as ``parplan collective`` lowers it."""
    placement = place(network, devices)
    devs, groups = list(placement.devices), [list(g) for g in placement.groups]
    call_s = call_overhead_s(network.transport, "ring", protocol)
    schedule = ring_all_reduce(len(devs), count, channels=channels, groups=groups)
    graph = collective_taskgraph(schedule, devs, 4, protocol=protocol, call_overhead_s=call_s)
    full = simulate(graph, network, link_sharing=link_sharing)
    spec = RingAlgorithm(name="ring", channels=channels)
    sym = simulate_symmetric(
        network, devs, spec, count, 4, groups=groups, protocol=protocol, call_overhead_s=call_s,
        link_sharing=link_sharing,
    )  # fmt: skip
    return full, sym


def _assert_equal(full: SimResult, sym: SimResult) -> None:
    assert sym.makespan_s == pytest.approx(full.makespan_s, rel=REL, abs=0)
    np.testing.assert_array_equal(sym.channel_bytes, full.channel_bytes)
    busy_abs = BUSY_ABS * full.makespan_s
    np.testing.assert_allclose(sym.channel_busy_s, full.channel_busy_s, rtol=REL, atol=busy_abs)
    np.testing.assert_allclose(sym.reduction_busy_s, full.reduction_busy_s, rtol=REL, atol=busy_abs)
    np.testing.assert_array_equal(sym.compute_busy_s, full.compute_busy_s)
    assert sym.channel_names == full.channel_names
    np.testing.assert_array_equal(sym.channel_bandwidth_Bps, full.channel_bandwidth_Bps)
    assert sym.collective is not None and full.collective is not None
    assert (sym.collective.algorithm, sym.collective.num_ranks, sym.collective.size_bytes) == (
        full.collective.algorithm,
        full.collective.num_ranks,
        full.collective.size_bytes,
    )
    assert sym.collective.time_s == sym.makespan_s


SYMMETRIC = {"switch": 1, "ring": 1, "fat_tree": 4, "nodes_switch": 8, "nodes_rails": 8, "nodes_one_nic": 4}
"""The shift each generator's ring runs under at 16 ranks (a torus's routes break ties by name,
which no shift respects)."""


@pytest.mark.parametrize("p", [4, 8, 16, 32])
@pytest.mark.parametrize("transport", ["ideal", "nccl"])
@pytest.mark.parametrize("link_sharing", [True, False])
def test_every_generator_equals_the_full_simulation(p: int, transport: str, link_sharing: bool) -> None:
    for name, generator in _generators(p).items():
        full, sym = _both(_network(generator, transport), p * 96, link_sharing=link_sharing)
        if p == 16:
            if name in SYMMETRIC:
                assert sym is not None, name
                assert sym.meta["symmetry"]["shift"] == SYMMETRIC[name], name  # type: ignore[index]
            else:
                assert sym is None, name
        if sym is not None:
            _assert_equal(full, sym)
            assert sym.meta["symmetry"]["transfers"] == len(full.end_s)  # type: ignore[index]


@pytest.mark.parametrize(
    "cluster", ["dgx-h100-8nodes.yaml", "dgx-a100-2nodes.yaml", "p5-efa-2nodes.yaml", "switch-4hosts.yaml",
                "fat-tree-16.yaml", "torus-4x4.toml"],
)  # fmt: skip
@pytest.mark.parametrize("protocol", [None, "ll128"])
def test_sample_clusters_equal_the_full_simulation(cluster: str, protocol: str | None) -> None:
    network = build_network(load_cluster(ROOT / "sample_configs" / "clusters" / cluster))
    p = len(place(network).devices)
    full, sym = _both(network, p * 64, protocol=protocol)
    if sym is not None:
        _assert_equal(full, sym)


@pytest.mark.parametrize("channels", [2, 3])
def test_multichannel_rings_equal_the_full_simulation(channels: int) -> None:
    generator = _generators(16)["nodes_rails"]
    full, sym = _both(_network(generator, "nccl"), 16 * 6 * 8, channels=channels)
    assert sym is not None
    _assert_equal(full, sym)


def test_unequal_chunks_have_no_orbit_form() -> None:
    network = _network(_generators(8)["switch"], "ideal")
    _, sym = _both(network, 8 * 96 + 3)
    assert sym is None


def test_one_slower_link_breaks_the_symmetry() -> None:
    slower = {"h3": {"bandwidth": "40 GB/s", "latency": "500 ns"}}
    generator = dict(_generators(8)["switch"], host_links=slower)
    network = _network(generator, "ideal")
    _, sym = _both(network, 8 * 96)
    assert sym is None
    p = 8
    graph = collective_taskgraph(ring_all_reduce(p, p * 8), list(network.devices), 4)
    assert find_quotient(graph, network, shift_image(p, 1)) is None


def test_one_slower_device_breaks_the_symmetry() -> None:
    generator = _generators(8)["switch"]
    network = _network(generator, "ideal")
    network.graph.nodes["h5"]["speed_factor"] = 0.5
    _, sym = _both(network, 8 * 96)
    assert sym is None


def test_the_environment_forces_the_full_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    network = _network(_generators(8)["switch"], "ideal")
    monkeypatch.setenv(FULL_SIMULATION_ENV, "1")
    assert _both(network, 8 * 96)[1] is None
    monkeypatch.setenv(FULL_SIMULATION_ENV, "0")
    assert _both(network, 8 * 96)[1] is not None


@settings(max_examples=25, deadline=None)
@given(
    p=st.integers(2, 24),
    chunk=st.integers(1, 5000),
    kind=st.sampled_from(["switch", "ring"]),
    transport=st.sampled_from(["ideal", "nccl"]),
    link_sharing=st.booleans(),
)
def test_random_sizes_equal_the_full_simulation(
    p: int, chunk: int, kind: str, transport: str, link_sharing: bool
) -> None:
    generator = {"kind": kind, "hosts": p, "device": DEVICE, "link": LINK}
    full, sym = _both(_network(generator, transport), p * chunk, link_sharing=link_sharing)
    assert sym is not None
    _assert_equal(full, sym)


def test_unit_weights_are_the_unweighted_allocation() -> None:
    route_channels = np.array([[0, 1], [0, 2], [1, 2]])
    args = (route_channels, np.array([1, 2, 1]), np.array([1e9, 2e9]), np.array([1e9] * 3))
    plain = max_min_rates(*args)
    weighted = max_min_rates(*args, pair_weight=np.ones(route_channels.shape))
    np.testing.assert_array_equal(plain[0], weighted[0])
    np.testing.assert_array_equal(plain[1], weighted[1])
    assert plain[2] == weighted[2]


def test_a_weight_counts_that_many_flows() -> None:
    # One route on one channel of 4 GB/s, weight 4 (its orbit's four flows all cross that
    # channel's orbit once per channel): each flow gets a quarter.
    rate, used, shared = max_min_rates(
        np.array([[0]]), np.array([1]), np.array([4e9]), np.array([4e9]), pair_weight=np.array([[4.0]])
    )
    assert rate.tolist() == [1e9] and used.tolist() == [0] and shared


def test_collective_sweep_runs_symmetric_rows_on_the_quotient(monkeypatch: pytest.MonkeyPatch) -> None:
    from parplan.api.collective import collective_sweep, expand_algorithms

    network = _network(_generators(8)["switch"], "nccl")
    devices = list(network.devices)
    specs = expand_algorithms("ring,tree:2")
    sizes = [(8 * 1024 + 4, 8 * 256 + 1), (8 * 4096, 8 * 1024)]
    sweep = collective_sweep(network, devices, specs, sizes)
    traced = collective_sweep(network, devices, specs, sizes, trace=True)
    monkeypatch.setenv(FULL_SIMULATION_ENV, "1")
    full = collective_sweep(network, devices, specs, sizes)
    marked = [(row.algorithm, row.size_bytes) for row in sweep.rows if row.symmetry is not None]
    assert marked == [("ring", 8 * 4096)]  # not the tree, not unequal chunks
    assert sweep.rows[2].symmetry == {
        "shift": 1, "orbit_size": 8, "representatives": 1, "channel_orbits": 2, "transfers": 112
    }  # fmt: skip
    for a, b in zip(sweep.rows, full.rows, strict=True):
        assert a.time_s == pytest.approx(b.time_s, rel=REL, abs=0)
    # A trace needs every transfer's times: the traced (largest) size runs in full.
    assert all(row.symmetry is None for row in traced.rows)
    assert [len(t.result.end_s) for t in traced.traces] == [t.graph.num_tasks for t in traced.traces]
    assert len(traced.traces[0].result.end_s) >= 112
