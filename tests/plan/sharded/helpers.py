"""Contexts for the sharded-plan tests: GPT-style models on DGX-like clusters."""

from __future__ import annotations

from typing import Any

from parplan.config.model import ModelSpec
from parplan.config.scenario import TrainingSpec
from parplan.config.strategy import ShardedStrategy
from parplan.model.graph import build_model
from parplan.plan.base import PlanContext
from parplan.topology.build import build_network
from tests.plan.strategy_helpers import dgx_cluster


def gpt(
    layers: int = 8, hidden: int = 1024, heads: int = 16, seq: int = 1024, vocab: int = 32000, **gen: Any
) -> ModelSpec:
    """A GPT-style decoder (tied embeddings) of the given shape."""
    return ModelSpec.model_validate(
        {
            "name": f"gpt-{layers}x{hidden}",
            "generator": {
                "kind": "transformer",
                "layers": layers,
                "hidden": hidden,
                "heads": heads,
                "seq_len": seq,
                "vocab": vocab,
                **gen,
            },
        }
    )


def context(
    model: ModelSpec | None = None, *, batch: int = 16, nodes: int = 2, per_node: int = 8
) -> PlanContext:
    """``model`` (default :func:`gpt`) on ``nodes`` DGX-like nodes with a ``batch``-sample step."""
    spec = model or gpt()
    return PlanContext(
        network=build_network(dgx_cluster(nodes=nodes, per_node=per_node)),
        model=build_model(spec),
        model_spec=spec,
        training=TrainingSpec(global_batch_size=batch),
    )


def sharded(**kw: Any) -> ShardedStrategy:
    """A sharded strategy from keywords."""
    return ShardedStrategy.model_validate({"kind": "sharded", **kw})
