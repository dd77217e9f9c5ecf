"""The ``search:`` block: the space of sharded plans ``parplan search`` explores, and its limits.

Every field is a set of allowed values (or a bound); the search takes their product, drops what
cannot divide the model, the batch or the cluster and what does not fit in memory, and ranks the
rest. Fields left out take the ranges a Megatron-LM or torchtitan user would try: powers of two up
to what the model and the cluster allow, every recomputation mode, ZeRO 0 and 1, FSDP off and full.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from parplan.collectives.specs import AlgorithmSpec
from parplan.config.units import Bytes
from parplan.spec import Spec

DEFAULT_LIMIT = 10_000_000
"""Candidates a search enumerates before it asks for ``limit`` (or ``--limit``) to be raised."""

Recompute = Literal["none", "selective", "op", "full"]
FsdpMode = Literal["none", "full_shard", "shard_grad_op", "hybrid_shard"]
Dtype = Literal["fp32", "tf32", "bf16", "fp16", "fp8"]


def _positive_unique(values: tuple[int, ...] | None, field: str) -> tuple[int, ...] | None:
    """Sorted distinct positive values, or ``None`` (the default range)."""
    if values is None:
        return None
    if not values:
        raise ValueError(f"{field} is empty: give at least one value or leave it out")
    if any(v < 1 for v in values):
        raise ValueError(f"{field} values must be >= 1, got {list(values)}")
    return tuple(sorted(set(values)))


class SearchSpec(Spec):
    """The plan space of ``parplan search``: allowed values per dimension, memory headroom, limits."""

    devices: tuple[int, ...] | None = Field(
        default=None, description="GPU counts to use (default: every GPU of the cluster)"
    )
    memory_headroom: float = Field(
        default=0.0, ge=0.0, lt=1.0, description="share of each device's memory kept free (0.1 = 10%)"
    )
    tp: tuple[int, ...] | None = Field(
        default=None, description="tensor-parallel degrees (default: powers of 2)"
    )
    pp: tuple[int, ...] | None = Field(default=None, description="pipeline stages (default: powers of 2)")
    cp: tuple[int, ...] = Field(default=(1,), description="context-parallel degrees")
    ep: tuple[int, ...] = Field(default=(1,), description="expert-parallel degrees (MoE models)")
    virtual_stages: tuple[int, ...] = Field(
        default=(1, 2), description="model chunks per stage (above 1: interleaved 1F1B)"
    )
    microbatch_size: tuple[int, ...] | None = Field(
        default=None, description="samples per micro-batch (default: powers of 2 up to 8)"
    )
    zero: tuple[Literal[0, 1, 2, 3], ...] = Field(default=(0, 1), description="ZeRO stages")
    fsdp: tuple[FsdpMode, ...] = Field(default=("none", "full_shard"), description="FSDP modes")
    recompute: tuple[Recompute, ...] = Field(
        default=("none", "selective", "op", "full"), description="activation recomputation modes"
    )
    sequence_parallel: tuple[bool, ...] = Field(
        default=(False, True), description="sequence parallelism (with tp > 1 only)"
    )
    algorithms: tuple[AlgorithmSpec, ...] = Field(
        default=(), description="gradient all-reduce algorithms, e.g. 'ring', 'tree:2' (default: auto)"
    )
    bucket_sizes_bytes: tuple[Bytes, ...] = Field(
        default=(25 * 2**20,), alias="bucket_sizes", description="gradient bucket sizes, e.g. '25 MiB'"
    )
    dtype: Dtype = Field(default="bf16", description="training dtype of every candidate")
    flash_attention: bool = True
    kernels: Literal["fused", "eager"] = "fused"
    tp_comm_overlap: bool = False
    top_k: int = Field(default=5, ge=0, description="best plans re-simulated with the event engine")
    limit: int = Field(
        default=DEFAULT_LIMIT, ge=1, description="most candidates enumerated before the search refuses"
    )

    @field_validator("devices", "tp", "pp", "microbatch_size")
    @classmethod
    def _optional_ranges(cls, values: tuple[int, ...] | None, info: ValidationInfo) -> tuple[int, ...] | None:
        return _positive_unique(values, info.field_name or "value")

    @field_validator("cp", "ep", "virtual_stages")
    @classmethod
    def _ranges(cls, values: tuple[int, ...], info: ValidationInfo) -> tuple[int, ...]:
        checked = _positive_unique(values, info.field_name or "value")
        assert checked is not None
        return checked

    @field_validator("zero", "fsdp", "recompute", "sequence_parallel", "bucket_sizes_bytes")
    @classmethod
    def _non_empty(cls, values: tuple[object, ...], info: ValidationInfo) -> tuple[object, ...]:
        name = info.field_name or "value"
        if not values:
            raise ValueError(f"{name} is empty: give at least one value or leave it out")
        return tuple(dict.fromkeys(values))
