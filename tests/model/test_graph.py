"""build_model: generators' sizes, explicit DAGs, stable topological order, cycles and unknown ids."""

from __future__ import annotations

from typing import Any

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.config.model import ModelNodeSpec, ModelSpec, TransformerGenerator
from parplan.errors import ModelError
from parplan.model.graph import (
    block_params,
    block_saved_activation_bytes,
    build_model,
    transformer_params,
)

GPT_1_3B: dict[str, Any] = {
    "kind": "transformer",
    "layers": 24,
    "hidden": 2048,
    "heads": 16,
    "seq_len": 2048,
    "vocab": 50257,
}


def model(**fields: Any) -> ModelSpec:
    return ModelSpec.model_validate(fields)


def test_gpt_1_3b_parameter_count() -> None:
    m = build_model(model(generator=GPT_1_3B))
    # 24 x (12 h^2 + 13 h) + (V + S) h, the GPT-3 XL size
    assert m.total_params == 24 * (12 * 2048**2 + 13 * 2048) + (50257 + 2048) * 2048 == 1_315_719_168
    assert m.total_params == transformer_params(TransformerGenerator.model_validate(GPT_1_3B))
    assert 1.25e9 < m.total_params < 1.35e9
    assert m.sequence_length == 2048


def test_transformer_nodes_names_and_chain() -> None:
    m = build_model(model(generator={**GPT_1_3B, "layers": 3}))
    assert m.order == ("embedding", "block0", "block1", "block2", "head")
    assert [n.id for n in m.nodes] == list(m.order)
    assert m.edges == (
        ("embedding", "block0"),
        ("block0", "block1"),
        ("block1", "block2"),
        ("block2", "head"),
    )
    assert m.graph.nodes["block1"]["position"] == 2
    assert m.predecessors("block0") == ("embedding",)
    assert m.successors("block2") == ("head",)


def test_transformer_flops_activations_and_memory() -> None:
    h, s, v, a = 2048, 2048, 50257, 16
    m = build_model(model(generator=GPT_1_3B))
    block = m.node("block5")
    assert block.params == 12 * h * h + 13 * h
    assert block.forward_flops_per_sample == 24 * h * h * s + 4 * s * s * h
    assert block.activation_bytes_per_sample == s * h * 2
    # Korthikanti et al. eq. 1 with b = 1, fp16
    assert block.saved_bytes_per_sample == s * h * (34 + 5 * a * s / h)
    head = m.node("head")
    assert head.params == 0  # tied embeddings
    assert head.forward_flops_per_sample == 2 * v * h * s
    emb = m.node("embedding")
    assert emb.params == (v + s) * h
    assert emb.forward_flops_per_sample == 0
    total = 24 * (24 * h * h * s + 4 * s * s * h) + 2 * v * h * s
    assert m.forward_flops_per_sample == total
    # the usual 2 x params x tokens rule is within the attention term of this
    assert m.forward_flops_per_sample == pytest.approx(2 * m.total_params * s, rel=0.2)


def test_transformer_untied_ffn_and_fp32() -> None:
    gen = {**GPT_1_3B, "layers": 2, "hidden": 64, "heads": 4, "seq_len": 16, "vocab": 100}
    tied = build_model(model(generator=gen))
    untied = build_model(model(generator={**gen, "tie_embeddings": False}))
    assert untied.total_params - tied.total_params == 100 * 64
    assert untied.node("head").params == 100 * 64
    narrow = build_model(model(generator={**gen, "ffn_multiplier": 2}))
    assert narrow.node("block0").params == 8 * 64 * 64 + 11 * 64
    tg = TransformerGenerator.model_validate({**gen, "ffn_multiplier": 2})
    assert block_params(tg) == 8 * 64 * 64 + 11 * 64
    fp32 = build_model(model(generator=gen, bytes_per_activation_element=4))
    assert fp32.node("block1").saved_bytes_per_sample == 2 * tied.node("block1").saved_bytes_per_sample
    assert fp32.node("block1").activation_bytes_per_sample == 16 * 64 * 4
    assert block_saved_activation_bytes(tg, 2.0) == 16 * 64 * (34 + 5 * 4 * 16 / 64)


def test_mlp_generator() -> None:
    m = build_model(
        model(generator={"kind": "mlp", "widths": [784, 256, 10]}, bytes_per_activation_element=4)
    )
    assert m.order == ("fc0", "fc1")
    assert m.node("fc0").params == 784 * 256 + 256
    assert m.node("fc1").params == 256 * 10 + 10
    assert m.node("fc0").forward_flops_per_sample == 2 * 784 * 256
    assert m.node("fc1").activation_bytes_per_sample == 10 * 4
    assert m.sequence_length is None
    no_bias = build_model(model(generator={"kind": "mlp", "widths": [4, 3], "bias": False}))
    assert no_bias.total_params == 12


def test_totals_use_the_bytes_per_element() -> None:
    nodes = [{"id": "a", "params": "1M"}, {"id": "b", "params": "3M", "forward_flops": "2 GFLOP"}]
    m = build_model(model(nodes=nodes, bytes_per_param=4, bytes_per_grad=4, optimizer_bytes_per_param=8))
    assert m.total_params == 4e6
    assert m.param_bytes == 16e6
    assert m.grad_bytes == 16e6
    assert m.optimizer_bytes == 32e6
    assert m.forward_flops_per_sample == 2e9
    default = build_model(model(nodes=nodes))
    assert (default.param_bytes, default.grad_bytes, default.optimizer_bytes) == (8e6, 8e6, 48e6)


def test_explicit_nodes_default_to_a_chain_in_file_order() -> None:
    m = build_model(model(nodes=[{"id": i, "activation": "1 MB"} for i in ["conv", "pool", "fc"]]))
    assert m.order == ("conv", "pool", "fc")
    assert m.edges == (("conv", "pool"), ("pool", "fc"))
    assert m.node("pool").saved_bytes_per_sample == 1e6  # defaults to the output activation
    assert m.name == "model"


def test_dag_model_keeps_file_order_where_edges_allow() -> None:
    # a diamond listed with the join first: topological order moves only what must move
    nodes = [{"id": i} for i in ["join", "left", "stem", "right", "out"]]
    edges = [["stem", "left"], ["stem", "right"], ["left", "join"], ["right", "join"], ["join", "out"]]
    m = build_model(model(nodes=nodes, edges=edges))
    assert m.order == ("stem", "left", "right", "join", "out")
    assert m.predecessors("join") == ("left", "right")
    assert m.successors("stem") == ("left", "right")
    assert set(m.graph.edges) == {tuple(e) for e in edges}
    # two independent sources and no edges at all are fine too
    m2 = build_model(model(nodes=[{"id": "x"}, {"id": "y"}], edges=[]))
    assert m2.order == ("x", "y") and m2.edges == ()


def test_cycles_are_rejected_and_named() -> None:
    nodes = [{"id": i} for i in "abcd"]
    with pytest.raises(ModelError, match="cycle: b -> c -> d -> b"):
        build_model(model(nodes=nodes, edges=[["a", "b"], ["b", "c"], ["c", "d"], ["d", "b"]]))
    with pytest.raises(ModelError, match="cycle: a -> a"):
        build_model(model(nodes=nodes, edges=[["a", "a"]]))


def test_unknown_ids_are_rejected() -> None:
    # the spec's own validator catches this in files; build_model checks again for specs made in code
    spec = ModelSpec.model_construct(nodes=(ModelNodeSpec(id="a"),), edges=(("a", "zz"),))
    with pytest.raises(ModelError, match=r"edge \[a, zz\] names unknown node 'zz'"):
        build_model(spec)
    m = build_model(model(nodes=[{"id": "a"}]))
    with pytest.raises(ModelError, match="no node 'b'"):
        m.node("b")
    with pytest.raises(ModelError, match="no node 'b'"):
        m.predecessors("b")


@st.composite
def dags(draw: st.DrawFn) -> tuple[list[str], list[tuple[str, str]]]:
    """File order of node ids and edges that go forward in some hidden order (so no cycles)."""
    n = draw(st.integers(1, 12))
    hidden = [f"n{i}" for i in range(n)]
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    edges = sorted({(hidden[min(a, b)], hidden[max(a, b)]) for a, b in pairs if a != b})
    file_order = draw(st.permutations(hidden))
    return list(file_order), edges


@settings(max_examples=80, deadline=None)
@given(dag=dags())
def test_order_is_topological_and_as_close_to_file_order_as_possible(
    dag: tuple[list[str], list[tuple[str, str]]],
) -> None:
    file_order, edges = dag
    m = build_model(model(nodes=[{"id": i, "params": 1} for i in file_order], edges=edges))
    pos = {n: i for i, n in enumerate(m.order)}
    assert sorted(m.order) == sorted(file_order)
    assert all(pos[a] < pos[b] for a, b in edges)
    expected = list(nx.lexicographical_topological_sort(m.graph, key=file_order.index))
    assert list(m.order) == expected
    if all(file_order.index(a) < file_order.index(b) for a, b in edges):
        assert list(m.order) == file_order
    assert m.total_params == len(file_order)
