"""In-network reduction (NVLS, CollNet/SHARP): switch ranks in the data plane, switch endpoints in
the network, lowering onto the switch a cluster declares, refusal elsewhere, and the closed forms
of CollNet with several ranks per node against the engine (the registry-wide checks cover the rest).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from parplan.collectives.algorithm import UniformCost
from parplan.collectives.dataplane import run_schedule
from parplan.collectives.registry import build_schedule, get, parse, schedules
from parplan.collectives.schedule import Schedule, SwitchRank
from parplan.config.loader import load_cluster
from parplan.engine.simulate import simulate
from parplan.errors import CollectiveError, PlanError, TopologyError
from parplan.plan.collective import collective_taskgraph, endpoint_devices
from parplan.topology.build import build_network
from parplan.topology.network import Network
from tests.collectives.cases import Step, hand_schedule
from tests.engine.nets import switch_network

ROOT = Path(__file__).resolve().parents[2]
VALIDATION = ROOT / "validation" / "clusters"


def _reducing_star(p: int, capability: str) -> Network:
    net = switch_network(p, 10e9, 1e-6)
    net.graph.nodes["sw0"]["reduces"] = (capability,)
    return Network(net.graph, name="star")


def _net(name: str) -> Network:
    return build_network(load_cluster(VALIDATION / name))


# -- the data plane ------------------------------------------------------------------------------


def _with_switch(steps: list[Step], p: int = 2, n: int = 4) -> Schedule:
    """A hand-written schedule on ``p`` ranks with one NVLS switch rank (id ``p``)."""
    return dataclasses.replace(
        hand_schedule(steps, num_ranks=p, num_elements=n), switches=(SwitchRank("nvls", tuple(range(p))),)
    )


def test_a_switch_rank_sums_what_reaches_it_and_holds_nothing_of_its_own() -> None:
    # Ranks 0 and 1 reduce into the switch (rank 2), which sends the sum back.
    good = _with_switch(
        [
            (0, 2, 0, 4, True, []),
            (1, 2, 0, 4, True, []),
            (2, 0, 0, 4, False, [0, 1]),
            (2, 1, 0, 4, False, [0, 1]),
        ]
    )
    arrays = [np.arange(4), 10 * np.arange(4)]
    result = run_schedule(good, arrays)
    assert [a.tolist() for a in result.arrays] == [[0, 11, 22, 33]] * 2  # ranks only
    assert result.bytes_received.tolist() == [32, 32, 64]  # the switch rank last
    # Sending before anything reached it: the switch holds no contribution of its own.
    early = _with_switch([(2, 0, 0, 4, False, []), (2, 1, 0, 4, False, [])])
    with pytest.raises(CollectiveError, match="rank 2 has not received yet"):
        run_schedule(early, arrays)
    # Back to rank 0 before rank 1's part is in (rank 1 then reduces into rank 0 directly): rank 1
    # never gets the sum.
    short = _with_switch([(0, 2, 0, 4, True, []), (2, 0, 0, 4, False, [0]), (1, 0, 0, 4, True, [1])])
    with pytest.raises(CollectiveError, match=r"rank 1 ends with .* not what a all_reduce defines"):
        run_schedule(short, arrays)


def test_a_schedule_names_only_its_switch_ranks() -> None:
    bad = _with_switch([(0, 3, 0, 4, True, [])])
    with pytest.raises(CollectiveError, match="dst out of range"):
        run_schedule(bad, [np.arange(4), np.arange(4)])


# -- the network and lowering ------------------------------------------------------------------


def test_reducing_switches_are_endpoints_others_are_refused() -> None:
    net = _net("hgx-h100-8gpu.yaml")
    assert net.switch_capabilities("n0.sw") == {"nvls"}
    assert net.endpoints[: len(net.devices)] == net.devices and "n0.sw" in net.endpoints
    assert net.endpoint("n0.sw").switch and net.endpoint("n0.d0") == net.device("n0.d0")
    with pytest.raises(TopologyError, match="a switch, not a device"):
        net.device_index("n0.sw")
    with pytest.raises(TopologyError, match="cannot reduce"):
        net.endpoint_index("fabric")  # no sharp in this cluster
    sharp = _net("coreweave-h100.yaml")
    assert sharp.switch_capabilities("fabric") == {"sharp"}
    assert sharp.switch_capabilities("n0.nic0") == frozenset()  # a NIC is not a reducing switch
    assert sharp.reducing_switch("sharp", ["n0.d0", "n1.d3"]) == "fabric"
    assert sharp.reducing_switch("nvls", ["n1.d0", "n1.d5"]) == "n1.sw"
    with pytest.raises(TopologyError, match=r"no switch .* can reduce"):
        sharp.reducing_switch("nvls", ["n0.d0", "n1.d0"])  # two nodes share no NVSwitch


def test_lowering_places_switch_ranks_or_refuses_clearly() -> None:
    schedule = build_schedule("nvls", 4, 64)
    net = _net("hgx-h100-8gpu.yaml")
    devices = list(net.devices[:4])
    assert endpoint_devices(schedule, devices, net) == [*devices, "n0.sw"]
    with pytest.raises(PlanError, match="needs the network"):
        endpoint_devices(schedule, devices, None)
    plain = build_network(load_cluster(ROOT / "sample_configs" / "clusters" / "dgx-a100-2nodes.yaml"))
    with pytest.raises(CollectiveError, match=r"nvls cannot run here.*nvswitch: true, nvls: true"):
        collective_taskgraph(schedule, list(plain.devices[:4]), 4, network=plain)
    groups = [[0, 1, 2, 3], [4, 5, 6, 7]]
    chain = build_schedule({"name": "collnet_chain", "channels": 2}, 8, 64, groups=groups)
    with pytest.raises(CollectiveError, match=r"sharp: true"):
        collective_taskgraph(chain, list(plain.devices[:8]), 4, network=plain)


def test_collnet_runs_on_the_sharp_fabric_of_a_cluster() -> None:
    net = _net("coreweave-h100.yaml")
    devices = [f"n{i}.d{j}" for i in range(2) for j in range(4)]
    groups = [[0, 1, 2, 3], [4, 5, 6, 7]]
    for spec in ({"name": "collnet_chain", "channels": 4}, {"name": "collnet_direct"}):
        schedule = build_schedule(spec, 8, 2**20, groups=groups)
        graph = collective_taskgraph(schedule, devices, 4, network=net)
        assert graph.devices[-1] == "fabric"
        assert simulate(graph, net).makespan_s > 0


def test_nvls_across_nodes_adds_the_sharp_switch() -> None:
    net = _net("coreweave-h100.yaml")
    devices = [f"n{i}.d{j}" for i in range(2) for j in range(4)]
    schedule = build_schedule("nvls", 8, 2**16, groups=[[0, 1, 2, 3], [4, 5, 6, 7]])
    assert [s.capability for s in schedule.switches] == ["nvls", "nvls", "sharp"]
    graph = collective_taskgraph(schedule, devices, 4, network=net)
    assert graph.devices[8:] == ("n0.sw", "n1.sw", "fabric")
    assert simulate(graph, net).makespan_s > 0
    hgx = _net("hgx-h100-8gpu.yaml")  # one node: its NVSwitch, no SHARP needed
    one = build_schedule("nvls", 8, 2**16, groups=[list(range(8))])
    assert collective_taskgraph(one, list(hgx.devices), 4, network=hgx).devices[8:] == ("n0.sw",)


def test_nvls_tree_reduces_in_each_nvswitch_and_trees_across() -> None:
    net = _net("coreweave-h100.yaml")
    devices = [f"n{i}.d{j}" for i in range(3) for j in range(2)]
    schedule = build_schedule({"name": "nvls_tree", "segments": 4}, 6, 4096, groups=[[0, 1], [2, 3], [4, 5]])
    assert [s.capability for s in schedule.switches] == ["nvls"] * 3
    tree_senders = {int(schedule.src[i]) for i in range(schedule.num_steps) if schedule.phase[i] == 2}
    assert len(tree_senders) > 1  # the heads rotate from slice to slice
    graph = collective_taskgraph(schedule, devices, 4, network=net)
    assert graph.devices[6:] == ("n0.sw", "n1.sw", "n2.sw")
    assert simulate(graph, net).makespan_s > 0
    one_node = build_schedule("nvls_tree", 4, 64)  # NCCL has no NVLS Tree on one node: NVLS
    assert one_node.algorithm == "nvls_tree" and len(one_node.switches) == 1


def test_all_leaves_in_network_schedules_out() -> None:
    in_network = {"nvls", "nvls_tree", "collnet_direct", "collnet_chain"}
    assert in_network <= set(schedules(in_network=True))
    assert not in_network & set(schedules())


# -- closed forms with several ranks per node ---------------------------------------------------


@pytest.mark.parametrize("name", ["collnet_direct", "collnet_chain"])
@pytest.mark.parametrize(("p", "g"), [(4, 2), (6, 3), (8, 4), (16, 4)])
@pytest.mark.parametrize("segments", [1, 3, 8])
def test_collnet_closed_form_is_exact_with_one_slice_and_close_with_more(
    name: str, p: int, g: int, segments: int
) -> None:
    algorithm = get(name)
    extra = {"channels": 2} if name == "collnet_chain" else {}
    spec = parse({"name": name, "group_size": g, "segments": segments, **extra})
    elements = math.lcm(p, 64, 210) * 3
    net = _reducing_star(p, "sharp")
    graph = collective_taskgraph(algorithm.build(spec, p, elements), net.devices, 4, network=net)
    engine = simulate(graph, net, gamma_s_per_byte=2e-11).makespan_s
    closed = algorithm.time_s(spec, p, elements * 4, UniformCost(2e-6, 1e-10, 2e-11))
    if segments == 1:
        assert algorithm.closed_form_estimate(spec, p) == ""
        assert closed == pytest.approx(engine, rel=1e-9)
    else:
        assert algorithm.closed_form_estimate(spec, p) != ""
        assert -0.20 <= closed / engine - 1 <= 0.10
