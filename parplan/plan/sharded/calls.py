"""Timing and lowering one :class:`~parplan.plan.sharded.comm.CommCall` of a sharded plan for its
event-simulated step (:mod:`parplan.plan.sharded.tasks`).

:class:`CallTimer` gives the seconds a call takes in its group, once per (call, size, stage): it
lowers one instance on the group's devices through the registry and ``auto``
(:func:`parplan.plan.collective_run.resolve_run`: NCCL's pick of algorithm, protocol and channels; the
data-parallel algorithm for gradient all-reduces) and simulates it with the engine
(``ctx.simulator``), so a replayed call costs what the engine's own rules say; without a simulator,
or for all-to-all and send/recv (no schedule in the registry), the closed form of
:class:`~parplan.plan.sharded.clock.CollectiveClock`. :func:`call_run` and :func:`call_schedule`
also serve :mod:`parplan.plan.sharded.step_end`, which lowers the calls that stay simulated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from parplan.plan.sharded.clock import CollectiveClock
from parplan.plan.sharded.comm import CommCall
from parplan.taskgraph import TaskGraph

if TYPE_CHECKING:
    from parplan.plan.base import PlanContext
    from parplan.plan.sharded.costs import ShardedLayout


def lowerable(collective: str) -> bool:
    """Whether the registry has schedules for ``collective`` (all-reduce, all-gather,
    reduce-scatter, broadcast; all-to-all once it is registered); send/recv never."""
    from parplan.collectives.registry import algorithms
    from parplan.collectives.schedule import COLLECTIVES

    return collective in COLLECTIVES and bool(algorithms(collective))


class CallTimer:
    """Seconds of one :class:`CommCall` in its group, timed once per (call, size, stage) by the
    engine on one lowered instance (module docstring), else by the closed form."""

    def __init__(self, ctx: PlanContext, layout: ShardedLayout) -> None:
        self.ctx = ctx
        self.clock = CollectiveClock(ctx, layout)
        self._times: dict[tuple[str, str, float, int], float] = {}

    def seconds(self, call: CommCall, stage: int) -> float:
        """Seconds of ``call`` on stage ``stage``'s group (0 for a group of one)."""
        key = (call.collective, call.axis, call.size_bytes, stage)
        found = self._times.get(key)
        if found is None:
            found = self._times[key] = self._time(call, stage)
        return found

    def total(self, calls: Sequence[CommCall], stage: int) -> float:
        """Seconds of ``calls`` one after another."""
        return sum(self.seconds(c, stage) for c in calls)

    def stolen(self, calls: Sequence[CommCall], stage: int) -> float:
        """Compute seconds ``calls`` take from the compute they run beside: each call's seconds
        times the share of the compute's rate it takes (:meth:`CollectiveClock.compute_share`:
        its NCCL channels' SMs, the memory bandwidth its traffic takes)."""
        return sum(self.seconds(c, stage) * self.clock.compute_share(c, stage) for c in calls)

    def _time(self, call: CommCall, stage: int) -> float:
        devices = self.clock.group(call.axis, stage)
        if len(devices) < 2 or call.size_bytes <= 0:
            return 0.0
        if self.ctx.simulator is None or not lowerable(call.collective):
            return self.clock.seconds(call, stage)
        graph = lowered_graph(self.ctx, self.clock.layout, call, devices)
        return float(self.ctx.simulator(graph, self.ctx.network))


def call_run(ctx: PlanContext, layout: ShardedLayout, call: CommCall, devices: Sequence[str]) -> Any:
    """(algorithm spec, run) of ``call`` on ``devices``: the data-parallel algorithm for gradient
    all-reduces, NCCL's ``auto`` pick otherwise."""
    from parplan.collectives.auto import AutoAlgorithm
    from parplan.plan.collective_run import resolve_run
    from parplan.topology.nccl_system import nccl_system

    spec: Any = AutoAlgorithm(name="auto")
    if call.collective == "all_reduce" and call.axis in ("dp", "dp_cp", "edp", "dp_replicate"):
        spec = layout.strategy.aggregation.algorithm
    system = nccl_system(ctx.network, list(devices)) if isinstance(spec, AutoAlgorithm) else None
    return resolve_run(spec, call.size_bytes, system, ctx.network.transport, collective=call.collective)


def call_schedule(ctx: PlanContext, run: Any, call: CommCall, devices: Sequence[str]) -> tuple[Any, float]:
    """The schedule of ``call`` under ``run`` and its element size (bytes)."""
    from parplan.collectives.registry import get
    from parplan.topology.placement import groups_by_node

    algorithm = get(run.spec.name, call.collective)
    groups = groups_by_node(ctx.network, list(devices)) if algorithm.uses_groups(run.spec) else None
    element_bytes = max(1.0, call.size_bytes / 2**20)
    elements = max(1, round(call.size_bytes / element_bytes))
    return algorithm.build(run.spec, len(devices), elements, groups), call.size_bytes / elements


def lowered_graph(
    ctx: PlanContext, layout: ShardedLayout, call: CommCall, devices: Sequence[str]
) -> TaskGraph:
    """A task graph of just ``call`` on ``devices`` (what :class:`CallTimer` simulates)."""
    from parplan.plan.collective import collective_taskgraph

    run = call_run(ctx, layout, call, devices)
    schedule, element_bytes = call_schedule(ctx, run, call, devices)
    return collective_taskgraph(
        schedule,
        list(devices),
        element_bytes,
        protocol=run.protocol,
        call_overhead_s=run.call_overhead_s,
        max_rate_Bps=run.max_rate_Bps,
        network=ctx.network,
    )
