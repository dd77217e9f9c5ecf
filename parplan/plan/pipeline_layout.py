"""What a model-parallel partitioning implies, before micro-batches and devices: segments, cut
edges and stages.

- **Segments.** Walking the model's topological order, a *segment* is a maximal run of consecutive
  nodes of one partition; one worker may hold several. Every input a segment needs comes from an
  earlier segment, so work built segment by segment never forms a cycle.
- **Cut edges.** A model edge ``u -> v`` whose endpoints are on different workers: ``u``'s output
  goes from ``u``'s worker to ``v``'s (and its gradient back), once per (producer node, consuming
  worker) however many of that worker's nodes read it. Edges between segments on one worker are
  plain dependencies (:attr:`PipelineLayout.local_preds`).
- **Stages.** Workers are ordered by the first model node they run; a worker's *stage index* is
  its position in that order.

:func:`analyse_partitions` checks the partitions and derives all three; the model-parallel and
2-D data-parallel strategies build their pipelines on its :class:`PipelineLayout`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from parplan.config.strategy import ModelParallelStrategy
from parplan.errors import PlanError
from parplan.plan.base import PlanContext


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
    """Append ``run`` (nodes of one partition, in model order) as the next segment."""
    if not run:
        return
    part = strategy.partitions[owner[run[0]]]
    segments.append(Segment(index=len(segments), partition=part.name, worker=part.worker, nodes=tuple(run)))
