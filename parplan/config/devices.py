"""The device catalog: spec-sheet figures of common accelerators, named by a device's ``type:``.

A cluster file may write ``type: H100-SXM`` instead of ``peak_flops``/``memory``; the catalog fills
whatever the file leaves out (any field given overrides). Peaks are *dense* (no 2:4 sparsity) and per
dtype: ``fp32`` is the non-tensor (vector) rate, ``tf32``/``bf16``/``fp16``/``fp8`` the tensor-core
rates; a dtype a device lacks is absent. ``peak_flops`` (the old whole-model path's single peak)
defaults to the 16-bit tensor peak. ``matmul_max_efficiency`` is the share of the peak that large
GEMMs reach in practice (cuBLAS/hipBLASLt on big square problems), a documented estimate, at the
board power the datasheet states (``tdp_watts``: SXM/OAM maximum TDP, PCIe board power), which a
device's ``power_limit_watts`` may lower (:func:`parplan.plan.compute.tensor_clock_scale`).
Memory sizes are the HBM/GDDR capacity the datasheets round ("80 GB" is 80 GiB of HBM); bandwidths
are the datasheets' decimal rates.

Sources, one per entry, are the vendors' datasheets as cited beside each (``tdp_watts``: the same
datasheets' maximum thermal design power: V100 SXM2 300 W, A100 SXM 400 W, H100 SXM 700 W, H100
PCIe 350 W, H200 SXM 700 W, B200 1,000 W, MI300X 750 W, L4 72 W, T4 70 W).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Dtype = Literal["fp32", "tf32", "bf16", "fp16", "fp8"]
DTYPES: tuple[Dtype, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8")

T = 1e12
GB = 1e9
GiB = 2.0**30


@dataclass(frozen=True)
class DeviceType:
    """Spec-sheet figures of one accelerator model."""

    name: str
    peak_flop_per_s_by_dtype: dict[str, float]
    memory_bytes: float
    memory_bandwidth_Bps: float
    sm_count: int
    arch: str | None
    matmul_max_efficiency: float = 0.8
    aliases: tuple[str, ...] = field(default=())
    tdp_watts: float | None = None

    @property
    def peak_flop_per_s(self) -> float:
        """The 16-bit tensor peak (bf16, else fp16): the single peak of the whole-model path."""
        peaks = self.peak_flop_per_s_by_dtype
        return peaks.get("bf16", peaks.get("fp16", peaks["fp32"]))


_TYPES = (
    # NVIDIA Tesla V100 datasheet (SXM2 32 GB): 15.7 TFLOPS fp32, 125 TFLOPS tensor (fp16), 900 GB/s
    DeviceType("V100", {"fp32": 15.7 * T, "fp16": 125 * T}, 32 * GiB, 900 * GB, 80, "volta", 0.75, (), 300),
    # NVIDIA A100 datasheet (SXM4 40 GB): 19.5 fp32, 156 tf32, 312 bf16/fp16 TFLOPS, 1,555 GB/s
    DeviceType(
        "A100-40GB",
        {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T},
        40 * GiB,
        1555 * GB,
        108,
        "ampere",
        0.85,
        ("A100-SXM4-40GB",),
        tdp_watts=400,
    ),
    # NVIDIA A100 datasheet (SXM4 80 GB): same peaks, 2,039 GB/s
    DeviceType(
        "A100-80GB",
        {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T},
        80 * GiB,
        2039 * GB,
        108,
        "ampere",
        0.85,
        ("A100", "A100-SXM4-80GB"),
        tdp_watts=400,
    ),
    # NVIDIA H100 datasheet (SXM5): 67 fp32, 494.7 tf32, 989.4 bf16/fp16, 1,978.9 fp8 TFLOPS dense;
    # 80 GB HBM3 at 3.35 TB/s; 132 SMs
    DeviceType(
        "H100-SXM",
        {"fp32": 67 * T, "tf32": 494.7 * T, "bf16": 989.4 * T, "fp16": 989.4 * T, "fp8": 1978.9 * T},
        80 * GiB,
        3350 * GB,
        132,
        "hopper",
        0.75,
        ("H100", "H100-SXM5-80GB"),
        tdp_watts=700,
    ),
    # NVIDIA H100 datasheet (PCIe): 51 fp32, 378 tf32, 756 bf16/fp16, 1,513 fp8 TFLOPS dense;
    # 80 GB HBM2e at 2.0 TB/s; 114 SMs
    DeviceType(
        "H100-PCIe",
        {"fp32": 51 * T, "tf32": 378 * T, "bf16": 756 * T, "fp16": 756 * T, "fp8": 1513 * T},
        80 * GiB,
        2000 * GB,
        114,
        "hopper",
        0.75,
        tdp_watts=350,
    ),
    # NVIDIA H200 datasheet (SXM): H100 SXM's peaks; 141 GB HBM3e at 4.8 TB/s
    DeviceType(
        "H200",
        {"fp32": 67 * T, "tf32": 494.7 * T, "bf16": 989.4 * T, "fp16": 989.4 * T, "fp8": 1978.9 * T},
        141 * GiB,
        4800 * GB,
        132,
        "hopper",
        0.75,
        ("H200-SXM",),
        tdp_watts=700,
    ),
    # NVIDIA HGX B200 datasheet, per GPU (the 8-GPU figures / 8): 75 fp32, 1,100 tf32,
    # 2,250 bf16/fp16, 4,500 fp8 TFLOPS dense; 180 GB HBM3e at 8 TB/s; 148 SMs
    DeviceType(
        "B200",
        {"fp32": 75 * T, "tf32": 1100 * T, "bf16": 2250 * T, "fp16": 2250 * T, "fp8": 4500 * T},
        180 * GiB,
        8000 * GB,
        148,
        "blackwell",
        0.75,
        tdp_watts=1000,
    ),
    # AMD Instinct MI300X datasheet: 81.7 fp32 vector, 653.7 tf32, 1,307.4 bf16/fp16,
    # 2,614.9 fp8 TFLOPS dense; 192 GB HBM3 at 5.3 TB/s; 304 CUs (not an NVIDIA arch for NCCL)
    DeviceType(
        "MI300X",
        {"fp32": 81.7 * T, "tf32": 653.7 * T, "bf16": 1307.4 * T, "fp16": 1307.4 * T, "fp8": 2614.9 * T},
        192 * GiB,
        5300 * GB,
        304,
        None,
        0.6,
        tdp_watts=750,
    ),
    # NVIDIA L4 datasheet: 30.3 fp32, 60 tf32, 121 bf16/fp16, 242 fp8 TFLOPS dense (half the
    # sparse figures); 24 GB GDDR6 at 300 GB/s; 58 SMs (Ada: NCCL tunes it as Ampere)
    DeviceType(
        "L4",
        {"fp32": 30.3 * T, "tf32": 60 * T, "bf16": 121 * T, "fp16": 121 * T, "fp8": 242 * T},
        24 * GiB,
        300 * GB,
        58,
        "ampere",
        0.7,
        tdp_watts=72,
    ),
    # NVIDIA T4 datasheet: 8.1 fp32, 65 fp16 tensor TFLOPS (no bf16, tf32 or fp8);
    # 16 GB GDDR6 at 320 GB/s; 40 SMs
    DeviceType("T4", {"fp32": 8.1 * T, "fp16": 65 * T}, 16 * GiB, 320 * GB, 40, "turing", 0.7, (), 70),
)

DEVICE_TYPES: dict[str, DeviceType] = {t.name: t for t in _TYPES}
"""The catalog by name."""

_LOOKUP: dict[str, DeviceType] = {name.lower(): t for t in _TYPES for name in (t.name, *t.aliases)}


def device_type(name: str) -> DeviceType:
    """The catalog entry called ``name`` (case-insensitive; aliases such as ``H100`` accepted).

    Raises :class:`KeyError` with a message listing the known types.
    """
    try:
        return _LOOKUP[name.lower()]
    except KeyError:
        raise KeyError(f"unknown device type {name!r}; known: {', '.join(DEVICE_TYPES)}") from None
