"""Lowering one pipelined step into task-graph work, in the order a pipeline schedule gives.

For every micro-batch and segment of a :class:`~parplan.plan.pipeline_layout.PipelineLayout`:
one forward and one backward compute task on the segment's worker, and for every cut edge one
activation transfer forward and one gradient transfer back (several consumers of a node on one
worker share them). What the schedule (:mod:`parplan.pipeline`) decides, and where it lands:

- **Priorities.** Among ready tasks on a stream the lower priority runs first. A task's priority
  is the key (position of its unit in the worker's :meth:`~parplan.pipeline.PipelineSchedule.worker_order`,
  rank of its segment within the unit) packed into one integer: ``position x (S + 1) + rank``
  with ``S`` the layout's number of segments. Ranks are segment indices (``0 .. S-1``) for
  forwards, which run in model order, and ``S - index`` (``1 .. S``) for backwards, which run in
  reverse model order; both fit in ``S + 1`` slots, so the position always decides first.
- **Rules.** A unit's tasks depend on every task of the units the schedule says it
  :meth:`~parplan.pipeline.PipelineSchedule.waits_for` on the same worker (1F1B: forward ``j + k``
  waits for backward ``j``). A schedule with
  :attr:`~parplan.pipeline.PipelineSchedule.backward_waits_for_forwards` (GPipe) gets one
  ``forwards done`` marker per worker over its forwards, which every backward on it waits for.
- **Build order.** Units are appended in the schedule's
  :meth:`~parplan.pipeline.PipelineSchedule.build_order` (all stages' segments of one unit at
  once); the barrier markers come right before the first backward.

Task ids, labels and priorities depend only on these, so identical inputs give identical graphs.

**Tied weights.** A model whose nodes share weights (:attr:`~parplan.model.graph.ModelGraph.ties`:
a tied embedding and LM head) split over two workers leaves each with a copy, as Megatron-LM
keeps the word embedding on the first and the last stage: :func:`tied_copies` names them, the
user's worker holds the copy's weights, gradients and optimizer state (:func:`tied_params`), and
the plans all-reduce the copies' gradients between the two workers before either steps its
optimizer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from parplan.errors import PlanError
from parplan.pipeline import PipelineSchedule, Stage, Unit
from parplan.pipeline import get as get_schedule
from parplan.plan.base import PlanContext
from parplan.plan.compute import backward_seconds, forward_seconds
from parplan.plan.pipeline_layout import PipelineLayout, Segment
from parplan.taskgraph import TaskGraphBuilder


@dataclass(frozen=True)
class TiedCopy:
    """A tie (:class:`~parplan.model.graph.TiedWeights`) whose nodes run on different workers: the
    worker of node ``user`` holds a copy of ``params`` weights of node ``owner`` whose gradients
    are all-reduced with the owner's."""

    owner: str
    user: str
    owner_worker: str
    user_worker: str
    params: float

    @property
    def label(self) -> str:
        """``owner/user``, e.g. ``embedding/head``."""
        return f"{self.owner}/{self.user}"


def tied_copies(ctx: PlanContext, layout: PipelineLayout) -> tuple[TiedCopy, ...]:
    """The model's ties split across workers in ``layout`` (none where both nodes share a worker)."""
    worker_of = {node: seg.worker for seg in layout.segments for node in seg.nodes}
    return tuple(
        TiedCopy(t.owner, t.user, worker_of[t.owner], worker_of[t.user], t.params)
        for t in ctx.model.ties
        if t.owner in worker_of and t.user in worker_of and worker_of[t.owner] != worker_of[t.user]
    )


def tied_params(copies: Sequence[TiedCopy], worker: str) -> float:
    """Parameters of the tied copies ``worker`` holds besides its own nodes'."""
    return sum(c.params for c in copies if c.user_worker == worker)


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


@dataclass
class _Build:
    """One pipeline being built: what every step reads, and the task ids made so far.

    ``forward[j][seg]``/``backward[j][seg]`` are the compute tasks of micro-batch ``j`` on segment
    ``seg`` (-1 until built); ``segments_on[worker]`` counts the worker's segments (the tasks of a
    complete unit there); ``unit_tasks[(worker, unit)]`` the compute tasks of a unit on a
    worker; ``forwards_done[worker]`` the barrier marker, for schedules that have one.
    """

    b: TaskGraphBuilder
    ctx: PlanContext
    layout: PipelineLayout
    sizes: Sequence[int]
    schedule: PipelineSchedule
    device: Mapping[str, str]
    tag: str
    stages: Mapping[str, Stage]
    position: Mapping[tuple[str, Unit], int]
    forward_s_per_sample: Sequence[float]
    backward_s_per_sample: Sequence[float]
    consumers: Sequence[Sequence[tuple[int, str, str]]]
    segments_on: Mapping[str, int]
    forward: list[list[int]]
    backward: list[list[int]]
    unit_tasks: dict[tuple[str, Unit], list[int]] = field(default_factory=dict)
    forwards_done: dict[str, int] = field(default_factory=dict)


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

    ``sizes`` are the micro-batch sizes; ``schedule`` names a registered pipeline schedule;
    ``worker_map`` sends each layout worker to the device that runs it (identity by default; a 2-D
    plan maps replica ``r``'s copy); ``tag`` prefixes labels.
    """
    first = b.num_tasks
    st = _start(b, ctx, layout, sizes, get_schedule(schedule), worker_map or {}, tag)
    for unit in st.schedule.build_order(len(sizes)):
        if unit.direction == "F":
            _add_forward(st, unit.microbatch)
            continue
        if st.schedule.backward_waits_for_forwards and not st.forwards_done:
            _add_barriers(st)
        _add_backward(st, unit.microbatch)
    segs = layout.segments
    grads_ready = tuple(
        b.marker([st.backward[j][seg.index] for j in range(len(sizes))], label=f"{tag}grads {seg.partition}")
        for seg in segs
    )
    backward_done = {
        w: b.marker([grads_ready[i] for i in layout.worker_segments(w)], label=f"{tag}backward done {w}")
        for w in layout.workers
    }
    return PipelineTasks(
        grads_ready=grads_ready, backward_done=backward_done, first_task=first, last_task=b.num_tasks
    )


def _start(
    b: TaskGraphBuilder,
    ctx: PlanContext,
    layout: PipelineLayout,
    sizes: Sequence[int],
    schedule: PipelineSchedule,
    worker_map: Mapping[str, str],
    tag: str,
) -> _Build:
    """The build state: devices, each worker's stage and unit positions, per-sample compute times,
    and for each segment the (producer segment, node, consumer worker) of the inputs it receives."""
    m, s, segs = len(sizes), layout.num_stages, layout.segments
    device = {w: worker_map.get(w, w) for w in layout.workers}
    stages = {w: Stage(index=layout.stage_of(w), num_stages=s, microbatches=m) for w in layout.workers}
    position: dict[tuple[str, Unit], int] = {}
    every_unit = sorted(Unit(d, j) for j in range(m) for d in ("F", "B"))
    for w, stage in stages.items():
        order = schedule.worker_order(stage)
        if sorted(order) != every_unit:
            raise PlanError(
                f"pipeline schedule {schedule.name!r} does not order every forward and backward "
                f"exactly once on stage {stage.index}"
            )
        position.update(((w, unit), pos) for pos, unit in enumerate(order))
    consumers: list[list[tuple[int, str, str]]] = [[] for _ in segs]
    for seg in segs:
        for node, w, targets in layout.sends[seg.index]:
            for t in targets:
                consumers[t].append((seg.index, node, w))
    return _Build(
        b=b,
        ctx=ctx,
        layout=layout,
        sizes=sizes,
        schedule=schedule,
        device=device,
        tag=tag,
        stages=stages,
        position=position,
        forward_s_per_sample=[forward_seconds(ctx, device[g.worker], g.nodes, 1.0) for g in segs],
        backward_s_per_sample=[backward_seconds(ctx, device[g.worker], g.nodes, 1.0) for g in segs],
        consumers=consumers,
        segments_on={w: len(layout.worker_segments(w)) for w in layout.workers},
        forward=[[-1] * len(segs) for _ in range(m)],
        backward=[[-1] * len(segs) for _ in range(m)],
    )


def _priority(st: _Build, worker: str, unit: Unit, rank: int) -> int:
    """``position x (S + 1) + rank``: the unit's place in the worker's order first, then the
    segment's rank within the unit (``0 .. S``); see the module docstring."""
    return st.position[(worker, unit)] * (len(st.layout.segments) + 1) + rank


def _activation_bytes(st: _Build, node: str, microbatch: int) -> float:
    """Bytes of ``node``'s output (or its gradient) for one micro-batch."""
    return float(st.ctx.model.node(node).activation_bytes_per_sample) * st.sizes[microbatch]


def _waits(st: _Build, worker: str, unit: Unit) -> list[int]:
    """The tasks the schedule's rules make ``unit`` on ``worker`` wait for."""
    deps: list[int] = []
    for other in st.schedule.waits_for(unit, st.stages[worker]):
        tasks = st.unit_tasks.get((worker, other), [])
        if len(tasks) != st.segments_on[worker]:
            raise PlanError(
                f"pipeline schedule {st.schedule.name!r} makes {unit} wait for {other}, "
                "which its build order has not built yet"
            )
        deps.extend(tasks)
    if unit.direction == "B" and st.schedule.backward_waits_for_forwards:
        deps.append(st.forwards_done[worker])
    return deps


def _add_compute(st: _Build, seg: Segment, unit: Unit, deps: list[int], *, rank: int) -> int:
    """The compute task of ``unit`` on segment ``seg``, recorded as part of the unit."""
    j = unit.microbatch
    forward = unit.direction == "F"
    per_sample = st.forward_s_per_sample if forward else st.backward_s_per_sample
    task = st.b.compute(
        st.device[seg.worker],
        per_sample[seg.index] * st.sizes[j],
        sorted(set(deps)),
        category="forward" if forward else "backward",
        label=f"{st.tag}{'fwd' if forward else 'bwd'} {seg.partition} mb{j}",
        priority=_priority(st, seg.worker, unit, rank),
    )
    st.unit_tasks.setdefault((seg.worker, unit), []).append(task)
    return task


def _add_forward(st: _Build, j: int) -> None:
    """Micro-batch ``j``'s forward on every segment in model order, each after the activations it
    receives (sent once per producer node and consuming worker, right before the first reader)."""
    segs = st.layout.segments
    sent: dict[tuple[str, str], int] = {}
    unit = Unit("F", j)
    for seg in segs:
        deps = [st.forward[j][p] for p in st.layout.local_preds[seg.index]]
        for src_seg, node, w in st.consumers[seg.index]:
            if (node, w) not in sent:
                sent[(node, w)] = st.b.transfer(
                    st.device[segs[src_seg].worker],
                    st.device[w],
                    _activation_bytes(st, node, j),
                    [st.forward[j][src_seg]],
                    category="activation",
                    label=f"{st.tag}act {node} mb{j}",
                )
            deps.append(sent[(node, w)])
        deps.extend(_waits(st, seg.worker, unit))
        st.forward[j][seg.index] = _add_compute(st, seg, unit, deps, rank=seg.index)


def _add_backward(st: _Build, j: int) -> None:
    """Micro-batch ``j``'s backward on every segment in reverse model order, each after its forward,
    the backwards of later segments on its worker that read it, and the gradients sent back to it."""
    layout = st.layout
    num_segs = len(layout.segments)
    unit = Unit("B", j)
    for seg in reversed(layout.segments):
        deps = [st.forward[j][seg.index]]
        readers = range(seg.index + 1, num_segs)
        deps.extend(st.backward[j][t] for t in readers if seg.index in layout.local_preds[t])
        for node, w, targets in layout.sends[seg.index]:
            deps.append(
                st.b.transfer(
                    st.device[w],
                    st.device[seg.worker],
                    _activation_bytes(st, node, j),
                    [st.backward[j][t] for t in targets],
                    category="activation_grad",
                    label=f"{st.tag}grad {node} mb{j}",
                )
            )
        deps.extend(_waits(st, seg.worker, unit))
        st.backward[j][seg.index] = _add_compute(st, seg, unit, deps, rank=num_segs - seg.index)


def _add_barriers(st: _Build) -> None:
    """One ``forwards done`` marker per worker (stage order) over every forward on it."""
    layout = st.layout
    if any(t < 0 for row in st.forward for t in row):
        raise PlanError(f"pipeline schedule {st.schedule.name!r} builds a backward before every forward")
    for w in layout.workers:
        mine = layout.worker_segments(w)
        st.forwards_done[w] = st.b.marker(
            [st.forward[j][i] for j in range(len(st.sizes)) for i in mine], label=f"{st.tag}forwards done {w}"
        )
