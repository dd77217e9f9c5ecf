"""Communication kernels take SMs from the compute they overlap: the share of SMs a call's NCCL
channels hold (:func:`parplan.plan.compute.comm_sm_share`), the exposure rule
(:func:`~parplan.plan.compute.overlapped_exposed_s`), and both paths of a sharded plan (the closed
form and the event-simulated step) slowing an FSDP plan's compute by the calls' stolen seconds."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from parplan.api.sharded_analytic import evaluate_layout
from parplan.config.cluster import ClusterSpec
from parplan.config.scenario import TrainingSpec
from parplan.config.strategy import ShardedStrategy
from parplan.engine.simulate import simulate
from parplan.model.graph import build_model
from parplan.plan.base import PlanContext
from parplan.plan.compute import comm_sm_share, overlapped_exposed_s
from parplan.plan.sharded.calls import CallTimer
from parplan.plan.sharded.clock import CollectiveClock
from parplan.plan.sharded.costs import layout_plan
from parplan.plan.sharded.tasks import build_tasks
from parplan.topology.build import build_network
from parplan.topology.network import DeviceInfo
from tests.plan.sharded.helpers import gpt


def _device(sm_count: int | None) -> DeviceInfo:
    return DeviceInfo("g", 1e15, 0.5, 1.0, 8e10, None, None, sm_count=sm_count)


def test_a_collective_holds_one_sm_per_channel() -> None:
    assert comm_sm_share(_device(108), 8) == pytest.approx(8 / 108)
    assert comm_sm_share(_device(132), 500) == 1.0  # never more than the device has
    assert comm_sm_share(_device(None), 8) == 0.0  # SMs not stated: not modelled
    assert comm_sm_share(_device(108), 0) == 0.0


def test_exposure_is_the_larger_of_what_overflows_and_what_the_sms_take() -> None:
    # compute 3 s beside 1 s of calls holding 10% of the SMs: the compute ends 0.1 s later
    assert overlapped_exposed_s(1.0, 3.0, 0.1) == pytest.approx(0.1)
    # calls longer than the compute: they end last, the contention is inside them
    assert overlapped_exposed_s(4.0, 3.0, 0.4) == pytest.approx(1.0)
    # nothing stolen: the old rule, never negative
    assert overlapped_exposed_s(1.0, 3.0, 0.0) == 0.0
    arrays = overlapped_exposed_s(np.array([1.0, 4.0]), np.array([3.0, 3.0]), np.array([0.1, 0.4]))
    assert arrays == pytest.approx([0.1, 1.0])
    # X s of calls holding share c beside C s of compute end both at max(X, C + c X)
    for x, c, share in [(1.0, 3.0, 0.1), (2.9, 3.0, 0.1), (3.5, 3.0, 0.2), (10.0, 1.0, 0.5)]:
        assert c + overlapped_exposed_s(x, c, share * x) == pytest.approx(max(x, c + share * x))


def _context(simulated: bool = False) -> PlanContext:
    """A small GPT on 2 x 8 A100 (108 SMs) with NCCL's transport: FSDP's calls get NCCL channels."""
    cluster = ClusterSpec.model_validate(
        {
            "hardware": {"nvswitch": True},
            "transport": {"kind": "nccl"},
            "generator": {
                "kind": "hierarchical",
                "nodes": 2,
                "devices_per_node": 8,
                "device": {"type": "A100-SXM4-80GB", "arch": "ampere"},
                "intra": {"class": "nvlink", "bandwidth": "300 GB/s", "latency": "0.7 us"},
                "nics_per_node": 8,
                "nic": {"class": "infiniband", "bandwidth": "200 Gbit/s", "latency": "1.5 us"},
            },
        }
    )
    spec = gpt(layers=8, hidden=2048, heads=16, seq=2048)
    return PlanContext(
        network=build_network(cluster),
        model=build_model(spec),
        model_spec=spec,
        training=TrainingSpec(global_batch_size=16),
        simulator=(lambda g, n: simulate(g, n).makespan_s) if simulated else None,
    )


def _fsdp() -> ShardedStrategy:
    return ShardedStrategy.model_validate({"kind": "sharded", "dp": 16, "fsdp": "full_shard"})


def _no_contention(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(CollectiveClock, "sm_share", lambda self, call, stage: 0.0)
    monkeypatch.setattr(CollectiveClock, "memory_excess", lambda self, call, stage: 0.0)


def test_fsdp_calls_hold_their_nccl_channels_sms() -> None:
    ctx = _context()
    layout = layout_plan(ctx, _fsdp())
    clock = CollectiveClock(ctx, layout)
    gather = layout.param_gather[0][1]
    channels = clock.groups.channels(gather, clock.group(gather.axis, 0))
    assert channels >= 1
    assert clock.sm_share(gather, 0) == pytest.approx(channels / 108)
    # the SMs' part is still there; the call's memory traffic adds to it (test_memory_contention)
    assert clock.stolen([gather], 0) >= clock.seconds(gather, 0) * channels / 108
    assert clock.stolen([gather], 0) == pytest.approx(
        clock.seconds(gather, 0) * clock.compute_share(gather, 0)
    )


def test_closed_form_slows_the_compute_fsdp_hides_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _context()
    layout = layout_plan(ctx, _fsdp())
    clock = CollectiveClock(ctx, layout)
    gathers, scatters = layout.param_gather[0], layout.grad_sync[0]
    # compute-bound: every call but the first gather and the last scatter hides, so each micro-batch
    # is longer by what the hidden calls' SMs take: the forward's gathers but the first, the
    # backward's gathers again and its scatters but the last
    stolen = clock.stolen(gathers[1:], 0) + clock.stolen(gathers, 0) + clock.stolen(scatters[:-1], 0)
    with_sms = evaluate_layout(ctx, layout)
    assert with_sms.bound.startswith("compute-bound")
    with monkeypatch.context() as m:
        _no_contention(m)
        without = evaluate_layout(ctx, layout)
    assert stolen > 0
    assert with_sms.step_time_s - without.step_time_s == pytest.approx(layout.microbatches * stolen)


def test_event_step_slows_as_the_closed_form_does(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _context(simulated=True)
    layout = layout_plan(ctx, _fsdp())

    def step(patch: bool) -> tuple[float, float]:
        with monkeypatch.context() as m:
            if patch:
                _no_contention(m)
            event = simulate(build_tasks(ctx, layout), ctx.network).makespan_s
            return event, evaluate_layout(ctx, layout).step_time_s

    event, closed = step(False)
    event_free, closed_free = step(True)
    assert event - event_free > 0
    assert event - event_free == pytest.approx(closed - closed_free, rel=0.1)


def test_event_timer_counts_the_same_shares() -> None:
    ctx = _context(simulated=True)
    layout = layout_plan(ctx, _fsdp())
    timer, clock = CallTimer(ctx, layout), CollectiveClock(ctx, layout)
    calls: Any = layout.param_gather[0][1:3]
    want = sum(timer.seconds(c, 0) * clock.compute_share(c, 0) for c in calls)
    assert timer.stolen(calls, 0) == pytest.approx(want)


def test_gradient_buckets_slow_the_backward_they_overlap_on_both_paths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctx = _context(simulated=True)
    plan = ShardedStrategy.model_validate(
        {"kind": "sharded", "dp": 16, "aggregation": {"overlap": True, "bucket_size": "16MiB"}}
    )
    layout = layout_plan(ctx, plan)
    assert len(layout.grad_sync[0]) > 2

    def steps() -> tuple[float, float]:
        event = simulate(build_tasks(ctx, layout), ctx.network).makespan_s
        return event, evaluate_layout(ctx, layout).step_time_s

    event, closed = steps()
    with monkeypatch.context() as m:
        _no_contention(m)
        event_free, closed_free = steps()
    assert event > event_free and closed > closed_free
    assert event - event_free == pytest.approx(closed - closed_free, rel=0.05)
