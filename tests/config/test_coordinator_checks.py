"""A custom strategy's coordinator checks its own config in validate-config (its ``validate`` hook),
with file:line:column like every other error; the bundled parameter server implements the hook and
runs the same checks when it is called."""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from parplan.api.validate_config import validate_file
from parplan.config.cluster import ClusterSpec
from parplan.plan import coordinators
from parplan.plan.coordinators import ConfigProblem, ValidatingCoordinator, check_config
from parplan.plan.coordinators.parameter_server import ParameterServerCoordinator
from parplan.topology.build import build_network
from parplan.topology.network import Network

NETWORK = build_network(
    ClusterSpec.model_validate(
        {
            "generator": {
                "kind": "switch",
                "hosts": 4,
                "device": {"peak_flops": "1 TFLOP/s", "memory": "1 GiB"},
                "link": {"bandwidth": "1 GB/s"},
            }
        }
    )
)


def write(tmp_path: Path, config: str) -> Path:
    path = tmp_path / "ps.yaml"
    path.write_text(f"kind: custom\ncoordinator: parameter_server\nconfig:\n{config}")
    return path


def scenario(tmp_path: Path, strategy: Path) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(
        "cluster:\n  generator:\n    kind: switch\n    hosts: 4\n"
        "    device: {peak_flops: 1 TFLOP/s, memory: 1 GiB}\n    link: {bandwidth: 1 GB/s}\n"
        "model:\n  generator: {kind: mlp, widths: [8, 8]}\n"
        f"training: {{global_batch_size: 8}}\nplans:\n  - {{name: ps, strategy: {strategy.name}}}\n"
    )
    return path


def shown(path: Path) -> list[str]:
    return [str(issue).replace(str(path.parent) + "/", "") for issue in validate_file(path).issues]


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            "  servers: abc\n",
            "ps.yaml:4:3 config.servers: servers must be a count or a list of device names, got 'abc'",
        ),
        ("  servers: 0\n", "ps.yaml:4:3 config.servers: servers must be >= 1, got 0"),
        ("  servers: []\n", "ps.yaml:4:3 config.servers: servers is an empty list"),
        ("  servers: [h0, h0]\n", "ps.yaml:4:17 config.servers[1]: servers lists 'h0' twice (also at [0])"),
        ("  sync: maybe\n", "ps.yaml:4:3 config.sync: sync must be true or false, got 'maybe'"),
        (
            "  server: 2\n",
            "ps.yaml:4:3 config.server: unknown config key 'server'; valid: servers, workers, sync",
        ),
        (
            "  workers: true\n",
            "ps.yaml:4:3 config.workers: workers must be a count or a list of device names, got True",
        ),
    ],
)
def test_a_strategy_file_alone_gets_the_shape_checks(tmp_path: Path, config: str, expected: str) -> None:
    path = write(tmp_path, config)
    assert shown(path) == [expected]


def test_device_names_and_counts_are_checked_against_a_scenarios_cluster(tmp_path: Path) -> None:
    strategy = write(tmp_path, "  servers: [h0, h7]\n  workers: 5\n")
    assert shown(strategy) == []  # on its own there is no cluster to hold the names against
    assert shown(scenario(tmp_path, strategy)) == [
        "ps.yaml:4:17 config.servers[1]: servers names 'h7', which is not a device of the cluster",
        "ps.yaml:5:3 config.workers: 5 workers asked, what the servers leave has only 3 devices",
    ]


def test_every_server_and_no_worker_is_caught_before_simulate(tmp_path: Path) -> None:
    strategy = write(tmp_path, "  servers: 4\n")
    assert shown(scenario(tmp_path, strategy)) == [
        "ps.yaml:4:3 config.servers: no worker devices left after 4 server(s)"
    ]


def test_a_valid_config_has_no_problems_and_the_bundled_coordinator_validates() -> None:
    coordinator = ParameterServerCoordinator()
    assert isinstance(coordinator, ValidatingCoordinator)
    assert check_config("parameter_server", {"servers": ["h1"], "workers": 2, "sync": False}, NETWORK) == []
    assert check_config("parameter_server", {"servers": 2}) == []


# -- plugins without the hook, and broken hooks -----------------------------------------------------------


def no_hook(network: Network, model: Any, training: Any, config: Mapping[str, Any]) -> None:
    raise AssertionError("validate-config must not run the coordinator itself")


class RaisingHook:
    def __call__(self, network: Network, model: Any, training: Any, config: Mapping[str, Any]) -> None:
        raise AssertionError("not called")

    def validate(self, config: Mapping[str, Any], network: Network | None) -> list[ConfigProblem]:
        raise KeyError("oops")


class WrongHook(RaisingHook):
    def validate(self, config: Mapping[str, Any], network: Network | None) -> list[ConfigProblem]:
        return ["not a problem"]  # type: ignore[list-item]


class WarningHook(RaisingHook):
    def validate(self, config: Mapping[str, Any], network: Network | None) -> list[ConfigProblem]:
        where = "with" if network is not None else "without"
        return [ConfigProblem(("rate", 1), f"looks slow ({where} a cluster)", "warning")]


PLUGINS = {"no_hook": "no_hook", "raising": "RaisingHook", "wrong": "WrongHook", "warns": "WarningHook"}


@pytest.fixture()
def plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = [EntryPoint(name, f"{__name__}:{attr}", coordinators.GROUP) for name, attr in PLUGINS.items()]
    monkeypatch.setattr(coordinators, "entry_points", lambda *, group: fakes)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("no_hook", []),
        (
            "raising",
            ["error: p.yaml:2:1 coordinator: coordinator 'raising': validate raised KeyError: 'oops'"],
        ),
        (
            "wrong",
            [
                "error: p.yaml:2:1 coordinator: coordinator 'wrong': validate returned str; "
                "expected ConfigProblem"
            ],
        ),
        ("warns", ["warning: p.yaml:3:20 config.rate[1]: looks slow (without a cluster)"]),
    ],
)
def test_plugins_with_and_without_the_hook(
    plugins: None, tmp_path: Path, name: str, expected: list[str]
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(f"kind: custom\ncoordinator: {name}\nconfig: {{rate: [1, 2]}}\n")
    report = validate_file(path)
    assert [f"{i.severity}: {str(i).replace(str(tmp_path) + '/', '')}" for i in report.issues] == expected
    assert report.valid == (name in ("no_hook", "warns"))
