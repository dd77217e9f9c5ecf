"""The candidate plans of ``parplan search``: the space a :class:`~parplan.config.search.SearchSpec`
allows, its size before anything is enumerated, and its enumeration as numpy columns with every
candidate that cannot lay out pruned (each drop counted under its reason).

The space is the product of the allowed values of: device count, ``tp``, ``pp``, ``cp``, ``ep``,
virtual stages, micro-batch size, ZeRO stage, FSDP mode, recomputation, sequence parallelism, the
data-parallel all-reduce algorithm and the gradient bucket size (``dp`` follows: the devices over
``tp x pp x cp``). Defaults for the ranges a search leaves out: ``tp`` the powers of two up to the
smaller of a node's GPUs and the heads; ``pp`` the powers of two and the divisors of the layer count
up to the layers; micro-batches of 1, 2, 4 and 8 samples; every GPU of the cluster.

Enumeration is staged so no column is ever longer than what survives: the meshes (devices, tp,
pp, cp, ep) first, then x virtual stages x micro-batch size, then x sharding x recomputation x
SP, then x algorithm x bucket; each stage's rules drop rows, and a dropped row counts for every
candidate of the later dimensions it stands for. The rules are the ones
:class:`~parplan.config.strategy.ShardedStrategy`, :func:`~parplan.plan.sharded.mesh.build_mesh`,
:func:`~parplan.plan.sharded.mesh.check_shape` and
:func:`~parplan.plan.sharded.mesh.microbatches_per_pipeline` enforce, so every candidate left lays
out without error; and duplicates collapse to one row: ZeRO / FSDP without data parallelism (the
plan of ZeRO 0), and the algorithm and bucket variants of plans that have no data-parallel
all-reduce or no gradient buckets (the first allowed value stands for them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from parplan.errors import PlanError

if TYPE_CHECKING:
    from parplan.collectives.algorithm import AlgorithmSpecBase
    from parplan.config.search import SearchSpec
    from parplan.config.strategy import ShardedStrategy
    from parplan.model.transformer import TransformerShape
    from parplan.plan.base import PlanContext

FSDP_MODES: tuple[str, ...] = ("none", "full_shard", "shard_grad_op", "hybrid_shard")
"""FSDP modes in the order of :attr:`CandidateTable.fsdp`'s indexes."""

RECOMPUTE_MODES: tuple[str, ...] = ("none", "selective", "op", "full")
"""Recomputation modes in the order of :attr:`CandidateTable.recompute`'s indexes."""

_RECOMPUTE_SHORT = {"none": "", "selective": "sel", "op": "opac", "full": "full"}
_FSDP_SHORT = {"none": "", "full_shard": "fsdp", "shard_grad_op": "sgo", "hybrid_shard": "hsdp"}
DEFAULT_MICROBATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8)
"""Micro-batch sizes a search tries when the spec leaves them out."""


class SearchError(PlanError):
    """Raised when a search space is empty after pruning, contradicts itself, or exceeds its limit."""


@dataclass(frozen=True)
class CandidateTable:
    """Candidate sharded plans as columns (one row per candidate, in enumeration order).

    ``fsdp`` and ``recompute`` index :data:`FSDP_MODES` / :data:`RECOMPUTE_MODES`; ``algorithm``
    and ``bucket`` index the search's algorithms and bucket sizes, kept here as
    ``algorithm_labels`` / ``bucket_sizes_bytes`` for labels.
    """

    devices: np.ndarray
    dp: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    virtual_stages: np.ndarray
    microbatch_size: np.ndarray
    zero: np.ndarray
    fsdp: np.ndarray
    recompute: np.ndarray
    sequence_parallel: np.ndarray
    algorithm: np.ndarray
    bucket: np.ndarray
    algorithm_labels: tuple[str, ...] = field(default=("auto",), compare=False)
    bucket_sizes_bytes: tuple[float, ...] = field(default=(25 * 2**20,), compare=False)

    def __len__(self) -> int:
        return int(self.devices.shape[0])

    def take(self, rows: np.ndarray | slice) -> CandidateTable:
        """The candidates at ``rows`` (indexes, a boolean mask or a slice), in that order."""
        return replace(self, **{name: getattr(self, name)[rows] for name in COLUMNS})

    def row(self, row: int) -> dict[str, Any]:
        """Row ``row`` as plain Python values (modes as their names)."""
        out: dict[str, Any] = {name: getattr(self, name)[row].item() for name in COLUMNS}
        out["fsdp"] = FSDP_MODES[out["fsdp"]]
        out["recompute"] = RECOMPUTE_MODES[out["recompute"]]
        return out

    def strategy(self, row: int, search: SearchSpec) -> ShardedStrategy:
        """Candidate ``row`` as the sharded plan a user would write (default placement, the
        cluster's first ``devices`` GPUs)."""
        from parplan.config.strategy import AggregationSpec, ShardedStrategy

        r = self.row(row)
        aggregation = AggregationSpec(
            algorithm=_algorithms(search)[r["algorithm"]],
            bucket_size_bytes=search.bucket_sizes_bytes[r["bucket"]],
        )
        return ShardedStrategy(
            kind="sharded",
            dp=r["dp"],
            tp=r["tp"],
            pp=r["pp"],
            cp=r["cp"],
            ep=r["ep"],
            sequence_parallel=r["sequence_parallel"],
            virtual_stages=r["virtual_stages"],
            schedule="interleaved_1f1b" if r["virtual_stages"] > 1 else "1f1b",
            microbatch_size=r["microbatch_size"],
            recompute=r["recompute"],
            zero=r["zero"],
            fsdp=r["fsdp"],
            dtype=search.dtype,
            flash_attention=search.flash_attention,
            kernels=search.kernels,
            tp_comm_overlap=search.tp_comm_overlap,
            aggregation=aggregation,
        )

    def label(self, row: int) -> str:
        """A short stable name, e.g. ``tp8-pp8-dp16-v3-mbs1-z1-sel-sp`` (cp, ep, FSDP, the
        algorithm and the bucket size only where they are not the default)."""
        from parplan.config.units import format_bytes

        r = self.row(row)
        parts = [f"tp{r['tp']}", f"pp{r['pp']}", f"dp{r['dp']}"]
        parts += [f"{k}{r[k]}" for k in ("cp", "ep") if r[k] > 1]
        if r["virtual_stages"] > 1:
            parts.append(f"v{r['virtual_stages']}")
        parts.append(f"mbs{r['microbatch_size']}")
        if r["zero"]:
            parts.append(f"z{r['zero']}")
        parts += [s for s in (_FSDP_SHORT[r["fsdp"]], _RECOMPUTE_SHORT[r["recompute"]]) if s]
        if r["sequence_parallel"]:
            parts.append("sp")
        if r["algorithm"]:
            parts.append(self.algorithm_labels[r["algorithm"]])
        if r["bucket"]:
            parts.append("b" + str(format_bytes(self.bucket_sizes_bytes[r["bucket"]])).replace(" ", ""))
        return "-".join(parts)


COLUMNS: tuple[str, ...] = tuple(
    f.name for f in fields(CandidateTable) if f.name not in ("algorithm_labels", "bucket_sizes_bytes")
)
"""The numpy columns of a :class:`CandidateTable`."""

_DTYPES = {
    **{name: np.int32 for name in COLUMNS},
    "fsdp": np.int8,
    "recompute": np.int8,
    "sequence_parallel": np.bool_,
    "algorithm": np.int16,
    "bucket": np.int16,
}


@dataclass(frozen=True)
class SpaceSize:
    """How big the space is: the product of the allowed values, the candidates dropped by each
    reason (rules and collapsed duplicates), and what remains."""

    enumerated: int
    pruned: dict[str, int]
    remaining: int


@dataclass(frozen=True)
class _Dimensions:
    """The allowed values of every dimension, in enumeration order."""

    devices: tuple[int, ...]
    tp: tuple[int, ...]
    pp: tuple[int, ...]
    cp: tuple[int, ...]
    ep: tuple[int, ...]
    virtual_stages: tuple[int, ...]
    microbatch_size: tuple[int, ...]
    zero: tuple[int, ...]
    fsdp: tuple[int, ...]
    recompute: tuple[int, ...]
    sequence_parallel: tuple[bool, ...]
    algorithm: tuple[int, ...]
    bucket: tuple[int, ...]

    def size(self, names: Sequence[str]) -> int:
        """The product of the value counts of ``names``."""
        return math.prod(len(getattr(self, n)) for n in names)


_STAGES: tuple[tuple[str, ...], ...] = (
    ("devices", "tp", "pp", "cp", "ep"),
    ("virtual_stages", "microbatch_size"),
    ("zero", "fsdp", "recompute", "sequence_parallel"),
    ("algorithm", "bucket"),
)


def _algorithms(search: SearchSpec) -> tuple[AlgorithmSpecBase, ...]:
    """The search's all-reduce algorithms (``auto`` when it names none)."""
    from parplan.collectives.auto import AutoAlgorithm

    return tuple(search.algorithms) or (AutoAlgorithm(name="auto"),)


def _node_width(ctx: PlanContext) -> int:
    """GPUs of the largest node (the NVLink domain TP stays inside by default)."""
    attrs = ctx.network.graph.nodes
    counts: dict[str, int] = {}
    for d in ctx.network.devices:
        node = attrs[d].get("group") or d
        counts[node] = counts.get(node, 0) + 1
    return max(counts.values(), default=1)


def _powers_of_two(limit: int) -> tuple[int, ...]:
    return tuple(2**k for k in range(limit.bit_length()) if 2**k <= limit)


def _dimensions(ctx: PlanContext, search: SearchSpec, shape: TransformerShape) -> _Dimensions:
    cluster = len(ctx.network.devices)
    devices = search.devices or (cluster,)
    too_many = [d for d in devices if d > cluster]
    if too_many:
        raise SearchError(
            f"search devices {too_many[0]} is more than the cluster's {cluster} GPUs; "
            f"give counts up to {cluster}"
        )
    divisors = {d for d in range(1, shape.layers + 1) if shape.layers % d == 0}
    pp = search.pp or tuple(sorted(set(_powers_of_two(shape.layers)) | divisors))
    return _Dimensions(
        devices=tuple(devices),
        tp=search.tp or _powers_of_two(min(_node_width(ctx), shape.heads)),
        pp=pp,
        cp=tuple(search.cp),
        ep=tuple(search.ep),
        virtual_stages=tuple(search.virtual_stages),
        microbatch_size=search.microbatch_size or DEFAULT_MICROBATCH_SIZES,
        zero=tuple(int(z) for z in search.zero),
        fsdp=tuple(FSDP_MODES.index(f) for f in search.fsdp),
        recompute=tuple(RECOMPUTE_MODES.index(r) for r in search.recompute),
        sequence_parallel=tuple(search.sequence_parallel),
        algorithm=tuple(range(len(_algorithms(search)))),
        bucket=tuple(range(len(search.bucket_sizes_bytes))),
    )


def _shape(ctx: PlanContext) -> TransformerShape:
    from parplan.plan.sharded.costs import transformer_shape

    return transformer_shape(ctx)


def space_size(ctx: PlanContext, search: SearchSpec) -> int:
    """Candidates the search's allowed values multiply to (before pruning), without enumerating."""
    dims = _dimensions(ctx, search, _shape(ctx))
    return dims.size([n for stage in _STAGES for n in stage])


Columns = dict[str, np.ndarray]
Rule = tuple[str, Callable[[Columns], np.ndarray]]


def _cross(cols: Columns, name: str, values: Sequence[int | bool]) -> Columns:
    """Every row of ``cols`` with every value of ``name`` (rows outermost)."""
    n, k = len(next(iter(cols.values()))) if cols else 1, len(values)
    out = {c: np.repeat(v, k) for c, v in cols.items()}
    out[name] = np.tile(np.asarray(values, dtype=_DTYPES[name]), n)
    return out


def _prune(cols: Columns, rules: Sequence[Rule], weight: int, pruned: dict[str, int]) -> Columns:
    """Drop the rows a rule marks (the first rule that marks a row gets it), counting each as
    ``weight`` candidates."""
    keep = np.ones(len(cols["devices"]), dtype=bool)
    for reason, marks in rules:
        drop = marks(cols) & keep
        count = int(drop.sum())
        if count:
            pruned[reason] = pruned.get(reason, 0) + count * weight
            keep &= ~drop
    return {c: v[keep] for c, v in cols.items()}


def _mesh_rules(shape: TransformerShape) -> list[Rule]:
    moe = shape.experts > 1
    return [
        (
            "tp x pp x cp does not divide the devices",
            lambda c: c["devices"] % (c["tp"] * c["pp"] * c["cp"]) != 0,
        ),
        ("tp does not divide the heads", lambda c: shape.heads % c["tp"] != 0),
        ("tp does not divide the kv heads", lambda c: shape.kv_heads % c["tp"] != 0),
        ("tp does not divide the FFN width", lambda c: shape.ffn_hidden % c["tp"] != 0),
        ("pp exceeds the layers", lambda c: c["pp"] > shape.layers),
        ("cp does not divide the sequence", lambda c: shape.sequence_length % c["cp"] != 0),
        ("ep needs a mixture-of-experts model", lambda c: (c["ep"] > 1) & (not moe)),
        ("ep does not divide the experts", lambda c: moe & (shape.experts % c["ep"] != 0)),
        ("ep does not divide dp x cp", lambda c: (c["dp"] * c["cp"]) % c["ep"] != 0),
    ]


def _batch_rules(shape: TransformerShape, global_batch: int) -> list[Rule]:
    def interleave(c: Columns) -> np.ndarray:
        m = global_batch // (c["dp"] * c["microbatch_size"])
        out: np.ndarray = (c["virtual_stages"] > 1) & (m % c["pp"] != 0)
        return out

    return [
        ("virtual stages need a pipeline (pp > 1)", lambda c: (c["virtual_stages"] > 1) & (c["pp"] == 1)),
        ("pp x virtual stages exceed the layers", lambda c: c["pp"] * c["virtual_stages"] > shape.layers),
        (
            "dp x micro-batch size does not divide the global batch",
            lambda c: global_batch % (c["dp"] * c["microbatch_size"]) != 0,
        ),
        ("interleaving needs micro-batches a multiple of pp", interleave),
    ]


def _hybrid_fails(ctx: PlanContext, cols: Columns) -> np.ndarray:
    """Rows whose hybrid-shard group (the data ranks of one node) does not divide the data ranks:
    :func:`~parplan.plan.sharded.mesh.build_mesh`'s check, asked once per mesh."""
    from parplan.config.strategy import ShardedStrategy
    from parplan.plan.sharded.mesh import build_mesh

    hybrid = cols["fsdp"] == FSDP_MODES.index("hybrid_shard")
    out = np.zeros(len(hybrid), dtype=bool)
    if not hybrid.any():
        return out
    keys = np.stack([cols[k] for k in ("dp", "tp", "pp", "cp", "ep")], axis=1)
    for key in {tuple(int(x) for x in k) for k in keys[hybrid]}:
        dp, tp, pp, cp, ep = key
        strategy = ShardedStrategy(kind="sharded", dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, fsdp="hybrid_shard")
        try:
            build_mesh(strategy, ctx.network)
        except PlanError:
            out |= hybrid & np.all(keys == np.asarray(key), axis=1)
    return out


def _sharding_rules(ctx: PlanContext, shape: TransformerShape) -> list[Rule]:
    moe = shape.experts > 1
    none = FSDP_MODES.index("none")
    return [
        ("zero and fsdp are exclusive", lambda c: (c["zero"] > 0) & (c["fsdp"] != none)),
        (
            "ZeRO/FSDP without data parallelism (the same plan as zero 0)",
            lambda c: ((c["zero"] > 0) | (c["fsdp"] != none)) & (c["dp"] * c["cp"] == 1),
        ),
        ("sequence parallelism needs tp > 1", lambda c: c["sequence_parallel"] & (c["tp"] == 1)),
        (
            "sequence parallelism needs tp to divide the tokens",
            lambda c: c["sequence_parallel"] & ((shape.sequence_length // c["cp"]) % c["tp"] != 0),
        ),
        (
            "a mixture-of-experts model with tp > 1 needs sequence parallelism",
            lambda c: moe & (c["tp"] > 1) & ~c["sequence_parallel"],
        ),
        ("the hybrid-shard group does not divide the data ranks", lambda c: _hybrid_fails(ctx, c)),
    ]


def _sync_rules() -> list[Rule]:
    none, hybrid = FSDP_MODES.index("none"), FSDP_MODES.index("hybrid_shard")

    def no_all_reduce(c: Columns) -> np.ndarray:
        data = c["dp"] * c["cp"]
        replicated = (c["zero"] == 0) & (c["fsdp"] == none) & (data > 1)
        out: np.ndarray = (c["algorithm"] > 0) & ~(replicated | (c["fsdp"] == hybrid))
        return out

    def no_buckets(c: Columns) -> np.ndarray:
        bucketed = (c["zero"] < 3) & (c["fsdp"] == none) & (c["dp"] * c["cp"] > 1)
        out: np.ndarray = (c["bucket"] > 0) & ~bucketed
        return out

    return [
        ("algorithm variants of a plan without a data-parallel all-reduce", no_all_reduce),
        ("bucket variants of a plan without gradient buckets", no_buckets),
    ]


def enumerate_space(ctx: PlanContext, search: SearchSpec) -> tuple[CandidateTable, SpaceSize]:
    """Every candidate of the search that lays out (module docstring), and the counts.

    Raises :class:`SearchError` over ``search.limit`` (before allocating), on a contradictory
    spec, or when pruning leaves nothing (naming the largest reasons).
    """
    shape = _shape(ctx)
    dims = _dimensions(ctx, search, shape)
    total = dims.size([n for stage in _STAGES for n in stage])
    if total > search.limit:
        raise SearchError(
            f"the search space has {total:,} candidates, over the limit of {search.limit:,}; "
            "narrow the ranges in the search: block or raise limit (--limit)"
        )
    rules = [
        _mesh_rules(shape),
        _batch_rules(shape, ctx.training.global_batch_size),
        _sharding_rules(ctx, shape),
        _sync_rules(),
    ]
    pruned: dict[str, int] = {}
    cols: Columns = {}
    for k, (stage, stage_rules) in enumerate(zip(_STAGES, rules, strict=True)):
        for name in stage:
            cols = _cross(cols, name, getattr(dims, name))
        if k == 0:
            cols["dp"] = (cols["devices"] // (cols["tp"] * cols["pp"] * cols["cp"])).astype(np.int32)
        later = [n for s in _STAGES[k + 1 :] for n in s]
        cols = _prune(cols, stage_rules, dims.size(later), pruned)
    remaining = len(cols["devices"])
    if remaining == 0:
        largest = sorted(pruned.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        reasons = "; ".join(f"{reason} ({count:,})" for reason, count in largest)
        raise SearchError(f"no candidate plan is left of {total:,} after pruning: {reasons}")
    from parplan.collectives.specs import algorithm_label

    table = CandidateTable(
        **{name: np.ascontiguousarray(cols[name], dtype=_DTYPES[name]) for name in COLUMNS},
        algorithm_labels=tuple(algorithm_label(a) for a in _algorithms(search)),
        bucket_sizes_bytes=tuple(float(b) for b in search.bucket_sizes_bytes),
    )
    return table, SpaceSize(enumerated=total, pruned=pruned, remaining=remaining)
