"""build_network: every generator's names, counts and attributes, explicit extras, channels, errors."""

from __future__ import annotations

from typing import Any

import networkx as nx
import pytest

from parplan.errors import TopologyError
from parplan.topology.build import build_network
from parplan.topology.network import Network
from tests.topology.helpers import DEVICE, LINK, cluster, network


def kinds(net: Network) -> tuple[int, int]:
    """(devices, switches) in the graph."""
    k = [d["kind"] for _, d in net.graph.nodes(data=True)]
    return k.count("device"), k.count("switch")


def num_links(net: Network) -> int:
    """Undirected links (every link is two directed edges)."""
    edges: int = net.graph.number_of_edges()
    assert edges % 2 == 0
    return edges // 2


def degree(net: Network, node: str) -> int:
    out: int = net.graph.out_degree(node)
    return out


def test_switch_generator_names_links_and_attributes() -> None:
    net = network(generator={"kind": "switch", "hosts": 4, "device": DEVICE, "link": LINK})
    assert net.devices == ("h0", "h1", "h2", "h3")
    assert kinds(net) == (4, 1)
    assert set(net.graph.successors("sw0")) == {"h0", "h1", "h2", "h3"}
    d = net.graph.nodes["h2"]
    assert d["kind"] == "device"
    assert d["peak_flop_per_s"] == 100e12
    assert d["efficiency"] == 0.5
    assert d["speed_factor"] == 1.0
    assert d["memory_bytes"] == 16 * 2**30
    assert d["memory_bandwidth_Bps"] is None
    assert d["group"] is None
    assert net.graph.nodes["sw0"]["kind"] == "switch"
    e = net.graph.edges["h0", "sw0"]
    assert e["bandwidth_Bps"] == 10e9
    assert e["latency_s"] == pytest.approx(1e-6)
    info = net.device("h1")
    assert info.effective_flop_per_s == pytest.approx(50e12)


def test_channels_follow_link_order_one_per_direction() -> None:
    net = network(generator={"kind": "switch", "hosts": 3, "device": DEVICE, "link": LINK})
    channel = {(u, v): d["channel"] for u, v, d in net.graph.edges(data=True)}
    assert channel == {
        ("h0", "sw0"): 0, ("sw0", "h0"): 1,
        ("h1", "sw0"): 2, ("sw0", "h1"): 3,
        ("h2", "sw0"): 4, ("sw0", "h2"): 5,
    }  # fmt: skip
    assert net.channel_names[:2] == ("h0->sw0", "sw0->h0")
    assert len(net.channel_bandwidth_Bps) == 6


def test_ring_generator_links_neighbours_and_two_hosts_give_one_link() -> None:
    net = network(generator={"kind": "ring", "hosts": 5, "device": DEVICE, "link": LINK})
    assert net.devices == tuple(f"h{i}" for i in range(5))
    assert kinds(net) == (5, 0)
    assert num_links(net) == 5
    assert set(net.graph.successors("h0")) == {"h1", "h4"}
    pair = network(generator={"kind": "ring", "hosts": 2, "device": DEVICE, "link": LINK})
    assert num_links(pair) == 1


@pytest.mark.parametrize(
    ("x", "y", "links"), [(4, 4, 32), (3, 5, 30), (2, 2, 4), (1, 4, 4), (2, 3, 9), (1, 1, 0)]
)
def test_torus2d_generator_counts(x: int, y: int, links: int) -> None:
    net = network(generator={"kind": "torus2d", "x": x, "y": y, "device": DEVICE, "link": LINK})
    assert net.devices == tuple(f"h{i}_{j}" for i in range(x) for j in range(y))
    assert num_links(net) == links


def test_torus2d_wraps_around() -> None:
    net = network(generator={"kind": "torus2d", "x": 4, "y": 3, "device": DEVICE, "link": LINK})
    assert set(net.graph.successors("h0_0")) == {"h1_0", "h3_0", "h0_1", "h0_2"}
    assert all(degree(net, d) == 4 for d in net.devices)


def test_fat_tree_k4_has_16_hosts_and_20_switches() -> None:
    net = network(generator={"kind": "fat_tree", "k": 4, "device": DEVICE, "link": LINK})
    assert kinds(net) == (16, 20)
    assert net.devices == tuple(f"h{i}" for i in range(16))
    roles = [d["role"] for _, d in net.graph.nodes(data=True) if d["kind"] == "switch"]
    assert (roles.count("edge"), roles.count("aggregation"), roles.count("core")) == (8, 8, 4)
    assert num_links(net) == 16 + 16 + 16
    # every switch has k ports
    for n, d in net.graph.nodes(data=True):
        if d["kind"] == "switch":
            assert degree(net, n) == 4, n
    assert set(net.graph.successors("h5")) == {"pod1.edge0"}
    assert set(net.graph.successors("pod0.agg1")) == {"pod0.edge0", "pod0.edge1", "core2", "core3"}
    assert nx.is_strongly_connected(net.to_networkx())


def test_fat_tree_fewer_hosts_and_uplink() -> None:
    uplink = {"bandwidth": "40 GB/s", "latency": "500 ns"}
    net = network(
        generator={"kind": "fat_tree", "k": 4, "hosts": 6, "device": DEVICE, "link": LINK, "uplink": uplink}
    )
    assert kinds(net) == (6, 20)
    assert net.devices[-1] == "h5"
    assert net.graph.edges["h5", "pod1.edge0"]["bandwidth_Bps"] == 10e9
    assert net.graph.edges["pod0.edge0", "pod0.agg0"]["bandwidth_Bps"] == 40e9
    assert net.graph.edges["pod3.agg1", "core3"]["latency_s"] == pytest.approx(500e-9)


def hierarchical(**extra: Any) -> dict[str, Any]:
    gen = {
        "kind": "hierarchical",
        "nodes": 2,
        "devices_per_node": 8,
        "device": DEVICE,
        "intra": {"bandwidth": "300 GB/s", "latency": "700 ns"},
        "nic": {"bandwidth": "200 Gbit/s", "latency": "2 us"},
    }
    gen.update(extra)
    return gen


def test_hierarchical_2x8_with_8_nics() -> None:
    net = network(generator=hierarchical(nics_per_node=8))
    assert net.devices == tuple(f"n{i}.d{j}" for i in range(2) for j in range(8))
    assert kinds(net) == (16, 2 + 16 + 1)
    assert num_links(net) == 16 + 16 + 16
    assert net.groups() == {"n0": [f"n0.d{j}" for j in range(8)], "n1": [f"n1.d{j}" for j in range(8)]}
    assert set(net.graph.successors("n1.d3")) == {"n1.sw", "n1.nic3"}
    assert net.graph.nodes["n1.nic3"]["role"] == "nic"
    # no pcie link: the device reaches its own NIC at NIC bandwidth, without extra latency
    direct = net.graph.edges["n1.d3", "n1.nic3"]
    assert direct["bandwidth_Bps"] == 25e9
    assert direct["latency_s"] == 0.0
    assert net.path("n0.d0", "n0.d5") == ["n0.d0", "n0.sw", "n0.d5"]
    assert net.path("n0.d2", "n1.d6") == ["n0.d2", "n0.nic2", "fabric", "n1.nic6", "n1.d6"]


def test_hierarchical_shared_nics_over_pcie() -> None:
    pcie = {"bandwidth": "32 GB/s", "latency": "1 us"}
    net = network(generator=hierarchical(nics_per_node=2, pcie=pcie))
    assert kinds(net) == (16, 2 + 4 + 1)
    assert set(net.graph.successors("n0.nic1")) == {"n0.d1", "n0.d3", "n0.d5", "n0.d7", "fabric"}
    assert net.graph.edges["n0.d5", "n0.nic1"]["bandwidth_Bps"] == 32e9
    # NVSwitch (2 x 700 ns) beats the two PCIe hops through the shared NIC (2 x 1 us)
    assert net.path("n0.d1", "n0.d3") == ["n0.d1", "n0.sw", "n0.d3"]


def test_hierarchical_shared_nics_need_pcie() -> None:
    with pytest.raises(TopologyError, match="needs a 'pcie' link"):
        network(generator=hierarchical(nics_per_node=2))


def test_explicit_cluster_with_groups() -> None:
    devices = [
        {"name": "a", **DEVICE, "group": "box1", "speed_factor": 0.5, "memory_bandwidth": "1 TB/s"},
        {"name": "b", **DEVICE, "group": "box1"},
        {"name": "c", **DEVICE},
    ]
    links = [{"a": "a", "b": "b", **LINK}, {"a": "b", "b": "s", **LINK}, {"a": "s", "b": "c", **LINK}]
    net = network(devices=devices, switches=[{"name": "s"}], links=links)
    assert net.devices == ("a", "b", "c")
    assert net.groups() == {"box1": ["a", "b"], "c": ["c"]}
    a = net.device("a")
    assert (a.speed_factor, a.memory_bandwidth_Bps, a.group) == (0.5, 1e12, "box1")
    assert net.path("a", "c") == ["a", "b", "s", "c"]  # a device forwards traffic


def test_generator_plus_explicit_extras() -> None:
    net = network(
        generator={"kind": "switch", "hosts": 2, "device": DEVICE, "link": LINK},
        devices=[{"name": "edge-box", **DEVICE, "peak_flops": "1 TFLOP/s"}],
        switches=[{"name": "wifi"}],
        links=[
            {"a": "edge-box", "b": "wifi", "bandwidth": "10 Mbit/s", "latency": "5 ms"},
            {"a": "wifi", "b": "sw0", "bandwidth": "1 Gbit/s"},
        ],
    )
    assert net.devices == ("h0", "h1", "edge-box")
    assert list(net.graph.nodes) == ["h0", "h1", "sw0", "edge-box", "wifi"]
    assert net.path("edge-box", "h1") == ["edge-box", "wifi", "sw0", "h1"]
    # generator channels come first: 2 host links, then the explicit ones
    assert net.graph.edges["edge-box", "wifi"]["channel"] == 4
    channels, latency_s = net.route("edge-box", "h1")
    assert latency_s == pytest.approx(5e-3 + 0.0 + 1e-6)
    assert len(channels) == 3


def test_half_duplex_directions_share_one_channel() -> None:
    links = [
        {"a": "x", "b": "y", **LINK, "full_duplex": False},
        {"a": "y", "b": "z", **LINK},
    ]
    net = network(devices=[{"name": n, **DEVICE} for n in "xyz"], links=links)
    assert net.graph.edges["x", "y"]["channel"] == net.graph.edges["y", "x"]["channel"] == 0
    assert (net.graph.edges["y", "z"]["channel"], net.graph.edges["z", "y"]["channel"]) == (1, 2)
    assert len(net.channel_bandwidth_Bps) == 3
    assert net.channel_names[0] == "x<->y"
    forward, _ = net.route("x", "z")
    backward, _ = net.route("z", "x")
    assert forward.tolist() == [0, 1]
    assert backward.tolist() == [2, 0]


def test_single_device_needs_no_links() -> None:
    net = network(devices=[{"name": "solo", **DEVICE}])
    assert net.devices == ("solo",)
    assert net.route("solo", "solo")[0].size == 0


def devices(*names: str) -> list[dict[str, Any]]:
    return [{"name": n, **DEVICE} for n in names]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"devices": devices("a", "b"), "links": [{"a": "a", "b": "ghost", **LINK}]},
            "link a - ghost names unknown device or switch 'ghost'",
        ),
        (
            {
                "generator": {"kind": "switch", "hosts": 2, "device": DEVICE, "link": LINK},
                "devices": devices("h1"),
            },
            "name 'h1' is used by the switch generator and by the explicit device list",
        ),
        (
            {
                "generator": {"kind": "ring", "hosts": 3, "device": DEVICE, "link": LINK},
                "switches": [{"name": "h0"}],
            },
            "name 'h0' is used by the ring generator and by the explicit switch list",
        ),
        (
            {
                "generator": {"kind": "switch", "hosts": 2, "device": DEVICE, "link": LINK},
                "links": [{"a": "sw0", "b": "h0", **LINK}],
            },
            "link sw0 - h0 is given twice",
        ),
        ({"devices": devices("a", "b"), "links": [{"a": "a", "b": "a", **LINK}]}, "links a node to itself"),
        (
            {"devices": devices("a", "b", "c"), "links": [{"a": "a", "b": "b", **LINK}]},
            r"device\(s\) \[c\] have no links",
        ),
        (
            {
                "devices": devices("a", "b", "c", "d"),
                "links": [{"a": "a", "b": "c", **LINK}, {"a": "b", "b": "d", **LINK}],
            },
            r"split into 2 unconnected parts: \[a, c\]; \[b, d\]",
        ),
    ],
)
def test_errors(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        network(**fields)


def test_disconnected_message_truncates_long_lists() -> None:
    links = [{"a": f"d{i}", "b": f"d{i + 1}", **LINK} for i in range(11)]
    links.append({"a": "x", "b": "y", **LINK})
    with pytest.raises(TopologyError, match=r"\[d0, d1, d2, d3, d4, d5, d6, d7, \.\.\. 4 more\]; \[x, y\]"):
        network(devices=devices(*(f"d{i}" for i in range(12)), "x", "y"), links=links)


def test_custom_router_is_used() -> None:
    calls: list[tuple[str, str]] = []

    def direct_only(net: Network, src: str, dst: str) -> list[str]:
        calls.append((src, dst))
        return [src, "sw0", dst]

    spec = cluster(generator={"kind": "switch", "hosts": 2, "device": DEVICE, "link": LINK})
    net = build_network(spec, direct_only)
    assert net.path("h0", "h1") == ["h0", "sw0", "h1"]
    net.route("h0", "h1")
    net.route("h0", "h1")  # cached
    assert calls == [("h0", "h1"), ("h0", "h1")]


def test_fat_trees_route_dmodk_by_default_and_clusters_can_choose() -> None:
    """First-shortest-path routing funnels every inter-pod flow through core0; D-mod-k spreads it."""
    from parplan.config.cluster import ClusterSpec
    from parplan.topology.build import build_network

    gen = {
        "kind": "fat_tree",
        "k": 4,
        "device": {"peak_flops": "1 TFLOP/s", "memory": "1 GiB"},
        "link": {"bandwidth": "10 GB/s"},
    }

    def cores_used(routing: str) -> set[str]:
        net = build_network(ClusterSpec.model_validate({"generator": gen, "routing": routing}))
        hosts = net.devices
        return {n for h in hosts[4:] for n in net.path(hosts[0], h) if n.startswith("core")}

    assert cores_used("shortest") == {"core0"}
    assert cores_used("auto") == cores_used("dmodk") == {"core0", "core1", "core2", "core3"}
