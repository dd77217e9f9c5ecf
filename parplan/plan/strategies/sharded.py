"""The ``sharded`` strategy: a transformer on a dp x tp x pp x cp mesh with ZeRO/FSDP, recomputation
and interleaving (issue 16). :func:`~parplan.plan.sharded.costs.layout_plan` lays the plan out and
prices it; this module turns the layout into :class:`~parplan.plan.base.PlanWork`: the task graph
of one step, every device's peak memory (:mod:`parplan.plan.sharded.memory`), notes and meta
(mesh degrees, micro-batches, the model FLOPs of a step for MFU).

The task graph is the event-simulated step of :mod:`parplan.plan.sharded.tasks` when that module
is present. Without it, a stand-in (:func:`standin_graph`) keeps the plan runnable: every device
runs its stage's micro-batches in the schedule's order as one forward and one backward task each,
whose durations are the compute plus the blocking TP/EP calls and the exposed part of the
overlappable ones, timed in closed form (:class:`~parplan.plan.sharded.clock.CollectiveClock`);
activations and their gradients cross between stages as real transfers; the per-step gradient
synchronisation, tied-embedding all-reduce, optimizer and ZeRO parameter all-gather follow as one
task per device, also in closed form. Interleaved chunks run as one unit per micro-batch there.
"""

from __future__ import annotations

import importlib.util

from parplan.config.strategy import ShardedStrategy
from parplan.pipeline import Stage
from parplan.pipeline import get as get_schedule
from parplan.plan.base import PlanContext, PlanWork
from parplan.plan.sharded.clock import CollectiveClock
from parplan.plan.sharded.costs import ShardedLayout, layout_plan
from parplan.plan.sharded.memory import plan_memory
from parplan.taskgraph import TaskGraph, TaskGraphBuilder

TASKS_MODULE = "parplan.plan.sharded.tasks"
"""The event-simulated task builder's module (``build_tasks(ctx, layout)``)."""


def _stage_durations(clock: CollectiveClock, stage: int) -> tuple[float, float, float]:
    """(forward, backward, end-of-step) seconds of one device of ``stage`` for the stand-in."""
    layout = clock.layout
    fwd = bwd = 0.0
    for chunk in layout.chunks[stage]:
        fwd += chunk.forward_s + sum(clock.seconds(c, stage) for c in chunk.forward_comm if c.blocking)
        bwd += chunk.backward_s + chunk.recompute_s
        bwd += sum(clock.seconds(c, stage) for c in chunk.backward_comm if c.blocking)
    sync = clock.total(layout.grad_sync[stage], stage)
    if layout.per_microbatch_sync:
        bwd += sync + clock.total(layout.param_gather[stage], stage) * (
            2 if layout.param_gather_backward else 1
        )
        sync = 0.0
    if layout.embedding_sync is not None and stage in (0, layout.strategy.pp - 1):
        sync += clock.seconds(layout.embedding_sync, stage)
    if layout.param_sync:
        sync += clock.total(layout.param_sync[stage], stage)
    return fwd, bwd, sync + layout.optimizer_s[stage]


def standin_graph(ctx: PlanContext, layout: ShardedLayout) -> TaskGraph:
    """The stand-in step graph (module docstring)."""
    mesh, strategy = layout.mesh, layout.strategy
    pp, m = mesh.pp, layout.microbatches
    clock = CollectiveClock(ctx, layout)
    durations = [_stage_durations(clock, s) for s in range(pp)]
    schedule = get_schedule("1f1b" if strategy.virtual_stages > 1 else strategy.schedule)
    orders = [schedule.worker_order(Stage(index=s, num_stages=pp, microbatches=m)) for s in range(pp)]
    b = TaskGraphBuilder(list(mesh.devices))
    stride = mesh.stride("pp")
    for first in (r for r in range(mesh.size) if (r // stride) % pp == 0):
        column = [mesh.devices[first + s * stride] for s in range(pp)]
        fwd: list[dict[int, int]] = [{} for _ in range(pp)]
        bwd: list[dict[int, int]] = [{} for _ in range(pp)]
        # walk the stages' orders together: a unit is placed once what it waits for exists
        cursor = [0] * pp
        last: list[list[int]] = [[] for _ in range(pp)]
        while any(cursor[s] < len(orders[s]) for s in range(pp)):
            progressed = False
            for s in range(pp):
                while cursor[s] < len(orders[s]):
                    unit = orders[s][cursor[s]]
                    j, device = unit.microbatch, column[s]
                    if unit.direction == "F":
                        if s > 0 and j not in fwd[s - 1]:
                            break
                        deps = [*last[s]]
                        if s > 0:
                            deps.append(
                                b.transfer(
                                    column[s - 1],
                                    device,
                                    layout.p2p_bytes,
                                    [fwd[s - 1][j]],
                                    category="activation",
                                    label=f"act mb{j}",
                                )
                            )
                        task = fwd[s][j] = b.compute(
                            device, durations[s][0], deps, category="forward", label=f"fwd mb{j}"
                        )
                    else:
                        if j not in fwd[s] or (s < pp - 1 and j not in bwd[s + 1]):
                            break
                        deps = [*last[s], fwd[s][j]]
                        if s < pp - 1:
                            deps.append(
                                b.transfer(
                                    column[s + 1],
                                    device,
                                    layout.p2p_bytes,
                                    [bwd[s + 1][j]],
                                    category="activation",
                                    label=f"grad mb{j}",
                                )
                            )
                        task = bwd[s][j] = b.compute(
                            device, durations[s][1], deps, category="backward", label=f"bwd mb{j}"
                        )
                    last[s] = [task]
                    cursor[s] += 1
                    progressed = True
            if not progressed:  # pragma: no cover - the schedules' orders never deadlock
                raise RuntimeError("pipeline orders deadlock")
        for s in range(pp):
            b.compute(column[s], durations[s][2], last[s], category="optimizer", label="sync + optimizer")
    return b.build(meta=_meta(ctx, layout))


def _meta(ctx: PlanContext, layout: ShardedLayout) -> dict[str, object]:
    """What the graph's readers need: the plan kind, the mesh, micro-batches, the schedule, FLOPs."""
    from parplan.model.transformer import model_flops_per_token

    mesh, strategy = layout.mesh, layout.strategy
    tokens = ctx.training.global_batch_size * layout.shape.sequence_length
    return {
        "strategy": "sharded",
        "dp": mesh.dp,
        "tp": mesh.tp,
        "pp": mesh.pp,
        "cp": mesh.cp,
        "ep": mesh.ep,
        "microbatches": layout.microbatches,
        "stages": mesh.pp,
        "schedule": strategy.schedule,
        "model_flops_per_step": float(model_flops_per_token(layout.shape)) * tokens,
        "peak_flop_per_s": peak_flop_per_s(ctx, layout),
    }


def peak_flop_per_s(ctx: PlanContext, layout: ShardedLayout) -> float:
    """The dense peak of the plan's first device in the plan's dtype (what MFU divides by)."""
    device = ctx.network.device(layout.mesh.devices[0])
    peak = device.peak_for(layout.strategy.dtype)
    return float(peak if peak is not None else device.peak_flop_per_s)


def _graph(ctx: PlanContext, layout: ShardedLayout) -> tuple[TaskGraph, tuple[str, ...]]:
    """E's event-simulated graph when present, else the stand-in (and a note saying so)."""
    if importlib.util.find_spec(TASKS_MODULE) is not None:
        tasks = importlib.import_module(TASKS_MODULE)
        built = tasks.build_tasks(ctx, layout)
        graph = built if isinstance(built, TaskGraph) else built.graph
        graph.meta.update({k: v for k, v in _meta(ctx, layout).items() if k not in graph.meta})
        return graph, ()
    return standin_graph(ctx, layout), ("stand-in step graph: per-layer communication timed in closed form",)


def _notes(layout: ShardedLayout) -> tuple[str, ...]:
    mesh, s = layout.mesh, layout.strategy
    sharding = f"ZeRO-{s.zero}" if s.fsdp == "none" else f"FSDP {s.fsdp}"
    parts = [
        f"dp {mesh.dp} x tp {mesh.tp} x pp {mesh.pp} x cp {mesh.cp}"
        + (f", ep {mesh.ep}" if mesh.ep > 1 else ""),
        f"{layout.microbatches} micro-batch(es) of {s.microbatch_size} per pipeline, {s.schedule}"
        + (f" over {s.virtual_stages} virtual stages" if s.virtual_stages > 1 else ""),
        f"{sharding}, recompute {s.recompute}" + (", sequence parallel" if s.sequence_parallel else ""),
    ]
    return ("; ".join(parts), *mesh.notes())


def expand(ctx: PlanContext, strategy: ShardedStrategy) -> PlanWork:
    """One step of a sharded plan (module docstring)."""
    layout = layout_plan(ctx, strategy)
    graph, graph_notes = _graph(ctx, layout)
    return PlanWork(
        graph=graph,
        devices=layout.mesh.devices,
        unit="step",
        samples_per_unit=float(ctx.training.global_batch_size),
        memory=plan_memory(ctx, layout),
        notes=(*_notes(layout), *graph_notes),
    )
