"""The local strategy: forward, backward and optimizer of the whole batch on one device."""

from __future__ import annotations

import pytest

from parplan.api.evaluate import evaluate_plan
from parplan.errors import TopologyError
from parplan.plan.compute import step_compute
from parplan.plan.strategies import expand
from parplan.plan.strategies.local import expand as expand_local
from parplan.taskgraph import COMPUTE
from tests.plan.strategy_helpers import chain_model, context, plan, strategy, switch_cluster


def test_three_chained_tasks_on_the_first_device() -> None:
    ctx = context(switch_cluster(3), chain_model(), batch=16)
    work = expand(ctx, strategy({"kind": "local"}))
    g = work.graph
    assert work.devices == ("h0",)
    assert list(g.kind) == [COMPUTE] * 3
    assert [g.categories[c] for c in g.category] == ["forward", "backward", "optimizer"]
    assert list(g.deps(1)) == [0] and list(g.deps(2)) == [1]
    t = step_compute(ctx, "h0", None, 16)
    assert list(g.seconds) == pytest.approx([t.forward_s, t.backward_s, t.optimizer_s])
    assert work.samples_per_unit == 16


def test_named_device_and_unknown_device() -> None:
    ctx = context(switch_cluster(3), chain_model())
    assert expand(ctx, strategy({"kind": "local", "device": "h2"})).devices == ("h2",)
    with pytest.raises(TopologyError, match="h9"):
        expand_local(ctx, strategy({"kind": "local", "device": "h9"}))


def test_result_is_all_compute_and_memory_is_the_whole_model() -> None:
    ctx = context(switch_cluster(1), chain_model(layers=4, params=1e6, activation=1000), batch=8)
    r = evaluate_plan(ctx, plan({"kind": "local"}))
    t = step_compute(ctx, "h0", None, 8)
    assert r.step_time_s == pytest.approx(t.total_s)
    assert r.compute_s == pytest.approx(r.step_time_s)
    assert r.exposed_comm_s == 0 and r.idle_s == pytest.approx(0, abs=1e-15)
    assert r.throughput_samples_per_s == pytest.approx(8 / t.total_s)
    (m,) = r.memory
    assert m.params_bytes == 4e6 * 2 and m.optimizer_bytes == 4e6 * 12
    assert m.activations_bytes == pytest.approx(4 * 1000 * 8)
    assert r.fits and r.bottleneck.startswith("compute on h0")
