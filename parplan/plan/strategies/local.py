"""The ``local`` strategy: forward, backward and the optimizer step of the whole batch on one device.

The device is ``strategy.device`` or the cluster's first device. The step is three compute tasks in
a chain; there is no communication, so the step time is the compute time. It is the baseline every
other plan is compared against.
"""

from __future__ import annotations

from parplan.config.strategy import LocalStrategy
from parplan.plan.base import PlanContext, PlanWork
from parplan.plan.compute import params_of, step_compute
from parplan.plan.memory import plan_memory, saved_activation_bytes
from parplan.taskgraph import TaskGraphBuilder


def expand(ctx: PlanContext, strategy: LocalStrategy) -> PlanWork:
    """One step of ``strategy`` as a task graph: forward -> backward -> optimizer on one device."""
    device = strategy.device or ctx.network.devices[0]
    ctx.network.device_index(device)  # raises TopologyError for an unknown device
    samples = float(ctx.training.global_batch_size)
    nodes = tuple(ctx.model.order)
    times = step_compute(ctx, device, nodes, samples)
    b = TaskGraphBuilder([device])
    fwd = b.compute(device, times.forward_s, category="forward", label="forward")
    bwd = b.compute(device, times.backward_s, [fwd], category="backward", label="backward")
    b.compute(device, times.optimizer_s, [bwd], category="optimizer", label="optimizer")
    memory = plan_memory(
        ctx,
        device,
        params=params_of(ctx.model, nodes),
        activations_bytes=saved_activation_bytes(ctx.model, nodes, samples),
    )
    return PlanWork(
        graph=b.build(meta={"strategy": "local"}),
        devices=(device,),
        unit="step",
        samples_per_unit=samples,
        memory=(memory,),
    )
