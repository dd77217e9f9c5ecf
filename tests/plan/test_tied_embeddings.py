"""Tied embeddings in pipelines (issue 16 item 8): the head's stage holds a copy of the word
embedding and the two copies' gradients are all-reduced before either optimizer steps, as
Megatron-LM does; nothing changes when embedding and head share a worker."""

from __future__ import annotations

from typing import Any

import networkx as nx
import numpy as np
import pytest

from parplan.config.model import ModelSpec
from parplan.model.graph import build_model
from parplan.plan.base import PlanWork
from parplan.plan.strategies import data_parallel, model_parallel
from parplan.taskgraph import TaskGraph
from tests.plan.strategy_helpers import context, strategy, switch_cluster

V, H = 1000, 64


def _gpt(tied: bool = True) -> ModelSpec:
    return ModelSpec.model_validate(
        {
            "name": "tiny-gpt",
            "generator": {
                "kind": "transformer",
                "layers": 2,
                "hidden": H,
                "heads": 4,
                "seq_len": 32,
                "vocab": V,
                "tie_embeddings": tied,
            },
        }
    )


def _pipeline(split: list[list[str]], workers: list[str]) -> dict[str, Any]:
    parts = [
        {"name": f"s{i}", "nodes": nodes, "worker": w}
        for i, (nodes, w) in enumerate(zip(split, workers, strict=True))
    ]
    return {
        "kind": "model_parallel",
        "partitions": parts,
        "communication": {"protocol": "pipeline", "microbatches": 2, "schedule": "1f1b"},
    }


APART = [["embedding", "block0"], ["block1", "head"]]
TOGETHER = [["embedding", "block0", "block1", "head"]]


def _expand(split: list[list[str]], tied: bool = True, hosts: int = 2) -> tuple[Any, PlanWork]:
    ctx = context(switch_cluster(hosts), _gpt(tied), batch=4)
    work = model_parallel.expand(ctx, strategy(_pipeline(split, ["h0", "h1"][: len(split)])))
    return ctx, work


def _tasks(graph: TaskGraph, prefix: str) -> list[int]:
    return [i for i in range(graph.num_tasks) if graph.labels[graph.label[i]].startswith(prefix)]


def _dag(graph: TaskGraph) -> nx.DiGraph:
    dag = nx.DiGraph()
    dag.add_nodes_from(range(graph.num_tasks))
    for i in range(graph.num_tasks):
        dag.add_edges_from(
            (int(d), i) for d in graph.dep_indices[graph.dep_offsets[i] : graph.dep_offsets[i + 1]]
        )
    return dag


def test_a_tied_transformer_records_its_tie() -> None:
    assert [(t.owner, t.user, t.params) for t in build_model(_gpt()).ties] == [("embedding", "head", V * H)]
    assert build_model(_gpt(tied=False)).ties == ()


def test_the_head_stage_holds_a_copy_and_the_copies_are_all_reduced_before_the_optimizers() -> None:
    ctx, work = _expand(APART)
    graph = work.graph
    tied = _tasks(graph, "tied embedding/head")
    transfers = [t for t in tied if graph.size_bytes[t] > 0]
    assert transfers, "an all-reduce between the first and the last stage"
    assert {graph.devices[graph.device[t]] for t in transfers} == {"h0", "h1"}
    moved = sum(float(graph.size_bytes[t]) for t in transfers)
    assert moved == pytest.approx(2 * V * H * ctx.model_spec.bytes_per_grad)  # a ring on 2 ranks: n each way
    dag = _dag(graph)
    for optimizer in _tasks(graph, "optimizer"):
        assert any(nx.has_path(dag, t, optimizer) for t in transfers)
    (info,) = work.collectives
    assert info.num_ranks == 2 and info.size_bytes == V * H * ctx.model_spec.bytes_per_grad
    _, untied = _expand(APART, tied=False)
    for field in ("params_bytes", "grads_bytes", "optimizer_bytes"):  # the copy is an untied head's V x h
        head_stage = [getattr(m, field) for m in work.memory if m.device == "h1"]
        assert head_stage == pytest.approx([getattr(m, field) for m in untied.memory if m.device == "h1"])


def test_nothing_changes_when_embedding_and_head_share_a_worker() -> None:
    _, work = _expand(TOGETHER, hosts=1)
    assert not _tasks(work.graph, "tied") and work.collectives == ()


def test_a_two_d_plan_reduces_the_copy_with_its_stage_then_between_the_stages() -> None:
    ctx = context(switch_cluster(4), _gpt(), batch=8)
    spec = strategy(
        {
            "kind": "data_parallel",
            "num_replicas": 2,
            "replica": _pipeline(APART, ["h0", "h1"]),
            "aggregation": {"algorithm": "ring", "bucket_size": "0 B"},
        }
    )
    work = data_parallel.expand(ctx, spec)
    labels = [c.label for c in work.collectives]
    assert (
        labels.count("r0 tied embedding/head bucket0") == 1
        and labels.count("r1 tied embedding/head bucket0") == 1
    )
    grad_bytes = ctx.model_spec.bytes_per_grad
    head_buckets = [c for c in work.collectives if c.label.startswith("allreduce h1")]
    assert any(
        c.size_bytes == pytest.approx(V * H * grad_bytes) for c in head_buckets
    )  # the copy, bucket of its own
    graph = work.graph
    dag = _dag(graph)
    tied = [i for i in _tasks(graph, "r0 tied") if graph.size_bytes[i] > 0]
    stage = [i for i in _tasks(graph, "allreduce h1") if graph.size_bytes[i] > 0]
    assert all(any(nx.has_path(dag, s, t) for s in stage) for t in tied)
    assert np.all(graph.size_bytes[tied] > 0)
