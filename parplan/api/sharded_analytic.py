"""The closed-form step time of a sharded plan (no event simulation): milliseconds for a 3-D plan of
a 175B model on 1024 GPUs, so sweeps can rank thousands of plans before simulating a few.

From :func:`~parplan.plan.sharded.costs.layout_plan`, per stage ``s`` and micro-batch:

- ``F_s`` / ``B_s``: the stage's forward / backward (plus recompute) compute over its chunks, plus
  its **blocking** calls (TP without overlap, EP all-to-alls) in full, plus the part of its
  **overlappable** calls that exceeds the compute they hide behind: TP backward calls behind half
  the backward (the weight-gradient GEMMs), TP calls with ``tp_comm_overlap`` behind the GEMMs of
  their direction, CP ring steps behind the attention cores, ZeRO-3/FSDP gathers and
  reduce-scatters of every micro-batch behind the whole forward / backward, the first gather and
  the last reduce-scatter always exposed.
- **Pipeline**: ``t = max_s (F_s + B_s)``; the last backward of stage 0 ends at ``(m + (pp - 1) /
  v) t`` (the interleaved bubble ``(pp - 1) / v``), plus the fill and drain hops ``2 (pp - 1)``
  activation transfers, plus two transfers per micro-batch in the steady state of plain 1F1B
  (Megatron overlaps them when interleaving). Stage ``s`` ends its last backward ``s B_s`` earlier.
- **Per step** on stage ``s``: the gradient buckets (once per step: ZeRO-0/1/2) exposed where they
  exceed the last micro-batch's backward plus the stage's drain slack (the last bucket always;
  all of them without ``aggregation.overlap``), the tied-embedding all-reduce (first and last
  stage), the optimizer, and ZeRO-1/2's parameter all-gather. The step ends when the last stage
  does.

**SMs and memory**: an overlappable call holds its NCCL channels' SMs and takes memory bandwidth
from the memory-bound kernels, so the compute it hides behind runs slower: each hidden group of
calls exposes ``max(X - W, stolen)`` instead of ``max(0, X - W)``
(:func:`~parplan.plan.compute.overlapped_exposed_s`; ``stolen`` the calls' seconds times their
:meth:`~parplan.plan.sharded.clock.CollectiveClock.compute_share`).

Collective times: :class:`~parplan.plan.sharded.clock.CollectiveClock` (NCCL's ``auto`` pick
timed by the picked algorithm's closed form on the group's bottleneck alpha and beta).

MFU: model FLOPs per token (``6 N`` + attention, :func:`parplan.model.transformer.model_flops_per_token`)
times tokens per step over step time, GPUs and the device's dense peak in the plan's dtype; HFU
counts recomputation too (the compute time ratio (F + B + R) / (F + B)).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from parplan.plan.base import MemoryBreakdown
from parplan.plan.compute import overlapped_exposed_s
from parplan.plan.sharded.clock import CollectiveClock
from parplan.plan.sharded.costs import CommCall, ShardedLayout, layout_plan
from parplan.plan.sharded.memory import stage_memory
from parplan.plan.strategies.sharded import peak_flop_per_s

if TYPE_CHECKING:
    from parplan.api.results import PlanResult
    from parplan.config.strategy import ShardedStrategy
    from parplan.plan.base import PlanContext

WGRAD_SHARE = 0.5
"""Share of a backward pass spent in weight-gradient GEMMs, which TP backward collectives hide behind."""


@dataclass(frozen=True)
class StageTimes:
    """One stage's per-micro-batch figures and its end of step, in seconds."""

    forward_s: float
    backward_s: float
    compute_s: float  # forward + backward + recompute compute only, one micro-batch
    recompute_s: float
    blocking_comm_s: float  # TP/EP blocking calls, one micro-batch
    exposed_overlap_s: float  # overlappable calls beyond their compute, one micro-batch
    dp_exposed_s: float  # per-step gradient sync beyond what it hides behind
    step_sync_s: float  # embedding all-reduce + parameter all-gather after the optimizer
    optimizer_s: float
    end_s: float


@dataclass(frozen=True)
class ShardedEstimate:
    """The closed-form evaluation of one sharded plan (module docstring)."""

    layout: ShardedLayout
    step_time_s: float
    pipeline_s: float
    bubble_s: float
    p2p_s: float
    stages: tuple[StageTimes, ...]
    critical_stage: int
    tokens_per_step: float
    model_flops_per_step: float
    mfu: float
    hfu: float | None
    model_tflops_per_gpu: float
    memory: tuple[MemoryBreakdown, ...]  # per stage: its first device (a stage's devices hold the same)
    bound: str

    @property
    def num_devices(self) -> int:
        """GPUs the plan runs on."""
        return self.layout.mesh.size


Array = Any
"""A float64 numpy array, or a float: the shared arithmetic below runs on either."""


@dataclass(frozen=True)
class ChunkSums:
    """Per model chunk (trailing axes ``[..., pp, v]``), one micro-batch: compute seconds and the
    seconds of its TP/CP/EP calls summed the ways the exposure rules need them. The scalar path
    (:func:`evaluate_layout`) and the search's vectorized one both reduce chunks to these."""

    forward_s: Array
    backward_s: Array
    recompute_s: Array
    attention_forward_s: Array
    attention_backward_s: Array
    blocking_s: Array  # every blocking call, forward and backward
    blocking_forward_s: Array
    busy_forward_s: Array  # overlappable forward calls (what the communication stream carries)
    busy_backward_s: Array
    tp_forward_s: Array  # overlappable calls by axis and direction
    tp_backward_s: Array
    cp_forward_s: Array
    cp_backward_s: Array
    tp_forward_sm_s: Array  # the compute seconds those calls take from what they hide behind
    tp_backward_sm_s: Array  # (their NCCL channels' SMs: plan.compute.overlapped_exposed_s)
    cp_forward_sm_s: Array
    cp_backward_sm_s: Array
    memory_share: Array  # memory-bound share of the chunk's blocks' kernel seconds (Roofline.memory_share)


@dataclass(frozen=True)
class StageMicro:
    """Per stage (trailing axis ``[..., pp]``), one micro-batch, before the ZeRO-3/FSDP calls:
    the loop over the stage's chunks (:func:`stage_micro`)."""

    forward_s: Array
    backward_s: Array
    compute_s: Array
    recompute_s: Array
    blocking_s: Array
    exposed_s: Array
    window_forward_s: Array  # compute the communication stream has left for FSDP's calls
    window_backward_s: Array
    memory_share: Array  # memory-bound share of the stage's blocks' kernel seconds


@dataclass(frozen=True)
class StageSync:
    """Per stage (trailing axis ``[..., pp]``): the data-parallel calls' seconds as the exposure
    rules read them. Flags broadcast against the stage axis."""

    per_microbatch: Array  # bool: ZeRO-3/FSDP calls every micro-batch
    gather_backward: Array  # bool: gathered again before backward
    gather_first_s: Array
    gather_sum_s: Array
    scatter_last_s: Array
    scatter_sum_s: Array
    has_grad_sync: Array  # bool: once-per-step gradient calls exist (and not per micro-batch)
    grad_last_s: Array
    grad_sum_s: Array
    overlap: Array  # bool: aggregation.overlap
    extra_s: Array  # tied-embedding all-reduce + parameter all-gather after the optimizer
    optimizer_s: Array
    gather_first_sm_s: Array  # compute seconds the calls take from what they hide behind (their
    gather_rest_sm_s: Array  # NCCL channels' SMs, plan.compute.overlapped_exposed_s): the first
    scatter_rest_sm_s: Array  # gather, the others; every scatter but the last; every gradient
    grad_rest_sm_s: Array  # call but the last
    gather_first_memory_s: Array  # what the same calls take beyond that from compute that is all
    gather_rest_memory_s: Array  # memory bound (CollectiveClock.memory_stolen), scaled by the
    scatter_rest_memory_s: Array  # stage's memory-bound share when they hide behind its compute
    grad_rest_memory_s: Array


def chunk_exposed(c: ChunkSums, tp_overlap: bool) -> Array:
    """Seconds of a chunk's overlappable TP/CP calls beyond the compute they hide behind, and of
    that compute slowed by their SMs (module docstring), per chunk."""
    fwd_gemm = c.forward_s - c.attention_forward_s
    bwd_hide = c.backward_s * WGRAD_SHARE if not tp_overlap else c.backward_s - c.attention_backward_s
    exposed = overlapped_exposed_s(c.tp_forward_s, fwd_gemm, c.tp_forward_sm_s)
    exposed = exposed + overlapped_exposed_s(c.tp_backward_s, bwd_hide, c.tp_backward_sm_s)
    exposed = exposed + overlapped_exposed_s(c.cp_forward_s, c.attention_forward_s, c.cp_forward_sm_s)
    cp_hide = c.attention_backward_s + c.recompute_s
    return exposed + overlapped_exposed_s(c.cp_backward_s, cp_hide, c.cp_backward_sm_s)


def stage_micro(c: ChunkSums, tp_overlap: bool) -> StageMicro:
    """Sum a stage's chunks (the last axis) into its per-micro-batch figures, in chunk order."""
    exposed_chunks = chunk_exposed(c, tp_overlap)
    zero = np.zeros(np.shape(c.forward_s)[:-1])
    fwd = bwd = compute = recompute = blocking = exposed = busy_fwd = busy_bwd = zero
    fwd_compute = bwd_compute = zero
    for k in range(np.shape(c.forward_s)[-1]):
        f, b, r, fb = (
            c.forward_s[..., k],
            c.backward_s[..., k],
            c.recompute_s[..., k],
            c.blocking_forward_s[..., k],
        )
        busy_fwd, busy_bwd = busy_fwd + c.busy_forward_s[..., k], busy_bwd + c.busy_backward_s[..., k]
        fwd = fwd + (f + fb)
        bwd = bwd + (b + r + (c.blocking_s[..., k] - fb))
        compute = compute + (f + b + r)
        recompute = recompute + r
        blocking = blocking + c.blocking_s[..., k]
        exposed = exposed + exposed_chunks[..., k]
        fwd_compute = fwd_compute + f
        bwd_compute = bwd_compute + (b + r)
    # one communication stream: FSDP's calls hide behind what the TP/CP calls leave of the compute
    window_fwd = np.maximum(0.0, fwd_compute - busy_fwd)
    window_bwd = np.maximum(0.0, bwd_compute - busy_bwd)
    memory = c.memory_share[..., 0]  # every chunk of a stage runs the same blocks
    return StageMicro(fwd, bwd, compute, recompute, blocking, exposed, window_fwd, window_bwd, memory)


def sharding_exposed(
    sync: StageSync, window_fwd: Array, window_bwd: Array, memory_share: Array = 0.0
) -> Array:
    """Exposed seconds of one micro-batch's ZeRO-3/FSDP gathers and reduce-scatters, hidden behind
    the windows (the first gather and the last reduce-scatter always exposed), with the compute
    they hide behind slowed by their SMs and, for its ``memory_share`` that is memory bound, by
    the memory bandwidth their traffic takes."""
    first, last = sync.gather_first_s, sync.scatter_last_s
    rest = sync.gather_rest_sm_s + memory_share * sync.gather_rest_memory_s
    fwd = first + overlapped_exposed_s(sync.gather_sum_s - first, window_fwd, rest)
    back = np.where(sync.gather_backward, sync.gather_sum_s, 0.0)
    back_sm = np.where(
        sync.gather_backward,
        sync.gather_first_sm_s
        + sync.gather_rest_sm_s
        + memory_share * (sync.gather_first_memory_s + sync.gather_rest_memory_s),
        0.0,
    )
    stolen = back_sm + sync.scatter_rest_sm_s + memory_share * sync.scatter_rest_memory_s
    bwd = last + overlapped_exposed_s(back + sync.scatter_sum_s - last, window_bwd, stolen)
    return np.where(sync.per_microbatch, fwd + bwd, 0.0)


@dataclass(frozen=True)
class StepFigures:
    """The assembled step (trailing axis ``[..., pp]`` per stage; the rest per plan)."""

    forward_s: Array
    backward_s: Array
    exposed_s: Array
    dp_exposed_s: Array
    end_s: Array
    pipeline_s: Array
    bubble_s: Array
    p2p_s: Array
    critical: Array  # int: the stage that ends last (the first of equals)
    step_s: Array


def assemble_step(
    micro: StageMicro,
    sync: StageSync,
    first_backward_s: Array,
    hop_s: Array,
    shape: tuple[Array, Array, Array],
) -> StepFigures:
    """The pipeline and the per-step sync over stages (module docstring). ``shape`` is (pp,
    virtual stages, micro-batches), each a number or an array shaped ``[..., 1]``; ``hop_s`` the
    slowest activation transfer between neighbouring stages, shaped like them."""
    pp, v, m = shape
    exposed = micro.exposed_s + sharding_exposed(
        sync, micro.window_forward_s, micro.window_backward_s, micro.memory_share
    )
    fwd, bwd = micro.forward_s, micro.backward_s + exposed
    t_mb = np.max(fwd + bwd, axis=-1, keepdims=True)
    p2p = np.where(pp > 1, 2.0 * (pp - 1) * hop_s + np.where(v == 1, 2.0 * m * hop_s, 0.0), 0.0)
    bubble = (pp - 1) / v * t_mb
    pipeline = m * t_mb + bubble + p2p
    stages = np.arange(np.shape(fwd)[-1])
    finish = pipeline - stages * bwd
    window = np.where(sync.overlap, first_backward_s + stages * bwd, 0.0)
    grad_stolen = sync.grad_rest_sm_s + micro.memory_share * sync.grad_rest_memory_s
    last, stolen = sync.grad_last_s, np.where(sync.overlap, grad_stolen, 0.0)
    dp = np.where(
        sync.has_grad_sync, last + overlapped_exposed_s(sync.grad_sum_s - last, window, stolen), 0.0
    )
    end = finish + dp + sync.extra_s + sync.optimizer_s
    critical = np.argmax(end, axis=-1)[..., None]
    step = np.take_along_axis(end, critical, axis=-1)
    return StepFigures(fwd, bwd, exposed, dp, end, pipeline, bubble, p2p, critical, step)


def _chunk_sums(clock: CollectiveClock) -> ChunkSums:
    """The layout's chunks as :class:`ChunkSums` (shape ``[pp, v]``), each sum in call order."""
    layout = clock.layout
    rows: list[list[tuple[float, ...]]] = []
    for stage, chunks in enumerate(layout.chunks):
        row: list[tuple[float, ...]] = []
        for chunk in chunks:
            comm = _chunk_comm(clock, stage, chunk.forward_comm, chunk.backward_comm)
            times = (chunk.forward_s, chunk.backward_s, chunk.recompute_s)
            attention = (chunk.attention_forward_s, chunk.attention_backward_s)
            row.append((*times, *attention, *comm, clock.memory_share(stage)))
        rows.append(row)
    table = np.asarray(rows, dtype=np.float64)
    return ChunkSums(*(table[..., k] for k in range(table.shape[-1])))


def _chunk_comm(
    clock: CollectiveClock, stage: int, forward: Sequence[CommCall], backward: Sequence[CommCall]
) -> tuple[float, ...]:
    """One chunk's call sums in :class:`ChunkSums`' order (from ``blocking_s``), in one pass over
    its calls, each sum in call order."""
    blocking = blocking_fwd = 0.0
    busy = [0.0, 0.0]  # forward, backward
    by_axis = {"tp": [0.0, 0.0], "cp": [0.0, 0.0]}
    stolen = {"tp": [0.0, 0.0], "cp": [0.0, 0.0]}
    for direction, calls in enumerate((forward, backward)):
        for c in calls:
            seconds = clock.seconds(c, stage)
            if c.blocking:
                blocking += seconds
                blocking_fwd += seconds if direction == 0 else 0.0
                continue
            busy[direction] += seconds
            if c.axis in by_axis:
                by_axis[c.axis][direction] += seconds
                stolen[c.axis][direction] += seconds * clock.compute_share(c, stage)
    tp, cp, sm_tp, sm_cp = by_axis["tp"], by_axis["cp"], stolen["tp"], stolen["cp"]
    return (blocking, blocking_fwd, *busy, *tp, *cp, *sm_tp, *sm_cp)


def _stage_sync(clock: CollectiveClock) -> StageSync:
    """The layout's data-parallel calls as :class:`StageSync` (shape ``[pp]``), sums in call order."""
    layout, pp = clock.layout, clock.layout.strategy.pp
    rows = []
    for s in range(pp):
        gathers = [clock.seconds(c, s) for c in layout.param_gather[s]]
        scatters = [clock.seconds(c, s) for c in layout.grad_sync[s]]
        gather_calls, scatter_calls = layout.param_gather[s], layout.grad_sync[s]
        extra = 0.0
        if layout.embedding_sync is not None and s in (0, pp - 1):
            extra += clock.seconds(layout.embedding_sync, s)
        if layout.param_sync:
            extra += clock.total(layout.param_sync[s], s)
        rows.append(
            (
                gathers[0] if gathers else 0.0,
                sum(gathers),
                scatters[-1] if scatters else 0.0,
                sum(scatters),
                extra,
                layout.optimizer_s[s],
                clock.sm_stolen(gather_calls[:1], s),
                clock.sm_stolen(gather_calls[1:], s),
                clock.sm_stolen(scatter_calls[:-1], s),
                clock.memory_stolen(gather_calls[:1], s),
                clock.memory_stolen(gather_calls[1:], s),
                clock.memory_stolen(scatter_calls[:-1], s),
            )
        )
    t = np.asarray(rows, dtype=np.float64)
    per_micro = layout.per_microbatch_sync
    return StageSync(
        per_microbatch=np.bool_(per_micro),
        gather_backward=np.bool_(layout.param_gather_backward),
        gather_first_s=t[:, 0],
        gather_sum_s=t[:, 1],
        scatter_last_s=t[:, 2],
        scatter_sum_s=t[:, 3],
        has_grad_sync=np.asarray([not per_micro and bool(layout.grad_sync[s]) for s in range(pp)]),
        grad_last_s=t[:, 2],
        grad_sum_s=t[:, 3],
        overlap=np.bool_(layout.strategy.aggregation.overlap),
        extra_s=t[:, 4],
        optimizer_s=t[:, 5],
        gather_first_sm_s=t[:, 6],
        gather_rest_sm_s=t[:, 7],
        scatter_rest_sm_s=t[:, 8],
        grad_rest_sm_s=t[:, 8],
        gather_first_memory_s=t[:, 9],
        gather_rest_memory_s=t[:, 10],
        scatter_rest_memory_s=t[:, 11],
        grad_rest_memory_s=t[:, 11],
    )


def evaluate_layout(ctx: PlanContext, layout: ShardedLayout) -> ShardedEstimate:
    """The closed-form step of a laid-out sharded plan (module docstring)."""
    clock = CollectiveClock(ctx, layout)
    strategy = layout.strategy
    pp, v, m = strategy.pp, strategy.virtual_stages, layout.microbatches
    chunks = _chunk_sums(clock)
    micro = stage_micro(chunks, strategy.tp_comm_overlap)
    sync = _stage_sync(clock)
    hop = 0.0
    if pp > 1:
        hop = max(
            clock.seconds(CommCall("send_recv", layout.p2p_bytes, "pp", True, "p2p"), s) for s in range(pp)
        )
    step = assemble_step(micro, sync, chunks.backward_s[:, 0], np.float64(hop), (pp, v, m))
    stages: list[StageTimes] = []
    for s in range(pp):
        dp, extra, opt = float(step.dp_exposed_s[s]), float(sync.extra_s[s]), float(sync.optimizer_s[s])
        stages.append(
            StageTimes(
                float(step.forward_s[s]),
                float(step.backward_s[s]),
                float(micro.compute_s[s]),
                float(micro.recompute_s[s]),
                float(micro.blocking_s[s]),
                float(step.exposed_s[s]),
                dp,
                extra,
                opt,
                float(step.end_s[s]),
            )
        )
    critical = int(step.critical[0])
    pipeline, bubble, p2p = float(step.pipeline_s[0]), float(step.bubble_s[0]), float(step.p2p_s)
    return _figures(ctx, layout, stages, critical, float(step.step_s[0]), pipeline, bubble, p2p)


def _figures(
    ctx: PlanContext,
    layout: ShardedLayout,
    stages: list[StageTimes],
    critical: int,
    step: float,
    pipeline: float,
    bubble: float,
    p2p: float,
) -> ShardedEstimate:
    from parplan.model.transformer import model_flops_per_token

    shape = layout.shape
    tokens = float(ctx.training.global_batch_size * shape.sequence_length)
    flops = float(model_flops_per_token(shape)) * tokens
    n = layout.mesh.size
    peak = peak_flop_per_s(ctx, layout)
    achieved = flops / step / n if step > 0 else 0.0
    mfu = achieved / peak if peak > 0 else 0.0
    hfu = None
    st = stages[critical]
    if layout.strategy.recompute != "none" and st.compute_s > st.recompute_s:
        hfu = mfu * st.compute_s / (st.compute_s - st.recompute_s)
    return ShardedEstimate(
        layout=layout,
        step_time_s=step,
        pipeline_s=pipeline,
        bubble_s=bubble,
        p2p_s=p2p,
        stages=tuple(stages),
        critical_stage=critical,
        tokens_per_step=tokens,
        model_flops_per_step=flops,
        mfu=mfu,
        hfu=hfu,
        model_tflops_per_gpu=achieved / 1e12,
        memory=tuple(stage_memory(ctx, layout, s) for s in range(layout.strategy.pp)),
        bound=bound_text(layout, stages[critical], step, bubble),
    )


def bound_text(layout: ShardedLayout, stage: StageTimes, step: float, bubble: float) -> str:
    """What bounds the plan: the largest share of the step, and the next."""
    m = layout.microbatches
    parts = {
        "compute": m * stage.compute_s,
        "pipeline bubble": bubble,
        "blocking TP/EP communication": m * stage.blocking_comm_s,
        "exposed overlappable communication (TP/CP/FSDP)": m * stage.exposed_overlap_s,
        "data-parallel gradient sync": stage.dp_exposed_s + stage.step_sync_s,
        "optimizer": stage.optimizer_s,
    }
    ranked = sorted(parts.items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{k} {v / step:.0%}" for k, v in ranked[:3] if v > 0)
    return f"{ranked[0][0]}-bound ({shown} of the step)"


def evaluate_sharded(ctx: PlanContext, strategy: ShardedStrategy) -> ShardedEstimate:
    """Lay out ``strategy`` and evaluate it in closed form."""
    return evaluate_layout(ctx, layout_plan(ctx, strategy))


def mfu_quality(
    model_flops_per_step: float,
    step_time_s: float,
    num_devices: int,
    peak_flop_per_s: float,
    hfu_ratio: float = 1.0,
) -> dict[str, float]:
    """The utilisation figures a sharded plan reports beside its time (in ``PlanResult.quality``):
    ``mfu``, ``model_tflops_per_gpu`` and, when recomputing (``hfu_ratio`` > 1), ``hfu``."""
    if step_time_s <= 0 or num_devices <= 0 or peak_flop_per_s <= 0:
        return {}
    achieved = model_flops_per_step / step_time_s / num_devices
    out = {"mfu": achieved / peak_flop_per_s, "model_tflops_per_gpu": achieved / 1e12}
    if hfu_ratio > 1.0:
        out["hfu"] = out["mfu"] * hfu_ratio
    return out


def analytic_result(ctx: PlanContext, name: str, strategy: ShardedStrategy) -> PlanResult:
    """A :class:`~parplan.api.results.PlanResult` from the closed form (no task graph, no
    simulation): the step's compute, exposed communication and idle (bubble) time on the critical
    stage, per-stage memory, MFU in ``quality``."""
    from dataclasses import replace

    from parplan.api.describe import describe_strategy
    from parplan.api.results import PlanResult, bottleneck_text
    from parplan.plan.memory import infeasible_message

    est = evaluate_sharded(ctx, strategy)
    st = est.stages[est.critical_stage]
    m = est.layout.microbatches
    compute = m * st.compute_s + st.optimizer_s
    idle = min(est.bubble_s, max(0.0, est.step_time_s - compute))
    exposed = max(0.0, est.step_time_s - compute - idle)
    samples = float(ctx.training.global_batch_size)
    throughput = samples / est.step_time_s if est.step_time_s > 0 else 0.0
    peak = max(est.memory, key=lambda mb: mb.total_bytes)
    reason = infeasible_message(est.memory)
    quality: dict[str, object] = {"mfu": est.mfu, "model_tflops_per_gpu": est.model_tflops_per_gpu}
    if est.hfu is not None:
        quality["hfu"] = est.hfu
    result = PlanResult(
        name=name,
        strategy_kind="sharded",
        description=describe_strategy(strategy),
        unit="step",
        step_time_s=est.step_time_s,
        compute_s=compute,
        exposed_comm_s=exposed,
        hidden_comm_s=0.0,
        idle_s=idle,
        bubble_fraction=est.bubble_s / est.pipeline_s if strategy.pp > 1 and est.pipeline_s > 0 else None,
        critical_device=est.layout.mesh.device({"pp": est.critical_stage}),
        samples_per_step=samples,
        throughput_samples_per_s=throughput,
        tokens_per_s=throughput * est.layout.shape.sequence_length,
        units_per_run=ctx.training.steps,
        run_time_s=est.step_time_s * ctx.training.steps,
        memory=est.memory,
        peak_memory_bytes=peak.total_bytes,
        peak_memory_device=peak.device,
        fits=reason is None,
        infeasible_reason=reason,
        busiest_link=None,
        busiest_link_utilisation=0.0,
        busiest_link_bytes=0.0,
        collectives=(),
        bottleneck="",
        num_devices=est.num_devices,
        quality=quality,
        notes=(
            f"closed-form evaluation: {est.bound}; memory per stage (its first device)",
            *est.layout.mesh.notes(),
        ),
    )
    return replace(result, bottleneck=bottleneck_text(result))
