"""The ``data_parallel`` strategy: replicas on shards of the batch, gradients all-reduced.

One step, per replica ``r`` on device ``d_r``:

1. **Batch split.** ``round_robin``: the global batch is dealt out one sample at a time, so shard
   sizes differ by at most one (the first ``B mod n`` replicas get one more). ``by_speed``: shards in
   proportion to each device's :attr:`~parplan.topology.network.DeviceInfo.effective_flop_per_s`,
   rounded by the largest-remainder method (ties to the lower rank), so they sum to the batch.
   Both follow the rules of :mod:`parplan.runtime`. Every replica needs at least one sample under
   ``round_robin``; ``by_speed`` may leave a very slow device with none (it still joins the all-reduce).
2. **Forward** of the whole model on the shard (one task), then **backward** one task per model node
   in reverse topological order, so gradients appear layer by layer as in autograd.
3. **Buckets.** Nodes with parameters are taken in reverse model order (the order their gradients
   appear, as PyTorch DDP assigns buckets) and packed into buckets that close as soon as they hold
   at least ``bucket_size`` bytes of gradients; a node's gradients are never split. With ``overlap``
   a bucket's all-reduce may start on a replica as soon as that replica's backward has produced all
   of the bucket's gradients, so it overlaps the rest of backward; without ``overlap`` every bucket
   waits for the end of backward. Either way a replica runs its buckets' all-reduces one after
   another, in bucket order (one communication stream per rank, as NCCL does), so the only difference
   overlap makes is when each bucket may start.
4. **All-reduce** of each bucket with ``aggregation.algorithm``: the algorithm's schedule (from
   :func:`parplan.collectives.registry.get`) on the replica devices, grouped by node with
   :func:`parplan.topology.placement.groups_by_node` when the algorithm uses groups (ring; and
   hierarchical unless it gives a ``group_size``), lowered into the step with
   :func:`parplan.plan.collective.lower_schedule`.
   ``reduce``: ``sum``, ``mean`` (scale by 1/n) and ``weighted_by_samples`` (each replica scales its
   gradient by its share of the batch before the sum) move the same bytes; the scaling is one
   elementwise pass over the gradients, negligible next to the optimizer's several, and not charged.
5. **Optimizer** step of the whole model on each replica once its all-reduces are done.

One replica skips the all-reduce and is exactly the ``local`` plan.

**2-D plans.** With ``replica`` (a model-parallel plan), each replica runs that pipeline on its own
devices over its shard of the batch (micro-batches per the replica's ``communication``); the
gradients of each stage are bucketed the same way and all-reduced among that stage's copies. A
bucket is ready once every micro-batch's backward of the segments holding its nodes is done; a
contiguous stage is one segment, so its buckets start when the stage's last backward ends (as in
Megatron-LM without ``overlap_grad_reduce``) and overlap the other stages' pipeline drain; then
each worker steps its own parameters. Tied weights split over two stages (a tied embedding and
head) add the head stage's copy to its buckets and, after the data-parallel all-reduces, an
all-reduce of the two copies' gradients within each replica, which both stages' optimizers wait
for (Megatron-LM's order). Which devices each replica uses is the rule of
:meth:`~parplan.config.strategy.DataParallelStrategy.replica_devices` (``validate-config`` checks the
same): plain replicas run on ``devices`` or the cluster's first ``num_replicas`` devices; for a 2-D
plan with W workers (sorted by cluster position), replica ``r`` runs worker ``W[j]`` on
``devices[r W + j]`` or, without ``devices``, on the device ``r x len(W)`` places after ``W[j]`` in
cluster order (a 4-stage plan on ``n0.d0 .. n0.d3`` replicates onto ``n0.d4 .. n0.d7``, then onto the
next node). By-speed shards of a 2-D plan
weight each replica by its slowest device (a pipeline runs at its slowest stage's pace).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from parplan.collectives.algorithm import AlgorithmSpecBase
from parplan.collectives.schedule import Schedule
from parplan.config.strategy import DataParallelStrategy
from parplan.errors import InfeasiblePlanError, PlanError, RuntimeCheckError
from parplan.plan.base import CollectiveInfo, MemoryBreakdown, PlanContext, PlanWork
from parplan.plan.compute import backward_seconds, forward_seconds, optimizer_seconds, params_of
from parplan.plan.memory import combine, plan_memory, saved_activation_bytes
from parplan.plan.strategies.model_parallel import (
    PipelineLayout,
    allreduce_tied,
    analyse_partitions,
    build_pipeline,
    microbatch_sizes,
    num_microbatches,
    pipeline_memory,
    tied_copies,
    tied_params,
)
from parplan.runtime.batching import speed_shares
from parplan.taskgraph import COMPUTE, TaskGraphBuilder, constant

if TYPE_CHECKING:
    from parplan.plan.collective_run import CollectiveRun


def round_robin_sizes(samples: int, replicas: int) -> list[int]:
    """Shards when ``samples`` are dealt round-robin to ``replicas`` (the first ``B mod n`` get one more).

    >>> round_robin_sizes(10, 3)
    [4, 3, 3]
    """
    base, extra = divmod(samples, replicas)
    return [base + (1 if r < extra else 0) for r in range(replicas)]


def shard_sizes(ctx: PlanContext, strategy: DataParallelStrategy, speeds: Sequence[float]) -> list[int]:
    """The batch shards of the replicas under ``strategy.batch_split`` (``speeds`` per replica), by the
    rules of :mod:`parplan.runtime.batching` (round-robin, or largest remainder by speed)."""
    n = strategy.num_replicas
    samples = ctx.training.global_batch_size
    if strategy.batch_split == "by_speed":
        try:
            return speed_shares(samples, speeds)
        except RuntimeCheckError as exc:
            raise PlanError(f"cannot split the batch by speed: {exc}") from None
    if samples < n:
        raise InfeasiblePlanError(
            f"a global batch of {samples} samples cannot feed {n} replicas (each needs at least one sample)"
        )
    return round_robin_sizes(samples, n)


@dataclass(frozen=True)
class Bucket:
    """Gradients all-reduced together: model nodes in the order backward produces them."""

    nodes: tuple[str, ...]
    params: float
    size_bytes: float


def gradient_buckets(
    ctx: PlanContext,
    nodes: Sequence[str],
    bucket_size_bytes: float,
    tied: Mapping[str, float] | None = None,
) -> tuple[Bucket, ...]:
    """Pack the gradients of ``nodes`` (model order) into buckets in reverse order, each closed once
    it holds at least ``bucket_size_bytes`` (a bucket size of 0 gives one bucket per node);
    ``tied[node]`` adds the parameters of a tied copy the node's worker holds (a head's copy of
    the word embedding)."""
    per_grad = ctx.model_spec.bytes_per_grad
    out: list[Bucket] = []
    current: list[str] = []
    params = 0.0
    for n in reversed(tuple(nodes)):
        p = float(ctx.model.node(n).params) + (tied or {}).get(n, 0.0)
        if p <= 0:
            continue
        current.append(n)
        params += p
        if params * per_grad >= bucket_size_bytes:
            out.append(Bucket(tuple(current), params, params * per_grad))
            current, params = [], 0.0
    if current:
        out.append(Bucket(tuple(current), params, params * per_grad))
    return tuple(out)


def allreduce_buckets(
    b: TaskGraphBuilder,
    ctx: PlanContext,
    buckets: Sequence[Bucket],
    devices: Sequence[str],
    algorithm: AlgorithmSpecBase,
    ready: Sequence[Sequence[Sequence[int]]],
    *,
    label: str = "allreduce",
) -> tuple[list[int], list[CollectiveInfo]]:
    """All-reduce each bucket among ``devices`` (rank order), one after another per rank.

    ``ready[k][r]`` are the tasks rank ``r`` waits for before its part of bucket ``k`` starts.
    Returns each rank's final done marker and the :class:`CollectiveInfo` of every bucket.
    """
    from parplan.collectives.registry import get
    from parplan.plan.collective import lower_schedule
    from parplan.topology.placement import groups_by_node

    n = len(devices)
    found = get(algorithm.name)
    # The ranks of each node, for algorithms that follow them (ring: one ring per device of a node).
    groups = groups_by_node(ctx.network, list(devices)) if found.uses_groups(algorithm) else None
    element_bytes = ctx.model_spec.bytes_per_grad
    schedules: dict[tuple[AlgorithmSpecBase, int], Schedule] = {}
    infos: list[CollectiveInfo] = []
    previous: list[list[int]] = [[] for _ in range(n)]
    pick = _BucketAlgorithm(ctx, devices, algorithm)
    for k, bucket in enumerate(buckets):
        elements = max(1, round(bucket.params))
        run, name = pick.at(elements * element_bytes)
        sched = schedules.get((run.spec, elements))
        if sched is None:
            sched = schedules[(run.spec, elements)] = get(run.spec.name).build(run.spec, n, elements, groups)
        first = b.num_tasks
        rank_deps = [sorted({*ready[k][r], *previous[r]}) for r in range(n)]
        tasks = lower_schedule(
            b,
            sched,
            list(devices),
            element_bytes=element_bytes,
            rank_deps=rank_deps,
            category="allreduce",
            label=f"{label} bucket{k}",
            protocol=run.protocol,
            call_overhead_s=run.call_overhead_s,
            max_rate_Bps=run.max_rate_Bps,
            network=ctx.network,
        )
        previous = [[t] for t in tasks.rank_done]
        infos.append(
            CollectiveInfo(
                label=f"{label} bucket{k}",
                algorithm=name,
                size_bytes=elements * element_bytes,
                num_ranks=n,
                first_task=first,
                last_task=b.num_tasks,
            )
        )
    return [p[0] for p in previous] if buckets else [], infos


class _BucketAlgorithm:
    """The aggregation algorithm per bucket size, timed as ``parplan collective`` times a call
    (:func:`parplan.plan.collective_run.resolve_run`): ``auto`` asks NCCL's tuner on the system the
    replicas form (:mod:`parplan.topology.nccl_system`) for the schedule, protocol and channels
    at each bucket's size; any other algorithm runs as named. Every call pays the cluster
    transport's per-call cost (zero under ``ideal``)."""

    def __init__(self, ctx: PlanContext, devices: Sequence[str], algorithm: AlgorithmSpecBase) -> None:
        from parplan.collectives.auto import AutoAlgorithm
        from parplan.collectives.registry import get

        self._transport = ctx.network.transport
        self._algorithm = algorithm
        self._system = None
        if isinstance(algorithm, AutoAlgorithm):
            from parplan.topology.nccl_system import nccl_system

            self._system = nccl_system(ctx.network, list(devices))
        self._label = get(algorithm.name).label(algorithm)
        self._cache: dict[float, tuple[CollectiveRun, str]] = {}

    def at(self, size_bytes: float) -> tuple[CollectiveRun, str]:
        """The run of a bucket of ``size_bytes`` and the name reports show for it."""
        found = self._cache.get(size_bytes)
        if found is None:
            from parplan.plan.collective_run import resolve_run

            run = resolve_run(self._algorithm, size_bytes, self._system, self._transport)
            found = self._cache[size_bytes] = (run, run.chosen or self._label)
        return found


def _replica_devices(ctx: PlanContext, strategy: DataParallelStrategy) -> list[str]:
    """Replica devices in rank order (rule: :meth:`DataParallelStrategy.replica_devices`)."""
    return [d for (d,) in strategy.replica_devices(ctx.network.devices)]


def _forward_backward(
    b: TaskGraphBuilder, ctx: PlanContext, device: str, order: Sequence[str], shard: int, memo: _Seconds
) -> int:
    """One replica's forward of the whole model, then backward node by node in reverse model order,
    each after the one before, as one block; returns the forward task's id. ``memo`` keeps the
    seconds by what they depend on: the shard and the device's rate (its name, under jitter)."""
    jitter = ctx.training.straggler_jitter > 0.0
    key = (device if jitter else ctx.network.device(device).effective_flop_per_s, shard)
    seconds = memo.get(key)
    if seconds is None:
        listed = [forward_seconds(ctx, device, order, shard)]
        listed.extend(backward_seconds(ctx, device, (node,), shard) for node in reversed(order))
        seconds = memo[key] = np.array(listed, dtype=np.float64)
    categories = [b.category_id("forward"), b.category_id("backward")]
    labels = [b.label_id("forward"), *(b.label_id(f"bwd {node}") for node in reversed(order))]
    n = len(seconds)
    first = b.num_tasks
    return b.add_block(
        {
            "kind": constant(n, COMPUTE, np.int8),
            "device": constant(n, b.device_id(device), np.int32),
            "seconds": seconds,
            "category": np.repeat(np.array(categories, dtype=np.int32), [1, n - 1]),
            "label": np.array(labels, dtype=np.int32),
        },
        np.concatenate([[0], np.arange(n, dtype=np.int64)]),
        np.arange(first, first + n - 1, dtype=np.int64),
    )


_Seconds = dict[tuple[str | float, int], np.ndarray]  # a replica's seconds by device rate (or name), shard


def expand(ctx: PlanContext, strategy: DataParallelStrategy) -> PlanWork:
    """One data-parallel step (or a 2-D step when ``strategy.replica`` is set)."""
    if strategy.replica is not None:
        return _expand_2d(ctx, strategy)
    devices = _replica_devices(ctx, strategy)
    n = len(devices)
    shards = shard_sizes(ctx, strategy, [ctx.network.device(d).effective_flop_per_s for d in devices])
    agg = strategy.aggregation
    order = tuple(ctx.model.order)
    params = params_of(ctx.model, order)
    b = TaskGraphBuilder(devices)
    bwd_task: list[dict[str, int]] = []
    last_bwd: list[int] = []
    seconds_memo: _Seconds = {}
    for d, shard in zip(devices, shards, strict=True):
        first = _forward_backward(b, ctx, d, order, shard, seconds_memo)
        bwd_task.append({node: first + 1 + i for i, node in enumerate(reversed(order))})
        last_bwd.append(first + len(order))
    buckets = gradient_buckets(ctx, order, agg.bucket_size_bytes) if n > 1 else ()
    ready = [
        [[bwd_task[r][bk.nodes[-1]]] if agg.overlap else [last_bwd[r]] for r in range(n)] for bk in buckets
    ]
    done, infos = allreduce_buckets(b, ctx, buckets, devices, agg.algorithm, ready)
    for r, d in enumerate(devices):
        deps = [done[r]] if done else [last_bwd[r]]
        b.compute(d, optimizer_seconds(ctx, d, params), deps, category="optimizer", label="optimizer")
    bucket_buffer = max((bk.size_bytes for bk in buckets), default=0.0)
    memory = tuple(
        plan_memory(
            ctx,
            d,
            params=params,
            activations_bytes=saved_activation_bytes(ctx.model, order, shard),
            buffers_bytes=bucket_buffer,
        )
        for d, shard in zip(devices, shards, strict=True)
    )
    if n == 1:
        notes = ["one replica: no gradient all-reduce"]
    else:
        notes = [
            f"{len(buckets)} gradient bucket(s), {'overlapped with' if agg.overlap else 'after'} backward"
        ]
    if 0 in shards:
        idle = [d for d, s in zip(devices, shards, strict=True) if s == 0]
        notes.append(f"by-speed split leaves {', '.join(idle)} without samples")
    return PlanWork(
        graph=b.build(meta={"strategy": "data_parallel", "replicas": n, "shards": shards}),
        devices=tuple(devices),
        unit="step",
        samples_per_unit=float(ctx.training.global_batch_size),
        memory=memory,
        collectives=tuple(infos),
        notes=tuple(notes),
    )


def replica_worker_maps(
    ctx: PlanContext, strategy: DataParallelStrategy, layout: PipelineLayout
) -> list[dict[str, str]]:
    """For each replica, the device running each worker of the replica plan
    (rule: :meth:`DataParallelStrategy.replica_devices`)."""
    workers = strategy.replica_workers(ctx.network.devices)
    if set(workers) != set(layout.workers):  # pragma: no cover - both come from the same partitions
        raise PlanError("the replica plan's workers do not match its partitions")
    return [dict(zip(workers, devs, strict=True)) for devs in strategy.replica_devices(ctx.network.devices)]


def _expand_2d(ctx: PlanContext, strategy: DataParallelStrategy) -> PlanWork:
    replica = strategy.replica
    assert replica is not None
    layout = analyse_partitions(ctx, replica)
    maps = replica_worker_maps(ctx, strategy, layout)
    n = strategy.num_replicas
    net = ctx.network
    speeds = [min(net.device(d).effective_flop_per_s for d in m.values()) for m in maps]
    shards = shard_sizes(ctx, strategy, speeds)
    mb = num_microbatches(replica)
    schedule = replica.communication.schedule
    sizes = [microbatch_sizes(s, mb) for s in shards]
    agg = strategy.aggregation
    all_devices = [m[w] for m in maps for w in layout.workers]
    b = TaskGraphBuilder(all_devices)
    pipes = [
        build_pipeline(b, ctx, layout, sizes[r], schedule, worker_map=maps[r], tag=f"r{r} " if n > 1 else "")
        for r in range(n)
    ]
    infos: list[CollectiveInfo] = []
    extra: dict[str, float] = {}
    copies = tied_copies(ctx, layout)
    stage_done: dict[str, list[int]] = {}  # per worker, each replica's all-reduces done
    for w in layout.workers:
        nodes = layout.worker_nodes(w)
        tied = {c.user: c.params for c in copies if c.user_worker == w}
        buckets = gradient_buckets(ctx, nodes, agg.bucket_size_bytes, tied) if n > 1 else ()
        extra[w] = max((bk.size_bytes for bk in buckets), default=0.0)
        ready = []
        for bk in buckets:
            segs = sorted({layout.node_segment[x] for x in bk.nodes})
            ready.append(
                [
                    [pipes[r].grads_ready[s] for s in segs] if agg.overlap else [pipes[r].backward_done[w]]
                    for r in range(n)
                ]
            )
        devs = [maps[r][w] for r in range(n)]
        done, stage_infos = allreduce_buckets(
            b, ctx, buckets, devs, agg.algorithm, ready, label=f"allreduce {w}"
        )
        infos.extend(stage_infos)
        stage_done[w] = [done[r] if done else pipes[r].backward_done[w] for r in range(n)]
    infos.extend(_optimizers(b, ctx, layout, maps, stage_done))
    memory: list[MemoryBreakdown] = []
    for r in range(n):
        memory.extend(
            pipeline_memory(
                ctx, layout, max(sizes[r]), mb, schedule, worker_map=maps[r], extra_buffers_bytes=extra
            )
        )
    return PlanWork(
        graph=b.build(
            meta={
                "strategy": "data_parallel",
                "replicas": n,
                "microbatches": mb,
                "stages": layout.num_stages,
                "schedule": schedule,
                "shards": shards,
            }
        ),
        devices=tuple(all_devices),
        unit="step",
        samples_per_unit=float(ctx.training.global_batch_size),
        memory=combine(memory),
        collectives=tuple(infos),
        notes=(
            f"{n} replica(s) x {layout.num_stages} stage(s), {mb} micro-batch(es) per replica, {schedule}",
        ),
    )


def _optimizers(
    b: TaskGraphBuilder,
    ctx: PlanContext,
    layout: PipelineLayout,
    maps: Sequence[Mapping[str, str]],
    stage_done: Mapping[str, Sequence[int]],
) -> list[CollectiveInfo]:
    """Each replica's all-reduces of its tied copies once both stages' data-parallel all-reduces
    are done (Megatron-LM's order), then every worker's optimizer step after both; returns the
    tied all-reduces' infos."""
    n = len(maps)
    copies = tied_copies(ctx, layout)
    infos: list[CollectiveInfo] = []
    waits: list[dict[str, list[int]]] = []
    for r in range(n):
        tied_ready = {w: [stage_done[w][r]] for w in layout.workers}
        found, tied_infos = allreduce_tied(b, ctx, copies, maps[r], tied_ready, tag=f"r{r} " if n > 1 else "")
        waits.append(found)
        infos.extend(tied_infos)
    for w in layout.workers:
        params = params_of(ctx.model, layout.worker_nodes(w)) + tied_params(copies, w)
        for r in range(n):
            b.compute(
                maps[r][w],
                optimizer_seconds(ctx, maps[r][w], params),
                [stage_done[w][r], *waits[r].get(w, [])],
                category="optimizer",
                label=f"optimizer {maps[r][w]}",
            )
    return infos
