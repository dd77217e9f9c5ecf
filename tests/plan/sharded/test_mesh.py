"""The sharded plan's device mesh: placement, groups per axis on 2-node clusters, and every check."""

from __future__ import annotations

from typing import Any

import pytest

from parplan.config.strategy import ShardedStrategy
from parplan.errors import PlanError
from parplan.plan.sharded.mesh import build_mesh, microbatches_per_pipeline
from parplan.topology.build import build_network
from parplan.topology.network import Network
from tests.plan.strategy_helpers import dgx_cluster


@pytest.fixture(scope="module")
def net() -> Network:
    return build_network(dgx_cluster(nodes=2, per_node=8))


def sharded(**kw: Any) -> ShardedStrategy:
    return ShardedStrategy.model_validate({"kind": "sharded", **kw})


def node(n: int, *ds: int) -> tuple[str, ...]:
    return tuple(f"n{n}.d{d}" for d in ds)


def test_default_placement_tp_inside_nodes_pp_then_dp_outside(net: Network) -> None:
    mesh = build_mesh(sharded(tp=4, pp=2), net)
    assert (mesh.tp, mesh.pp, mesh.cp, mesh.dp) == (4, 2, 1, 2)
    assert mesh.group("tp", "n0.d5") == node(0, 4, 5, 6, 7)
    assert mesh.group("pp", "n0.d5") == ("n0.d1", "n0.d5")
    assert mesh.group("dp", "n0.d5") == ("n0.d5", "n1.d5")
    assert mesh.group("embedding", "n0.d1") == ("n0.d1", "n0.d5")
    assert mesh.coords("n1.d6") == {"tp": 2, "cp": 0, "pp": 1, "dp": 1}
    assert mesh.device({"tp": 2, "pp": 1, "dp": 1}) == "n1.d6"
    assert mesh.stage_devices(1) == (*node(0, 4, 5, 6, 7), *node(1, 4, 5, 6, 7))
    assert mesh.notes() == ()


def test_every_device_has_one_coordinate_and_back(net: Network) -> None:
    mesh = build_mesh(sharded(tp=2, cp=2, pp=2), net)
    seen = {mesh.device(mesh.coords(d)) for d in mesh.devices}
    assert seen == set(mesh.devices) and len(mesh.devices) == 16


def test_placement_dp_innermost_spreads_tp_over_nodes(net: Network) -> None:
    mesh = build_mesh(sharded(tp=2, pp=1, dp=8, placement=["dp", "tp", "cp", "pp"]), net)
    assert mesh.group("dp", "n0.d0") == node(0, *range(8))
    assert mesh.group("tp", "n0.d0") == ("n0.d0", "n1.d0")
    assert mesh.spans_nodes("tp")
    assert any("TP groups span nodes" in n for n in mesh.notes())


def test_cp_and_dp_cp_groups(net: Network) -> None:
    mesh = build_mesh(sharded(tp=2, cp=2, pp=2), net)  # dp = 2
    assert mesh.group("cp", "n0.d0") == ("n0.d0", "n0.d2")
    assert mesh.group("dp_cp", "n0.d0") == ("n0.d0", "n0.d2", "n1.d0", "n1.d2")


def test_expert_groups_carved_from_dp_x_cp(net: Network) -> None:
    mesh = build_mesh(sharded(tp=2, pp=1, ep=4), net)  # dp = 8: ranks n0.d0, d2, .., n1.d6
    data = mesh.group("dp_cp", "n0.d0")
    assert data == (*node(0, 0, 2, 4, 6), *node(1, 0, 2, 4, 6))
    assert mesh.group("ep", "n0.d4") == node(0, 0, 2, 4, 6)
    assert mesh.group("ep", "n1.d2") == node(1, 0, 2, 4, 6)
    assert mesh.group("edp", "n0.d2") == ("n0.d2", "n1.d2")


def test_placement_naming_ep_splits_dp(net: Network) -> None:
    mesh = build_mesh(sharded(tp=2, ep=2, placement=["tp", "cp", "pp", "dp", "ep"]), net)
    # dp = 8 = ep 2 (outermost) x 4; the EP pair is one device apart by half the cluster
    assert mesh.group("dp", "n0.d0") == (*node(0, 0, 2, 4, 6), *node(1, 0, 2, 4, 6))
    assert mesh.coords("n1.d0")["dp"] == 1
    assert mesh.device({"dp": 1}) == "n1.d0"


def test_hybrid_shard_groups_default_to_one_node(net: Network) -> None:
    mesh = build_mesh(sharded(fsdp="hybrid_shard"), net)  # dp 16
    assert mesh.sizes["dp_shard"] == 8
    assert mesh.group("dp_shard", "n1.d3") == node(1, *range(8))
    assert mesh.group("dp_replicate", "n1.d3") == ("n0.d3", "n1.d3")


def test_plan_on_part_of_the_cluster_and_on_listed_devices(net: Network) -> None:
    assert build_mesh(sharded(tp=2, dp=2), net).devices == node(0, 0, 1, 2, 3)
    listed = ("n1.d0", "n1.d1", "n0.d0", "n0.d1")
    assert build_mesh(sharded(tp=2, dp=2, devices=listed), net).group("dp", "n1.d0") == ("n1.d0", "n0.d0")


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"tp": 3}, "16 devices are not a multiple of tp x pp x cp = 3 x 1 x 1 = 3"),
        ({"tp": 8, "dp": 4}, "dp x tp x pp x cp = 4 x 8 x 1 x 1 = 32 devices; the cluster has 16"),
        ({"tp": 2, "dp": 1, "devices": ["n0.d0", "n0.d1", "n0.d2"]}, "devices lists 3 devices but dp x tp"),
        ({"tp": 2, "dp": 1, "devices": ["n0.d0", "x"]}, "devices names 'x'"),
        ({"tp": 2, "dp": 1, "devices": ["n0.d0", "n0.d0"]}, "lists 'n0.d0' more than once"),
        ({"tp": 2, "ep": 3}, "ep (3) must divide dp x cp (8 x 1)"),
        ({"pp": 2, "virtual_stages": 2}, "set schedule: interleaved_1f1b"),
        ({"fsdp": "hybrid_shard", "shard_group": 3}, "shard_group (3) must divide"),
        ({"ep": 2, "placement": ["tp", "cp", "pp", "dp", "ep"], "dp": 3}, "ep (2) must divide dp x cp"),
    ],
)
def test_mesh_checks_say_what_disagrees(net: Network, kw: dict[str, Any], message: str) -> None:
    with pytest.raises(PlanError) as err:
        build_mesh(sharded(**kw), net)
    assert message in str(err.value)


def test_microbatches_per_pipeline() -> None:
    assert microbatches_per_pipeline(sharded(microbatch_size=2), 64, 4) == 8
    with pytest.raises(PlanError, match=r"global batch 60 is not a multiple of dp x microbatch_size = 4 x 2"):
        microbatches_per_pipeline(sharded(microbatch_size=2), 60, 4)
