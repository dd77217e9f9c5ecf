"""One step of a sharded plan as a task graph, for the event engine: :func:`build_tasks`.

**Symmetry, stated.** The ranks of one TP group (and of one CP group) run the same kernels on the
same sizes at the same times, and on a uniform fabric they meet the same links: a TP group's
collectives stay inside its node, and each rank's inter-node traffic leaves through its own NIC.
So the graph holds one *representative* device per (pipeline stage, data-parallel rank): the mesh
device at TP rank 0 and CP rank 0. GPT-3 175B at TP 8 x PP 8 x DP 16 has 128 representatives for
1024 GPUs. What is simulated and what is replayed:

- **Simulated with link sharing** (transfers on the network): point-to-point activations and their
  gradients between consecutive model chunks (``layout.p2p_bytes`` per micro-batch), and the
  once-per-step collectives whose group is made of representatives only (the data-parallel
  gradient buckets, ZeRO-1/2's parameter all-gather, the tied-embedding all-reduce between first
  and last stage when CP is 1), lowered through the registry and ``auto``
  (:func:`parplan.plan.collective_run.resolve_run`, :func:`~parplan.plan.collective.lower_schedule`),
  so pipeline and data-parallel traffic share the NICs and switches as they do on the cluster.
- **Replayed** (compute tasks of a known duration): TP/SP, CP and EP calls of every chunk, and
  ZeRO-3/FSDP's per-micro-batch gathers and reduce-scatters, and any once-per-step call whose
  group reaches beyond the representatives. Each distinct (call, size, stage) is timed once by
  lowering one instance on its group's devices and simulating it with the engine
  (``ctx.simulator``: the engine's own rules, protocols and per-call costs); without a simulator,
  or for all-to-all and send/recv, by :class:`~parplan.plan.sharded.clock.CollectiveClock`'s closed
  form. **Blocking** calls (Megatron's TP in forward, EP all-to-alls) run on the compute stream:
  the compute waits for them. **Overlappable** ones run on the device's communication stream
  (:data:`~parplan.taskgraph.COMM_STREAM`): TP backward calls beside the weight-gradient half of
  the backward (``WGRAD_SHARE``), CP ring steps beside the attention core, ZeRO-3/FSDP's per-layer
  gathers (the first layer's exposed, the rest beside the compute, one unit of prefetch at most)
  and reduce-scatters (beside the backward, the last layer's after it).

What this costs in truth: replayed calls do not contend with simulated traffic (a TP group's
NVSwitch is its own; CP and FSDP traffic that leaves the node does share NICs with the pipeline
in reality), and a cluster whose GPUs share one NIC per node would need the other TP ranks'
traffic too (their rings are not in the graph).

**Order.** Each representative's compute stream runs its stage's units strictly in the pipeline
schedule's :meth:`~parplan.pipeline.PipelineSchedule.worker_order`, as Megatron's blocking schedule
does: each unit waits for the one before it (and for the schedule's rules,
:meth:`~parplan.pipeline.PipelineSchedule.waits_for`), so streams need no priorities and run FIFO
(the engine books them in batches). Units name a chunk (model chunk ``c x pp + s`` on stage
``s``), so interleaved 1F1B runs as Megatron runs it.
Per unit: forward = compute, then its blocking calls; backward = recompute, blocking calls, the
input-gradient half, then the weight-gradient half beside the overlappable calls. A compute task
that an overlappable call runs beside is longer by what the call takes from it: the SMs its NCCL
channels hold and, for the task's memory-bound kernels, the HBM bandwidth its traffic uses, the
larger of the two (:meth:`~parplan.plan.sharded.calls.CallTimer.stolen`, the closed form's rule,
:func:`~parplan.plan.compute.comm_compute_share`); a weight-gradient slice by the SM seconds of
the gradient bucket the slice before it made ready (ZeRO-0/1/2 with ``aggregation.overlap``: the
bucket is simulated on the network, its SM share taken from the closed form's time of it). After
the last backward: gradient buckets (ready when the chunks they cover finish their last backward, in
backward order), the tied-embedding all-reduce, the optimizer, ZeRO-1/2's parameter all-gather.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from parplan.errors import PlanError
from parplan.pipeline import Stage, Unit
from parplan.pipeline import get as get_schedule
from parplan.plan.sharded.calls import CallTimer
from parplan.plan.sharded.comm import CommCall
from parplan.plan.sharded.order import strict_order
from parplan.plan.sharded.step_end import add_step_end, bucket_chunk
from parplan.taskgraph import COMM_STREAM, TaskGraph, TaskGraphBuilder

if TYPE_CHECKING:
    from parplan.plan.base import PlanContext
    from parplan.plan.sharded.costs import ShardedLayout

WGRAD_SHARE = 0.5
"""Share of a backward pass spent in weight-gradient GEMMs (what TP backward calls hide behind);
the analytic evaluation uses the same share."""


@dataclass
class _Build:
    """The graph being built: representatives, timers, and the tasks made so far."""

    b: TaskGraphBuilder
    ctx: PlanContext
    layout: ShardedLayout
    timer: CallTimer
    reps: list[list[str]]  # [stage][dp rank]
    forward: dict[tuple[int, int, Unit], int] = field(default_factory=dict)  # (stage, d, unit) -> done
    backward: dict[tuple[int, int, Unit], int] = field(default_factory=dict)
    costs: dict[tuple[int, int], _Costs] = field(default_factory=dict)  # (stage, chunk) -> seconds
    gathered: dict[tuple[int, int], int] = field(default_factory=dict)  # (stage, d) -> last gather
    previous: dict[tuple[int, int], int] = field(default_factory=dict)  # (stage, d) -> last unit's end
    earlier: dict[tuple[int, int], int] = field(default_factory=dict)  # (stage, d) -> the unit's before
    scattered: dict[tuple[int, int, Unit], int] = field(default_factory=dict)  # ZeRO-3/FSDP reduce-scatter
    bucket_ready: dict[tuple[int, int, int], int] = field(default_factory=dict)  # (stage, d, bucket)


@dataclass(frozen=True)
class _Costs:
    """Seconds of one chunk's parts on one stage, one micro-batch (the same on every dp rank)."""

    forward_blocking_s: float
    forward_overlapped: tuple[CommCall, ...]
    forward_overlapped_s: float
    forward_core_s: float  # the attention core, apart when the CP ring hides behind it
    backward_blocking_s: float
    backward_overlapped: tuple[CommCall, ...]
    backward_overlapped_s: float
    forward_stolen_s: float  # compute seconds the overlappable calls' SMs take
    backward_stolen_s: float


def _costs(st: _Build, s: int, chunk: int) -> _Costs:
    found = st.costs.get((s, chunk))
    if found is None:
        work, timer = st.layout.chunks[s][chunk], st.timer
        fwd = tuple(c for c in work.forward_comm if not c.blocking)
        bwd = tuple(c for c in work.backward_comm if not c.blocking)
        found = st.costs[(s, chunk)] = _Costs(
            forward_blocking_s=timer.total([c for c in work.forward_comm if c.blocking], s),
            forward_overlapped=fwd,
            forward_overlapped_s=timer.total(fwd, s),
            forward_core_s=work.attention_forward_s if any(c.axis == "cp" for c in fwd) else 0.0,
            backward_blocking_s=timer.total([c for c in work.backward_comm if c.blocking], s),
            backward_overlapped=bwd,
            backward_overlapped_s=timer.total(bwd, s),
            forward_stolen_s=timer.stolen(fwd, s),
            backward_stolen_s=timer.stolen(bwd, s),
        )
    return found


def representatives(layout: ShardedLayout) -> list[list[str]]:
    """``[stage][dp rank]``: the mesh device at TP rank 0, CP rank 0 of each (stage, dp rank)."""
    mesh = layout.mesh
    return [[mesh.device({"pp": s, "dp": d}) for d in range(mesh.dp)] for s in range(mesh.pp)]


def build_tasks(ctx: PlanContext, layout: ShardedLayout) -> TaskGraph:
    """The task graph of one step of ``layout`` (module docstring); ``meta`` holds the
    representatives (``"representatives"``) and the devices each stands for (``"represents"``)."""
    strategy = layout.strategy
    schedule = get_schedule(strategy.schedule)
    pp, v, m = strategy.pp, layout.virtual_stages, layout.microbatches
    if v > 1 and not schedule.interleaved:
        raise PlanError(f"pipeline schedule {schedule.name!r} runs one chunk per stage, not {v}")
    reps = representatives(layout)
    # one data-parallel rank's pipeline, built once and copied for the others (module docstring)
    st = _Build(TaskGraphBuilder(), ctx, layout, CallTimer(ctx, layout), [[row[0]] for row in reps])
    orders = []
    for s in range(pp):
        stage = Stage(index=s, num_stages=pp, microbatches=m, virtual_stages=v)
        orders.append(schedule.worker_order(stage))
    for s, unit in strict_order(orders, pp, v):
        stage = Stage(index=s, num_stages=pp, microbatches=m, virtual_stages=v)
        _add_unit(st, s, 0, unit, schedule.waits_for(unit, stage))
    b = TaskGraphBuilder()
    offsets = replicate(b, st.b.build(), reps)
    ends = {**st.backward, **st.scattered}
    last = {
        (s, d, u): ends[(s, 0, u)] + offset
        for d, offset in enumerate(offsets)
        for s in range(pp)
        for u in (Unit("B", m - 1, c) for c in range(v))
    }

    ready = {
        (s, d, k): t + offset for d, offset in enumerate(offsets) for (s, _, k), t in st.bucket_ready.items()
    }
    add_step_end(b, ctx, layout, st.timer, reps, last, ready)
    mesh = layout.mesh
    return b.build(
        meta={"representatives": [dev for row in reps for dev in row], "represents": mesh.tp * mesh.cp}
    )


def replicate(b: TaskGraphBuilder, piece: TaskGraph, reps: Sequence[Sequence[str]]) -> list[int]:
    """Append ``piece`` (the pipeline of data-parallel rank 0, on ``reps[s][0]``) once per rank
    ``d`` with each ``reps[s][0]`` replaced by ``reps[s][d]``; returns each copy's task offset."""
    import numpy as np

    categories = np.array([b.category_id(c) for c in piece.categories], dtype=np.int32)
    labels = np.array([b.label_id(x) for x in piece.labels], dtype=np.int32)
    stage_of = {row[0]: s for s, row in enumerate(reps)}
    offsets: list[int] = []
    for d in range(len(reps[0])):
        devices = np.array([b.device_id(reps[stage_of[x]][d]) for x in piece.devices] + [-1], dtype=np.int32)
        first = b.num_tasks
        columns: dict[str, np.ndarray] = {
            "kind": piece.kind,
            "device": devices[piece.device],  # -1 (markers) reads the appended -1
            "dst": devices[piece.dst],
            "size_bytes": piece.size_bytes,
            "seconds": piece.seconds,
            "flops": piece.flops,
            "reduce": piece.reduce,
            "priority": piece.priority,
            "category": categories[piece.category],
            "label": labels[piece.label],
            "protocol": piece.protocol,
            "overhead_s": piece.overhead_s,
            "max_rate_Bps": piece.max_rate_Bps,
        }
        if piece.stream is not None:
            columns["stream"] = piece.stream
        if piece.lane is not None:
            columns["lane"] = piece.lane
        b.add_block(
            columns, np.asarray(piece.dep_offsets, dtype=np.int64), piece.dep_indices.astype(np.int64) + first
        )
        offsets.append(first)
    return offsets


def _chunk_index(st: _Build, s: int, unit: Unit) -> int:
    """The model chunk ``unit`` runs on stage ``s`` (``chunk x pp + s``)."""
    return unit.chunk * st.layout.strategy.pp + s


def _neighbour(st: _Build, g: int) -> tuple[int, int]:
    """(stage, chunk) of model chunk ``g``."""
    pp = st.layout.strategy.pp
    return g % pp, g // pp


def _add_unit(st: _Build, s: int, d: int, unit: Unit, waits: Sequence[Unit]) -> None:
    """One unit of stage ``s`` on data-parallel rank ``d``'s representative."""
    deps = [st.backward[(s, d, w)] for w in waits]
    previous = st.previous.get((s, d))
    if previous is not None:
        deps.append(previous)
    if unit.direction == "F":
        _add_forward(st, s, d, unit, deps)
    else:
        _add_backward(st, s, d, unit, deps)


def _layer_calls(calls: Sequence[CommCall], layers: Sequence[str]) -> list[CommCall]:
    """The per-layer ZeRO-3/FSDP calls (labelled ``"fsdp gather <layer>"`` and the like) of
    ``layers``, in the order given."""
    mine = set(layers)
    return [c for c in calls if mine.intersection(c.label.split())]


def _gather(st: _Build, s: int, d: int, unit: Unit, deps: list[int]) -> tuple[int, int, float] | None:
    """ZeRO-3/FSDP: the chunk's per-layer parameter gathers on the communication stream, as
    (first layer's gather, the rest). The first starts once the previous gather is done and the
    unit two places back has ended (FSDP's limit of one prefetch: the parameters it used may be
    freed); the unit's compute waits for it; the rest run beside the compute, which its end waits
    for. So a unit exposes its first gather and what of the rest its compute does not hide; the
    third figure is the compute seconds the rest take of the SMs."""
    layout = st.layout
    if not layout.per_microbatch_sync or not layout.param_gather[s]:
        return None
    if unit.direction == "B" and not layout.param_gather_backward:
        return None
    calls = _layer_calls(layout.param_gather[s], layout.chunks[s][unit.chunk].layers)
    if unit.direction == "B":
        calls.reverse()
    if not calls:
        return None
    prev = st.gathered.get((s, d))
    waits = list(deps) if prev is None else [prev]
    if prev is not None and (s, d) in st.earlier:
        waits.append(st.earlier[(s, d)])
    tag = f"s{s} {unit.direction}{unit.microbatch}.{unit.chunk}"
    dev = st.reps[s][d]
    first = st.b.compute(
        dev, st.timer.seconds(calls[0], s), waits, category="fsdp", label=f"gather {tag}", stream=COMM_STREAM
    )
    rest, stolen = first, st.timer.stolen(calls[1:], s)
    if len(calls) > 1:
        seconds = st.timer.total(calls[1:], s)
        rest = st.b.compute(
            dev, seconds, [first], category="fsdp", label=f"gathers {tag}", stream=COMM_STREAM
        )
    st.gathered[(s, d)] = rest
    return first, rest, stolen


def _scatter_stolen(st: _Build, s: int, unit: Unit) -> float:
    """Compute seconds the SMs of the reduce-scatters :func:`_scatter` runs beside the backward take."""
    layout = st.layout
    if not layout.per_microbatch_sync:
        return 0.0
    calls = _layer_calls(layout.grad_sync[s], layout.chunks[s][unit.chunk].layers)
    return st.timer.stolen(calls[:-1], s)


def _scatter(st: _Build, s: int, d: int, unit: Unit, start: int, done: int) -> None:
    """ZeRO-3/FSDP: the chunk's per-layer gradient reduce-scatters (and hybrid all-reduces) on the
    communication stream: all but the last layer's beside the backward (from ``start``), the last
    after it (``done``)."""
    layout = st.layout
    calls = _layer_calls(layout.grad_sync[s], layout.chunks[s][unit.chunk].layers)
    if not layout.per_microbatch_sync or not calls:
        return
    tag = f"s{s} mb{unit.microbatch}.{unit.chunk}"
    dev, b = st.reps[s][d], st.b
    *early, last = calls
    waits = [done]
    if early:
        seconds = st.timer.total(early, s)
        waits.append(
            b.compute(
                dev, seconds, [start], category="fsdp", label=f"reduce-scatters {tag}", stream=COMM_STREAM
            )
        )
    seconds = st.timer.seconds(last, s)
    st.scattered[(s, d, unit)] = b.compute(
        dev, seconds, waits, category="fsdp", label=f"reduce-scatter {tag}", stream=COMM_STREAM
    )


def _add_forward(st: _Build, s: int, d: int, unit: Unit, deps: list[int]) -> None:
    """Forward: compute (the attention core apart, beside the CP ring, when CP > 1), then the
    blocking calls; overlappable TP calls (``tp_comm_overlap``) beside the compute."""
    layout, b = st.layout, st.b
    dev = st.reps[s][d]
    work, costs = layout.chunks[s][unit.chunk], _costs(st, s, unit.chunk)
    g = _chunk_index(st, s, unit)
    tag = f"s{s} mb{unit.microbatch}.{unit.chunk}"
    if g > 0:
        ps, pc = _neighbour(st, g - 1)
        prev = st.forward[(ps, d, Unit("F", unit.microbatch, pc))]
        deps.append(
            b.transfer(
                st.reps[ps][d], dev, layout.p2p_bytes, [prev], category="activation", label=f"act {tag}"
            )
        )
    gather = _gather(st, s, d, unit, deps)
    if gather is not None:
        deps.append(gather[0])
    # the gathers run beside the compute; the overlappable calls beside the core when it is apart
    core_s = costs.forward_core_s
    main_s = work.forward_s - core_s + (gather[2] if gather is not None else 0.0)
    if core_s:
        core_s += costs.forward_stolen_s
    else:
        main_s += costs.forward_stolen_s
    last = b.compute(dev, main_s, deps, category="forward", label=f"fwd {tag}")
    ends = [last]
    if costs.forward_overlapped:
        ends.append(
            _comm(
                st,
                s,
                dev,
                costs.forward_overlapped,
                costs.forward_overlapped_s,
                [last] if core_s else deps,
                f"fwd comm {tag}",
            )
        )
    if core_s:
        last = b.compute(dev, core_s, [last], category="forward", label=f"attn {tag}")
        ends.append(last)
    if costs.forward_blocking_s:
        last = b.compute(dev, costs.forward_blocking_s, ends, category="tp", label=f"fwd tp {tag}")
        ends = [last]
    if gather is not None and gather[1] != gather[0]:
        ends.append(gather[1])
    if (s, d) in st.previous:
        st.earlier[(s, d)] = st.previous[(s, d)]
    st.previous[(s, d)] = last
    st.forward[(s, d, unit)] = ends[0] if len(ends) == 1 else b.marker(ends, label=f"fwd done {tag}")


def _comm(
    st: _Build, s: int, dev: str, calls: Sequence[CommCall], seconds: float, deps: list[int], label: str
) -> int:
    """Overlappable calls as one task on the communication stream."""
    category = calls[0].axis if len({c.axis for c in calls}) == 1 else "comm"
    return st.b.compute(dev, seconds, deps, category=category, label=label, stream=COMM_STREAM)


def _bucket_slices(st: _Build, s: int, unit: Unit) -> list[int]:
    """The gradient buckets whose last gradients ``unit`` computes (the last micro-batch's backward
    of the chunk the bucket belongs to, with ``aggregation.overlap``), in backward order."""
    layout = st.layout
    if unit.microbatch != layout.microbatches - 1 or layout.per_microbatch_sync:
        return []
    if not layout.strategy.aggregation.overlap:
        return []
    n = len(layout.grad_sync[s])
    return [k for k in range(n) if bucket_chunk(k, n, layout.virtual_stages) == unit.chunk]


def _add_backward(st: _Build, s: int, d: int, unit: Unit, deps: list[int]) -> None:
    """Backward: recompute, blocking calls and the input-gradient half, then the weight-gradient
    half beside the overlappable calls; ZeRO-3/FSDP's reduce-scatter after it."""
    layout, b = st.layout, st.b
    dev = st.reps[s][d]
    work, costs = layout.chunks[s][unit.chunk], _costs(st, s, unit.chunk)
    g = _chunk_index(st, s, unit)
    tag = f"s{s} mb{unit.microbatch}.{unit.chunk}"
    deps.append(st.forward[(s, d, Unit("F", unit.microbatch, unit.chunk))])
    if g < layout.strategy.pp * layout.virtual_stages - 1:
        ns, nc = _neighbour(st, g + 1)
        later = st.backward[(ns, d, Unit("B", unit.microbatch, nc))]
        deps.append(
            b.transfer(
                st.reps[ns][d],
                dev,
                layout.p2p_bytes,
                [later],
                category="activation_grad",
                label=f"grad {tag}",
            )
        )
    gather = _gather(st, s, d, unit, deps)
    if gather is not None:
        deps.append(gather[0])
    head_s = work.recompute_s + costs.backward_blocking_s + work.backward_s * (1 - WGRAD_SHARE)
    head_s += gather[2] if gather is not None else 0.0
    wgrad_total_s = work.backward_s * WGRAD_SHARE + costs.backward_stolen_s + _scatter_stolen(st, s, unit)
    first = b.compute(dev, head_s, deps, category="backward", label=f"bwd {tag}")
    last = first
    slices, buckets = _bucket_slices(st, s, unit), layout.grad_sync[s]
    for j, k in enumerate(slices or [-1]):
        wgrad_s = wgrad_total_s / max(1, len(slices))
        if j > 0:  # beside the bucket the slice before made ready (its closed-form SM seconds)
            wgrad_s += st.timer.clock.stolen([buckets[slices[j - 1]]], s)
        last = b.compute(dev, wgrad_s, [last], category="backward", label=f"wgrad {tag}")
        if k >= 0:
            st.bucket_ready[(s, d, k)] = last
    if (s, d) in st.previous:
        st.earlier[(s, d)] = st.previous[(s, d)]
    st.previous[(s, d)] = last
    ends = [last]
    if costs.backward_overlapped:
        ends.append(
            _comm(
                st, s, dev, costs.backward_overlapped, costs.backward_overlapped_s, [first], f"bwd comm {tag}"
            )
        )
    if gather is not None and gather[1] != gather[0]:
        ends.append(gather[1])
    done = ends[0] if len(ends) == 1 else b.marker(ends, label=f"bwd done {tag}")
    _scatter(st, s, d, unit, first, done)
    st.backward[(s, d, unit)] = done
