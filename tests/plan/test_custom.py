"""Custom coordinators through the entry-point group, and the built-in parameter server."""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import numpy as np
import pytest

from parplan.config.cluster import ClusterSpec
from parplan.config.model import ModelSpec
from parplan.config.scenario import TrainingSpec
from parplan.config.strategy import CustomStrategy
from parplan.engine.simulate import simulate
from parplan.errors import PluginError
from parplan.model.graph import ModelGraph, build_model
from parplan.plan import coordinators
from parplan.plan.base import PlanContext, PlanWork
from parplan.plan.compute import optimizer_seconds, step_compute
from parplan.plan.coordinators.parameter_server import ParameterServerCoordinator
from parplan.plan.strategies import expand
from parplan.taskgraph import TRANSFER, TaskGraph, TaskGraphBuilder
from parplan.topology.build import build_network
from parplan.topology.network import Network

PARAMS = 1e8
MODEL = ModelSpec.model_validate(
    {
        "name": "m",
        "nodes": [
            {"id": "a", "params": PARAMS / 2, "forward_flops": 1e9, "activation": 1e3},
            {"id": "b", "params": PARAMS / 2, "forward_flops": 1e9, "activation": 1e3},
        ],
    }
)
LINK_Bps = 1e9


def ctx_for(hosts: int = 6, batch: int = 64) -> PlanContext:
    cluster = ClusterSpec.model_validate(
        {
            "generator": {
                "kind": "switch",
                "hosts": hosts,
                "device": {
                    "peak_flops": 1e14,
                    "efficiency": 0.5,
                    "memory": 80 * 2**30,
                    "memory_bandwidth": 2e12,
                },
                "link": {"bandwidth": LINK_Bps, "latency": 0.0},
            }
        }
    )
    return PlanContext(
        build_network(cluster), build_model(MODEL), MODEL, TrainingSpec(global_batch_size=batch)
    )


def custom(name: str, **config: Any) -> CustomStrategy:
    return CustomStrategy(kind="custom", coordinator=name, config=config)


# -- fake plugins -------------------------------------------------------------------------------
def two_task_graph(
    network: Network, model: ModelGraph, training: TrainingSpec, config: Mapping[str, Any]
) -> TaskGraph:
    b = TaskGraphBuilder()
    c = b.compute(network.devices[0], float(config.get("seconds", 1.0)))
    b.transfer(network.devices[0], network.devices[1], 1e6, [c])
    return b.build(meta={"samples_per_step": 16})


def wrong_type(network: Network, model: ModelGraph, training: TrainingSpec, config: Mapping[str, Any]) -> int:
    return 42


def raises(
    network: Network, model: ModelGraph, training: TrainingSpec, config: Mapping[str, Any]
) -> TaskGraph:
    raise ZeroDivisionError("plugin bug")


def ghost_device(
    network: Network, model: ModelGraph, training: TrainingSpec, config: Mapping[str, Any]
) -> TaskGraph:
    b = TaskGraphBuilder()
    b.compute("ghost", 1.0)
    return b.build()


class CountingCoordinator:
    """A class-style plugin: instantiated once, then called."""

    def __call__(
        self, network: Network, model: ModelGraph, training: TrainingSpec, config: Mapping[str, Any]
    ) -> PlanWork:
        b = TaskGraphBuilder()
        b.compute(network.devices[0], 2.0)
        return PlanWork(
            graph=b.build(), devices=(network.devices[0],), unit="step", samples_per_unit=8.0, memory=()
        )


FAKES = {
    "two_tasks": "two_task_graph",
    "wrong_type": "wrong_type",
    "raises": "raises",
    "ghost": "ghost_device",
    "counting": "CountingCoordinator",
}


@pytest.fixture
def fake_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The installed entry points plus this module's fakes (and one that cannot be imported)."""
    real = list(entry_points(group=coordinators.GROUP))
    fakes = [EntryPoint(name, f"{__name__}:{attr}", coordinators.GROUP) for name, attr in FAKES.items()]
    fakes.append(EntryPoint("broken", "no_such_package.nowhere:thing", coordinators.GROUP))

    def fake_entry_points(*, group: str) -> list[EntryPoint]:
        return [*real, *fakes] if group == coordinators.GROUP else []

    monkeypatch.setattr(coordinators, "entry_points", fake_entry_points)


# -- discovery and errors -----------------------------------------------------------------------
def test_parameter_server_is_installed_through_the_entry_point_group() -> None:
    eps = {ep.name: ep for ep in entry_points(group="parplan.coordinators")}
    assert (
        eps["parameter_server"].value
        == "parplan.plan.coordinators.parameter_server:ParameterServerCoordinator"
    )
    assert "parameter_server" in coordinators.installed()
    assert isinstance(coordinators.load("parameter_server"), ParameterServerCoordinator)


def test_unknown_coordinator_lists_the_installed_ones() -> None:
    with pytest.raises(PluginError, match=r"unknown coordinator 'nope'; installed: .*parameter_server"):
        expand(ctx_for(), custom("nope"))


def test_unknown_coordinator_lists_plugins_too(fake_plugins: None) -> None:
    with pytest.raises(PluginError) as err:
        expand(ctx_for(), custom("nope"))
    for name in ("parameter_server", "two_tasks", "counting", "broken"):
        assert name in str(err.value)


def test_a_bare_task_graph_becomes_one_step(fake_plugins: None) -> None:
    ctx = ctx_for()
    work = expand(ctx, custom("two_tasks", seconds=0.5))
    assert work.unit == "step"
    assert work.samples_per_unit == 16
    assert work.memory == ()
    assert simulate(work.graph, ctx.network).makespan_s == pytest.approx(0.5 + 1e6 / LINK_Bps)


def test_a_class_coordinator_is_instantiated_and_its_planwork_kept(fake_plugins: None) -> None:
    work = expand(ctx_for(), custom("counting"))
    assert work.samples_per_unit == 8.0 and work.graph.num_tasks == 1


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("wrong_type", r"coordinator 'wrong_type' returned int; expected a TaskGraph or a PlanWork"),
        ("raises", r"coordinator 'raises' raised ZeroDivisionError: plugin bug"),
        ("ghost", r"coordinator 'ghost' uses device 'ghost'"),
        ("broken", r"coordinator 'broken' \(no_such_package.nowhere:thing\) failed to load"),
    ],
)
def test_misbehaving_plugins_are_plugin_errors_naming_them(
    fake_plugins: None, name: str, message: str
) -> None:
    with pytest.raises(PluginError, match=message):
        expand(ctx_for(), custom(name))


# -- the parameter server -----------------------------------------------------------------------
def step_s(ctx: PlanContext, **config: Any) -> float:
    return float(simulate(expand(ctx, custom("parameter_server", **config)).graph, ctx.network).makespan_s)


def test_more_servers_less_contention_faster_steps() -> None:
    """W workers push P gradient bytes into S servers' links: W x P / S per server link, each way."""
    ctx = ctx_for(hosts=6)
    workers = ["h2", "h3", "h4", "h5"]
    one = step_s(ctx, servers=["h0"], workers=workers)
    two = step_s(ctx, servers=["h0", "h1"], workers=workers)
    assert two < one
    t = step_compute(ctx, "h2", None, 16.0)
    grad_bytes = PARAMS * 2
    for servers, measured in ((1, one), (2, two)):
        comm = 2 * len(workers) * grad_bytes / servers / LINK_Bps  # push into and pull out of each server
        update = optimizer_seconds(ctx, "h0", PARAMS / servers)
        gamma = 3.0 / 2e12 * grad_bytes / servers * len(workers)  # the servers' reductions (engine default)
        assert measured == pytest.approx(t.forward_s + t.backward_s + comm + update + gamma, rel=1e-6)
    assert (one - t.forward_s - t.backward_s) / (two - t.forward_s - t.backward_s) == pytest.approx(
        2.0, rel=0.01
    )


def test_default_devices_and_graph_shape() -> None:
    ctx = ctx_for(hosts=5)
    work = expand(ctx, custom("parameter_server", servers=2))
    g = work.graph
    assert work.devices == ("h0", "h1", "h2", "h3", "h4")
    tr = np.flatnonzero(g.kind == TRANSFER)
    push = [t for t in tr if g.categories[g.category[t]] == "push"]
    pull = [t for t in tr if g.categories[g.category[t]] == "pull"]
    assert len(push) == len(pull) == 2 * 3  # every worker to every server and back
    assert np.all(g.size_bytes[push] == PARAMS / 2 * 2)
    assert np.all(g.reduce[push])
    assert work.samples_per_unit == 64
    assert work.graph.meta["workers"] == ["h2", "h3", "h4"]


def test_parameter_server_memory() -> None:
    ctx = ctx_for(hosts=4)
    work = expand(ctx, custom("parameter_server", servers=2, workers=2))
    mem = {m.device: m for m in work.memory}
    assert mem["h0"].optimizer_bytes == PARAMS / 2 * 12 and mem["h0"].activations_bytes == 0
    assert mem["h2"].optimizer_bytes == 0 and mem["h2"].params_bytes == PARAMS * 2
    assert mem["h2"].activations_bytes == 32 * 2e3  # half the batch, two nodes of 1 kB each


def test_async_mode_applies_each_push_on_its_own() -> None:
    ctx = ctx_for(hosts=4)
    work = expand(ctx, custom("parameter_server", sync=False))
    g = work.graph
    updates = [t for t in range(g.num_tasks) if g.categories[g.category[t]] == "optimizer"]
    assert len(updates) == 3  # one per worker on the single server
    assert not np.any(g.reduce)
    assert any("asynchronous" in n for n in work.notes)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"server": 1}, "unknown config key 'server'; valid: servers, workers, sync"),
        ({"servers": 7}, "7 servers asked, the cluster has only 6 devices"),
        ({"servers": 0}, "servers must be >= 1"),
        ({"servers": ["h0", "zz"]}, "'zz', which is not a device"),
        ({"workers": 9}, "9 workers asked"),
        ({"sync": "yes"}, "sync must be true or false"),
        ({"servers": 6}, "no worker devices left"),
    ],
)
def test_parameter_server_config_errors(config: dict[str, Any], message: str) -> None:
    with pytest.raises(PluginError, match=message):
        expand(ctx_for(hosts=6), custom("parameter_server", **config))


def test_parameter_server_is_deterministic() -> None:
    ctx = ctx_for()
    a = expand(ctx, custom("parameter_server", servers=2))
    b = expand(ctx, custom("parameter_server", servers=2))
    assert np.array_equal(a.graph.size_bytes, b.graph.size_bytes)
    assert step_s(ctx, servers=2) == step_s(ctx, servers=2)
