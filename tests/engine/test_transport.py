"""The transport's per-message costs in the engine: LogGP o, rendezvous, NCCL protocols, call costs,
and link-class efficiencies, each checked against the formula the cost model documents."""

from __future__ import annotations

import math

import pytest

from parplan.config.cluster import LINK_EFFICIENCY, ClusterSpec, TransportCosts, TransportSpec
from parplan.engine.simulate import simulate
from parplan.engine.transport import PROTOCOL_EFFICIENCY, STEP_LATENCY_S
from parplan.taskgraph import PROTOCOLS, TREE_STEP, TaskGraphBuilder
from parplan.topology.build import build_network
from parplan.topology.network import HW_NET, HW_NVLINK, Network

BW = 10e9
LAT = 2e-6


def _pair(
    transport: TransportCosts | None, link_class: str | None = None, efficiency: float | None = None
) -> Network:
    link: dict[str, object] = {"bandwidth": BW, "latency": LAT}
    if link_class:
        link["class"] = link_class
    if efficiency is not None:
        link["efficiency"] = efficiency
    spec = ClusterSpec.model_validate(
        {
            "name": "pair",
            "devices": [{"name": n, "peak_flops": 1e12, "memory": 1e9} for n in ("a", "b")],
            "links": [{"a": "a", "b": "b", **link}],
            **({"transport": {"kind": transport.kind}} if transport else {}),
        }
    )
    net = build_network(spec)
    if transport is not None:
        net.transport = transport
    return net


def _one(net: Network, size: float, **kw: object) -> float:
    b = TaskGraphBuilder()
    b.transfer("a", "b", size, **kw)  # type: ignore[arg-type]
    return simulate(b.build(), net).makespan_s


def test_ideal_is_alpha_beta() -> None:
    assert _one(_pair(TransportCosts("ideal")), 1e6) == pytest.approx(LAT + 1e6 / BW, rel=1e-12)


def test_loggp_overheads_and_rendezvous() -> None:
    t = TransportCosts("mpi", send_overhead_s=1e-6, recv_overhead_s=3e-6, eager_threshold_bytes=1000.0)
    net = _pair(t)
    assert _one(net, 1000.0) == pytest.approx(LAT + 4e-6 + 1000 / BW, rel=1e-12)
    # Above the threshold: a request and a clear-to-send first (each a small message).
    assert _one(net, 1001.0) == pytest.approx(LAT + 4e-6 + 2 * (LAT + 4e-6) + 1001 / BW, rel=1e-12)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_nccl_protocol_wire_bytes_and_step_latency(protocol: str) -> None:
    net = _pair(TransportCosts("nccl"), "infiniband", efficiency=1.0)
    code = PROTOCOLS.index(protocol)
    want = STEP_LATENCY_S[HW_NET, code] + 1e6 / PROTOCOL_EFFICIENCY[protocol] / BW
    assert _one(net, 1e6, protocol=code) == pytest.approx(want, rel=1e-12)


def test_nccl_step_latency_follows_the_hardware() -> None:
    net = _pair(TransportCosts("nccl"), "nvlink", efficiency=1.0)
    simple = PROTOCOLS.index("simple")
    want = STEP_LATENCY_S[HW_NVLINK, simple] + 8 / BW
    assert _one(net, 8, protocol=simple) == pytest.approx(want)
    # No protocol under nccl is Simple.
    assert _one(net, 8) == pytest.approx(_one(net, 8, protocol=simple), rel=1e-15)


def test_nccl_step_latency_stands_for_the_path_latency() -> None:
    """NCCL's measured step latency replaces the file's link latency (it contains it)."""
    ll = PROTOCOLS.index("ll")
    assert STEP_LATENCY_S[HW_NVLINK, ll] < LAT  # 0.6 us per LL step on NVLink, 2 us of path
    net = _pair(TransportCosts("nccl"), "nvlink", efficiency=1.0)
    assert _one(net, 8, protocol=ll) == pytest.approx(STEP_LATENCY_S[HW_NVLINK, ll] + 16 / BW, rel=1e-12)


def test_plan_overhead_is_a_delay() -> None:
    net = _pair(TransportCosts("ideal"))
    assert _one(net, 100.0, overhead_s=5e-6) == pytest.approx(LAT + 5e-6 + 100 / BW, rel=1e-12)


@pytest.mark.parametrize("link_class", sorted(LINK_EFFICIENCY))
def test_link_class_efficiency(link_class: str) -> None:
    net = _pair(TransportCosts("ideal"), link_class)
    eff = LINK_EFFICIENCY[link_class]
    assert 0.5 < eff < 1
    assert _one(net, 1e6) == pytest.approx(LAT + 1e6 / (BW * eff), rel=1e-12)
    assert _one(_pair(TransportCosts("ideal"), link_class, efficiency=0.5), 1e6) == pytest.approx(
        LAT + 1e6 / (BW * 0.5), rel=1e-12
    )


def test_ethernet_is_tcp_payload_per_frame() -> None:
    assert math.isclose(LINK_EFFICIENCY["ethernet"], 1448 / 1538)


@pytest.mark.parametrize(
    ("link_class", "kind"),
    [(None, "ideal"), ("ethernet", "gloo"), ("nvlink", "nccl"), ("infiniband", "nccl")],
)
def test_default_transport_follows_link_classes(link_class: str | None, kind: str) -> None:
    assert _pair(None, link_class).transport.kind == kind


def test_file_overrides_kind_defaults() -> None:
    spec = {"kind": "gloo", "send_overhead": "2 us", "eager_threshold": "1 MiB"}
    costs = TransportSpec.model_validate(spec).resolved()
    assert costs.send_overhead_s == pytest.approx(2e-6)
    assert costs.recv_overhead_s == pytest.approx(5e-6)
    assert costs.eager_threshold_bytes == 2**20


def test_rate_ceiling_caps_the_payload_rate() -> None:
    net = _pair(TransportCosts("ideal"))
    assert _one(net, 1e6, max_rate_Bps=BW / 4) == pytest.approx(LAT + 4e6 / BW, rel=1e-12)
    nccl = _pair(TransportCosts("nccl"), "nvlink", efficiency=1.0)
    ll = PROTOCOLS.index("ll")
    # The ceiling is on payload: LL's doubled wire bytes move at twice the ceiling.
    want = STEP_LATENCY_S[HW_NVLINK, ll] + 1e6 / (BW / 4)
    assert _one(nccl, 1e6, protocol=ll, max_rate_Bps=BW / 4) == pytest.approx(want, rel=1e-12)


def test_tree_steps_take_nccls_tree_latencies() -> None:
    net = _pair(TransportCosts("nccl"), "infiniband", efficiency=1.0)
    ll = PROTOCOLS.index("ll")
    assert STEP_LATENCY_S[HW_NET, TREE_STEP + ll] == pytest.approx(5.0e-6)  # NET Tree LL
    assert STEP_LATENCY_S[HW_NET, ll] == pytest.approx(2.7e-6)  # NET Ring LL
    want = STEP_LATENCY_S[HW_NET, TREE_STEP + ll] + 16 / BW
    assert _one(net, 8, protocol=TREE_STEP + ll) == pytest.approx(want, rel=1e-12)
