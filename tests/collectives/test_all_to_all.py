"""All-to-all: the schedules on arrays for many sizes, the data plane's checks of a permutation,
the closed forms, ``auto``'s choice and NCCL's p2p per-call cost (the registry-wide checks of
``test_every_algorithm.py`` cover the rest)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.api.collective import bus_factor
from parplan.collectives.algorithm import UniformCost
from parplan.collectives.all_to_all import P2P_CHANNELS_PER_PEER, PAIRWISE, RING, PairwiseSpec
from parplan.collectives.all_to_all_bruck import BRUCK, round_items
from parplan.collectives.all_to_all_hierarchical import HIERARCHICAL, HierarchicalSpec
from parplan.collectives.auto import AutoAlgorithm
from parplan.collectives.auto_collectives import ALL_TO_ALL, choose_all_to_all
from parplan.collectives.nccl_search import NcclSystem
from parplan.collectives.registry import build_schedule, schedules
from parplan.config.cluster import TransportCosts
from parplan.errors import CollectiveError
from parplan.plan.collective_run import call_overhead_s, resolve_run
from tests.collectives.cases import dep_lists, inputs, random_groups, run_and_check, with_deps

ALGORITHMS = {"pairwise": PAIRWISE, "ring": RING, "bruck": BRUCK, "hierarchical": HIERARCHICAL}


def test_the_registry_lists_the_schedules() -> None:
    assert schedules("all_to_all") == ["pairwise", "ring", "bruck", "hierarchical"]


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(sorted(ALGORITHMS)),
    p=st.integers(1, 12),
    per_rank=st.integers(0, 3),
    extra=st.integers(0, 11),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_every_schedule_delivers_every_block(
    name: str, p: int, per_rank: int, extra: int, seed: int, data: st.DataObject
) -> None:
    n = p * per_rank + extra % p
    algorithm = ALGORITHMS[name]
    groups = data.draw(random_groups(p)) if name == "hierarchical" else None
    schedule = algorithm.build(algorithm.default_spec(), p, n, groups)
    arrays = inputs(seed, p, n, np.int32)
    result = run_and_check(schedule, arrays)
    for j in range(p):  # slot r of rank j is rank r's block j
        for r in range(p):
            got = result.arrays[j][r * per_rank : (r + 1) * per_rank]
            np.testing.assert_array_equal(got, arrays[r][j * per_rank : (j + 1) * per_rank])
    sent, _ = algorithm.traffic(algorithm.default_spec(), p, n, groups)
    np.testing.assert_array_equal(result.bytes_sent, sent * 4)


def test_pairwise_posts_everything_at_once_on_channels() -> None:
    schedule = PAIRWISE.build(PAIRWISE.default_spec(), 4, 4 * 10)
    assert schedule.num_steps == 4 * 3 * P2P_CHANNELS_PER_PEER and not schedule.dep_counts.any()
    assert sorted(set(np.asarray(schedule.meta["lane"]).tolist())) == list(range(P2P_CHANNELS_PER_PEER))
    one = PAIRWISE.build(PairwiseSpec(name="pairwise", channels=1), 4, 40)
    assert one.num_steps == 12


def test_the_ring_is_one_message_per_rank_per_round() -> None:
    p = 6
    schedule = RING.build(RING.default_spec(), p, p * 2)
    assert schedule.num_steps == p * (p - 1)
    for t in range(1, p):
        steps = range((t - 1) * p, t * p)
        assert sorted(int(schedule.src[i]) for i in steps) == list(range(p))
        assert all(int(schedule.dst[i]) == (int(schedule.src[i]) + t) % p for i in steps)


def test_the_data_plane_catches_a_missing_dependency_and_a_wrong_slot() -> None:
    p, n = 4, 8
    bruck = BRUCK.build(BRUCK.default_spec(), p, n)
    deps = dep_lists(bruck)
    deps[-1] = []  # the last run forwards a block received in the first round
    with pytest.raises(CollectiveError, match=r"missing dependency|race"):
        run_and_check(with_deps(bruck, deps), inputs(0, p, n, np.int64))
    ring = RING.build(RING.default_spec(), p, n)
    wrong = dict(ring.meta)
    wrong["dst_offset"] = np.asarray(ring.meta["dst_offset"])[::-1].copy()
    with pytest.raises(CollectiveError, match=r"race|all_to_all defines"):
        run_and_check(dataclasses.replace(ring, meta=wrong), inputs(0, p, n, np.int64))


@pytest.mark.parametrize("p", [2, 4, 8, 16, 64])
def test_bruck_is_log_rounds_of_half_the_data(p: int) -> None:
    cost = UniformCost(2e-6, 1e-10)
    n = 1e6
    assert round_items(p) == [p // 2] * int(math.log2(p))
    want = math.log2(p) * (cost.alpha_s + n / 2 * cost.beta_s_per_byte)
    assert BRUCK.time_s(BRUCK.default_spec(), p, n, cost) == pytest.approx(want, rel=1e-12)
    pairwise = cost.alpha_s + (p - 1) / p * n * cost.beta_s_per_byte
    assert PAIRWISE.time_s(PAIRWISE.default_spec(), p, n, cost) == pytest.approx(pairwise, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    p=st.integers(2, 300),
    n=st.floats(1.0, 1e10),
    alpha=st.floats(1e-9, 1e-3),
    beta=st.floats(1e-13, 1e-8),
    shared=st.booleans(),
)
def test_auto_without_a_gpu_is_the_cheaper_by_closed_form_which_is_pairwise(
    p: int, n: float, alpha: float, beta: float, shared: bool
) -> None:
    cost = UniformCost(alpha, beta, shared_port=shared)
    pairwise = PAIRWISE.time_s(PAIRWISE.default_spec(), p, n, cost)
    bruck = BRUCK.time_s(BRUCK.default_spec(), p, n, cost)
    assert bruck >= pairwise * (1 - 1e-12)
    assert ALL_TO_ALL.time_s(AutoAlgorithm(name="auto"), p, n, cost) == pytest.approx(pairwise, rel=1e-12)


def test_auto_on_gpus_is_pairwise_with_nccls_p2p_protocol() -> None:
    system = NcclSystem("hopper", 2, 8, 450.0, nvswitch=True, nics_per_node=8, nic_bandwidth_GBps=50.0)
    auto = AutoAlgorithm(name="auto")
    small = choose_all_to_all(auto, system, 16 * 16384)  # 16 KiB per peer: LL
    large = choose_all_to_all(auto, system, 16 * 16385)
    assert (small.protocol, large.protocol) == ("ll", "simple")
    assert small.label == f"auto=pairwise/ll/{P2P_CHANNELS_PER_PEER}ch"
    assert small.spec.channels  # type: ignore[attr-defined] == P2P_CHANNELS_PER_PEER
    forced = choose_all_to_all(AutoAlgorithm(name="auto", protocol="simple"), system, 64)
    assert forced.protocol == "simple"
    run = resolve_run(
        auto, 1024.0, system, TransportCosts("nccl", call_latency_s=5e-6), collective="all_to_all"
    )
    assert run.spec.name == "pairwise" and run.call_overhead_s == pytest.approx(5e-6)


def test_p2p_calls_pay_no_collective_base_latency() -> None:
    nccl = TransportCosts("nccl", call_latency_s=5e-6)
    assert call_overhead_s(nccl, "pairwise", "simple", "all_to_all") == pytest.approx(5e-6)
    assert call_overhead_s(nccl, "ring", "simple") > 5e-6


def test_busbw_is_alltoall_perfs() -> None:
    assert bus_factor("all_to_all", 8) == pytest.approx(7 / 8)


def test_short_forms() -> None:
    assert build_schedule("pairwise:3", 3, 9, collective="all_to_all").meta["channels"] == 3
    assert build_schedule("bruck", 5, 10, collective="all_to_all").meta["regions"] == 2 + 3


@pytest.mark.parametrize("name", ["pairwise", "ring", "bruck"])
def test_lowered_into_a_step_a_slow_rank_delays_what_it_sends_and_receives(name: str) -> None:
    """As expert parallelism lowers it (``plan.collective.lower_schedule`` with per-rank ready
    tasks): what rank 2 sends waits for its compute, and every rank is done only once its blocks
    arrived, rank 2's among them."""
    from parplan.engine.simulate import simulate
    from parplan.plan.collective import lower_schedule
    from parplan.taskgraph import TaskGraphBuilder
    from tests.engine.nets import switch_network

    p = 4
    net = switch_network(p, 1e9, 1e-6)
    schedule = build_schedule(name, p, 4000, collective="all_to_all")
    b = TaskGraphBuilder()
    slow = b.compute("h2", 1.0)
    tasks = lower_schedule(
        b, schedule, net.devices, element_bytes=1.0, rank_deps=[[], [], [slow], []], category="alltoall"
    )
    result = simulate(b.build(), net)
    starts = result.start_s[tasks.first_task : tasks.first_task + tasks.num_steps]
    assert starts[schedule.src == 2].min() >= 1.0
    others = [done for r, done in enumerate(tasks.rank_done) if r != 2]
    assert all(result.end_s[done] > 1.0 for done in others)  # they wait for rank 2's block
    if name == "pairwise":  # the others' sends to each other do not wait for rank 2
        assert starts[(schedule.src != 2)].min() == 0.0


def test_hierarchical_crosses_nodes_once_per_pair_of_leaders() -> None:
    """4 nodes of 4: gather to each node's first rank, one message (here one run of own blocks
    and one of gathered ones, each split where a slot is final) per pair of leaders, scatter."""
    p, g = 16, 4
    schedule = HIERARCHICAL.build(HierarchicalSpec(name="hierarchical", group_size=g), p, p * 3)
    node = np.arange(p) // g
    across = node[schedule.src] != node[schedule.dst]
    assert set(schedule.src[across].tolist()) == {0, 4, 8, 12}  # only leaders cross
    assert int(schedule.length[across].sum()) == (p // g) * (p // g - 1) * g * g * 3
    cost = UniformCost(1e-6, 1e-9)
    m, k_bytes = p // g, 1e6 / p
    want = sum(
        cost.alpha_s + blocks * k_bytes * cost.beta_s_per_byte
        for blocks in ((g - 1) * (p - g + 1), (m - 1) * g * g, (g - 1) * (p - g))
    )
    spec = HierarchicalSpec(name="hierarchical", group_size=g)
    assert HIERARCHICAL.time_s(spec, p, 1e6, cost) == pytest.approx(want, rel=1e-12)
