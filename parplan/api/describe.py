"""Short descriptions of strategies for tables and reports: ``data_parallel ×8 ring``,
``model_parallel 4 stages, 8 mb 1f1b``, ``federated 16 clients, random 4, 20 round(s)``,
``sharded dp16 x tp8 x pp8 (1f1b), SP, ZeRO-1``."""

from __future__ import annotations

from typing import Any

from parplan.config.algorithms import algorithm_label
from parplan.config.units import format_bytes

DEFAULT_BUCKET_BYTES = 25 * 2**20
"""PyTorch DDP's bucket size, the spec default; descriptions only mention other sizes."""


def describe_strategy(strategy: Any) -> str:
    """A short description for tables: ``data_parallel ×8 ring``, ``model_parallel 4 stages, 8 mb 1f1b``.

    Data-parallel descriptions add the bucket size when it is not the default 25 MiB, and
    ``no overlap`` / ``by speed`` when set.
    """
    kind = strategy.kind
    if kind == "local":
        return f"local on {strategy.device}" if strategy.device else "local"
    if kind == "model_parallel":
        return f"model_parallel {_pipeline_text(strategy)}"
    if kind == "data_parallel":
        agg = strategy.aggregation
        text = f"data_parallel ×{strategy.num_replicas} {algorithm_label(agg.algorithm)}"
        if strategy.replica is not None:
            text += f" of {_pipeline_text(strategy.replica)}"
        if strategy.num_replicas > 1:
            if agg.bucket_size_bytes != DEFAULT_BUCKET_BYTES:
                text += f", {format_bytes(agg.bucket_size_bytes)} buckets"
            if not agg.overlap:
                text += ", no overlap"
        if strategy.batch_split == "by_speed":
            text += ", by speed"
        return text
    if kind == "federated":
        sel = strategy.client_selection
        chosen = "all" if sel.kind == "all" else f"{sel.kind} {sel.k}"
        return f"federated {strategy.num_clients} clients, {chosen}, {strategy.rounds} round(s)"
    if kind == "population_based":
        return (
            f"population_based {strategy.population_size} members, {strategy.generations} generation(s), "
            f"{strategy.exploit.kind}/{strategy.explore.kind}"
        )
    if kind == "custom":
        return f"custom {strategy.coordinator}"
    if kind == "sharded":
        return f"sharded {_sharded_text(strategy)}"
    return str(kind)


def _sharded_text(strategy: Any) -> str:
    """``dp16 x tp8 x pp8 (v2, interleaved_1f1b), SP, ZeRO-1, recompute selective``: the degrees
    other than 1 (dp always; ``dp?`` when it is what the cluster leaves), then what is switched on."""
    dp = f"dp{strategy.dp}" if strategy.dp is not None else "dp?"
    axes = [dp] + [f"{a}{getattr(strategy, a)}" for a in ("tp", "pp", "cp", "ep") if getattr(strategy, a) > 1]
    text = " x ".join(axes)
    if strategy.pp > 1:
        text += (
            f" ({f'v{strategy.virtual_stages}, ' if strategy.virtual_stages > 1 else ''}{strategy.schedule})"
        )
    extras = []
    if strategy.sequence_parallel:
        extras.append("SP")
    if strategy.zero:
        extras.append(f"ZeRO-{strategy.zero}")
    if strategy.fsdp != "none":
        extras.append(f"FSDP {strategy.fsdp}")
    if strategy.recompute != "none":
        extras.append(f"recompute {strategy.recompute}")
    return ", ".join([text, *extras])


def _pipeline_text(strategy: Any) -> str:
    count = len(dict.fromkeys(p.worker for p in strategy.partitions))
    stages = f"{count} stage" + ("s" if count != 1 else "")
    comm = strategy.communication
    if comm.protocol == "none":
        return f"{stages}, no micro-batches"
    return f"{stages}, {comm.microbatches} mb {comm.schedule}"
