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
  bandwidth (A100: 312 TFLOP/s over 1.6 TB/s ~ 200). That is one fused kernel (Apex's and
  Megatron's FusedAdam, DeepSpeed's). PyTorch's ``torch.optim.AdamW`` on GPUs runs its ``foreach``
  implementation (the default when every tensor is on CUDA; torchtitan asks for it), one kernel per
  step of the update, each streaming whole tensors: :func:`foreach_adamw_bytes_per_param`.
- **Per-kernel roofline** (:func:`op_seconds`, for plans that know their kernels, such as the
  sharded transformer of :mod:`parplan.model.transformer`): an op takes
  ``max(FLOPs / (peak[dtype] x matmul_efficiency(m, n, k) x speed), bytes / (bandwidth x``
  :data:`MEMORY_EFFICIENCY` ``x speed)) +`` :data:`KERNEL_LAUNCH_S`. GEMMs and attention run at the
  dtype's tensor peak (fused attention at :data:`ATTENTION_EFFICIENCY` of a GEMM's rate);
  memory-bound kernels (norms, activations, losses) at the fp32 vector peak.
  The GEMM efficiency is ``max x F / (F + half)`` for ``F = 2mnk`` (small GEMMs cannot fill the
  device), times the wave quantisation of 256 x 128 output tiles (:data:`GEMM_TILE_M`) over the
  SMs once a GEMM has more tiles than SMs (the last wave runs partly empty). A GEMM's backward is
  two GEMMs, each at its own shape (:func:`backward_gemm_shapes`); a fused attention's backward
  runs at :data:`ATTENTION_BACKWARD_RATE` of its forward's rate; a causal FlashAttention-2 kernel's
  unequal tiles stretch its last wave (:mod:`parplan.plan.tiles`). This path is separate from the
  whole-model ``efficiency`` above, which stays as it is for every other plan.
- **Power cap** (:func:`tensor_clock_scale`): a device run under a ``power_limit_watts`` below its
  datasheet ``tdp_watts`` runs its tensor-core kernels (GEMMs, attention) at
  ``(limit / tdp) ** (1/3)`` of their rate; memory-bound kernels keep theirs.
- **FlashAttention-2 on Hopper** (:data:`FLASH2_PEAK_SHARE`): an attention op marked
  ``kernel="flash2"`` (PyTorch's SDPA, which eager plans run) reaches the share of the dense peak
  the FlashAttention-3 paper measured for FlashAttention-2 on the architecture, where it knows one.
- **Communication kernels beside compute** (:func:`comm_sm_share`, :func:`overlapped_exposed_s`):
  an NCCL collective is one kernel of one thread block (CTA) per channel (``ncclLaunchKernel``
  launches a grid of ``nChannels`` blocks, NCCL's ``src/enqueue.cc``), resident on its SMs for the
  whole call. A GEMM or attention kernel that runs while it is in flight on the same device gets
  the other SMs only: ``(SMs - channels) / SMs`` of its rate (its thread blocks fill an SM's
  shared memory, so they do not share an SM with a resident NCCL block). Measured, not only
  argued: Rashidi et al. (ISCA 2021, "Enabling compute-communication overlap in distributed deep
  learning training platforms") and Pati et al. (ASPLOS 2024, "T3") report overlapped GEMMs
  slowed by the communication kernels' SM and memory use, and Transformer Engine's
  userbuffers overlap caps its communication SMs for that reason. A collective of ``X`` seconds
  taking a share ``c`` of the SMs beside ``C`` seconds of compute ends both at
  ``max(X, C + c X)``: it exposes ``max(X - C, c X)`` beyond the compute, where without the
  contention it exposed ``max(0, X - C)``.
- **Communication traffic in memory** (:func:`comm_compute_share`): the same kernels stream their
  data through the device's HBM. A ring step of NCCL's Simple protocol (``prims_simple.h``:
  ``recvReduceSend``, ``directRecvCopySend``) has the previous rank write a slice into this rank's
  receive buffer, reads it back (and, reducing, reads the local slice too) and writes the result
  on: about :data:`COMM_HBM_BYTES_PER_BUS_BYTE` bytes of HBM traffic per byte the bus carries (the
  three of a reduction's ``gamma``). Memory-bound kernels running beside the call (norms,
  activations, copies: the share ``f`` of the compute's seconds, :meth:`~parplan.plan.sharded.
  blocks.Roofline.memory_share`) get the memory bandwidth the call leaves them, so they lose the
  larger of the SM share ``c`` and the call's share ``h`` of the bandwidth; GEMMs keep losing
  ``c``. Per second of the call the compute loses ``c + f max(0, h - c)``. Rashidi et al. (2021)
  and T3 (Pati et al. 2024) above name this memory contention beside the SMs' (T3 tracks and
  arbitrates the collective's memory traffic against the GEMM's for that reason).
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

import math
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from parplan.errors import PlanError
from parplan.plan.tiles import causal_tile_waves

if TYPE_CHECKING:
    from parplan.config.model import ModelSpec
    from parplan.model.graph import ModelGraph
    from parplan.model.transformer import Op
    from parplan.plan.base import PlanContext
    from parplan.topology.network import DeviceInfo

KERNEL_LAUNCH_S = 4e-6
"""Fixed cost of one kernel: launch and the ramp-up/tail a kernel cannot overlap (a few us on
current GPUs; CUDA graphs lower it, so this is a documented middle)."""

MEMORY_EFFICIENCY = 0.85
"""Share of the spec-sheet memory bandwidth streaming kernels reach (STREAM-like copies on HBM
reach 80-90%)."""

DEFAULT_MATMUL_MAX_EFFICIENCY = 0.8
"""Share of peak large GEMMs reach on a device that does not say (cuBLAS on A100/H100: 0.75-0.85)."""

DEFAULT_MATMUL_HALF_FLOPS = 2e9
"""GEMM size (``2 m n k`` FLOPs) at half the maximum efficiency when the device does not say
(a 1024^3 GEMM: tens of microseconds of work cannot fill a large GPU)."""

ATTENTION_EFFICIENCY = 0.8
"""A fused attention kernel's rate over a GEMM's of the same shape (FlashAttention-2 reaches about
70% of an A100's peak forward where cuBLAS reaches 85%; FlashAttention-3 on H100 comes closer)."""

FLASH2_PEAK_SHARE: dict[str, float] = {"hopper": 0.35}
"""Share of the dense 16-bit peak FlashAttention-2's kernels reach, per architecture, where it differs
from :data:`ATTENTION_EFFICIENCY` x a GEMM's. Hopper: "FlashAttention-2 ... achieving only 35%
utilization on the H100 GPU" (Shah et al. 2024, FlashAttention-3, abstract): its kernels are written
for Ampere's ``mma.sync``, which on H100 reaches about two thirds of the tensor cores' peak (the
paper's section 2), where cuBLAS uses Hopper's ``wgmma``. PyTorch's ``scaled_dot_product_attention``
runs FlashAttention-2 as its flash backend (PyTorch 2.2 release notes). On Ampere FlashAttention-2
reaches 50-73% of peak (Dao 2023, abstract), about the default's 0.85 x 0.8 = 68%."""

ATTENTION_BACKWARD_RATE = 63.0 / 73.0
"""A fused attention kernel's backward FLOP rate over its forward's. FlashAttention-2 reaches "up to
73% of the theoretical max throughput in the forward pass, and up to 63% ... in the backward pass"
on A100 (Dao 2023, FlashAttention-2, section 4.1): its backward recomputes the scores, adds into
the query gradient across key blocks, and has more non-matmul work between its five matmuls. The
rates above (:data:`ATTENTION_EFFICIENCY`, :data:`FLASH2_PEAK_SHARE`) are forward rates; FLOPs
count the backward's as ``backward_flops_factor`` x forward (2.5), as that paper does."""

GEMM_TILE_M, GEMM_TILE_N = 256, 128
"""Output tile (rows x columns) of the large 16-bit GEMM kernels, one resident per SM, used for wave
quantisation. NVIDIA's *Matrix Multiplication Background User's Guide* ("Wave quantization") takes
256 x 128 thread-block tiles, one per SM, as its A100 example: "108 SMs ... leading to a wave size
of 108 tiles that can execute simultaneously"; cuBLAS's large bf16 kernels on Ampere
(``ampere_bf16_s16816gemm_bf16_256x128_...``) and Hopper (``sm90_xmma_gemm_..._tilesize128x256x64_
...``) are of that size."""

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


def foreach_adamw_bytes_per_param(model_spec: ModelSpec) -> float:
    """Memory traffic of one ``torch.optim.AdamW`` step per parameter with ``foreach`` kernels
    (``_multi_tensor_adam`` in ``torch/optim/adam.py``), ``p`` bytes a weight, ``g`` a gradient, ``s``
    a moment (half of ``optimizer_bytes_per_param``): the decoupled weight decay ``_foreach_mul_``
    on the weights (2p), ``_foreach_lerp_`` of the first moment towards the gradient (2s + g),
    ``_foreach_mul_`` and ``_foreach_addcmul_`` of the second (2s; 2s + 2g), ``_foreach_sqrt`` into
    a new tensor, ``_foreach_div_`` by the bias correction and ``_foreach_add_`` of eps (2s each),
    ``_foreach_addcdiv_`` into the weights (2p + 2s): ``4p + 3g + 14s``; fp32 throughout, 84 bytes.

    >>> from parplan.config.model import ModelSpec
    >>> fp32 = {"bytes_per_param": 4, "bytes_per_grad": 4, "optimizer_bytes_per_param": 8}
    >>> spec = ModelSpec.model_validate({"nodes": [{"id": "a"}], **fp32})
    >>> foreach_adamw_bytes_per_param(spec)
    84.0
    """
    moment = model_spec.optimizer_bytes_per_param / 2.0
    return 4.0 * model_spec.bytes_per_param + 3.0 * model_spec.bytes_per_grad + 14.0 * moment


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


# -- per-kernel roofline ----------------------------------------------------------------------------


def matmul_efficiency(device: DeviceInfo, m: int, n: int, k: int) -> float:
    """Share of the tensor peak a ``[m, k] x [k, n]`` GEMM reaches on ``device`` (module docstring)."""
    top = device.matmul_max_efficiency or DEFAULT_MATMUL_MAX_EFFICIENCY
    half = device.matmul_half_flops or DEFAULT_MATMUL_HALF_FLOPS
    size = 2.0 * m * n * k
    efficiency = top * size / (size + half)
    if device.sm_count:
        tiles = math.ceil(m / GEMM_TILE_M) * math.ceil(n / GEMM_TILE_N)
        if tiles > device.sm_count:
            waves = math.ceil(tiles / device.sm_count)
            efficiency *= tiles / (waves * device.sm_count)
    return efficiency


def tensor_clock_scale(device: DeviceInfo) -> float:
    """The tensor-core rate of a power-capped device over its rate at the datasheet TDP.

    A GPU's power management lowers its clock until the board's power is under the limit
    (``nvidia-smi --power-limit``). Dynamic CMOS power is ``a C V^2 f`` (Hennessy and Patterson,
    *Computer Architecture*, section 1.5) and DVFS lowers the voltage with the frequency, so a
    compute-bound kernel's power goes as ``f^3`` and its clock (and tensor throughput) as
    ``(limit / tdp) ** (1/3)``. The static and memory power that do not scale with the SM clock
    are left out, so the slow-down is a lower bound. 1 without a limit below a known TDP.

    >>> from parplan.topology.network import DeviceInfo
    >>> d = DeviceInfo("g", 1e15, 0.5, 1.0, 8e10, None, None, tdp_watts=700.0, power_limit_watts=500.0)
    >>> round(tensor_clock_scale(d), 3)
    0.894
    """
    tdp, limit = device.tdp_watts, device.power_limit_watts
    if tdp is None or limit is None or limit >= tdp:
        return 1.0
    return float((limit / tdp) ** (1.0 / 3.0))


def comm_sm_share(device: DeviceInfo, channels: int) -> float:
    """Share of ``device``'s SMs a collective of ``channels`` NCCL channels (one CTA each) holds
    while it runs (module docstring); 0 when the device does not state its SM count.

    >>> from parplan.topology.network import DeviceInfo
    >>> d = DeviceInfo("g", 1e15, 0.5, 1.0, 8e10, None, None, sm_count=132)
    >>> round(comm_sm_share(d, 12), 4)
    0.0909
    """
    if not device.sm_count or channels <= 0:
        return 0.0
    return min(channels, device.sm_count) / device.sm_count


COMM_HBM_BYTES_PER_BUS_BYTE = 3.0
"""HBM bytes a rank's NCCL ring kernels move per byte its bus carries: the slice the previous
rank writes into its buffer, the read of that slice, the write of the result (a reduction's read
of its local slice takes the place of the copy's write to the output); module docstring."""


def comm_compute_share(
    device: DeviceInfo, channels: int, seconds: float, bus_bytes: float, memory_share: float
) -> float:
    """Share of ``device``'s compute rate a collective takes while it runs: its SMs
    (:func:`comm_sm_share` of its ``channels``) and, for the ``memory_share`` of the compute that
    is memory bound, the larger of those and its share of the memory bandwidth, ``bus_bytes`` x
    :data:`COMM_HBM_BYTES_PER_BUS_BYTE` over ``seconds`` (module docstring). The SM share alone
    for a call with no NCCL channels (not an NCCL kernel) or no duration.

    >>> from parplan.topology.network import DeviceInfo
    >>> d = DeviceInfo("g", 1e15, 0.5, 1.0, 8e10, 2e12, None, sm_count=100)
    >>> round(comm_compute_share(d, 10, 1e-3, 0.0, 0.5), 4)  # no bytes: the SMs only
    0.1
    >>> round(comm_compute_share(d, 10, 1e-3, 4.25e8, 0.5), 4)  # 3 x 425 MB in 1 ms: 75% of 1.7 TB/s
    0.425
    """
    return comm_sm_share(device, channels) + memory_share * comm_memory_excess(
        device, channels, seconds, bus_bytes
    )


def comm_memory_excess(device: DeviceInfo, channels: int, seconds: float, bus_bytes: float) -> float:
    """How much more of a memory-bound kernel's rate a collective takes than of a GEMM's: its share
    of the memory bandwidth (``bus_bytes`` x :data:`COMM_HBM_BYTES_PER_BUS_BYTE` over ``seconds``,
    at most 1) beyond its SM share, never below 0; 0 for a call with no NCCL channels or no
    duration. :func:`comm_compute_share` scales it by the compute's memory-bound share.

    >>> from parplan.topology.network import DeviceInfo
    >>> d = DeviceInfo("g", 1e15, 0.5, 1.0, 8e10, 2e12, None, sm_count=100)
    >>> round(comm_memory_excess(d, 10, 1e-3, 4.25e8), 4), comm_memory_excess(d, 0, 1e-3, 4.25e8)
    (0.65, 0.0)
    """
    if channels <= 0 or seconds <= 0.0 or bus_bytes <= 0.0:
        return 0.0
    memory_s = COMM_HBM_BYTES_PER_BUS_BYTE * bus_bytes / (memory_bandwidth_Bps(device) * MEMORY_EFFICIENCY)
    return max(0.0, min(1.0, memory_s / seconds) - comm_sm_share(device, channels))


def overlapped_exposed_s(comm_s: Any, window_s: Any, stolen_s: Any) -> Any:
    """Seconds communication of ``comm_s`` adds beyond the ``window_s`` of compute it runs beside,
    when it holds the SMs of ``stolen_s`` of that compute (``sum(share x seconds)`` of its calls:
    :func:`comm_sm_share`): ``max(comm - window, stolen)`` (module docstring). Floats or numpy
    arrays (the closed form and the search's vectorized evaluation share it); ``stolen_s`` 0 gives
    the uncontended ``max(0, comm - window)``.

    >>> float(overlapped_exposed_s(1.0, 3.0, 0.1)), float(overlapped_exposed_s(4.0, 3.0, 0.1))
    (0.1, 1.0)
    """
    return np.maximum(np.maximum(comm_s - window_s, stolen_s), 0.0)


def _peak(device: DeviceInfo, dtype: str) -> float:
    peak = device.peak_for(dtype)
    if peak is None:
        known = ", ".join(d for d, _ in device.peak_flop_per_s_by_dtype)
        raise PlanError(f"device {device.name!r} has no {dtype} peak (it has: {known}); choose another dtype")
    return peak


def _tensor_rate(device: DeviceInfo, op: Op, dtype: str, mnk: tuple[int, int, int] | None) -> float:
    """FLOP/s of a GEMM or attention kernel: the dtype's peak at the (capped) clock, times the
    efficiency of the ``mnk`` GEMM, FlashAttention-2's measured share, or the attention default."""
    rate = _peak(device, dtype) * tensor_clock_scale(device)
    flash2 = FLASH2_PEAK_SHARE.get(device.arch or "") if op.kernel == "flash2" else None
    if op.kind == "attention" and flash2 is not None:
        return rate * flash2
    if mnk is not None:
        rate *= matmul_efficiency(device, *mnk)
    else:
        rate *= device.matmul_max_efficiency or DEFAULT_MATMUL_MAX_EFFICIENCY
    return rate * ATTENTION_EFFICIENCY if op.kind == "attention" else rate


def backward_gemm_shapes(mnk: tuple[int, int, int]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """The two GEMMs of a ``[m, k] x [k, n]`` GEMM's backward, as ``(m, n, k)`` of their outputs and
    reduction: the input gradient ``dY [m, n] x W^T [n, k]`` is ``(m, k, n)``, the weight gradient
    ``X^T [k, m] x dY [m, n]`` is ``(k, n, m)`` (a long reduction over the tokens).

    >>> backward_gemm_shapes((8192, 1024, 4096))
    ((8192, 4096, 1024), (4096, 1024, 8192))
    """
    m, n, k = mnk
    return (m, k, n), (k, n, m)


def op_seconds(device: DeviceInfo, op: Op, dtype: str, *, backward: bool = False) -> float:
    """Seconds of one kernel on ``device`` at ``dtype`` (its backward with ``backward``): the roofline
    of the module docstring, plus :data:`KERNEL_LAUNCH_S` (twice for a GEMM's backward: two GEMMs,
    each timed at its own shape, :func:`backward_gemm_shapes`; a fused attention's backward at
    :data:`ATTENTION_BACKWARD_RATE` of its forward's rate; a kernel only the backward runs moves its
    ``backward_bytes_moved``). No straggler jitter: the plan applies it."""
    flops = op.flops * (op.backward_flops_factor if backward else 1.0)
    moved = op.bytes_moved * (op.backward_bytes_factor if backward else 1.0)
    if backward and op.backward_bytes_moved is not None:
        moved = op.backward_bytes_moved
    if flops <= 0.0 and moved <= 0.0:
        return 0.0
    speed = device.speed_factor
    bandwidth_Bps = memory_bandwidth_Bps(device) * MEMORY_EFFICIENCY
    if backward and op.kind == "gemm" and op.gemm_mnk is not None:
        return sum(
            max(flops / 2.0 / (_tensor_rate(device, op, dtype, mnk) * speed), moved / 2.0 / bandwidth_Bps)
            + KERNEL_LAUNCH_S
            for mnk in backward_gemm_shapes(op.gemm_mnk)
        )
    if op.kind in ("gemm", "attention"):
        rate = _tensor_rate(device, op, dtype, op.gemm_mnk)
        if backward and op.kind == "attention":
            rate *= ATTENTION_BACKWARD_RATE
    else:
        rate = device.peak_for("fp32") or device.peak_flop_per_s
    compute_s = flops / (rate * speed) if flops > 0.0 else 0.0
    if op.causal_grid is not None and device.sm_count:  # unequal causal tiles: a longer last wave
        compute_s *= causal_tile_waves(*op.causal_grid, device.sm_count, descending=backward)
    memory_s = moved / bandwidth_Bps if moved > 0.0 else 0.0
    launches = 2 if backward and op.kind == "gemm" else 1
    return max(compute_s, memory_s) + launches * KERNEL_LAUNCH_S


def ops_seconds(device: DeviceInfo, ops: Iterable[Op], dtype: str, *, backward: bool = False) -> float:
    """Seconds of a sequence of kernels run one after another (backward: the sum of their backwards)."""
    return sum(op_seconds(device, op, dtype, backward=backward) for op in ops)
