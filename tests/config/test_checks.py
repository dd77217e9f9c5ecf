"""The checks a spec gets on its own, before any network or model graph is built.

Everything that needs a built graph (and the whole-file order) is tested in ``tests/api/test_checks.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from parplan.config.checks import IssueCollector, check_partitions, check_strategy, suggest
from parplan.config.loader import spec_from_data


def strategy_issues(data: dict[str, Any]) -> list[str]:
    loaded = spec_from_data("strategy", data, "f.yaml")
    return [f"{i.severity}: {i.field}: {i.message}" for i in check_strategy(loaded.spec, loaded.source)]


def test_partition_file_nodes_once() -> None:
    data = {
        "partitions": [
            {"name": "a", "nodes": ["x", "y", "x"], "worker": "h0"},
            {"name": "b", "nodes": ["y"], "worker": "h1"},
        ]
    }
    loaded = spec_from_data("partition", data, "p.yaml")
    issues = check_partitions(loaded.spec, loaded.source)
    assert [(i.path, i.field) for i in issues] == [
        ("p.yaml", "partitions[0].nodes[2]"),
        ("p.yaml", "partitions[1].nodes[0]"),
    ]
    assert [i.message for i in issues] == [
        "model node 'x' is already earlier in this partition",
        "model node 'y' is already in partition 'a'",
    ]


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ({"kind": "local"}, []),
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
                "replica": {
                    "partitions": [
                        {"name": "s", "nodes": ["x", "x"], "worker": "a"},
                        {"name": "t", "nodes": ["y"], "worker": "b"},
                    ]
                },
            },
            ["error: replica.partitions[0].nodes[1]: model node 'x' is already earlier in this partition"],
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
        # whether a coordinator is installed is a question for the plugin registry, above config
        ({"kind": "custom", "coordinator": "not-installed-anywhere"}, []),
    ],
)
def test_strategy_on_its_own(strategy: dict[str, Any], expected: list[str]) -> None:
    assert strategy_issues(strategy) == expected


def test_collector_places_each_issue_once_under_its_prefix() -> None:
    report = IssueCollector(None, ("plans", 0))
    sub = report.at(("strategy",))
    sub.add(("devices", 1), "twice")
    sub.add(("devices", 1), "twice")
    report.add((), "a note", "info")
    assert [(i.field, i.message, i.severity) for i in report.issues] == [
        ("plans[0].strategy.devices[1]", "twice", "error"),
        ("plans[0]", "a note", "info"),
    ]


def test_suggest() -> None:
    assert suggest("parameter-server", ["parameter_server", "ring"]) == "; did you mean 'parameter_server'?"
    assert suggest("zzz", ["parameter_server"]) == ""
