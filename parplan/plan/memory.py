"""The memory model: what each device holds at its peak during a step, and whether it fits.

Per device (:class:`~parplan.plan.base.MemoryBreakdown`):

- **params / grads / optimizer**: the parameters the device owns times ``bytes_per_param``,
  ``bytes_per_grad`` and ``optimizer_bytes_per_param`` of the :class:`~parplan.config.model.ModelSpec`
  (mixed-precision Adam by default: 2 + 2 + 12 bytes per parameter);
- **activations**: the bytes every node keeps for its backward (``saved_bytes_per_sample``) times the
  samples in flight. A data-parallel replica (or a local run) holds its whole shard of the batch. A
  pipeline stage holds one micro-batch per micro-batch whose forward has run and whose backward has
  not: all ``m`` under GPipe, at most ``min(m, s - stage_index)`` under 1F1B
  (:func:`inflight_microbatches`);
- **buffers**: communication staging: one gradient bucket for data-parallel all-reduces, and the
  send and receive buffers of one micro-batch's cut activations for a pipeline stage.

The pipeline schedule (:mod:`parplan.pipeline`) says how many micro-batches a stage holds; this
module only asks it.

Framework workspace, fragmentation and the CUDA context are not modelled; a plan that fits with
little headroom may not fit in practice.

>>> model_state_bytes_per_param(2.0, 2.0, 12.0)
16.0
>>> inflight_microbatches("1f1b", microbatches=8, num_stages=4, stage_index=1)
3
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from parplan.config.units import human_bytes
from parplan.errors import InfeasiblePlanError
from parplan.pipeline import Stage
from parplan.pipeline import get as get_schedule
from parplan.plan.base import MemoryBreakdown

if TYPE_CHECKING:
    from parplan.config.model import ModelSpec
    from parplan.model.graph import ModelGraph
    from parplan.plan.base import PlanContext


def model_state_bytes_per_param(
    bytes_per_param: float, bytes_per_grad: float, optimizer_bytes: float
) -> float:
    """Bytes of weights, gradients and optimizer state held per parameter."""
    return bytes_per_param + bytes_per_grad + optimizer_bytes


def model_state_bytes(model_spec: ModelSpec, params: float) -> tuple[float, float, float]:
    """(weights, gradients, optimizer state) bytes of ``params`` parameters."""
    return (
        params * model_spec.bytes_per_param,
        params * model_spec.bytes_per_grad,
        params * model_spec.optimizer_bytes_per_param,
    )


def saved_activation_bytes(model: ModelGraph, node_ids: Iterable[str], samples: float) -> float:
    """Activation bytes ``node_ids`` keep for backward over ``samples`` samples."""
    return sum(float(model.node(n).saved_bytes_per_sample) for n in node_ids) * float(samples)


def inflight_microbatches(schedule: str, microbatches: int, num_stages: int, stage_index: int) -> int:
    """Micro-batches whose activations a pipeline stage holds at once, as the named schedule says
    (GPipe all, 1F1B ``min(m, s - i)``); a :class:`~parplan.errors.PlanError` for an unknown name."""
    stage = Stage(index=stage_index, num_stages=num_stages, microbatches=microbatches)
    return get_schedule(schedule).inflight_microbatches(stage)


def plan_memory(
    ctx: PlanContext,
    device: str,
    *,
    params: float,
    activations_bytes: float,
    buffers_bytes: float = 0.0,
) -> MemoryBreakdown:
    """The peak memory of ``device`` holding ``params`` parameters' state plus activations and buffers."""
    weights, grads, optimizer = model_state_bytes(ctx.model_spec, params)
    return MemoryBreakdown(
        device=device,
        capacity_bytes=ctx.network.device(device).memory_bytes,
        params_bytes=weights,
        grads_bytes=grads,
        optimizer_bytes=optimizer,
        activations_bytes=activations_bytes,
        buffers_bytes=buffers_bytes,
    )


def combine(memories: Iterable[MemoryBreakdown]) -> tuple[MemoryBreakdown, ...]:
    """Sum breakdowns of the same device (e.g. two partitions on one worker), in first-seen order."""
    out: dict[str, MemoryBreakdown] = {}
    for m in memories:
        prev = out.get(m.device)
        if prev is None:
            out[m.device] = m
            continue
        out[m.device] = MemoryBreakdown(
            device=m.device,
            capacity_bytes=m.capacity_bytes,
            params_bytes=prev.params_bytes + m.params_bytes,
            grads_bytes=prev.grads_bytes + m.grads_bytes,
            optimizer_bytes=prev.optimizer_bytes + m.optimizer_bytes,
            activations_bytes=prev.activations_bytes + m.activations_bytes,
            buffers_bytes=prev.buffers_bytes + m.buffers_bytes,
        )
    return tuple(out.values())


def describe_shortfall(m: MemoryBreakdown) -> str:
    """One line saying what a device needs against what it has, and by how much it falls short."""
    return (
        f"{m.device} needs {_fmt(m.total_bytes)} of {_fmt(m.capacity_bytes)} "
        f"(short by {_fmt(m.shortfall_bytes)}: params {_fmt(m.params_bytes)}, grads {_fmt(m.grads_bytes)}, "
        f"optimizer {_fmt(m.optimizer_bytes)}, activations {_fmt(m.activations_bytes)}, "
        f"buffers {_fmt(m.buffers_bytes)})"
    )


def infeasible_message(memories: Sequence[MemoryBreakdown]) -> str | None:
    """Why a plan does not fit (the devices short of memory, worst first), or ``None`` when it fits."""
    short = sorted((m for m in memories if not m.fits), key=lambda m: -m.shortfall_bytes)
    if not short:
        return None
    head = "; ".join(describe_shortfall(m) for m in short[:3])
    more = f"; and {len(short) - 3} more device(s)" if len(short) > 3 else ""
    return f"out of memory on {len(short)} device(s): {head}{more}"


def require_fits(memories: Sequence[MemoryBreakdown]) -> None:
    """Raise :class:`InfeasiblePlanError` with the figures when some device's peak exceeds its memory."""
    message = infeasible_message(memories)
    if message is not None:
        raise InfeasiblePlanError(message)


def _fmt(size_bytes: float) -> str:
    """Bytes for messages: binary units, 3 significant digits."""
    return human_bytes(size_bytes, precision="short")
