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
- **Order on each worker's stream.** ``gpipe``: all forwards (micro-batch order), then all
  backwards; enforced by making every backward on a worker wait for all of that worker's forwards.
  ``1f1b`` (PipeDream-flush): ``k = min(m, s - stage)`` warm-up forwards, then one backward and one
  forward alternately, then the remaining backwards; enforced by making forward ``j + k`` on a
  worker wait for backward ``j`` on that worker (at most ``k`` micro-batches in flight, which is what
  bounds its activation memory). Task priorities give the same order among ready tasks. Both rules
  only make a micro-batch wait for earlier micro-batches, so they cannot deadlock on any DAG.
- **Optimizer.** Each worker steps its own partitions' parameters once every backward on it is done.

The bubble (the fraction of the pipeline's span that a worker's stream is idle) is computed by
:mod:`parplan.plan.evaluate` from the forward/backward tasks; for ``s`` uniform stages and negligible
communication it is ``(s - 1) / (m + s - 1)``.

:func:`build_pipeline` is reused by data-parallel 2-D plans, one pipeline per replica.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from parplan.config.strategy import ModelParallelStrategy
from parplan.errors import InfeasiblePlanError, PlanError
from parplan.plan.base import MemoryBreakdown, PlanContext, PlanWork
from parplan.plan.compute import backward_seconds, forward_seconds, optimizer_seconds, params_of
from parplan.plan.memory import combine, inflight_microbatches, plan_memory, saved_activation_bytes
from parplan.taskgraph import TaskGraphBuilder


@dataclass(frozen=True)
class Segment:
    """A maximal run of consecutive (in model order) nodes of one partition."""

    index: int
    partition: str
    worker: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class PipelineLayout:
    """What a partitioning implies, independent of micro-batches and of which devices run it.

    ``workers`` are the distinct workers in stage order; ``segments`` are in model order;
    ``sends[seg]`` lists ``(producer node, consumer worker, consumer segments)`` for outputs of the
    segment that cross to another worker; ``local_preds[seg]`` the earlier segments on the same
    worker it reads from directly.
    """

    workers: tuple[str, ...]
    segments: tuple[Segment, ...]
    node_segment: Mapping[str, int]
    sends: tuple[tuple[tuple[str, str, tuple[int, ...]], ...], ...]
    local_preds: tuple[tuple[int, ...], ...]

    @property
    def num_stages(self) -> int:
        """Number of distinct workers."""
        return len(self.workers)

    def stage_of(self, worker: str) -> int:
        """Stage index of a worker."""
        return self.workers.index(worker)

    def worker_nodes(self, worker: str) -> tuple[str, ...]:
        """Every model node a worker runs, in model order."""
        return tuple(n for s in self.segments if s.worker == worker for n in s.nodes)

    def worker_segments(self, worker: str) -> tuple[int, ...]:
        """Indices of the worker's segments, in model order."""
        return tuple(s.index for s in self.segments if s.worker == worker)


def analyse_partitions(ctx: PlanContext, strategy: ModelParallelStrategy) -> PipelineLayout:
    """Check the partitions cover every model node exactly once on known devices; derive segments and cuts."""
    model = ctx.model
    order = tuple(model.order)
    known = set(order)
    owner: dict[str, int] = {}
    problems: list[str] = []
    for i, part in enumerate(strategy.partitions):
        ctx.network.device_index(part.worker)  # TopologyError for an unknown worker
        for n in part.nodes:
            if n not in known:
                problems.append(f"partition {part.name!r} names unknown model node {n!r}")
            elif n in owner:
                first = strategy.partitions[owner[n]].name
                problems.append(f"model node {n!r} is in partitions {first!r} and {part.name!r}")
            else:
                owner[n] = i
    missing = [n for n in order if n not in owner]
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        problems.append(f"model nodes in no partition: {shown}")
    if problems:
        raise PlanError("; ".join(problems))

    segments: list[Segment] = []
    node_segment: dict[str, int] = {}
    run: list[str] = []
    for n in order:
        if run and owner[run[-1]] != owner[n]:
            _close(segments, run, strategy, owner)
            run = []
        run.append(n)
    _close(segments, run, strategy, owner)
    for seg in segments:
        for n in seg.nodes:
            node_segment[n] = seg.index

    workers: list[str] = []
    for seg in segments:
        if seg.worker not in workers:
            workers.append(seg.worker)

    sends: list[list[tuple[str, str, tuple[int, ...]]]] = [[] for _ in segments]
    local: list[set[int]] = [set() for _ in segments]
    graph = model.graph
    for seg in segments:
        for u in seg.nodes:
            remote: dict[str, set[int]] = {}
            for v in graph.successors(u):
                sv = node_segment[v]
                if sv == seg.index:
                    continue
                w = segments[sv].worker
                if w == seg.worker:
                    local[sv].add(seg.index)
                else:
                    remote.setdefault(w, set()).add(sv)
            for w in sorted(remote, key=workers.index):
                sends[seg.index].append((u, w, tuple(sorted(remote[w]))))
    return PipelineLayout(
        workers=tuple(workers),
        segments=tuple(segments),
        node_segment=node_segment,
        sends=tuple(tuple(s) for s in sends),
        local_preds=tuple(tuple(sorted(p)) for p in local),
    )


def _close(
    segments: list[Segment], run: list[str], strategy: ModelParallelStrategy, owner: Mapping[str, int]
) -> None:
    if not run:
        return
    part = strategy.partitions[owner[run[0]]]
    segments.append(Segment(index=len(segments), partition=part.name, worker=part.worker, nodes=tuple(run)))


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


def worker_sequence(schedule: str, microbatches: int, warmup: int) -> list[tuple[str, int]]:
    """The order of ("F"|"B", micro-batch) units on one worker's stream.

    >>> worker_sequence("1f1b", 4, 2)
    [('F', 0), ('F', 1), ('B', 0), ('F', 2), ('B', 1), ('F', 3), ('B', 2), ('B', 3)]
    """
    m = microbatches
    if schedule == "gpipe":
        return [("F", j) for j in range(m)] + [("B", j) for j in range(m)]
    seq: list[tuple[str, int]] = [("F", j) for j in range(min(warmup, m))]
    for j in range(m):
        seq.append(("B", j))
        if j + warmup < m:
            seq.append(("F", j + warmup))
    return seq


@dataclass(frozen=True)
class PipelineTasks:
    """Task ids of one pipeline built into a graph.

    ``grads_ready[seg]`` is a marker done once every micro-batch's backward of segment ``seg`` is
    (its parameters' gradients are complete); ``backward_done[worker]`` once every backward on that
    (base) worker is; ``first_task``/``last_task`` bound the pipeline's tasks (last exclusive).
    """

    grads_ready: tuple[int, ...]
    backward_done: Mapping[str, int]
    first_task: int
    last_task: int


def build_pipeline(
    b: TaskGraphBuilder,
    ctx: PlanContext,
    layout: PipelineLayout,
    sizes: Sequence[int],
    schedule: str,
    *,
    worker_map: Mapping[str, str] | None = None,
    tag: str = "",
) -> PipelineTasks:
    """Append the forward and backward work of one pipelined step to ``b``.

    ``sizes`` are the micro-batch sizes; ``worker_map`` sends each layout worker to the device that
    runs it (identity by default; a 2-D plan maps replica ``r``'s copy); ``tag`` prefixes labels.
    """
    dev = {w: (worker_map or {}).get(w, w) for w in layout.workers}
    m = len(sizes)
    s = layout.num_stages
    segs = layout.segments
    first = b.num_tasks
    # priorities: position of each (unit, micro-batch) in the worker's sequence, then segment order
    prio: dict[tuple[str, str, int], int] = {}
    for w in layout.workers:
        warm = inflight_microbatches(schedule, m, s, layout.stage_of(w))
        for pos, (unit, j) in enumerate(worker_sequence(schedule, m, warm)):
            prio[(w, unit, j)] = pos * (len(segs) + 1)
    warmup = {w: inflight_microbatches(schedule, m, s, layout.stage_of(w)) for w in layout.workers}
    fwd_s = [forward_seconds(ctx, dev[seg.worker], seg.nodes, 1.0) for seg in segs]
    bwd_s = [backward_seconds(ctx, dev[seg.worker], seg.nodes, 1.0) for seg in segs]
    consumers: list[list[tuple[int, str, str]]] = [[] for _ in segs]  # seg -> (producer seg, node, worker)
    for seg in segs:
        for node, w, targets in layout.sends[seg.index]:
            for t in targets:
                consumers[t].append((seg.index, node, w))

    fwd: list[list[int]] = [[-1] * len(segs) for _ in range(m)]
    bwd: list[list[int]] = [[-1] * len(segs) for _ in range(m)]
    bwd_on_worker: dict[tuple[str, int], list[int]] = {}
    fwd_done: dict[str, int] = {}

    def forward_mb(j: int) -> None:
        sent: dict[tuple[str, str], int] = {}
        for seg in segs:
            deps = [fwd[j][p] for p in layout.local_preds[seg.index]]
            for src_seg, node, w in consumers[seg.index]:
                key = (node, w)
                if key not in sent:
                    size = ctx.model.node(node).activation_bytes_per_sample * sizes[j]
                    sent[key] = b.transfer(
                        dev[segs[src_seg].worker],
                        dev[w],
                        size,
                        [fwd[j][src_seg]],
                        category="activation",
                        label=f"{tag}act {node} mb{j}",
                    )
                deps.append(sent[key])
            if schedule == "1f1b" and j >= warmup[seg.worker]:
                deps.extend(bwd_on_worker[(seg.worker, j - warmup[seg.worker])])
            fwd[j][seg.index] = b.compute(
                dev[seg.worker],
                fwd_s[seg.index] * sizes[j],
                sorted(set(deps)),
                category="forward",
                label=f"{tag}fwd {seg.partition} mb{j}",
                priority=prio[(seg.worker, "F", j)] + seg.index,
            )

    def backward_mb(j: int) -> None:
        for seg in reversed(segs):
            deps = [fwd[j][seg.index]]
            deps.extend(
                bwd[j][t] for t in range(seg.index + 1, len(segs)) if seg.index in layout.local_preds[t]
            )
            for node, w, targets in layout.sends[seg.index]:
                size = ctx.model.node(node).activation_bytes_per_sample * sizes[j]
                deps.append(
                    b.transfer(
                        dev[w],
                        dev[seg.worker],
                        size,
                        [bwd[j][t] for t in targets],
                        category="activation_grad",
                        label=f"{tag}grad {node} mb{j}",
                    )
                )
            if schedule == "gpipe":
                deps.append(fwd_done[seg.worker])
            bwd[j][seg.index] = b.compute(
                dev[seg.worker],
                bwd_s[seg.index] * sizes[j],
                sorted(set(deps)),
                category="backward",
                label=f"{tag}bwd {seg.partition} mb{j}",
                priority=prio[(seg.worker, "B", j)] + (len(segs) - seg.index),
            )
            bwd_on_worker.setdefault((seg.worker, j), []).append(bwd[j][seg.index])

    if schedule == "gpipe":
        for j in range(m):
            forward_mb(j)
        for w in layout.workers:
            fwd_done[w] = b.marker(
                [fwd[j][i] for j in range(m) for i in layout.worker_segments(w)],
                label=f"{tag}forwards done {w}",
            )
        for j in range(m):
            backward_mb(j)
    elif schedule == "1f1b":
        for j in range(m):
            forward_mb(j)
            backward_mb(j)
    else:
        raise PlanError(f"unknown pipeline schedule {schedule!r}; valid: gpipe, 1f1b")

    grads_ready = tuple(
        b.marker([bwd[j][seg.index] for j in range(m)], label=f"{tag}grads {seg.partition}") for seg in segs
    )
    backward_done = {
        w: b.marker([grads_ready[i] for i in layout.worker_segments(w)], label=f"{tag}backward done {w}")
        for w in layout.workers
    }
    return PipelineTasks(
        grads_ready=grads_ready, backward_done=backward_done, first_task=first, last_task=b.num_tasks
    )


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
    """Peak memory of each worker: its partitions' state, in-flight micro-batches' activations, and
    send/receive buffers of one micro-batch's cut activations (plus ``extra_buffers_bytes[worker]``)."""
    dev = {w: (worker_map or {}).get(w, w) for w in layout.workers}
    cut = dict.fromkeys(layout.workers, 0.0)
    for seg in layout.segments:
        for node, w, _ in layout.sends[seg.index]:
            size = ctx.model.node(node).activation_bytes_per_sample * microbatch_samples
            cut[seg.worker] += size
            cut[w] += size
    out: list[MemoryBreakdown] = []
    for w in layout.workers:
        nodes = layout.worker_nodes(w)
        held = inflight_microbatches(schedule, microbatches, layout.num_stages, layout.stage_of(w))
        out.append(
            plan_memory(
                ctx,
                dev[w],
                params=params_of(ctx.model, nodes),
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
    for w in layout.workers:
        b.compute(
            w,
            optimizer_seconds(ctx, w, params_of(ctx.model, layout.worker_nodes(w))),
            [tasks.backward_done[w]],
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
        notes=_notes(layout, m),
    )


def _notes(layout: PipelineLayout, m: int) -> tuple[str, ...]:
    cuts = sum(len(s) for s in layout.sends)
    return (
        f"{layout.num_stages} stage(s), {len(layout.segments)} segment(s), {m} micro-batch(es), "
        f"{cuts} activation transfer(s) per micro-batch each way",
    )
