"""torch_module models: a user's module traced on the meta device into per-child nodes."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from parplan.config.model import ModelSpec
from parplan.errors import ModelError
from parplan.model.graph import build_model

HAVE_TORCH = importlib.util.find_spec("torch") is not None
requires_torch = pytest.mark.skipif(
    not HAVE_TORCH,
    reason="torch is not installed, so there is no module to trace (pip install 'parplan[torch]')",
)
TINY = "tests.model.tiny_torch_module"


def spec(target: str) -> ModelSpec:
    return ModelSpec.model_validate({"name": "tiny", "torch_module": target})


@pytest.mark.torch
@requires_torch
def test_a_module_becomes_one_node_per_top_level_child() -> None:
    m = build_model(spec(f"{TINY}:build"))
    assert m.order == ("embedding", "block0", "block1", "head")
    h, v, s = 32, 100, 8
    block = m.node("block0")
    assert block.params == 2 * h * 4 * h + 4 * h + h + 2 * h  # two linears with biases, a LayerNorm
    assert block.forward_flops_per_sample == 2 * 2 * s * h * 4 * h  # per sequence of 8 tokens
    assert block.activation_bytes_per_sample == s * h * 4  # fp32 output
    # saved for backward: norm input and stats, up input, ReLU output (twice: ReLU's and down's input)
    assert block.saved_bytes_per_sample == (s * h + 2 * s + s * h + 2 * s * 4 * h) * 4
    assert m.node("embedding").params == v * h and m.node("embedding").forward_flops_per_sample == 0
    assert m.node("head").forward_flops_per_sample == 2 * s * h * v
    assert m.total_params == v * h + 2 * block.params + h * v


@pytest.mark.torch
@requires_torch
def test_bad_targets_are_model_errors() -> None:
    with pytest.raises(ModelError, match=r"cannot import 'tests\.model\.nowhere'"):
        build_model(spec("tests.model.nowhere:build"))
    with pytest.raises(ModelError, match="has no function 'missing'"):
        build_model(spec(f"{TINY}:missing"))
    with pytest.raises(ModelError, match=r"must return \(torch.nn.Module, example_input\)"):
        build_model(spec(f"{TINY}:broken"))


def test_without_torch_the_message_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "torch.utils.flop_counter", None)
    with pytest.raises(ModelError, match=r"needs the torch extra: pip install 'parplan\[torch\]'"):
        build_model(spec(f"{TINY}:build"))


def test_torch_module_is_a_module_name_not_a_path() -> None:
    with pytest.raises(ValueError, match="torch_module"):
        spec("models/tiny.py:build")
    with pytest.raises(ValueError, match="torch_module alone"):
        ModelSpec.model_validate({"torch_module": "a.b:c", "nodes": [{"id": "x"}]})


@pytest.mark.torch
@requires_torch
def test_keyword_inputs() -> None:
    by_name = build_model(spec(f"{TINY}:build_with_keywords"))
    assert [n.model_dump() for n in by_name.nodes] == [
        n.model_dump() for n in build_model(spec(f"{TINY}:build")).nodes
    ]
