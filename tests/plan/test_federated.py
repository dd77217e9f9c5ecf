"""The federated strategy: rounds timed on the engine, selection policies, FedAvg quality."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.api.evaluate import evaluate_plan, makespan_s
from parplan.config.cluster import ClusterSpec
from parplan.config.model import ModelSpec
from parplan.config.scenario import PlanSpec, TrainingSpec
from parplan.config.strategy import FederatedStrategy
from parplan.errors import PlanError, TopologyError
from parplan.model.graph import build_model
from parplan.plan.base import PlanContext, PlanWork
from parplan.plan.compute import step_compute
from parplan.plan.repeated import MAX_SIMULATED_UNITS
from parplan.plan.strategies import expand
from parplan.plan.strategies.federated import aggregation_seconds
from parplan.taskgraph import TRANSFER
from parplan.topology.build import build_network

PARAMS = 1e6
MODEL_BYTES = 2e6  # 1M parameters x 2 bytes
MODEL = ModelSpec.model_validate(
    {"name": "one", "nodes": [{"id": "net", "params": PARAMS, "forward_flops": 1e9, "activation": 1000}]}
)


def edge_cluster(
    server_Bps: float,
    client_Bps: list[float],
    speeds: list[float] | None = None,
    latency_s: float = 0.0,
) -> ClusterSpec:
    """A server and clients ``c0 ..`` on one switch; each client its own link speed and device speed."""
    speeds = speeds or [1.0] * len(client_Bps)
    device = {"peak_flops": 1e12, "efficiency": 1.0, "memory": 8 * 2**30, "memory_bandwidth": 1e12}
    return ClusterSpec.model_validate(
        {
            "devices": [{"name": "server", **device, "memory_bandwidth": 1e13}]
            + [{"name": f"c{i}", **device, "speed_factor": s} for i, s in enumerate(speeds)],
            "switches": [{"name": "sw"}],
            "links": [{"a": "server", "b": "sw", "bandwidth": server_Bps, "latency": latency_s}]
            + [
                {"a": f"c{i}", "b": "sw", "bandwidth": bw, "latency": latency_s}
                for i, bw in enumerate(client_Bps)
            ],
        }
    )


def ctx_for(cluster: ClusterSpec, batch: int = 400, **training: Any) -> PlanContext:
    training_spec = TrainingSpec(global_batch_size=batch, **training)
    return PlanContext(build_network(cluster), build_model(MODEL), MODEL, training_spec, simulator=makespan_s)


def fed(**fields: Any) -> FederatedStrategy:
    return FederatedStrategy.model_validate({"kind": "federated", **fields})


def client_compute_s(ctx: PlanContext, device: str, samples: int, local_steps: int = 1) -> float:
    return local_steps * step_compute(ctx, device, None, float(samples)).total_s


# -- scaling with k -----------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_round_grows_linearly_in_k_when_the_server_link_is_the_bottleneck(k: int) -> None:
    """k downloads share the server's uplink and k uploads its downlink: 2 k S / B_server."""
    ctx = ctx_for(edge_cluster(1e7, [1e11] * 8))
    work = expand(ctx, fed(num_clients=8, rounds=3, client_selection={"kind": "random", "k": k, "seed": 1}))
    compute = client_compute_s(ctx, "c0", 50)
    expected = 2 * k * MODEL_BYTES / 1e7 + compute + k * aggregation_seconds(ctx, "server")
    times = work.quality["round_times_s"]
    assert times == pytest.approx([expected] * 3, rel=1e-9)
    assert compute < MODEL_BYTES / 1e7  # the link really is the bottleneck here


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_round_is_constant_in_k_when_the_server_link_is_fast(k: int) -> None:
    """A server link faster than all clients together: every client runs at its own link's speed."""
    ctx = ctx_for(edge_cluster(1e12, [1e7] * 8))
    work = expand(ctx, fed(num_clients=8, rounds=2, client_selection={"kind": "random", "k": k, "seed": 1}))
    compute = client_compute_s(ctx, "c0", 50)
    agg = aggregation_seconds(ctx, "server")
    expected = 2 * MODEL_BYTES / 1e7 + compute + k * agg
    times = work.quality["round_times_s"]
    assert times == pytest.approx([expected] * 2, rel=1e-9)
    # the only k-dependence is the server folding k updates one after another: under a microsecond each
    assert k * agg < 1e-5 * times[0]


# -- heterogeneity ------------------------------------------------------------------------------
def test_a_slow_client_sets_the_round_time() -> None:
    ctx = ctx_for(edge_cluster(1e12, [1e11] * 4, speeds=[1.0, 1.0, 1.0, 0.25]))
    work = expand(ctx, fed(num_clients=4, samples_per_client=[100] * 4))
    slow = client_compute_s(ctx, "c3", 100)
    fast = client_compute_s(ctx, "c0", 100)
    assert slow == pytest.approx(4 * fast)
    (round_s,) = work.quality["round_times_s"]
    assert slow < round_s < slow * 1.01
    fast_only = expand(ctx, fed(num_clients=3, samples_per_client=[100] * 3))  # c0 .. c2
    assert fast_only.quality["round_times_s"][0] < round_s / 3


def test_a_slow_link_sets_the_round_time() -> None:
    ctx = ctx_for(edge_cluster(1e12, [1e10, 1e10, 1e10, 1e7], latency_s=1e-3))
    work = expand(ctx, fed(num_clients=4))
    (round_s,) = work.quality["round_times_s"]
    slow_link = 2 * (MODEL_BYTES / 1e7 + 2e-3)  # each way: the bytes at 10 MB/s plus two hops of latency
    assert round_s == pytest.approx(slow_link + client_compute_s(ctx, "c3", 100), rel=1e-3)


def test_fastest_k_picks_the_fast_clients_and_the_short_rounds() -> None:
    ctx = ctx_for(
        edge_cluster(1e12, [1e9, 1e7, 1e9, 1e9, 1e9, 1e9], speeds=[1.0, 1.0, 0.1, 2.0, 1.0, 0.5]),
        batch=600,
    )
    fastest = expand(ctx, fed(num_clients=6, rounds=4, client_selection={"kind": "fastest", "k": 3}))
    assert fastest.quality["selected_per_round"] == [[0, 3, 4]] * 4
    trips = fastest.quality["estimated_round_trip_s"]
    assert sorted(range(6), key=trips.__getitem__)[:3] == [3, 0, 4]
    everyone = expand(ctx, fed(num_clients=6, rounds=4))
    random = expand(ctx, fed(num_clients=6, rounds=4, client_selection={"kind": "random", "k": 3}))
    assert fastest.quality["mean_round_time_s"] < random.quality["mean_round_time_s"]
    assert random.quality["mean_round_time_s"] <= everyone.quality["mean_round_time_s"]
    # the slowest selected client bounds the round: client 0 (speed 1) among the fastest three
    assert fastest.quality["round_times_s"][0] == pytest.approx(max(trips[c] for c in (0, 3, 4)), rel=0.02)


def test_random_selection_is_seeded_and_deterministic() -> None:
    ctx = ctx_for(edge_cluster(1e9, [1e8, 2e8, 3e8, 4e8, 5e8, 6e8], speeds=[1, 2, 3, 1, 2, 3]))
    strategy = fed(num_clients=6, rounds=10, client_selection={"kind": "random", "k": 2, "seed": 5})
    a, b = expand(ctx, strategy), expand(ctx, strategy)
    assert a.quality == b.quality
    assert np.array_equal(a.graph.size_bytes, b.graph.size_bytes)
    other = expand(ctx, fed(num_clients=6, rounds=10, client_selection={"kind": "random", "k": 2, "seed": 6}))
    assert other.quality["selected_per_round"] != a.quality["selected_per_round"]
    assert len({tuple(s) for s in a.quality["selected_per_round"]}) > 3
    assert len(set(a.quality["round_times_s"])) > 1  # other clients, other round times


def test_round_robin_rounds_differ_and_the_total_is_their_sum() -> None:
    ctx = ctx_for(edge_cluster(1e12, [1e9] * 4, speeds=[1.0, 1.0, 0.2, 0.2]))
    work = expand(ctx, fed(num_clients=4, rounds=4, client_selection={"kind": "round_robin", "k": 2}))
    q = work.quality
    assert q["selected_per_round"] == [[0, 1], [2, 3], [0, 1], [2, 3]]
    t = q["round_times_s"]
    assert t[0] == pytest.approx(t[2]) and t[1] == pytest.approx(t[3])
    assert t[1] > 3 * t[0]
    assert q["total_time_s"] == pytest.approx(sum(t))
    assert q["mean_round_time_s"] == pytest.approx(sum(t) / 4)
    assert work.graph.meta["run_time_s"] == pytest.approx(sum(t))


# -- the graph and its reading ------------------------------------------------------------------
def test_round_graph_moves_the_model_both_ways_for_each_selected_client() -> None:
    ctx = ctx_for(edge_cluster(1e10, [1e9] * 5))
    work = expand(ctx, fed(num_clients=5, rounds=1, client_selection={"kind": "round_robin", "k": 3}))
    g = work.graph
    tr = np.flatnonzero(g.kind == TRANSFER)
    assert len(tr) == 6
    assert np.all(g.size_bytes[tr] == MODEL_BYTES)
    server = g.devices.index("server")
    downs = sorted(g.devices[d] for d in g.dst[tr][g.device[tr] == server])
    ups = sorted(g.devices[s] for s in g.device[tr][g.dst[tr] == server])
    assert downs == ups == ["c0", "c1", "c2"]
    assert work.unit == "round" and work.units_per_run == 1
    assert work.samples_per_unit == 3 * 80  # 400 samples over 5 clients, 3 selected, one local step


def test_local_steps_multiply_compute_and_samples() -> None:
    ctx = ctx_for(edge_cluster(1e12, [1e11] * 2))
    one = expand(ctx, fed(num_clients=2, local_steps=1))
    five = expand(ctx, fed(num_clients=2, local_steps=5))
    assert five.samples_per_unit == 5 * one.samples_per_unit
    comm = one.quality["round_times_s"][0] - client_compute_s(ctx, "c0", 200)
    assert five.quality["round_times_s"][0] - comm == pytest.approx(
        5 * client_compute_s(ctx, "c0", 200), rel=1e-6
    )


def test_the_shown_round_is_the_upper_median_and_the_evaluator_reports_the_run() -> None:
    ctx = ctx_for(edge_cluster(1e12, [1e9] * 6, speeds=[1, 1, 0.5, 0.5, 0.25, 0.25]))
    spec = PlanSpec.model_validate(
        {
            "name": "fl",
            "strategy": {
                "kind": "federated",
                "num_clients": 6,
                "rounds": 9,
                "client_selection": {"kind": "random", "k": 2, "seed": 3},
            },
        }
    )
    result = evaluate_plan(ctx, spec)
    q = result.quality
    times = q["round_times_s"]
    assert result.unit == "round"
    assert result.step_time_s == pytest.approx(times[q["shown_round"]], rel=1e-12)
    assert sorted(times)[len(times) // 2] == times[q["shown_round"]]
    assert result.units_per_run == 9
    assert result.run_time_s == pytest.approx(sum(times))
    assert result.throughput_samples_per_s == pytest.approx(result.samples_per_step / result.step_time_s)
    assert q["loss_per_round"][-1] < q["initial_loss"]


def test_clients_share_devices_when_there_are_more_clients_than_devices() -> None:
    ctx = ctx_for(edge_cluster(1e12, [1e11] * 2))
    work = expand(ctx, fed(num_clients=4))
    assert work.quality["client_devices"] == ["c0", "c1", "c0", "c1"]
    assert any("take turns" in n and "c0: clients 0, 2" in n for n in work.notes)
    one_each = expand(ctx, fed(num_clients=2))  # same 400 samples, 200 per client, one client per device
    # two clients of 100 samples one after the other on each device: same compute as one client of 200
    assert work.quality["round_times_s"][0] == pytest.approx(one_each.quality["round_times_s"][0], rel=1e-3)


def test_memory_of_server_and_clients() -> None:
    ctx = ctx_for(edge_cluster(1e12, [1e11] * 2))
    work = expand(ctx, fed(num_clients=3, samples_per_client=[10, 30, 20]))
    mem = {m.device: m for m in work.memory}
    assert mem["server"].params_bytes == MODEL_BYTES and mem["server"].buffers_bytes == MODEL_BYTES
    assert mem["server"].optimizer_bytes == 0
    assert mem["c0"].optimizer_bytes == PARAMS * 12
    assert mem["c0"].activations_bytes == 20 * 1000  # clients 0 and 2 take turns: the larger shard
    assert mem["c1"].activations_bytes == 30 * 1000


def test_quality_reports_fedavg_per_round() -> None:
    ctx = ctx_for(edge_cluster(1e12, [1e11] * 4))
    work = expand(ctx, fed(num_clients=4, rounds=12, local_steps=3, samples_per_client=[50, 100, 200, 400]))
    q = work.quality
    assert len(q["loss_per_round"]) == len(q["round_times_s"]) == len(q["selected_per_round"]) == 12
    assert q["loss_per_round"][-1] < 0.75 * q["initial_loss"]
    assert 0.5 < q["accuracy"] <= 1.0
    mean = expand(
        ctx,
        fed(
            num_clients=4,
            rounds=12,
            local_steps=3,
            aggregation="mean",
            samples_per_client=[50, 100, 200, 400],
        ),
    )
    assert mean.quality["loss_per_round"] != q["loss_per_round"]
    assert mean.quality["round_times_s"] == q["round_times_s"]  # same work, different weights


def test_straggler_jitter_varies_rounds_reproducibly() -> None:
    ctx = ctx_for(edge_cluster(1e12, [1e11] * 3), straggler_jitter=0.2, seed=1)
    a = expand(ctx, fed(num_clients=3, rounds=6))
    b = expand(ctx, fed(num_clients=3, rounds=6))
    assert a.quality["round_times_s"] == b.quality["round_times_s"]
    assert len(set(a.quality["round_times_s"])) == 6


def test_long_runs_simulate_the_first_rounds_and_extrapolate() -> None:
    ctx = ctx_for(edge_cluster(1e12, [1e11] * 2))
    work = expand(ctx, fed(num_clients=2, rounds=MAX_SIMULATED_UNITS + 30))
    q = work.quality
    assert q["simulated_rounds"] == MAX_SIMULATED_UNITS == len(q["round_times_s"])
    assert q["total_time_s"] == pytest.approx(q["mean_round_time_s"] * (MAX_SIMULATED_UNITS + 30))
    assert work.units_per_run == MAX_SIMULATED_UNITS + 30
    assert any("extrapolates" in n for n in work.notes)


def test_placement_errors() -> None:
    lonely = ClusterSpec.model_validate({"devices": [{"name": "only", "peak_flops": 1e12, "memory": 1e9}]})
    with pytest.raises(PlanError, match="no device besides the server"):
        expand(ctx_for(lonely), fed(num_clients=2))
    ctx = ctx_for(edge_cluster(1e9, [1e9] * 2))
    with pytest.raises(TopologyError, match="nowhere"):
        expand(ctx, fed(num_clients=2, server="nowhere"))
    with pytest.raises(TopologyError, match="ghost"):
        expand(ctx, fed(num_clients=2, clients=["c0", "ghost"]))


def test_expand_returns_planwork_with_every_device() -> None:
    ctx = ctx_for(edge_cluster(1e9, [1e9] * 3))
    work = expand(ctx, fed(num_clients=3, server="c1"))
    assert isinstance(work, PlanWork)
    assert work.devices == ("c1", "server", "c0", "c2")
    assert work.quality["server"] == "c1"


def test_a_local_step_is_one_batch_of_the_scenario_batch_size() -> None:
    ctx = ctx_for(edge_cluster(1e12, [1e11] * 3), batch=64)
    work = expand(ctx, fed(num_clients=3, local_steps=4, samples_per_client=[1000, 30, 500]))
    q = work.quality
    assert q["local_batch_per_client"] == [64, 30, 64]  # a client with fewer samples uses them all
    assert work.samples_per_unit == 4 * (64 + 30 + 64)
    slowest = client_compute_s(ctx, "c0", 64, local_steps=4)
    assert slowest < q["round_times_s"][0] < slowest * 1.01
    mem = {m.device: m for m in work.memory}
    assert mem["c0"].activations_bytes == 64 * 1000 and mem["c1"].activations_bytes == 30 * 1000


@settings(max_examples=25, deadline=None)
@given(
    links=st.lists(st.sampled_from([1e6, 1e7, 1e8, 1e9]), min_size=2, max_size=6),
    data=st.data(),
    server_Bps=st.sampled_from([1e7, 1e9, 1e11]),
    seed=st.integers(0, 1000),
)
def test_round_times_lie_between_the_contention_free_bound_and_full_serialisation(
    links: list[float], data: st.DataObject, server_Bps: float, seed: int
) -> None:
    n = len(links)
    speeds = data.draw(st.lists(st.sampled_from([0.1, 0.5, 1.0, 2.0]), min_size=n, max_size=n))
    k = data.draw(st.integers(1, n))
    ctx = ctx_for(edge_cluster(server_Bps, links, speeds=speeds, latency_s=1e-3))
    work = expand(
        ctx, fed(num_clients=n, rounds=3, client_selection={"kind": "random", "k": k, "seed": seed})
    )
    q = work.quality
    trips = q["estimated_round_trip_s"]
    agg = aggregation_seconds(ctx, "server")
    for chosen, t in zip(q["selected_per_round"], q["round_times_s"], strict=True):
        assert len(chosen) == k
        assert t >= max(trips[c] for c in chosen) * (1 - 1e-9)  # no client beats its own round trip
        assert t <= sum(trips[c] for c in chosen) + k * agg + 1e-9  # at worst everything in series


def test_huge_local_step_counts_are_timed_in_full_but_trained_only_in_part() -> None:
    """A file asking for 10^18 local steps must not hang the planner: the FedAvg numerics train at
    most MAX_TRAINED_LOCAL_STEPS and say so; the round time still counts every step."""
    from parplan.plan.strategies.federated import MAX_TRAINED_LOCAL_STEPS

    ctx = ctx_for(edge_cluster(1e12, [1e11] * 2))
    few = expand(ctx, fed(num_clients=2, samples_per_client=[100] * 2, local_steps=1))
    huge = expand(ctx, fed(num_clients=2, samples_per_client=[100] * 2, local_steps=10**18))
    assert huge.quality["round_times_s"][0] > 1e15 * few.quality["round_times_s"][0]
    assert any(f"train {MAX_TRAINED_LOCAL_STEPS} of {10**18} local steps" in n for n in huge.notes)
    assert not any("local steps per client" in n for n in few.notes)
