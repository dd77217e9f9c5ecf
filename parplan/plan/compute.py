"""The compute model: how long forward, backward and optimizer work takes on a device.

Every strategy expander converts work to seconds here, so one set of assumptions times every plan:

- **Forward**: ``sum(node.forward_flops_per_sample for node in nodes) x samples`` FLOPs at the
  device's effective rate ``peak_flop_per_s x efficiency x speed_factor``
  (:attr:`~parplan.topology.network.DeviceInfo.effective_flop_per_s`).
- **Backward**: twice the forward FLOPs (gradients with respect to activations and to weights),
  at the same rate (:data:`BACKWARD_TO_FORWARD`).
- **Optimizer step**: memory bound, not FLOP bound (Adam does a handful of FLOPs per element but
  streams every parameter, gradient and state element). Per parameter it reads the gradient
  (``bytes_per_grad``), reads and writes the weights (``2 x bytes_per_param``) and reads and writes
  the optimizer state (``2 x optimizer_bytes_per_param``); with the mixed-precision Adam defaults
  (2 + 2 + 12) that is 30 bytes per parameter. The bytes move at the device's memory bandwidth
  times its speed factor; a device without a ``memory_bandwidth`` is assumed to have the machine
  balance of current accelerators, :data:`DEFAULT_FLOP_PER_BYTE` FLOP of peak per byte of memory
  bandwidth (A100: 312 TFLOP/s over 1.6 TB/s ~ 200).
- **Straggler jitter**: when ``training.straggler_jitter`` is ``j > 0`` every compute time of a
  device in a step is multiplied by one factor ``1 + j x u`` with ``u`` uniform in ``[-1, 1)``,
  drawn from a generator seeded by ``(seed, crc32(device name), step)``; so a device is slow or fast
  for a whole step, reproducibly, independently of which plan or expander asks.

>>> jitter_factor(seed=0, jitter=0.0, device="h0", step=0)
1.0
>>> a = jitter_factor(seed=1, jitter=0.1, device="h0", step=0)
>>> a == jitter_factor(seed=1, jitter=0.1, device="h0", step=0) and 0.9 <= a <= 1.1
True
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from parplan.config.model import ModelSpec
    from parplan.model.graph import ModelGraph
    from parplan.plan.base import PlanContext
    from parplan.topology.network import DeviceInfo

BACKWARD_TO_FORWARD = 2.0
"""Backward FLOPs per forward FLOP (activation gradients plus weight gradients)."""

DEFAULT_FLOP_PER_BYTE = 200.0
"""Peak FLOP/s per byte/s of memory bandwidth assumed when a device gives no ``memory_bandwidth``."""


def forward_flops(model: ModelGraph, node_ids: Iterable[str], samples: float) -> float:
    """Forward FLOPs of ``node_ids`` on ``samples`` samples."""
    per_sample = sum(float(model.node(n).forward_flops_per_sample) for n in node_ids)
    return per_sample * float(samples)


def params_of(model: ModelGraph, node_ids: Iterable[str]) -> float:
    """Parameter count of ``node_ids``."""
    return sum(float(model.node(n).params) for n in node_ids)


def optimizer_bytes_moved_per_param(model_spec: ModelSpec) -> float:
    """Memory traffic of one optimizer update per parameter (see the module docstring)."""
    return (
        model_spec.bytes_per_grad
        + 2.0 * model_spec.bytes_per_param
        + 2.0 * model_spec.optimizer_bytes_per_param
    )


def memory_bandwidth_Bps(device: DeviceInfo) -> float:
    """Memory bandwidth (given, or peak / :data:`DEFAULT_FLOP_PER_BYTE`) times the speed factor."""
    base = device.memory_bandwidth_Bps
    if base is None:
        base = device.peak_flop_per_s / DEFAULT_FLOP_PER_BYTE
    return float(base) * device.speed_factor


def jitter_factor(seed: int, jitter: float, device: str, step: int = 0) -> float:
    """Straggler multiplier of ``device`` in ``step``: ``1 + jitter x U[-1, 1)``, seeded (1 if no jitter)."""
    if jitter <= 0.0:
        return 1.0
    rng = np.random.default_rng([seed & 0xFFFFFFFF, zlib.crc32(device.encode()), step])
    return 1.0 + jitter * float(rng.uniform(-1.0, 1.0))


def device_jitter(ctx: PlanContext, device: str, step: int = 0) -> float:
    """:func:`jitter_factor` with the scenario's seed and ``straggler_jitter``."""
    return jitter_factor(ctx.seed, ctx.training.straggler_jitter, device, step)


def flops_seconds(ctx: PlanContext, device: str, flops: float, *, step: int = 0) -> float:
    """Seconds ``device`` needs for ``flops`` at its effective rate, with its straggler jitter."""
    if flops <= 0.0:
        return 0.0
    rate = ctx.network.device(device).effective_flop_per_s
    return flops / rate * device_jitter(ctx, device, step)


def forward_seconds(
    ctx: PlanContext, device: str, node_ids: Iterable[str], samples: float, *, step: int = 0
) -> float:
    """Seconds of the forward pass of ``node_ids`` over ``samples`` samples on ``device``."""
    return flops_seconds(ctx, device, forward_flops(ctx.model, node_ids, samples), step=step)


def backward_seconds(
    ctx: PlanContext, device: str, node_ids: Iterable[str], samples: float, *, step: int = 0
) -> float:
    """Seconds of the backward pass (:data:`BACKWARD_TO_FORWARD` x forward FLOPs)."""
    flops = BACKWARD_TO_FORWARD * forward_flops(ctx.model, node_ids, samples)
    return flops_seconds(ctx, device, flops, step=step)


def optimizer_seconds(ctx: PlanContext, device: str, params: float, *, step: int = 0) -> float:
    """Seconds of one optimizer update of ``params`` parameters on ``device`` (memory bound)."""
    if params <= 0.0:
        return 0.0
    info = ctx.network.device(device)
    moved = params * optimizer_bytes_moved_per_param(ctx.model_spec)
    return moved / memory_bandwidth_Bps(info) * device_jitter(ctx, device, step)


@dataclass(frozen=True)
class StepCompute:
    """The three compute phases of one training step of some nodes on one device, in seconds."""

    forward_s: float
    backward_s: float
    optimizer_s: float

    @property
    def total_s(self) -> float:
        """Forward + backward + optimizer."""
        return self.forward_s + self.backward_s + self.optimizer_s


def step_compute(
    ctx: PlanContext,
    device: str,
    node_ids: Iterable[str] | None,
    samples: float,
    *,
    step: int = 0,
) -> StepCompute:
    """Forward, backward and optimizer seconds of ``node_ids`` (default: the whole model) on ``samples``."""
    nodes = tuple(ctx.model.order if node_ids is None else node_ids)
    return StepCompute(
        forward_s=forward_seconds(ctx, device, nodes, samples, step=step),
        backward_s=backward_seconds(ctx, device, nodes, samples, step=step),
        optimizer_s=optimizer_seconds(ctx, device, params_of(ctx.model, nodes), step=step),
    )
