"""The data-parallel side of a sharded plan on one pipeline stage: gradient reduction, ZeRO/FSDP
parameter gathers, the tied-embedding all-reduce, and the optimizer's share of the parameters.

Gradients of dense parameters are reduced over ``dp_cp`` (the data and context ranks: CP ranks hold
the same weights), expert parameters over ``edp`` (the data ranks holding the same experts).
Bytes per element: ``bytes_per_grad`` for gradients (the model spec's; Megatron under bf16 and
torchtitan's FSDP2, whose ``MixedPrecisionPolicy`` has ``reduce_dtype=float32``, reduce gradients
in fp32: a model spec with ``bytes_per_grad: 4`` says so); parameters are gathered in the compute
dtype (:func:`gathered_param_bytes`), whatever precision the sharded copy is kept in.

- **ZeRO 0** (plain DDP / Megatron DDP): gradients all-reduced in buckets of
  ``aggregation.bucket_size`` filled in backward order; once per step, overlapped with the last
  micro-batch's backward when ``aggregation.overlap``.
- **ZeRO 1 and 2** (DeepSpeed; Megatron's distributed optimizer): the buckets are reduce-scattered,
  each rank updates its shard, and the updated parameters are all-gathered after the optimizer
  (``param_sync``); once per step.
- **DeepSpeed's ``BF16_Optimizer``** (``framework: deepspeed``, ZeRO 0 or 1): the engine all-reduces
  the fp32 gradients (``allreduce_gradients``: ``buffered_allreduce_fallback`` of
  ``get_grads_for_reduction()``, the optimizer's fp32 gradients) even where the optimizer state is
  sharded over the data ranks; each rank updates its shard and all-gathers the updated 16-bit
  parameters (``update_lp_params``). Its gradients are fp32: a model spec says so with
  ``bytes_per_grad: 4``.
- **ZeRO 3, FSDP ``full_shard``**: every layer is one unit; its parameters are all-gathered before its
  forward and again before its backward, its gradients reduce-scattered after its backward; every
  micro-batch (DeepSpeed ZeRO-3 and FSDP without ``no_sync``).
- **FSDP ``shard_grad_op``**: the gathers happen before the forward only (parameters stay until the
  backward is done), gradients reduce-scattered per layer, every micro-batch.
- **FSDP ``hybrid_shard``**: ``full_shard`` inside ``dp_shard`` blocks of ``shard_group`` ranks, then
  the reduced shard all-reduced across the blocks (``dp_replicate``).
- **Tied embeddings** with ``pp > 1``: Megatron keeps the word embedding on the first stage and a
  copy on the last for the logits, and all-reduces their gradients between the two once per step.
- **Optimizer**: each rank updates the parameters it owns after sharding (ZeRO >= 1 or FSDP: its
  ``1 / dp_cp`` share of the dense ones, ``1 / edp`` of the expert ones); memory bound, as
  :func:`parplan.plan.compute.optimizer_seconds` prices a fused Adam kernel, or under FSDP as
  PyTorch's foreach AdamW moves its bytes
  (:func:`~parplan.plan.compute.foreach_adamw_bytes_per_param`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from parplan.config.strategy import ShardedStrategy
from parplan.plan.sharded.comm import CommAxis, CommCall


@dataclass(frozen=True)
class UnitParams:
    """The parameters one device holds for one sharding unit (a layer, the embedding or the head),
    after TP/EP splits: ``dense`` (reduced over dp_cp) and ``expert`` (reduced over edp)."""

    name: str
    dense: float
    expert: float


@dataclass(frozen=True)
class StageSync:
    """The data-parallel calls of one stage (see the module docstring)."""

    param_gather: tuple[CommCall, ...]
    grad_sync: tuple[CommCall, ...]
    param_sync: tuple[CommCall, ...]


GATHERED_BYTES: dict[str, float] = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 2.0}
"""Bytes per parameter of the copy a plan of each dtype gathers: FSDP2 casts its fp32 shard to the
``param_dtype`` before the all-gather (its copy-in); ZeRO-3 and Megatron's distributed optimizer
gather the 16-bit weights; fp8 training keeps 16-bit weights and casts inside the GEMMs."""


def gathered_param_bytes(bytes_per_param: float, dtype: str) -> float:
    """Bytes per parameter on the wire of a parameter all-gather: the compute dtype's copy, never
    more than the kept copy (``bytes_per_param``).

    >>> [gathered_param_bytes(kept, dtype) for kept, dtype in ((4.0, "bf16"), (2.0, "bf16"), (4.0, "fp32"))]
    [2.0, 2.0, 4.0]
    """
    return min(bytes_per_param, GATHERED_BYTES[dtype])


def fsdp_copy_bytes(
    strategy: ShardedStrategy, units: Sequence[UnitParams], param_bytes: float, grad_bytes: float
) -> tuple[float, float]:
    """(forward, backward) bytes FSDP2's copies move around its collectives for ``units``, one
    micro-batch (``torch/distributed/_composable/fsdp/_fsdp_collectives.py``): after each
    all-gather, ``foreach_all_gather_copy_out`` splits the gathered buffer into the unsharded
    parameters (``split_with_sizes_copy``: read and write ``param_bytes`` a parameter), before the
    backward again when parameters are resharded after forward; before each reduce-scatter,
    ``foreach_reduce`` packs the unsharded gradients (compute dtype) into the reduce-scatter input in
    the reduce dtype (``_chunk_cat``: read ``param_bytes``, write ``grad_bytes``). The shard-sized
    copies (the all-gather input, the reduced shard) are ``1 / shards`` of these and left out.
    Zero without FSDP (ZeRO-3 here is DeepSpeed's, whose copies are not modelled)."""
    if strategy.fsdp == "none":
        return 0.0, 0.0
    params = sum(u.dense + u.expert for u in units)
    gather = 2.0 * param_bytes * params
    again = gather if strategy.fsdp != "shard_grad_op" else 0.0
    return gather, again + (param_bytes + grad_bytes) * params


def accumulation_bytes(strategy: ShardedStrategy, params: float) -> float:
    """Bytes one micro-batch's gradient accumulation moves for ``params`` parameters beyond the
    backward's own kernels. DeepSpeed (``framework: deepspeed``): its ``BF16_Optimizer`` keeps fp32
    gradients, and after every micro-batch's backward ``update_hp_grads`` adds each 16-bit gradient
    to its fp32 copy (``hp_grad.data.add_(lp.grad.data.to(hp_grad.dtype))``,
    ``deepspeed/runtime/bf16_optimizer.py``; the ``PipelineEngine`` calls it after each backward):
    the cast reads the 16-bit gradient and writes an fp32 one, the add reads both fp32 tensors and
    writes one: ``e + 4 x 4`` bytes a parameter. Megatron-LM accumulates inside the
    weight-gradient GEMMs (``gradient_accumulation_fusion``), PyTorch's autograd into ``.grad``
    as it writes it: 0.

    >>> accumulation_bytes(ShardedStrategy(kind="sharded", framework="deepspeed"), 1e9) / 1e9
    18.0
    """
    if strategy.framework != "deepspeed" or params <= 0.0:
        return 0.0
    fp32 = GATHERED_BYTES["fp32"]
    return params * (gathered_param_bytes(fp32, strategy.dtype) + 4.0 * fp32)


def fully_sharded(strategy: ShardedStrategy) -> bool:
    """Whether parameters live sharded between uses (ZeRO-3 or any FSDP mode)."""
    return strategy.zero == 3 or strategy.fsdp != "none"


def state_sharded(strategy: ShardedStrategy) -> bool:
    """Whether the optimizer state is sharded over the data ranks (ZeRO >= 1 or FSDP)."""
    return strategy.zero >= 1 or strategy.fsdp != "none"


CallRun = tuple[tuple[CommCall, ...], int]
"""A pattern of calls made ``count`` times in a row (run-length form: what equal units make)."""
UnitRun = tuple[UnitParams, int]
"""``count`` equal units in a row (model order)."""


@dataclass(frozen=True)
class StageSyncRuns:
    """:class:`StageSync` in run-length form: each field's calls as patterns repeated in a row, so
    a stage of N equal blocks is a few runs instead of N calls (what a search prices); the same
    calls in the same order, one for one, as :func:`stage_sync`'s (:meth:`expanded`)."""

    param_gather: tuple[CallRun, ...]
    grad_sync: tuple[CallRun, ...]
    param_sync: tuple[CallRun, ...]

    def expanded(self) -> StageSync:
        """The calls one by one (labels are the first unit's or bucket's of each run)."""

        def flat(runs: tuple[CallRun, ...]) -> tuple[CommCall, ...]:
            return tuple(c for pattern, count in runs for _ in range(count) for c in pattern)

        return StageSync(flat(self.param_gather), flat(self.grad_sync), flat(self.param_sync))


def unit_runs(units: Sequence[UnitParams]) -> list[UnitRun]:
    """``units`` with consecutive units of equal parameters merged (the first one's name kept)."""
    out: list[UnitRun] = []
    for u in units:
        if out and (out[-1][0].dense, out[-1][0].expert) == (u.dense, u.expert):
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((u, 1))
    return out


def _bucket_runs(params: Sequence[tuple[float, int]], bucket_params: float) -> list[tuple[float, int]]:
    """Parameter counts of the gradient buckets filled in backward order from runs of (unit
    parameters, count) given in backward order (units without parameters skipped), as runs of
    (bucket parameters, count): a unit joins the open bucket, which closes once it reaches
    ``bucket_params``. The sums are the one-by-one sums: after a bucket closes the next fills from
    0.0 with the same additions, so a run of equal units closes equal buckets of ``k`` units each
    (worked out once) and only the units before the first close and after the last are added
    one by one."""
    out: list[tuple[float, int]] = []

    def close(value: float, count: int = 1) -> None:
        if out and out[-1][0] == value:
            out[-1] = (value, out[-1][1] + count)
        else:
            out.append((value, count))

    current = 0.0
    for p, n in params:
        if p <= 0:
            continue
        while n > 0 and current < bucket_params:  # the open bucket: until it closes
            current += p
            n -= 1
            if current >= bucket_params:
                close(current)
                current = 0.0
                break
        if n <= 0:
            continue
        cycle, k = 0.0, 0  # from an empty bucket: k units close one
        while k < n:
            cycle += p
            k += 1
            if cycle >= bucket_params:
                break
        if cycle < bucket_params:  # the run ends before one closes
            current = cycle
            continue
        close(cycle, n // k)
        for _ in range(n % k):
            current += p
    if current > 0:
        close(current)
    return out


def _dp_buckets(
    strategy: ShardedStrategy, runs: Sequence[UnitRun], grad_bytes: float, data_ranks: int, expert_ranks: int
) -> Iterator[tuple[str, CommAxis, float, int, int]]:
    """The data-parallel gradient buckets of a stage whose units ``runs`` stands for (ZeRO 0-2),
    dense then expert, each filled in backward order (:func:`_bucket_runs`), as (kind, axis, bucket
    parameters, index of the first bucket, count of equal buckets in a row)."""
    bucket_params = strategy.aggregation.bucket_size_bytes / grad_bytes
    kinds: tuple[tuple[str, CommAxis, int], ...] = (
        ("dense", "dp_cp", data_ranks),
        ("expert", "edp", expert_ranks),
    )
    for kind, axis, ranks in kinds:
        if ranks <= 1:
            continue
        params = [(u.dense if kind == "dense" else u.expert, n) for u, n in reversed(runs)]
        k = 0
        for n, count in _bucket_runs(params, bucket_params):
            yield kind, axis, n, k, count
            k += count


def _bucket_calls(
    strategy: ShardedStrategy,
    kind: str,
    axis: CommAxis,
    params: float,
    k: int,
    grad_bytes: float,
    param_bytes: float,
) -> tuple[CommCall, CommCall | None]:
    """Bucket ``k``'s gradient call and, under ZeRO >= 1, its parameter all-gather."""
    label = f"{kind} bucket{k}"
    if strategy.zero == 0 or (strategy.framework == "deepspeed" and strategy.zero == 1):
        grad = CommCall("all_reduce", params * grad_bytes, axis, False, f"dp all-reduce {label}")
    else:
        grad = CommCall("reduce_scatter", params * grad_bytes, axis, False, f"dp reduce-scatter {label}")
    gather = None
    if strategy.zero > 0:
        gather = CommCall("all_gather", params * param_bytes, axis, False, f"dp param all-gather {label}")
    return grad, gather


def stage_sync(
    strategy: ShardedStrategy,
    units: Sequence[UnitParams],
    *,
    grad_bytes: float,
    param_bytes: float,
    shard_group: int,
    data_ranks: int,
    expert_ranks: int,
) -> StageSync:
    """The calls of one stage whose units (model order) hold ``units`` parameters per device.

    ``data_ranks`` is the size of dp_cp, ``expert_ranks`` of edp, ``shard_group`` of a
    hybrid-shard block.
    """
    singles = [(u, 1) for u in units]  # every unit and bucket its own call, with its own label
    if fully_sharded(strategy):
        runs = _fsdp_runs(strategy, singles, grad_bytes, param_bytes, shard_group, data_ranks, expert_ranks)
        return runs.expanded()
    grads: list[CommCall] = []
    params: list[CommCall] = []
    for kind, axis, n, first, count in _dp_buckets(strategy, singles, grad_bytes, data_ranks, expert_ranks):
        for k in range(first, first + count):
            grad, gather = _bucket_calls(strategy, kind, axis, n, k, grad_bytes, param_bytes)
            grads.append(grad)
            if gather is not None:
                params.append(gather)
    return StageSync((), tuple(grads), tuple(params))


def stage_sync_runs(
    strategy: ShardedStrategy,
    runs: Sequence[UnitRun],
    *,
    grad_bytes: float,
    param_bytes: float,
    shard_group: int,
    data_ranks: int,
    expert_ranks: int,
) -> StageSyncRuns:
    """:func:`stage_sync` of the units ``runs`` stands for, in run-length form (the same rules:
    :func:`_bucket_runs`, :func:`_bucket_calls`, :func:`_unit_calls`)."""
    if fully_sharded(strategy):
        return _fsdp_runs(strategy, runs, grad_bytes, param_bytes, shard_group, data_ranks, expert_ranks)
    grad_runs: list[CallRun] = []
    param_runs: list[CallRun] = []
    for kind, axis, n, first, count in _dp_buckets(strategy, runs, grad_bytes, data_ranks, expert_ranks):
        grad, gather = _bucket_calls(strategy, kind, axis, n, first, grad_bytes, param_bytes)
        grad_runs.append(((grad,), count))
        if gather is not None:
            param_runs.append(((gather,), count))
    return StageSyncRuns((), tuple(grad_runs), tuple(param_runs))


def _unit_calls(
    strategy: ShardedStrategy,
    u: UnitParams,
    grad_bytes: float,
    param_bytes: float,
    shard_group: int,
    data_ranks: int,
    expert_ranks: int,
) -> tuple[tuple[CommCall, ...], tuple[CommCall, ...]]:
    """One unit's calls under ZeRO-3 / FSDP: (its gathers, its gradient calls)."""
    hybrid = strategy.fsdp == "hybrid_shard"
    shard_axis: CommAxis = "dp_shard" if hybrid else "dp_cp"
    shard_ranks = shard_group if hybrid else data_ranks
    gathers: list[CommCall] = []
    grads: list[CommCall] = []
    if u.dense > 0 and shard_ranks > 1:
        gathers.append(
            CommCall("all_gather", u.dense * param_bytes, shard_axis, False, f"fsdp gather {u.name}")
        )
    if u.expert > 0 and expert_ranks > 1:
        gathers.append(
            CommCall("all_gather", u.expert * param_bytes, "edp", False, f"fsdp gather {u.name} experts")
        )
    if u.dense > 0 and shard_ranks > 1:
        grads.append(
            CommCall(
                "reduce_scatter", u.dense * grad_bytes, shard_axis, False, f"fsdp reduce-scatter {u.name}"
            )
        )
    if hybrid and u.dense > 0 and data_ranks > shard_ranks:
        shard = u.dense * grad_bytes / shard_ranks
        grads.append(CommCall("all_reduce", shard, "dp_replicate", False, f"hsdp all-reduce {u.name}"))
    if u.expert > 0 and expert_ranks > 1:
        grads.append(
            CommCall(
                "reduce_scatter", u.expert * grad_bytes, "edp", False, f"fsdp reduce-scatter {u.name} experts"
            )
        )
    return tuple(gathers), tuple(grads)


def _fsdp_runs(
    strategy: ShardedStrategy,
    runs: Sequence[UnitRun],
    grad_bytes: float,
    param_bytes: float,
    shard_group: int,
    data_ranks: int,
    expert_ranks: int,
) -> StageSyncRuns:
    """ZeRO-3 / FSDP: each unit's gathers in model order, its gradient calls in backward order."""
    ranks = (shard_group, data_ranks, expert_ranks)
    per_run = [(_unit_calls(strategy, u, grad_bytes, param_bytes, *ranks), n) for u, n in runs]
    gathers = tuple((calls[0], n) for calls, n in per_run if calls[0])
    grads = tuple((calls[1], n) for calls, n in reversed(per_run) if calls[1])
    return StageSyncRuns(gathers, grads, ())


def optimizer_params(
    strategy: ShardedStrategy,
    units: Sequence[UnitParams],
    data_ranks: int,
    expert_ranks: int,
    shard_group: int,
) -> float:
    """Parameters this device's optimizer updates (its shard under ZeRO >= 1 / FSDP)."""
    dense = sum(u.dense for u in units)
    expert = sum(u.expert for u in units)
    if not state_sharded(strategy):
        return dense + expert
    dense_ranks = shard_group if strategy.fsdp == "hybrid_shard" else data_ranks
    return dense / max(1, dense_ranks) + expert / max(1, expert_ranks)
