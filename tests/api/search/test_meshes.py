"""A search's meshes and their groups by rank arithmetic (:mod:`parplan.api.search.meshes`) and
the copies on the first nodes found from runs of ranks
(:meth:`~parplan.plan.sharded.clock.GroupClock.canonical_run`): each equal to what it replaces."""

from __future__ import annotations

import random

import numpy as np
import pytest

from parplan.api.search.meshes import Meshes, group_of, run_of, run_period
from parplan.api.search.space import enumerate_space
from parplan.config.loader import load_cluster
from parplan.plan.sharded.clock import GroupClock
from parplan.plan.sharded.mesh import build_mesh
from parplan.plan.sharded.symmetry import node_symmetry, regular_node_size
from parplan.topology.build import build_network
from tests.api.search.helpers import LLM_SAMPLES, ROOT, first_candidate, sample, search_of

_AXES = ("tp", "cp", "pp", "dp", "ep", "dp_cp", "edp", "dp_shard", "dp_replicate", "embedding")
_CLUSTERS = ROOT / "sample_configs" / "clusters"
_CLUSTER_FILES = sorted(str(p.relative_to(_CLUSTERS)) for p in _CLUSTERS.rglob("*.*") if p.is_file())


@pytest.mark.parametrize("name", LLM_SAMPLES)
def test_runs_of_ranks_are_the_groups_and_their_copies(name: str) -> None:
    """On every mesh of the space (with and without hybrid sharding), each stage's group of each
    axis is the run :func:`run_of` gives (None only for the data axes with cp > 1), and the copy
    :meth:`GroupClock.canonical_run` finds for it is :meth:`GroupClock.canonical`'s, on a clock
    whose memos started empty."""
    _, ctx = sample(name)
    search = search_of(name)
    table, _ = enumerate_space(ctx, search)
    meshes = Meshes(ctx.network)
    clock = GroupClock(ctx.network, share_congruent=True)
    clock._runs, clock._canonical = {}, {}  # this test's own memos: every run worked out here
    fresh = GroupClock(ctx.network, share_congruent=True)
    fresh._canonical = {}
    devices = ctx.network.devices
    _, first = np.unique(
        np.stack([table.devices, table.tp, table.pp, table.cp, table.ep], axis=1), axis=0, return_index=True
    )
    for row in first:
        strategy = table.strategy(int(row), search)
        for fsdp in ("none", "hybrid_shard"):
            mesh = meshes.build(strategy.model_copy(update={"fsdp": fsdp, "zero": 0}))
            assert meshes.shape(mesh) is not None
            assert mesh.devices == devices[: len(mesh.devices)]  # its ranks are the network's
            for axis in _AXES:
                for stage in range(mesh.pp):
                    group = group_of(mesh, axis, stage)
                    run = run_of(mesh, axis, stage)
                    if run is None:
                        assert mesh.cp > 1 and axis in ("dp_cp", "edp", "dp_shard", "dp_replicate", "ep")
                        continue
                    start, stride, count = run
                    assert tuple(devices[start + k * stride] for k in range(count)) == group
                    assert clock.canonical_run(*run) == fresh.canonical(group), (axis, stage)


def test_meshes_keep_one_mesh_per_shape() -> None:
    """A shape is laid out once and read back; a mesh :func:`build_mesh` made has no shape."""
    ctx, strategy = first_candidate("llama3-70b-64xh100")
    meshes = Meshes(ctx.network)
    mesh = meshes.build(strategy)
    assert meshes.build(strategy.model_copy(update={"microbatch_size": 2})) is mesh
    assert meshes.shape(mesh) == (
        strategy.dp,
        strategy.tp,
        strategy.pp,
        strategy.cp,
        strategy.ep,
        strategy.dp,
    )
    assert meshes.shape(build_mesh(strategy, ctx.network)) is None


@pytest.mark.parametrize("cluster", _CLUSTER_FILES)
def test_regular_node_size_equals_the_rank_by_rank_check(cluster: str) -> None:
    """:func:`regular_node_size` is ``g`` exactly when device ``r`` sits on the ``r // g``-th node
    at the position of node 0's device ``r % g`` (nodes interchangeable)."""
    network = build_network(load_cluster(_CLUSTERS / cluster))
    symmetry = node_symmetry(network)
    expected = None
    if symmetry is not None:
        nodes, where = symmetry
        size = len(network.devices) // len(nodes)
        names = [where[d][1] for d in network.devices[:size]]
        if all(where[d] == (r // size, names[r % size]) for r, d in enumerate(network.devices)):
            expected = size
    assert regular_node_size(network) == expected


def test_canonical_run_without_regular_numbering_reads_the_devices() -> None:
    """Devices numbered other than node by node alike: no regular numbering, no memo on the run's
    shape, the copy of the devices themselves."""
    network = build_network(load_cluster(_CLUSTERS / "dgx-a100-128nodes.yaml"))
    devices = list(network.devices)
    random.Random(3).shuffle(devices)
    network.devices = tuple(devices)  # the same nodes, numbered out of order
    assert node_symmetry(network) is not None
    assert regular_node_size(network) is None
    clock = GroupClock(network, share_congruent=True)
    for start, stride, count in ((0, 1, 8), (3, 8, 16), (5, 24, 40)):
        group = tuple(devices[start + k * stride] for k in range(count))
        assert clock.canonical_run(start, stride, count) == clock.canonical(group)
    assert not clock._runs


@pytest.mark.parametrize("cluster", _CLUSTER_FILES)
def test_clock_sharing_congruent_groups_groups_ranks_by_node_as_placement_does(cluster: str) -> None:
    """With the nodes interchangeable the clock groups ranks by each device's node number
    (:func:`node_symmetry`) instead of reading the graph: the same groups."""
    from parplan.topology.placement import groups_by_node

    network = build_network(load_cluster(_CLUSTERS / cluster))
    clock = GroupClock(network, share_congruent=True)
    clock._groups_by_node = {}
    rng = random.Random(cluster)
    devices = list(network.devices)
    for _ in range(20):
        group = tuple(rng.sample(devices, rng.randint(1, len(devices))))
        assert clock._node_groups(group) == tuple(tuple(g) for g in groups_by_node(network, group))


@pytest.mark.parametrize("name", LLM_SAMPLES)
def test_runs_a_period_apart_have_one_canonical_group(name: str) -> None:
    """:func:`run_period`: where it gives ``g``, every stage's run of every axis, moved by ``g``
    ranks (within the cluster), has the canonical group of the run itself, worked out from the
    devices on a clock whose memos started empty; a clock that does not share congruent groups,
    or a cluster numbered out of node order, has no period."""
    _, ctx = sample(name)
    search = search_of(name)
    table, _ = enumerate_space(ctx, search)
    clock = GroupClock(ctx.network, share_congruent=True)
    period = run_period(clock, ctx.network)
    assert period == regular_node_size(ctx.network)
    assert run_period(GroupClock(ctx.network), ctx.network) is None
    if period is None:
        return
    fresh = GroupClock(ctx.network, share_congruent=True)
    fresh._canonical = {}
    devices = ctx.network.devices
    meshes = Meshes(ctx.network)
    _, first = np.unique(np.stack([table.devices, table.tp, table.pp], axis=1), axis=0, return_index=True)
    for row in first:
        mesh = meshes.build(table.strategy(int(row), search).model_copy(update={"fsdp": "none", "zero": 0}))
        for axis in _AXES:
            for stage in range(mesh.pp):
                run = run_of(mesh, axis, stage)
                if run is None:
                    continue
                start, stride, count = run
                ranks = [start + period + k * stride for k in range(count)]
                if min(ranks) >= 0 and max(ranks) < len(devices):  # the copy fits in the cluster
                    copy = tuple(devices[r] for r in ranks)
                    assert fresh.canonical(copy) == fresh.canonical(group_of(mesh, axis, stage))


def test_a_cluster_numbered_out_of_node_order_has_no_run_period() -> None:
    network = build_network(load_cluster(_CLUSTERS / "dgx-a100-128nodes.yaml"))
    devices = list(network.devices)
    random.Random(3).shuffle(devices)
    network.devices = tuple(devices)
    assert run_period(GroupClock(network, share_congruent=True), network) is None
