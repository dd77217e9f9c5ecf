"""Generators that match the hardware: several NICs per device, rail-optimized fabrics, per-host
link rates, and the file:line errors their fields give."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from parplan.config.loader import load_cluster
from parplan.errors import ConfigError
from parplan.topology.build import build_network
from tests.topology.helpers import DEVICE, LINK, cluster, network


def multi_nic(**extra: Any) -> dict[str, Any]:
    """A p5-like 2-node cluster: 8 devices per node, each owning 4 NICs of 100 Gbit/s."""
    gen: dict[str, Any] = {
        "kind": "hierarchical",
        "nodes": 2,
        "devices_per_node": 8,
        "nics_per_device": 4,
        "device": DEVICE,
        "intra": {"bandwidth": "450 GB/s", "latency": "700 ns"},
        "nic": {"bandwidth": "100 Gbit/s", "latency": "1.5 us"},
    }
    gen.update(extra)
    return gen


def test_nics_per_device_is_nics_per_node_times_devices() -> None:
    spec = cluster(generator=multi_nic())
    assert spec.generator is not None and spec.generator.kind == "hierarchical"
    assert spec.generator.nics_per_node == 32
    assert spec.generator.nics_per_device_owned == 4
    same = cluster(generator={**multi_nic(), "nics_per_node": 32})
    assert same.generator == spec.generator


def test_a_device_owns_its_nics_and_spreads_by_destination() -> None:
    net = network(generator=multi_nic())
    assert set(net.graph.successors("n0.d1")) == {"n0.sw", "n0.nic4", "n0.nic5", "n0.nic6", "n0.nic7"}
    used = {net.path("n0.d1", f"n1.d{j}")[1] for j in range(8)}
    assert used == {"n0.nic4", "n0.nic5", "n0.nic6", "n0.nic7"}  # every NIC of the device
    # each route leaves through exactly one NIC of its own device
    for j in range(8):
        path = net.path("n0.d1", f"n1.d{j}")
        assert sum(1 for n in path if n.startswith("n0.nic")) == 1


def test_more_nics_than_devices_must_divide() -> None:
    with pytest.raises(ValueError, match="whole number per device"):
        cluster(generator={**multi_nic(nics_per_device=None), "nics_per_node": 12})
    with pytest.raises(ValueError, match="disagree"):
        cluster(generator={**multi_nic(), "nics_per_node": 8})


def test_rails_put_nic_r_of_every_node_on_rail_r() -> None:
    gen = multi_nic(nics_per_device=None, nics_per_node=8, fabric="rails")
    net = network(generator=gen)
    assert set(net.graph.successors("rail3")) == {"n0.nic3", "n1.nic3", "spine"}
    assert net.graph.nodes["rail3"]["role"] == "rail"
    assert "fabric" not in net.graph
    # the same local rank: one switch between the NICs
    assert net.path("n0.d3", "n1.d3") == ["n0.d3", "n0.nic3", "rail3", "n1.nic3", "n1.d3"]
    # the default spine link carries the whole rail: nodes x the NIC rate
    assert net.graph.edges["rail0", "spine"]["bandwidth_Bps"] == 2 * 12.5e9
    # another local rank: NVLink to the rail of the destination (as fast, fewer microseconds)
    other = net.path("n0.d0", "n1.d5")
    assert "spine" not in other and len(other) == 7


def test_the_default_spine_stays_within_the_largest_bandwidth_a_spec_accepts() -> None:
    """NICs at the largest supported rate (1 EB/s) on two nodes: the default spine would need 2 EB/s;
    it is capped at 1 EB/s instead of failing inside the builder (found by the hostile-input test)."""
    gen = multi_nic(
        nics_per_device=None, nics_per_node=8, fabric="rails", nic={"bandwidth": 1e18, "latency": "1 us"}
    )
    net = network(generator=gen)
    assert net.graph.edges["rail0", "spine"]["bandwidth_Bps"] == 1e18


def test_rails_with_a_slow_spine_still_reach_everyone() -> None:
    gen = multi_nic(
        nics_per_device=None,
        nics_per_node=8,
        fabric="rails",
        intra={"bandwidth": "10 GB/s", "latency": "1 us"},  # narrower than the NIC: no detour
        spine={"bandwidth": "100 Gbit/s", "latency": "1 us"},
    )
    net = network(generator=gen)
    assert net.path("n0.d0", "n1.d5") == ["n0.d0", "n0.nic0", "rail0", "spine", "rail5", "n1.nic5", "n1.d5"]


def test_spine_needs_rails() -> None:
    with pytest.raises(ValueError, match="spine link needs fabric: rails"):
        cluster(generator=multi_nic(spine=LINK))


def test_switch_generator_takes_per_host_links() -> None:
    slow = {"bandwidth": "20 Mbit/s", "latency": "45 ms"}
    gen = {"kind": "switch", "hosts": 3, "device": DEVICE, "link": LINK, "host_links": {"h2": slow}}
    net = network(generator=gen)
    assert net.graph.edges["h0", "sw0"]["bandwidth_Bps"] == 10e9
    assert net.graph.edges["h2", "sw0"]["bandwidth_Bps"] == 2.5e6
    assert net.graph.edges["sw0", "h2"]["latency_s"] == pytest.approx(45e-3)


def test_fat_tree_takes_per_host_links() -> None:
    fast = {"bandwidth": "40 GB/s", "latency": "1 us"}
    gen = {"kind": "fat_tree", "k": 4, "device": DEVICE, "link": LINK, "host_links": {"h15": fast}}
    net = network(generator=gen)
    assert net.graph.edges["h15", "pod3.edge1"]["bandwidth_Bps"] == 40e9
    assert net.graph.edges["h14", "pod3.edge1"]["bandwidth_Bps"] == 10e9


def test_per_host_link_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "edge.yaml"
    path.write_text(
        "generator:\n"
        "  kind: switch\n"
        "  hosts: 2\n"
        "  device: {peak_flops: 1 TFLOP/s, memory: 1 GiB}\n"
        "  link: {bandwidth: 1 Gbit/s}\n"
        "  host_links:\n"
        "    h1: {bandwidth: -5 Mbit/s}\n"
        "    h7: {bandwidth: 5 Mbit/s}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_cluster(path)
    text = str(info.value)
    assert "edge.yaml:7:" in text and "h1.bandwidth" in text
    path.write_text(path.read_text().replace("-5", "5"))
    with pytest.raises(ConfigError) as info:
        load_cluster(path)
    assert "edge.yaml:6:" in str(info.value) and "'h7' is not a host" in str(info.value)


def test_multi_nic_sample_builds() -> None:
    root = Path(__file__).resolve().parents[2]
    net = build_network(load_cluster(root / "sample_configs/clusters/p5-efa-2nodes.yaml"))
    assert len(net.devices) == 16
    assert sum(1 for _, d in net.graph.nodes(data=True) if d.get("role") == "nic") == 64
