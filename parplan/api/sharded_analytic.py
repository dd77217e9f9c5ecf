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

Collective times: :class:`~parplan.plan.sharded.clock.CollectiveClock` (NCCL's ``auto`` pick
timed by the picked algorithm's closed form on the group's bottleneck alpha and beta).

MFU: model FLOPs per token (``6 N`` + attention, :func:`parplan.model.transformer.model_flops_per_token`)
times tokens per step over step time, GPUs and the device's dense peak in the plan's dtype; HFU
counts recomputation too (the compute time ratio (F + B + R) / (F + B)).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from parplan.plan.base import MemoryBreakdown
from parplan.plan.sharded.clock import CollectiveClock
from parplan.plan.sharded.costs import ChunkWork, CommCall, ShardedLayout, layout_plan
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


def _chunk_comm(
    clock: CollectiveClock, chunk: ChunkWork, stage: int, tp_overlap: bool
) -> tuple[float, float, float, float]:
    """(blocking, exposed overlappable, overlappable forward, overlappable backward) seconds of one
    chunk's TP/CP/EP calls, one micro-batch (the last two: what the communication stream carries)."""
    blocking = sum(clock.seconds(c, stage) for c in (*chunk.forward_comm, *chunk.backward_comm) if c.blocking)
    busy_fwd = sum(clock.seconds(c, stage) for c in chunk.forward_comm if not c.blocking)
    busy_bwd = sum(clock.seconds(c, stage) for c in chunk.backward_comm if not c.blocking)

    def hidden(calls: Sequence[CommCall], axis: str, behind_s: float) -> float:
        busy = sum(clock.seconds(c, stage) for c in calls if not c.blocking and c.axis == axis)
        return max(0.0, busy - behind_s)

    fwd_gemm = chunk.forward_s - chunk.attention_forward_s
    bwd_hide = (
        chunk.backward_s * WGRAD_SHARE if not tp_overlap else chunk.backward_s - chunk.attention_backward_s
    )
    exposed = hidden(chunk.forward_comm, "tp", fwd_gemm) + hidden(chunk.backward_comm, "tp", bwd_hide)
    exposed += hidden(chunk.forward_comm, "cp", chunk.attention_forward_s)
    exposed += hidden(chunk.backward_comm, "cp", chunk.attention_backward_s + chunk.recompute_s)
    return blocking, exposed, busy_fwd, busy_bwd


def _sharding_per_microbatch(clock: CollectiveClock, stage: int, fwd_s: float, bwd_s: float) -> float:
    """Exposed seconds of one micro-batch's ZeRO-3/FSDP gathers and reduce-scatters, hidden behind
    ``fwd_s`` / ``bwd_s`` (the compute the communication stream has left after the other calls)."""
    layout = clock.layout
    if not layout.per_microbatch_sync:
        return 0.0
    gathers = [clock.seconds(c, stage) for c in layout.param_gather[stage]]
    scatters = [clock.seconds(c, stage) for c in layout.grad_sync[stage]]
    first = gathers[0] if gathers else 0.0
    last = scatters[-1] if scatters else 0.0
    fwd = first + max(0.0, sum(gathers) - first - fwd_s)
    back = sum(gathers) if layout.param_gather_backward else 0.0
    bwd = last + max(0.0, back + sum(scatters) - last - bwd_s)
    return fwd + bwd


def _stage_micro(clock: CollectiveClock, stage: int) -> tuple[float, float, float, float, float, float]:
    """(F, B, compute, recompute, blocking, exposed) of one micro-batch on ``stage``."""
    layout = clock.layout
    overlap = layout.strategy.tp_comm_overlap
    fwd = bwd = compute = recompute = blocking = exposed = busy_fwd = busy_bwd = 0.0
    for chunk in layout.chunks[stage]:
        b, e, bf, bb = _chunk_comm(clock, chunk, stage, overlap)
        busy_fwd, busy_bwd = busy_fwd + bf, busy_bwd + bb
        fwd_block = sum(clock.seconds(c, stage) for c in chunk.forward_comm if c.blocking)
        fwd += chunk.forward_s + fwd_block
        bwd += chunk.backward_s + chunk.recompute_s + (b - fwd_block)
        compute += chunk.forward_s + chunk.backward_s + chunk.recompute_s
        recompute += chunk.recompute_s
        blocking += b
        exposed += e
    fwd_compute = sum(c.forward_s for c in layout.chunks[stage])
    bwd_compute = sum(c.backward_s + c.recompute_s for c in layout.chunks[stage])
    # one communication stream: FSDP's calls hide behind what the TP/CP calls leave of the compute
    window_fwd = max(0.0, fwd_compute - busy_fwd)
    window_bwd = max(0.0, bwd_compute - busy_bwd)
    exposed += _sharding_per_microbatch(clock, stage, window_fwd, window_bwd)
    bwd += exposed
    return fwd, bwd, compute, recompute, blocking, exposed


def _step_sync(clock: CollectiveClock, stage: int, hide_s: float) -> tuple[float, float]:
    """(exposed gradient sync, embedding + parameter all-gather) seconds of one step on ``stage``."""
    layout = clock.layout
    dp = 0.0
    if not layout.per_microbatch_sync and layout.grad_sync[stage]:
        times = [clock.seconds(c, stage) for c in layout.grad_sync[stage]]
        window = hide_s if layout.strategy.aggregation.overlap else 0.0
        dp = times[-1] + max(0.0, sum(times) - times[-1] - window)
    extra = 0.0
    if layout.embedding_sync is not None and stage in (0, layout.strategy.pp - 1):
        extra += clock.seconds(layout.embedding_sync, stage)
    if layout.param_sync:
        extra += clock.total(layout.param_sync[stage], stage)
    return dp, extra


def evaluate_layout(ctx: PlanContext, layout: ShardedLayout) -> ShardedEstimate:
    """The closed-form step of a laid-out sharded plan (module docstring)."""
    clock = CollectiveClock(ctx, layout)
    strategy = layout.strategy
    pp, v, m = strategy.pp, strategy.virtual_stages, layout.microbatches
    micro = [_stage_micro(clock, s) for s in range(pp)]
    t_mb = max(f + b for f, b, *_ in micro)
    p2p = 0.0
    if pp > 1:
        hop = max(
            clock.seconds(CommCall("send_recv", layout.p2p_bytes, "pp", True, "p2p"), s) for s in range(pp)
        )
        p2p = 2.0 * (pp - 1) * hop + (2.0 * m * hop if v == 1 else 0.0)
    bubble = (pp - 1) / v * t_mb
    pipeline = m * t_mb + bubble + p2p
    stages: list[StageTimes] = []
    for s, (f, b, compute, recompute, blocking, exposed) in enumerate(micro):
        last_backward = sum(c.backward_s for c in layout.chunks[s][:1])
        finish = pipeline - s * b
        dp, extra = _step_sync(clock, s, last_backward + s * b)
        end = finish + dp + extra + layout.optimizer_s[s]
        stages.append(
            StageTimes(f, b, compute, recompute, blocking, exposed, dp, extra, layout.optimizer_s[s], end)
        )
    critical = max(range(pp), key=lambda s: stages[s].end_s)
    step = stages[critical].end_s
    return _figures(ctx, layout, stages, critical, step, pipeline, bubble, p2p)


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
