"""Checks across values and files: devices, partitions, counts, batches, connectivity, coordinators.

Every check of a file, through :func:`parplan.api.checks.check_spec` (the spec-only ones it runs are
also tested on their own in ``tests/config/test_checks.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

from parplan.api.checks import check_cluster, check_model, check_plan, check_scenario, check_spec
from parplan.api.validate_config import validate_file
from parplan.config.checks import check_strategy
from parplan.config.loader import load_file, load_scenario, spec_from_data
from parplan.config.scenario import TrainingSpec
from parplan.config.strategy import DataParallelStrategy, LocalStrategy
from parplan.errors import Issue, PlanError
from parplan.topology.network import Network

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted(p for p in (ROOT / "sample_configs").rglob("*") if p.is_file())

SWITCH4 = {
    "generator": {
        "kind": "switch",
        "hosts": 4,
        "device": {"peak_flops": "65 TFLOP/s", "memory": "16 GiB"},
        "link": {"bandwidth": "1 GB/s"},
    }
}
DGX = {
    "generator": {
        "kind": "hierarchical",
        "nodes": 2,
        "devices_per_node": 8,
        "device": {"peak_flops": "312 TFLOP/s", "memory": "80 GiB"},
        "intra": {"bandwidth": "300 GB/s"},
        "nics_per_node": 8,
        "nic": {"bandwidth": "25 GB/s"},
    }
}
MLP = {"generator": {"kind": "mlp", "widths": [16, 32, 32, 4]}}  # fc0, fc1, fc2


def scenario_issues(
    strategy: dict[str, Any], cluster: dict[str, Any] = SWITCH4, batch: int = 64
) -> list[str]:
    data = {
        "cluster": cluster,
        "model": MLP,
        "training": {"global_batch_size": batch},
        "plans": [{"name": "p", "strategy": strategy}],
    }
    loaded = spec_from_data("scenario", data, "s.yaml")
    return [f"{i.severity}: {i.field}: {i.message}" for i in check_scenario(loaded.spec, loaded.source)]


def issues_of(kind: str, data: dict[str, Any]) -> list[str]:
    loaded = spec_from_data(kind, data, "f.yaml")
    if kind in ("cluster", "model"):  # the entry points of their own agree with the dispatch
        own: Callable[[Any, Any], list[Issue]] = check_cluster if kind == "cluster" else check_model
        assert own(loaded.spec, loaded.source) == check_spec(kind, loaded.spec, loaded.source)
    return [f"{i.severity}: {i.field}: {i.message}" for i in check_spec(kind, loaded.spec, loaded.source)]


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_every_sample_passes_every_check(sample: Path) -> None:
    report = validate_file(sample)
    assert report.valid, [str(i) for i in report.issues]


def test_population_sample_says_members_queue() -> None:
    report = validate_file(ROOT / "sample_configs/scenarios/population-based.yaml")
    assert [(i.severity, i.message) for i in report.issues] == [
        ("info", "32 members on 16 devices: 2 waves per generation")
    ]
    assert report.issues[0].path.endswith("strategies/population-based.yaml")


# -- clusters and models -------------------------------------------------------------------------------


def device(name: str) -> dict[str, Any]:
    return {"name": name, "peak_flops": 1e12, "memory": 1e9}


def test_cluster_links() -> None:
    data = {
        "generator": {
            "kind": "switch",
            "hosts": 2,
            "device": {"peak_flops": 1, "memory": 1},
            "link": {"bandwidth": 1},
        },
        "devices": [device("gpu0"), device("h1")],
        "switches": [{"name": "sw0"}, {"name": "spine"}],
        "links": [
            {"a": "gpu0", "b": "spine", "bandwidth": 1},
            {"a": "gpu0", "b": "spnie", "bandwidth": 1},
            {"a": "spine", "b": "spine", "bandwidth": 1},
            {"a": "spine", "b": "gpu0", "bandwidth": 1},
        ],
    }
    assert issues_of("cluster", data) == [
        "error: devices[1].name: name 'h1' is already used by the generator",
        "error: switches[0].name: name 'sw0' is already used by the generator",
        "error: links[1].b: unknown device or switch 'spnie'; did you mean 'spine'?",
        "error: links[2]: links 'spine' to itself",
        "error: links[3]: spine - gpu0 is linked twice (also links[0]); give one link with the combined "
        "bandwidth",
    ]


def test_cluster_that_does_not_build() -> None:
    data = {
        "devices": [device("a"), device("b"), device("c")],
        "links": [{"a": "a", "b": "b", "bandwidth": 1}],
    }
    (issue,) = issues_of("cluster", data)
    assert issue.startswith("error: : device(s) [c] have no links")
    data["links"] = []
    data["devices"] = [device("a")]
    assert issues_of("cluster", data) == []


def test_model_cycle_and_valid_models() -> None:
    data = {"nodes": [{"id": "a"}, {"id": "b"}, {"id": "c"}], "edges": [["a", "b"], ["b", "c"], ["c", "b"]]}
    assert issues_of("model", data) == ["error: edges: the edges form a cycle: b -> c -> b"]
    assert issues_of("model", {"nodes": [{"id": "a"}, {"id": "b"}]}) == []
    assert issues_of("model", MLP) == []


# -- strategies on their own ---------------------------------------------------------------------------


def test_partition_file_nodes_once() -> None:
    data = {
        "partitions": [
            {"name": "a", "nodes": ["x", "y", "x"], "worker": "h0"},
            {"name": "b", "nodes": ["y"], "worker": "h1"},
        ]
    }
    assert issues_of("partition", data) == [
        "error: partitions[0].nodes[2]: model node 'x' is already earlier in this partition",
        "error: partitions[1].nodes[0]: model node 'y' is already in partition 'a'",
    ]


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ({"kind": "data_parallel", "num_replicas": 2, "devices": ["a", "b"]}, []),
        (
            {"kind": "data_parallel", "num_replicas": 2, "devices": ["a", "b", "a"]},
            [
                "error: devices: lists 3 devices; num_replicas=2 needs 2",
                "error: devices[2]: device 'a' is listed twice (also at [0])",
            ],
        ),
        (
            {
                "kind": "data_parallel",
                "num_replicas": 2,
                "devices": ["a", "b", "c"],
                "replica": {
                    "partitions": [
                        {"name": "s", "nodes": ["x"], "worker": "a"},
                        {"name": "t", "nodes": ["y"], "worker": "b"},
                    ]
                },
            },
            ["error: devices: lists 3 devices; num_replicas=2 x 2 workers of the replica plan needs 4"],
        ),
        (
            {"kind": "federated", "num_clients": 2, "server": "s", "clients": ["a", "s", "c"]},
            [
                "warning: clients: lists 3 devices for 2 clients; only the first 2 are used",
                "warning: clients[1]: the server 's' is also listed as a client",
            ],
        ),
        (
            {"kind": "population_based", "population_size": 4, "devices": ["a", "a"]},
            ["error: devices[1]: device 'a' is listed twice (also at [0])"],
        ),
        ({"kind": "custom", "coordinator": "parameter_server"}, []),
        (
            {"kind": "custom", "coordinator": "parameter-server"},
            [
                "error: coordinator: no coordinator 'parameter-server' is installed (group "
                "parplan.coordinators); "
                "installed: parameter_server; did you mean 'parameter_server'?"
            ],
        ),
    ],
)
def test_strategy_alone(strategy: dict[str, Any], expected: list[str]) -> None:
    assert issues_of("strategy", strategy) == expected


# -- strategies against a cluster, a model and the training ------------------------------------------------


PIPE = {
    "kind": "model_parallel",
    "partitions": [
        {"name": "front", "nodes": ["fc0", "fc1"], "worker": "h0"},
        {"name": "back", "nodes": ["fc2"], "worker": "h1"},
    ],
}


@pytest.mark.parametrize(
    ("strategy", "batch", "expected"),
    [
        ({"kind": "local"}, 64, []),
        (
            {"kind": "local", "device": "h7"},
            64,
            [
                "error: plans[0].strategy.device: device 'h7' is not a device of "
                "cluster 'cluster' (devices: h0, h1, h2, h3)"
            ],
        ),
        (
            {"kind": "local", "device": "sw0"},
            64,
            ["error: plans[0].strategy.device: device 'sw0' is a switch, not a device"],
        ),
        ({"kind": "data_parallel", "num_replicas": 4}, 64, []),
        (
            {"kind": "data_parallel", "num_replicas": 5},
            64,
            ["error: plans[0].strategy.num_replicas: num_replicas (5) exceeds the cluster's 4 devices"],
        ),
        (
            {"kind": "data_parallel", "num_replicas": 4},
            3,
            [
                "error: plans[0].strategy.num_replicas: 4 replicas need at least one sample each, "
                "but training.global_batch_size is 3"
            ],
        ),
        (
            {"kind": "data_parallel", "num_replicas": 2, "devices": ["h3", "gpu"]},
            64,
            [
                "error: plans[0].strategy.devices[1]: device 'gpu' is not a device of cluster 'cluster' "
                "(devices: h0, h1, h2, h3)"
            ],
        ),
        (PIPE, 64, []),
        (
            {**PIPE, "communication": {"microbatches": 65}},
            64,
            [
                "error: plans[0].strategy.communication.microbatches: 65 micro-batches need at least 65 "
                "samples, "
                "there are 64 in the global batch"
            ],
        ),
        ({**PIPE, "communication": {"protocol": "none", "microbatches": 65}}, 64, []),
        (
            {
                "kind": "model_parallel",
                "partitions": [{"name": "a", "nodes": ["fc0", "fc2", "fc9"], "worker": "h0"}],
            },
            64,
            [
                "error: plans[0].strategy.partitions[0].nodes[2]: 'fc9' is not a node of model 'model'; "
                "did you mean 'fc2'?",
                "error: plans[0].strategy.partitions: model nodes in no partition: fc1",
            ],
        ),
        (
            {
                "kind": "model_parallel",
                "partitions": [{"name": "a", "nodes": ["fc0", "fc1", "fc2", "fc1"], "worker": "h0"}],
            },
            64,
            [
                "error: plans[0].strategy.partitions[0].nodes[3]: model node 'fc1' is already earlier in "
                "this partition"
            ],
        ),
        ({"kind": "federated", "num_clients": 3}, 64, []),
        (
            {"kind": "federated", "num_clients": 5},
            64,
            [
                "info: plans[0].strategy.num_clients: 5 clients on 3 devices: clients sharing a device "
                "train one after another"
            ],
        ),
        (
            {"kind": "federated", "num_clients": 3, "server": "h9"},
            64,
            [
                "error: plans[0].strategy.server: server 'h9' is not a device of cluster 'cluster' "
                "(devices: h0, h1, h2, h3)"
            ],
        ),
        (
            {"kind": "federated", "num_clients": 3, "clients": ["h1", "hx"]},
            64,
            [
                "error: plans[0].strategy.clients[1]: client device 'hx' is not a device of cluster "
                "'cluster' "
                "(devices: h0, h1, h2, h3)"
            ],
        ),
        (
            {"kind": "federated", "num_clients": 8},
            4,
            [
                "info: plans[0].strategy.num_clients: 8 clients on 3 devices: clients sharing a device "
                "train one after another",
                "warning: plans[0].strategy.num_clients: training.global_batch_size (4) split over 8 "
                "clients leaves 4 without data",
            ],
        ),
        ({"kind": "population_based", "population_size": 4}, 64, []),
        (
            {"kind": "population_based", "population_size": 9},
            64,
            ["info: plans[0].strategy.population_size: 9 members on 4 devices: 3 waves per generation"],
        ),
        (
            {"kind": "population_based", "population_size": 3, "devices": ["h0", "h5"]},
            64,
            [
                "error: plans[0].strategy.devices[1]: device 'h5' is not a device of cluster 'cluster' "
                "(devices: h0, h1, h2, h3)"
            ],
        ),
        ({"kind": "custom", "coordinator": "parameter_server", "config": {"servers": 2}}, 64, []),
    ],
)
def test_plan_against_the_cluster(strategy: dict[str, Any], batch: int, expected: list[str]) -> None:
    assert scenario_issues(strategy, batch=batch) == expected


def test_federated_needs_a_device_besides_the_server() -> None:
    one = {"devices": [device("only")]}
    assert scenario_issues({"kind": "federated", "num_clients": 1}, cluster=one) == [
        "error: plans[0].strategy.server: the server 'only' is the cluster's only device; clients need others"
    ]


# -- 2-D plans -----------------------------------------------------------------------------------------


def two_d(
    workers: list[str], replicas: int, devices: list[str] | None = None, layers: int = 3
) -> dict[str, Any]:
    """A data-parallel plan of a pipeline with one stage per worker over an MLP of ``layers`` layers."""
    nodes = [[f"fc{i}"] for i in range(len(workers) - 1)] + [
        [f"fc{i}" for i in range(len(workers) - 1, layers)]
    ]
    parts = [
        {"name": f"s{i}", "nodes": n, "worker": w}
        for i, (w, n) in enumerate(zip(workers, nodes, strict=True))
    ]
    strategy: dict[str, Any] = {
        "kind": "data_parallel",
        "num_replicas": replicas,
        "replica": {"partitions": parts},
    }
    if devices is not None:
        strategy["devices"] = devices
    return strategy


def test_two_d_default_mapping_tiles_the_cluster_order() -> None:
    names = [f"n{i}.d{j}" for i in range(2) for j in range(8)]
    spec = DataParallelStrategy.model_validate(two_d(["n0.d2", "n0.d0", "n0.d1"], 4))
    assert spec.replica_workers(names) == ("n0.d0", "n0.d1", "n0.d2")
    assert spec.replica_devices(names) == (
        ("n0.d0", "n0.d1", "n0.d2"),
        ("n0.d3", "n0.d4", "n0.d5"),
        ("n0.d6", "n0.d7", "n1.d0"),
        ("n1.d1", "n1.d2", "n1.d3"),
    )
    explicit = DataParallelStrategy.model_validate(
        two_d(["n0.d1", "n0.d0"], 2, ["n1.d0", "n1.d1", "n0.d0", "n0.d1"])
    )
    assert explicit.replica_devices(names) == (("n1.d0", "n1.d1"), ("n0.d0", "n0.d1"))
    with pytest.raises(
        PlanError, match=r"replica 5 would run worker 'n0.d0' on device #15, but the cluster has 15 devices"
    ):
        DataParallelStrategy.model_validate(two_d(["n0.d0", "n0.d1", "n0.d2"], 6)).replica_devices(names[:15])
    plain = DataParallelStrategy(kind="data_parallel", num_replicas=3)
    assert plain.replica_devices(names) == (("n0.d0",), ("n0.d1",), ("n0.d2",))


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        (two_d(["n0.d0", "n0.d1", "n0.d2"], 4), []),
        (
            two_d(["n0.d0", "n0.d1", "n0.d2"], 6),
            [
                "error: plans[0].strategy.num_replicas: replica 5 would run worker 'n0.d1' on device #16, "
                "but the cluster "
                "has 16 devices; use fewer replicas or list the devices"
            ],
        ),
        (
            two_d(["n0.d0", "n0.d2"], 2),
            [
                "error: plans[0].strategy.num_replicas: device 'n0.d2' would run worker 'n0.d2' of replica "
                "0 and worker "
                "'n0.d0' of replica 1; list the devices explicitly"
            ],
        ),
        (two_d(["n0.d0", "n0.d2"], 2, ["n0.d0", "n0.d2", "n1.d0", "n1.d2"]), []),
        (
            two_d(["n0.d0", "n0.d2"], 2, ["n0.d0", "n0.d2", "n1.d0", "n0.d2"]),
            ["error: plans[0].strategy.devices[3]: device 'n0.d2' is listed twice (also at [1])"],
        ),
        (
            two_d(["n0.d0", "n2.d0"], 2),
            [
                "error: plans[0].strategy.replica.partitions[1].worker: worker 'n2.d0' is not a device of "
                "cluster "
                "'cluster'; did you mean 'n1.d0'?"
            ],
        ),
        (
            two_d(["n0.d0", "n0.d1", "n0.d2"], 16),
            [
                "error: plans[0].strategy.num_replicas: replica 5 would run worker 'n0.d1' on device #16, "
                "but the cluster "
                "has 16 devices; use fewer replicas or list the devices"
            ],
        ),
    ],
)
def test_two_d_plans_in_a_scenario(strategy: dict[str, Any], expected: list[str]) -> None:
    assert scenario_issues(strategy, cluster=DGX, batch=64) == expected


def test_two_d_batch_and_microbatches() -> None:
    strategy = two_d(["n0.d0", "n0.d1", "n0.d2"], 4)
    strategy["replica"]["communication"] = {"microbatches": 8}
    assert scenario_issues(strategy, cluster=DGX, batch=32) == []
    assert scenario_issues(strategy, cluster=DGX, batch=31) == [
        "error: plans[0].strategy.replica.communication.microbatches: 8 micro-batches need at least 8 "
        "samples, "
        "there are 7 per replica"
    ]


@pytest.mark.parametrize(
    ("workers", "replicas", "devices"),
    [
        (["n0.d0", "n0.d1", "n0.d2", "n0.d3"], 4, None),
        (["n0.d1", "n0.d0"], 3, None),
        (["n0.d0", "n0.d4"], 2, None),
        (["n0.d1", "n0.d0"], 2, ["n1.d7", "n1.d6", "n0.d0", "n0.d1"]),
    ],
)
def test_two_d_mapping_agrees_with_the_planner(
    workers: list[str], replicas: int, devices: list[str] | None
) -> None:
    """validate-config and the data-parallel planner must place replicas identically."""
    from parplan.api.evaluate import build_context
    from parplan.plan.strategies.data_parallel import replica_worker_maps
    from parplan.plan.strategies.model_parallel import analyse_partitions

    data = {
        "cluster": DGX,
        "model": {"generator": {"kind": "mlp", "widths": [8] * (len(workers) + 1)}},
        "training": {"global_batch_size": 64},
        "plans": [{"name": "p", "strategy": two_d(workers, replicas, devices, layers=len(workers))}],
    }
    scenario = spec_from_data("scenario", data).spec
    strategy = scenario.plans[0].strategy
    ctx = build_context(scenario)
    planner = replica_worker_maps(ctx, strategy, analyse_partitions(ctx, strategy.replica))
    ours = strategy.replica_devices(ctx.network.devices)
    order = strategy.replica_workers(ctx.network.devices)
    assert [dict(zip(order, r, strict=True)) for r in ours] == planner


# -- connectivity --------------------------------------------------------------------------------------


def test_devices_a_plan_uses_must_be_connected() -> None:
    graph = nx.DiGraph()
    for name in ("a", "b", "c"):
        graph.add_node(name, kind="device", peak_flop_per_s=1.0, efficiency=1.0, memory_bytes=1.0)
    graph.add_edge("a", "b", bandwidth_Bps=1.0, latency_s=0.0, channel=0)
    network = Network(graph, name="split")
    training = TrainingSpec(global_batch_size=8)
    dp = DataParallelStrategy(kind="data_parallel", num_replicas=3)
    found = [i.message for i in check_plan(dp, network, None, training)]
    assert found == [
        "the plan uses devices 'a' and 'b', but there is no route from 'b' to 'a'",
        "the plan uses devices 'a' and 'c', but there is no route from 'a' to 'c'",
    ]
    assert check_plan(LocalStrategy(kind="local", device="c"), network, None, training) == []


def test_checks_without_a_source_still_name_the_field() -> None:
    scenario = load_scenario(ROOT / "sample_configs/scenarios/quickstart.yaml")
    bad = scenario.model_copy(update={"training": TrainingSpec(global_batch_size=2)})
    issues = check_scenario(bad)
    assert {(i.path, i.field) for i in issues} == {
        ("", "plans[1].strategy.num_replicas"),
        ("", "plans[2].strategy.num_replicas"),
        ("", "plans[3].strategy.num_replicas"),
        ("", "plans[4].strategy.communication.microbatches"),
    }


def test_validate_file_never_raises_for_bad_files(tmp_path: Path) -> None:
    report = validate_file(tmp_path / "missing.yaml")
    assert not report.valid and report.kind is None
    assert [i.message for i in report.errors] == ["does not exist"]
    loaded = load_file(ROOT / "sample_configs/strategies/dp-x-pipeline.yaml")
    assert check_strategy(loaded.spec, loaded.source) == []
