"""The end of a sharded step in the task graph (:mod:`parplan.plan.sharded.tasks`): gradient
buckets, the tied-embedding all-reduce, the optimizer and ZeRO-1/2's parameter all-gather.

A call whose groups are made of representatives only (the data-parallel group when TP and CP
ranks are represented by rank 0, the first/last-stage pair of tied embeddings) is lowered into
transfers among them through the registry and ``auto``, so it shares links with the pipeline's
traffic; any other (e.g. ``dp_cp`` with CP > 1, whose other members are not in the graph) is
replayed on each representative's communication stream for the time :class:`CallTimer` gives.

Buckets come in backward order; bucket ``k`` of ``n`` belongs to chunk :func:`bucket_chunk` (the
last chunk first). The last micro-batch's weight-gradient pass of a chunk runs in one slice per
bucket of the chunk (:mod:`~parplan.plan.sharded.tasks`), and bucket ``k`` is ready when its slice
is done (``bucket_ready``), as DDP's and Megatron's buckets fill layer by layer during the last
backward; each waits for the previous bucket on its rank (NCCL runs them in order). Without
``aggregation.overlap`` every bucket waits for the stage's last backward.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from parplan.pipeline import Unit
from parplan.taskgraph import COMM_STREAM, TaskGraphBuilder

if TYPE_CHECKING:
    from parplan.plan.base import PlanContext
    from parplan.plan.sharded.calls import CallTimer
    from parplan.plan.sharded.comm import CommCall
    from parplan.plan.sharded.costs import ShardedLayout


def bucket_chunk(k: int, buckets: int, virtual_stages: int) -> int:
    """The chunk whose parameters gradient bucket ``k`` of ``buckets`` (backward order) holds:
    ``v - 1 - floor(k v / n)``.

    >>> [bucket_chunk(k, 4, 2) for k in range(4)]
    [1, 1, 0, 0]
    """
    v = virtual_stages
    return v - 1 - min(v - 1, k * v // buckets)


def add_step_end(
    b: TaskGraphBuilder,
    ctx: PlanContext,
    layout: ShardedLayout,
    timer: CallTimer,
    reps: Sequence[Sequence[str]],
    backward: Mapping[tuple[int, int, Unit], int],
    bucket_ready: Mapping[tuple[int, int, int], int],
) -> None:
    """Append the step's end for every stage and representative (module docstring):
    ``backward[(s, d, unit)]`` ends the last micro-batch's units, ``bucket_ready[(s, d, k)]`` the
    slice that completes bucket ``k``'s gradients."""
    pp, v, m = layout.strategy.pp, layout.virtual_stages, layout.microbatches
    dp = len(reps[0])
    overlap = layout.strategy.aggregation.overlap
    synced: list[list[int]] = []
    for s in range(pp):
        last = [[backward[(s, d, Unit("B", m - 1, c))] for c in range(v)] for d in range(dp)]
        all_done = [b.marker(last[d], label=f"backward done s{s}") for d in range(dp)]
        previous = [[t] for t in all_done] if not overlap else [[] for _ in range(dp)]
        calls = () if layout.per_microbatch_sync else layout.grad_sync[s]
        for k, call in enumerate(calls):
            chunk = bucket_chunk(k, len(calls), v)
            ready = [[bucket_ready.get((s, d, k), last[d][chunk]), *previous[d]] for d in range(dp)]
            previous = [[t] for t in _call(b, ctx, layout, timer, reps, s, call, ready)]
        synced.append([b.marker([all_done[d], *previous[d]], label=f"grads synced s{s}") for d in range(dp)])
    if layout.embedding_sync is not None and pp > 1:
        call = layout.embedding_sync
        for d in range(dp):
            pair = [reps[0][d], reps[pp - 1][d]]
            done = _lower(b, ctx, layout, call, pair, [[synced[0][d]], [synced[pp - 1][d]]])
            synced[0][d], synced[pp - 1][d] = done[0], done[1]
    for s in range(pp):
        updated = [
            b.compute(
                reps[s][d],
                layout.optimizer_s[s],
                [synced[s][d]],
                category="optimizer",
                label=f"optimizer s{s}",
            )
            for d in range(dp)
        ]
        for call in layout.param_sync[s] if layout.param_sync else ():
            updated = _call(b, ctx, layout, timer, reps, s, call, [[t] for t in updated])


def _call(
    b: TaskGraphBuilder,
    ctx: PlanContext,
    layout: ShardedLayout,
    timer: CallTimer,
    reps: Sequence[Sequence[str]],
    s: int,
    call: CommCall,
    ready: Sequence[Sequence[int]],
) -> list[int]:
    """``call`` on stage ``s`` for every representative: lowered per group when its groups are made
    of representatives, else replayed on each one's communication stream. Returns each rank's done."""
    mesh = layout.mesh
    index = {dev: d for d, dev in enumerate(reps[s])}
    groups: list[tuple[str, ...]] = []
    seen: set[str] = set()
    for dev in reps[s]:
        if dev not in seen:
            group = mesh.group(call.axis, dev)
            groups.append(group)
            seen.update(group)
    lowered = all(dev in index for g in groups for dev in g)
    done = [-1] * len(reps[s])
    if not lowered:
        seconds = timer.seconds(call, s)
        for d, dev in enumerate(reps[s]):
            done[d] = b.compute(
                dev, seconds, list(ready[d]), category="dp", label=f"{call.label} s{s}", stream=COMM_STREAM
            )
        return done
    for group in groups:
        ranks = [index[dev] for dev in group]
        if len(group) < 2:
            done[ranks[0]] = b.marker(list(ready[ranks[0]]), label=f"{call.label} s{s}")
            continue
        finished = _lower(b, ctx, layout, call, list(group), [list(ready[r]) for r in ranks])
        for r, t in zip(ranks, finished, strict=True):
            done[r] = t
    return done


def _lower(
    b: TaskGraphBuilder,
    ctx: PlanContext,
    layout: ShardedLayout,
    call: CommCall,
    devices: list[str],
    ready: Sequence[Sequence[int]],
) -> list[int]:
    """Lower ``call`` on ``devices`` into transfers (registry, ``auto``); each rank's done marker."""
    from parplan.plan.collective import lower_schedule
    from parplan.plan.sharded.calls import call_run, call_schedule

    run = call_run(ctx, layout, call, devices)
    schedule, element_bytes = call_schedule(ctx, run, call, devices)
    tasks = lower_schedule(
        b,
        schedule,
        devices,
        element_bytes=element_bytes,
        rank_deps=[sorted(set(r)) for r in ready],
        category="allreduce" if call.collective == "all_reduce" else call.collective.replace("_", ""),
        label=call.label,
        protocol=run.protocol,
        call_overhead_s=run.call_overhead_s,
        max_rate_Bps=run.max_rate_Bps,
        network=ctx.network,
    )
    return list(tasks.rank_done)
