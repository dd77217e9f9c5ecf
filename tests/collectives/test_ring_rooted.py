"""Ring broadcast and reduce (NCCL's pipelined chains), multi-channel ring reduce-scatter and
all-gather, and ``auto`` for the four collectives of their own: array proofs, closed forms against
the engine, lanes, and auto's choice per size."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.collectives.algorithm import UniformCost
from parplan.collectives.auto import AutoAlgorithm
from parplan.collectives.auto_collectives import chain_segments, choose_for
from parplan.collectives.nccl_search import NcclSystem, nvlink_bandwidth_GBps
from parplan.collectives.nccl_tuner import select
from parplan.collectives.registry import algorithms, build_schedule, get, parse
from parplan.collectives.ring_rooted import RingRootedSpec, chain_time_s, ring_chain
from parplan.collectives.volumes import collective_traffic
from parplan.engine.simulate import simulate
from parplan.errors import CollectiveError
from parplan.plan.collective import collective_taskgraph
from tests.collectives.cases import SEEDS, inputs, random_groups, run_and_check, sizes
from tests.engine.nets import switch_network

H100X8 = NcclSystem("hopper", 1, 8, nvlink_bandwidth_GBps("hopper", 18), nvswitch=True, nvls=True)
H100X16 = NcclSystem(
    "hopper", 2, 8, nvlink_bandwidth_GBps("hopper", 18), nvswitch=True, nvls=True,
    nics_per_node=8, nic_bandwidth_GBps=50,
)  # fmt: skip
ROOTED = ("broadcast", "reduce")


@pytest.mark.parametrize("collective", ROOTED)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_chains_compute_the_collective_on_arrays(collective: str, data: st.DataObject) -> None:
    p, n = data.draw(sizes(max_ranks=24))
    spec: dict[str, Any] = {
        "name": "ring",
        "root": data.draw(st.integers(0, p - 1)),
        "channels": data.draw(st.one_of(st.none(), st.integers(1, 4))),
        "segments": data.draw(st.one_of(st.none(), st.integers(1, 5))),
    }
    groups = data.draw(st.one_of(st.none(), random_groups(p)))
    schedule = build_schedule(spec, p, n, collective=collective, groups=groups)
    schedule.validate()
    assert schedule.collective == collective and schedule.root == spec["root"]
    arrays = inputs(data.draw(SEEDS), p, n, np.int64)
    result = run_and_check(schedule, arrays)  # exact result and dependencies proven on the data
    found = get("ring", collective)
    sent, received = found.traffic(parse(spec, collective), p, n, groups)
    np.testing.assert_array_equal(result.bytes_sent, sent * 8)
    np.testing.assert_array_equal(result.bytes_received, received * 8)
    assert result.bytes_received.sum() == (p - 1) * n * 8  # every rank but one gets n once


@pytest.mark.parametrize("collective", ["reduce_scatter", "all_gather"])
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_ring_halves_on_channels_and_nodes_compute_on_arrays(collective: str, data: st.DataObject) -> None:
    p, n = data.draw(sizes(max_ranks=24))
    spec = {"name": "ring", "channels": data.draw(st.one_of(st.none(), st.integers(1, 5)))}
    groups = data.draw(st.one_of(st.none(), random_groups(p)))
    schedule = build_schedule(spec, p, n, collective=collective, groups=groups)
    schedule.validate()
    result = run_and_check(schedule, inputs(data.draw(SEEDS), p, n, np.int64))
    sent, received = get("ring", collective).traffic(parse(spec, collective), p, n, groups)
    np.testing.assert_array_equal(result.bytes_sent, sent * 8)
    np.testing.assert_array_equal(result.bytes_received, received * 8)
    assert result.bytes_received.sum() == (p - 1) * n * 8


def test_a_chain_follows_the_nodes_and_puts_each_channel_on_its_own_lane() -> None:
    nodes = [[0, 1, 2], [3, 4, 5]]
    s = ring_chain("broadcast", 6, 60, root=4, channels=3, segments=2, groups=nodes)
    # One order: the ring of the nodes (the second backwards, so it crosses on one local index) from 4.
    assert s.meta["chains"] == ((4, 3, 0, 1, 2, 5),) * 3
    lanes = np.asarray(s.meta["lane"])
    assert sorted(set(lanes.tolist())) == [0, 1, 2] and len(lanes) == s.num_steps == 3 * 2 * 5
    reduce = ring_chain("reduce", 6, 60, root=4, channels=None, groups=nodes)
    assert reduce.meta["chains"][0][-1] == 4 and reduce.meta["channels"] == 3  # one per node member


@pytest.mark.parametrize("collective", ROOTED)
@pytest.mark.parametrize(("p", "channels", "segments"), [(2, 1, 1), (5, 1, 4), (8, 3, 6), (7, 2, 1)])
def test_the_pipelined_chain_meets_its_closed_form(
    collective: str, p: int, channels: int, segments: int
) -> None:
    elements = 3 * 3 * 4 * 5 * 7 * 64  # whole segments on every channel
    net = switch_network(p, 10e9, 1e-6)
    spec = RingRootedSpec(name="ring", root=p // 2, channels=channels, segments=segments)
    graph = collective_taskgraph(get("ring", collective).build(spec, p, elements), net.devices, 4)
    engine = simulate(graph, net).makespan_s
    cost = UniformCost(2e-6, 1e-10)
    closed = get("ring", collective).time_s(spec, p, elements * 4, cost)
    assert engine == pytest.approx(closed, rel=1e-9)
    assert closed == pytest.approx(chain_time_s(p, elements * 4, segments, 2e-6, 1e-10))


def test_segments_pipeline_the_chain() -> None:
    """(p - 2 + S)(a + n/S b): with n b >> a, S segments bring (p-1) n b down towards n b."""
    p, n_bytes, a, b = 8, 2**28, 5e-6, 1e-10
    one = chain_time_s(p, n_bytes, 1, a, b)
    many = chain_time_s(p, n_bytes, 64, a, b)
    assert one == pytest.approx(7 * (a + n_bytes * b))
    assert many < one / 5 and many > n_bytes * b  # never below the root's n bytes


def test_bad_chains_are_errors() -> None:
    with pytest.raises(CollectiveError, match="root 4 is not a rank"):
        ring_chain("broadcast", 4, 8, root=4)
    with pytest.raises(CollectiveError, match="segments must be >= 1"):
        ring_chain("reduce", 4, 8, segments=0)
    with pytest.raises(CollectiveError, match="broadcast or reduce"):
        ring_chain("all_gather", 4, 8)


# -- auto for every collective -------------------------------------------------------------------


def _auto(**kw: object) -> AutoAlgorithm:
    spec = parse({"name": "auto", **kw}, "broadcast")
    assert isinstance(spec, AutoAlgorithm)
    return spec


@pytest.mark.parametrize("collective", ["reduce_scatter", "all_gather", "broadcast", "reduce"])
@pytest.mark.parametrize("system", [H100X8, H100X16], ids=["1node", "2nodes"])
@pytest.mark.parametrize("size", [8, 2**16, 2**20, 2**28])
def test_auto_follows_the_tuner_for_every_collective(collective: str, system: NcclSystem, size: int) -> None:
    registered = algorithms(collective)
    choice = choose_for(_auto(), system, size, registered, collective)
    assert choice.nccl is not None
    others = ("nvls", "nvls_tree", "collnet_direct", "collnet_chain", "pat")
    missing = [a for a in others if a not in registered]
    want = select(system, collective, size, algorithms="^" + ",".join(missing))  # type: ignore[arg-type]
    assert (choice.nccl.algorithm, choice.protocol) == (want.algorithm, want.protocol)
    assert choice.label.startswith(f"auto={want.algorithm}")
    assert isinstance(choice.spec, get(choice.spec.name, collective).spec_type)
    schedule = build_schedule(choice.spec, system.n_ranks, max(size // 4, 1), collective=collective)
    assert schedule.collective == collective
    if collective in ROOTED:
        segments = chain_segments(size, want.channels, want.protocol)
        assert choice.label.endswith(f"/{want.channels}ch/{segments}seg")
        assert choice.spec.model_dump()["channels"] == want.channels


def test_auto_picks_ll_for_small_broadcasts_and_simple_with_more_segments_for_large_ones() -> None:
    registered = algorithms("broadcast")
    small = choose_for(_auto(), H100X8, 8, registered, "broadcast")
    large = choose_for(_auto(), H100X8, 2**30, registered, "broadcast")
    assert (small.protocol, large.protocol) == ("ll", "simple")
    assert small.label == "auto=ring/ll/1ch/1seg" and large.label.endswith("/64seg")
    forced = choose_for(_auto(protocol="ll128"), H100X8, 2**30, registered, "broadcast")
    assert forced.protocol == "ll128"


@pytest.mark.parametrize("collective", ["reduce_scatter", "all_gather", "broadcast", "reduce"])
def test_auto_without_a_gpu_is_the_collectives_ring(collective: str) -> None:
    choice = choose_for(_auto(), None, 2**20, algorithms(collective), collective)
    ring = get("ring", collective)
    assert choice.spec == ring.default_spec() and choice.label == "auto=ring/simple"
    auto_schedule = build_schedule("auto", 8, 100, collective=collective)
    ring_schedule = build_schedule("ring", 8, 100, collective=collective)
    assert auto_schedule.algorithm == "auto"
    np.testing.assert_array_equal(auto_schedule.src, ring_schedule.src)
    np.testing.assert_array_equal(auto_schedule.dep_indices, ring_schedule.dep_indices)
    auto_traffic = collective_traffic(collective, 8, 100, "auto")
    for a, b in zip(auto_traffic, collective_traffic(collective, 8, 100, "ring"), strict=True):
        np.testing.assert_array_equal(a, b)
