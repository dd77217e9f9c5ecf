"""The ``model_parallel`` strategy: partitions of the model graph on workers, pipelined micro-batches.

Any partition of any model DAG on any topology is accepted, not only contiguous chains:

- **Segments.** Walking the model's topological order, a *segment* is a maximal run of consecutive
  nodes of one partition. A contiguous chain partition is one segment; a non-contiguous partition
  (nodes 1 and 3 on worker A, node 2 on B) or a branching DAG gives several, and one worker may hold
  several partitions. Each micro-batch runs one forward and one backward compute task per segment.
  Every input a segment needs comes from an earlier segment, so dependencies never form a cycle.
- **Cut edges.** For every model edge ``u -> v`` whose endpoints are on different workers, each
  micro-batch sends ``u``'s output (``activation_bytes_per_sample x micro-batch samples``) from
  ``u``'s worker to ``v``'s, routed over the cluster, and in backward the gradient of that
  activation (same size) back. Several consumers of ``u`` on one worker share one transfer (the
  tensor is sent once; their gradient contributions are summed there and sent back once), so the
  transfers are one per (producer node, consuming worker) per micro-batch and direction. Edges
  between partitions on the same worker are plain dependencies.
- **Stages.** Workers are ordered by the first model node they run; a worker's *stage index* is its
  position in that order and ``s`` the number of workers.
- **Micro-batches.** With ``communication.protocol: pipeline`` the batch is split into
  ``communication.microbatches`` micro-batches (sizes differ by at most one); ``none`` is one batch.
- **Order on each worker's stream.** ``communication.schedule`` names a pipeline schedule of
  :mod:`parplan.pipeline` (``gpipe``: all forwards, then all backwards; ``1f1b``
  (PipeDream-flush): ``k = min(m, s - stage)`` warm-up forwards, then one backward and one forward
  alternately, at most ``k`` micro-batches in flight). The schedule gives each stage's order, the
  rules that enforce it and the micro-batches each stage holds; :mod:`parplan.plan.pipeline_tasks`
  turns them into priorities and dependencies. The rules only make a micro-batch wait for earlier
  micro-batches, so they cannot deadlock on any DAG.
- **Optimizer.** Each worker steps its own partitions' parameters once every backward on it is done.
- **Tied weights.** Where a tied embedding and head run on different workers, the head's worker
  holds a copy of the word embedding (weights, gradients, optimizer state) and, after backward,
  the two copies' gradients are all-reduced between the two workers (the registry's default
  algorithm, ``auto``) before either optimizer steps, as Megatron-LM does between its first and
  last stage (:func:`allreduce_tied`).

The bubble (the fraction of the pipeline's span that a worker's stream is idle) is computed by
:mod:`parplan.api.timeline` from the forward/backward tasks; for ``s`` uniform stages and negligible
communication it is ``(s - 1) / (m + s - 1)``.

Segments, cut edges and stages come from :func:`~parplan.plan.pipeline_layout.analyse_partitions`;
the task building (:func:`~parplan.plan.pipeline_tasks.build_pipeline`) is reused by data-parallel
2-D plans, one pipeline per replica.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from parplan.config.strategy import ModelParallelStrategy
from parplan.errors import InfeasiblePlanError
from parplan.plan.base import CollectiveInfo, MemoryBreakdown, PlanContext, PlanWork
from parplan.plan.compute import optimizer_seconds, params_of
from parplan.plan.memory import combine, inflight_microbatches, plan_memory, saved_activation_bytes
from parplan.plan.pipeline_layout import PipelineLayout, Segment, analyse_partitions
from parplan.plan.pipeline_tasks import PipelineTasks, TiedCopy, build_pipeline, tied_copies, tied_params
from parplan.taskgraph import TaskGraphBuilder

__all__ = [
    "PipelineLayout",
    "PipelineTasks",
    "Segment",
    "TiedCopy",
    "allreduce_tied",
    "analyse_partitions",
    "build_pipeline",
    "expand",
    "microbatch_sizes",
    "num_microbatches",
    "pipeline_memory",
    "tied_copies",
    "tied_params",
]
"""The strategy's API; the layout and the task building live in :mod:`parplan.plan.pipeline_layout`
and :mod:`parplan.plan.pipeline_tasks` and are re-exported for the 2-D data-parallel plans."""


def microbatch_sizes(samples: int, microbatches: int) -> list[int]:
    """Split ``samples`` into ``microbatches`` sizes differing by at most one (larger ones first)."""
    if samples < microbatches:
        raise InfeasiblePlanError(
            f"{samples} samples cannot fill {microbatches} micro-batches; use at most {samples} micro-batches"
        )
    base, extra = divmod(samples, microbatches)
    return [base + (1 if j < extra else 0) for j in range(microbatches)]


def num_microbatches(strategy: ModelParallelStrategy) -> int:
    """Micro-batches per step: ``communication.microbatches`` for a pipeline, 1 without one."""
    comm = strategy.communication
    return comm.microbatches if comm.protocol == "pipeline" else 1


def pipeline_memory(
    ctx: PlanContext,
    layout: PipelineLayout,
    microbatch_samples: int,
    microbatches: int,
    schedule: str,
    *,
    worker_map: Mapping[str, str] | None = None,
    extra_buffers_bytes: Mapping[str, float] | None = None,
) -> tuple[MemoryBreakdown, ...]:
    """Peak memory of each worker: its partitions' state (and that of the tied copies it holds),
    in-flight micro-batches' activations, and send/receive buffers of one micro-batch's cut
    activations (plus ``extra_buffers_bytes[worker]``)."""
    dev = {w: (worker_map or {}).get(w, w) for w in layout.workers}
    cut = dict.fromkeys(layout.workers, 0.0)
    for seg in layout.segments:
        for node, w, _ in layout.sends[seg.index]:
            size = ctx.model.node(node).activation_bytes_per_sample * microbatch_samples
            cut[seg.worker] += size
            cut[w] += size
    copies = tied_copies(ctx, layout)
    out: list[MemoryBreakdown] = []
    for w in layout.workers:
        nodes = layout.worker_nodes(w)
        held = inflight_microbatches(schedule, microbatches, layout.num_stages, layout.stage_of(w))
        out.append(
            plan_memory(
                ctx,
                dev[w],
                params=params_of(ctx.model, nodes) + tied_params(copies, w),
                activations_bytes=saved_activation_bytes(ctx.model, nodes, microbatch_samples * held),
                buffers_bytes=cut[w] + (extra_buffers_bytes or {}).get(w, 0.0),
            )
        )
    return combine(out)


def expand(ctx: PlanContext, strategy: ModelParallelStrategy) -> PlanWork:
    """One pipelined step of ``strategy``: forward/backward per segment and micro-batch, cut-edge
    transfers both ways, then each worker's optimizer step."""
    layout = analyse_partitions(ctx, strategy)
    m = num_microbatches(strategy)
    schedule = strategy.communication.schedule
    sizes = microbatch_sizes(ctx.training.global_batch_size, m)
    b = TaskGraphBuilder(list(layout.workers))
    tasks = build_pipeline(b, ctx, layout, sizes, schedule)
    copies = tied_copies(ctx, layout)
    ready = {w: [tasks.backward_done[w]] for w in layout.workers}
    waits, infos = allreduce_tied(b, ctx, copies, {w: w for w in layout.workers}, ready)
    for w in layout.workers:
        b.compute(
            w,
            optimizer_seconds(ctx, w, params_of(ctx.model, layout.worker_nodes(w)) + tied_params(copies, w)),
            [tasks.backward_done[w], *waits.get(w, [])],
            category="optimizer",
            label=f"optimizer {w}",
        )
    memory = pipeline_memory(ctx, layout, max(sizes), m, schedule)
    return PlanWork(
        graph=b.build(
            meta={
                "strategy": "model_parallel",
                "microbatches": m,
                "stages": layout.num_stages,
                "schedule": schedule,
            }
        ),
        devices=layout.workers,
        unit="step",
        samples_per_unit=float(ctx.training.global_batch_size),
        memory=memory,
        collectives=tuple(infos),
        notes=_notes(layout, m),
    )


def allreduce_tied(
    b: TaskGraphBuilder,
    ctx: PlanContext,
    copies: Sequence[TiedCopy],
    device: Mapping[str, str],
    ready: Mapping[str, Sequence[int]],
    *,
    tag: str = "",
) -> tuple[dict[str, list[int]], list[CollectiveInfo]]:
    """All-reduce each tied copy's gradients (``params x bytes_per_grad``) between the owner's and
    the user's worker (on ``device[worker]``), each side once ``ready[worker]`` is done, with the
    registry's default algorithm; returns, per worker, the tasks its optimizer must wait for and
    the collectives' infos."""
    from parplan.collectives.registry import DEFAULT_ALGORITHM, parse
    from parplan.plan.strategies.data_parallel import Bucket, allreduce_buckets

    waits: dict[str, list[int]] = {}
    infos: list[CollectiveInfo] = []
    for c in copies:
        ends = (c.owner_worker, c.user_worker)
        bucket = Bucket((c.label,), c.params, c.params * ctx.model_spec.bytes_per_grad)
        done, found = allreduce_buckets(
            b,
            ctx,
            [bucket],
            [device[w] for w in ends],
            parse(DEFAULT_ALGORITHM),
            [[list(ready[w]) for w in ends]],
            label=f"{tag}tied {c.label}",
        )
        for w, marker in zip(ends, done, strict=True):
            waits.setdefault(w, []).append(marker)
        infos.extend(found)
    return waits, infos


def _notes(layout: PipelineLayout, m: int) -> tuple[str, ...]:
    cuts = sum(len(s) for s in layout.sends)
    return (
        f"{layout.num_stages} stage(s), {len(layout.segments)} segment(s), {m} micro-batch(es), "
        f"{cuts} activation transfer(s) per micro-batch each way",
    )
