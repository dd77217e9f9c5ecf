"""The ``sharded`` strategy: a transformer on a dp x tp x pp x cp mesh with ZeRO/FSDP, recomputation
and interleaving (issue 16). :func:`~parplan.plan.sharded.costs.layout_plan` lays the plan out and
prices it; :func:`~parplan.plan.sharded.tasks.build_tasks` turns the layout into the event-simulated
task graph of one step; this module returns both as :class:`~parplan.plan.base.PlanWork` with
every device's peak memory (:mod:`parplan.plan.sharded.memory`), notes (the mesh, the schedule, the
sharding; placement warnings) and meta (mesh degrees, micro-batches, the model FLOPs of a step and
the device's peak in the plan's dtype, for MFU).
"""

from __future__ import annotations

from parplan.config.strategy import ShardedStrategy
from parplan.plan.base import MemoryBreakdown, PlanContext, PlanWork
from parplan.plan.sharded.costs import ShardedLayout, layout_plan
from parplan.plan.sharded.memory import plan_memory


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
        "hfu_ratio": hfu_ratio(layout),
    }


def hfu_ratio(layout: ShardedLayout) -> float:
    """Hardware over model FLOPs, as compute time: (forward + backward + recompute) / (forward +
    backward) over every stage (1 without recomputation)."""
    chunks = [c for row in layout.chunks for c in row]
    base = sum(c.forward_s + c.backward_s for c in chunks)
    return (base + sum(c.recompute_s for c in chunks)) / base if base > 0 else 1.0


def peak_flop_per_s(ctx: PlanContext, layout: ShardedLayout) -> float:
    """The dense peak of the plan's first device in the plan's dtype (what MFU divides by)."""
    device = ctx.network.device(layout.mesh.devices[0])
    peak = device.peak_for(layout.strategy.dtype)
    return float(peak if peak is not None else device.peak_flop_per_s)


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


def memory(ctx: PlanContext, strategy: ShardedStrategy) -> tuple[MemoryBreakdown, ...]:
    """Every device's peak memory, from the layout alone (what :func:`expand` reports, without
    building the step's tasks)."""
    return plan_memory(ctx, layout_plan(ctx, strategy))


def expand(ctx: PlanContext, strategy: ShardedStrategy) -> PlanWork:
    """One step of a sharded plan (module docstring)."""
    from parplan.plan.sharded.tasks import build_tasks

    layout = layout_plan(ctx, strategy)
    graph = build_tasks(ctx, layout)
    graph.meta.update({k: v for k, v in _meta(ctx, layout).items() if k not in graph.meta})
    return PlanWork(
        graph=graph,
        devices=layout.mesh.devices,
        unit="step",
        samples_per_unit=float(ctx.training.global_batch_size),
        memory=plan_memory(ctx, layout),
        notes=_notes(layout),
    )
