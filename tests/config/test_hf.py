"""Hugging Face config.json files as models: the shipped samples' parameter counts against the
published totals, ``hf_config:`` with overrides, and one clear error for what cannot be read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from parplan.config.hf import hf_generator_data, hf_model_data, is_hf_config
from parplan.config.loader import detect_kind, load_model, load_scenario
from parplan.errors import ConfigError
from parplan.model.graph import build_model
from parplan.model.transformer import shape_of

ROOT = Path(__file__).resolve().parents[2]
HF = ROOT / "sample_configs" / "models" / "hf"

# published totals (model cards / papers), in parameters
PUBLISHED = {
    "gpt2": (124.44e6, 0.001),  # 124M (124,439,808 in transformers)
    "llama-3-8b": (8.03e9, 0.001),
    "llama-3.1-70b": (70.6e9, 0.001),
    "llama-3.1-405b": (405.9e9, 0.001),
    "mixtral-8x7b": (46.7e9, 0.001),
    "qwen2-7b": (7.62e9, 0.001),  # 7.61B with its 152,064-word untied vocabulary
    "mistral-7b": (7.24e9, 0.001),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_samples_match_the_published_parameter_counts(name: str) -> None:
    spec = load_model(HF / name / "config.json")
    assert spec.name == name
    model = build_model(spec)
    total, rel = PUBLISHED[name]
    assert model.total_params == pytest.approx(total, rel=rel)
    shape = shape_of(model)
    assert shape is not None and shape.total_params() == model.total_params


def test_exact_counts_of_two_well_known_models() -> None:
    assert build_model(load_model(HF / "gpt2" / "config.json")).total_params == 124_439_808
    assert build_model(load_model(HF / "llama-3-8b" / "config.json")).total_params == 8_030_261_248
    assert build_model(load_model(HF / "mixtral-8x7b" / "config.json")).total_params == 46_702_792_704


def test_family_features_are_read() -> None:
    llama = load_model(HF / "llama-3.1-70b" / "config.json").generator
    assert llama is not None and llama.kind == "transformer"
    assert (llama.kv_heads, llama.activation, llama.norm, llama.position) == (8, "swiglu", "rmsnorm", "rope")
    assert not llama.bias and not llama.dropout and not llama.tie_embeddings and llama.final_norm
    assert llama.sequence_length == 131072
    mixtral = load_model(HF / "mixtral-8x7b" / "config.json").generator
    assert mixtral is not None and (mixtral.experts, mixtral.top_k, mixtral.moe_ffn_hidden) == (8, 2, 14336)
    qwen = load_model(HF / "qwen2-7b" / "config.json").generator
    assert qwen is not None and qwen.qkv_bias and not qwen.bias
    gpt2 = load_model(HF / "gpt2" / "config.json").generator
    assert gpt2 is not None and gpt2.tie_embeddings and gpt2.position == "learned" and gpt2.dropout


def test_gpt_neox_field_names() -> None:
    # Pythia-160M's config fields
    data = {
        "architectures": ["GPTNeoXForCausalLM"],
        "hidden_size": 768,
        "intermediate_size": 3072,
        "max_position_embeddings": 2048,
        "num_attention_heads": 12,
        "num_hidden_layers": 12,
        "vocab_size": 50304,
        "tie_word_embeddings": False,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
    }
    gen = hf_generator_data(data)
    assert gen["position"] == "rope" and gen["ffn_hidden"] == 3072 and gen["dropout"] is False
    from parplan.config.model import ModelSpec

    total = build_model(ModelSpec.model_validate(hf_model_data(data, "pythia-160m/config.json"))).total_params
    assert total == pytest.approx(162.3e6, rel=0.002)  # Pythia-160M: 162,322,944 parameters


def test_hf_config_reference_with_overrides(tmp_path: Path) -> None:
    spec = load_model(ROOT / "sample_configs" / "models" / "llama-3-8b.yaml")
    assert spec.hf_config == "hf/llama-3-8b/config.json"
    assert spec.generator is not None and spec.generator.sequence_length == 4096
    assert build_model(spec).total_params == 8_030_261_248
    ref = tmp_path / "m.yaml"
    ref.write_text(
        f"name: short\nhf_config: {HF / 'gpt2' / 'config.json'}\n"
        "bytes_per_param: 4\ngenerator: {seq_len: 128, dropout: false}\n"
    )
    short = load_model(ref)
    assert short.name == "short" and short.bytes_per_param == 4
    assert short.generator is not None and short.generator.sequence_length == 128
    assert short.generator.max_positions == 1024 and not short.generator.dropout


def test_a_scenario_may_name_a_config_json(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        f"cluster: {ROOT / 'sample_configs/clusters/dgx-a100-2nodes.yaml'}\n"
        f"model: {HF / 'gpt2' / 'config.json'}\n"
        "training: {global_batch_size: 8}\nplans: [{name: one, strategy: local}]\n"
    )
    loaded = load_scenario(scenario)
    assert loaded.model.name == "gpt2"


def write(tmp_path: Path, data: dict[str, Any], name: str = "config.json") -> Path:
    path = tmp_path / "m" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    return path


def test_unknown_model_type_is_one_clear_error(tmp_path: Path) -> None:
    path = write(tmp_path, {"model_type": "bert", "hidden_size": 768})
    with pytest.raises(ConfigError) as exc:
        load_model(path)
    (issue,) = exc.value.issues
    assert issue.path == str(path) and issue.field == "model_type" and issue.line == 2
    assert "unknown model_type 'bert'; parplan reads llama, mistral" in issue.message


def test_missing_field_names_the_file_and_the_field(tmp_path: Path) -> None:
    data = json.loads((HF / "llama-3-8b" / "config.json").read_text())
    del data["intermediate_size"]
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as exc:
        load_model(path)
    (issue,) = exc.value.issues
    assert issue.path == str(path) and "missing field 'intermediate_size'" in issue.message
    # through hf_config: the model file's hf_config line, naming the config and the field
    ref = tmp_path / "model.yaml"
    ref.write_text("name: x\nhf_config: m/config.json\n")
    with pytest.raises(ConfigError) as exc:
        load_model(ref)
    (issue,) = exc.value.issues
    assert issue.path == str(ref) and issue.field == "hf_config" and issue.line == 2
    assert str(path) in issue.message and "intermediate_size" in issue.message
    ref.write_text("hf_config: nowhere.json\n")
    with pytest.raises(ConfigError, match="file not found"):
        load_model(ref)


def test_junk_values_are_config_errors(tmp_path: Path) -> None:
    for junk in (
        {"architectures": 5},
        {"model_type": ["llama"]},
        {"model_type": "llama", "hidden_size": "big"},
    ):
        with pytest.raises(ConfigError):
            load_model(write(tmp_path, junk))
    assert not is_hf_config([1]) and detect_kind({"architectures": []}) == "model"
