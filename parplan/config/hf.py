"""Hugging Face ``config.json`` files as parplan models (a ``transformer`` generator, no weights).

:func:`hf_model_data` turns the parsed JSON of a decoder-only model's config into the data of a
parplan model file; the loader calls it for a ``config.json`` given directly (recognised by its
``model_type`` or ``architectures``) and for a parplan model file that says ``hf_config: path``
(whose own ``generator:`` keys, e.g. ``seq_len``, override the converted ones).

Field names by family (``model_type``):

- ``llama``, ``mistral``, ``qwen2``, ``mixtral`` (and ``qwen2_moe``-free relatives):
  ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``
  (default: the heads), ``intermediate_size``, ``vocab_size``, ``max_position_embeddings``,
  ``tie_word_embeddings`` (default false), ``head_dim`` (optional); a gated SiLU MLP (SwiGLU),
  RMSNorm, rotary positions, no biases (``attention_bias``/``mlp_bias`` if present; Qwen2 has QKV
  biases), no dropout. Mixtral: ``num_local_experts`` experts of ``intermediate_size`` each,
  ``num_experts_per_tok`` per token, every block.
- ``gpt2``: ``n_embd``, ``n_layer``, ``n_head``, ``n_positions``, ``vocab_size``, ``n_inner``
  (default 4 x n_embd); GELU, LayerNorm, biases, learned positions, tied embeddings, dropout.
- ``gpt_neox``: ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
  ``intermediate_size``, ``vocab_size``, ``max_position_embeddings``, ``tie_word_embeddings``
  (default false); GELU, LayerNorm, biases, rotary positions, dropout only if
  ``hidden_dropout``/``attention_dropout`` are non-zero.

The sequence length defaults to the context the config allows (``max_position_embeddings`` or
``n_positions``); give ``seq_len`` in a model file with ``hf_config:`` to plan a shorter one.
Every config counts its final norm (``final_norm: true``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

LLAMA_LIKE = ("llama", "mistral", "qwen2", "mixtral")
HF_MODEL_TYPES = (*LLAMA_LIKE, "gpt2", "gpt_neox")
"""The ``model_type`` values :func:`hf_model_data` understands."""


class HFConfigError(ValueError):
    """A config.json parplan cannot read: ``field`` names the offending key ('' for the file)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def is_hf_config(data: Any) -> bool:
    """Whether parsed data looks like a Hugging Face config (``model_type`` or ``architectures``)."""
    return isinstance(data, dict) and ("model_type" in data or "architectures" in data)


def _get(data: dict[str, Any], key: str, default: Any = None, *, required: bool = True) -> Any:
    value = data.get(key, default)
    if value is None and required:
        raise HFConfigError(key, f"missing field {key!r} (needed for a {data.get('model_type')} model)")
    return value


def _int(data: dict[str, Any], key: str, default: Any = None) -> int:
    value = _get(data, key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise HFConfigError(key, f"{key} must be an integer, not {value!r}")
    return value


def _nonzero(data: dict[str, Any], *keys: str) -> bool:
    """Whether any of the dropout probabilities ``keys`` is a number above zero."""
    for key in keys:
        value = data.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise HFConfigError(key, f"{key} must be a number, not {value!r}")
        if value > 0:
            return True
    return False


def _flag(data: dict[str, Any], key: str, default: bool) -> bool:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise HFConfigError(key, f"{key} must be true or false, not {value!r}")
    return value


def _llama(data: dict[str, Any]) -> dict[str, Any]:
    heads = _int(data, "num_attention_heads")
    gen: dict[str, Any] = {
        "layers": _int(data, "num_hidden_layers"),
        "hidden": _int(data, "hidden_size"),
        "heads": heads,
        "kv_heads": _int(data, "num_key_value_heads", heads),
        "ffn_hidden": _int(data, "intermediate_size"),
        "vocab": _int(data, "vocab_size"),
        "seq_len": _int(data, "max_position_embeddings"),
        "tie_embeddings": _flag(data, "tie_word_embeddings", False),
        "activation": "swiglu",
        "norm": "rmsnorm",
        "bias": _flag(data, "mlp_bias", False) and _flag(data, "attention_bias", False),
        "qkv_bias": data.get("model_type") == "qwen2" or _flag(data, "attention_bias", False),
        "position": "rope",
        "final_norm": True,
        "dropout": _nonzero(data, "attention_dropout", "hidden_dropout"),
    }
    if data.get("head_dim") is not None:
        gen["head_dim"] = _int(data, "head_dim")
    if data.get("model_type") == "mixtral":
        gen["experts"] = _int(data, "num_local_experts")
        gen["top_k"] = _int(data, "num_experts_per_tok")
        gen["moe_ffn_hidden"] = gen["ffn_hidden"]
    return gen


def _gpt2(data: dict[str, Any]) -> dict[str, Any]:
    hidden = _int(data, "n_embd")
    positions = _int(data, "n_positions", data.get("n_ctx"))
    inner = data.get("n_inner")
    gen: dict[str, Any] = {
        "layers": _int(data, "n_layer"),
        "hidden": hidden,
        "heads": _int(data, "n_head"),
        "ffn_hidden": 4 * hidden if inner is None else _int(data, "n_inner"),
        "vocab": _int(data, "vocab_size"),
        "seq_len": positions,
        "max_positions": positions,
        "tie_embeddings": _flag(data, "tie_word_embeddings", True),
        "final_norm": True,
        "dropout": _nonzero(data, "resid_pdrop", "attn_pdrop") or "resid_pdrop" not in data,
    }
    return gen


def _gpt_neox(data: dict[str, Any]) -> dict[str, Any]:
    return {
        "layers": _int(data, "num_hidden_layers"),
        "hidden": _int(data, "hidden_size"),
        "heads": _int(data, "num_attention_heads"),
        "ffn_hidden": _int(data, "intermediate_size"),
        "vocab": _int(data, "vocab_size"),
        "seq_len": _int(data, "max_position_embeddings"),
        "tie_embeddings": _flag(data, "tie_word_embeddings", False),
        "position": "rope",
        "final_norm": True,
        "dropout": _nonzero(data, "hidden_dropout", "attention_dropout"),
    }


_FAMILIES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    **dict.fromkeys(LLAMA_LIKE, _llama),
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
}

_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2",
    "GPT2LMHeadModel": "gpt2",
    "GPTNeoXForCausalLM": "gpt_neox",
}


def model_type_of(data: dict[str, Any]) -> str:
    """The config's ``model_type`` (or the one its ``architectures`` imply); :class:`HFConfigError`
    naming the supported ones when parplan does not know it."""
    model_type = data.get("model_type")
    if model_type is None:
        archs = data.get("architectures") or []
        if not isinstance(archs, list):
            raise HFConfigError("architectures", f"architectures must be a list, not {archs!r}")
        known = [_ARCHITECTURES[a] for a in archs if isinstance(a, str) and a in _ARCHITECTURES]
        if not known:
            raise HFConfigError(
                "architectures",
                f"no model_type, and architectures {archs!r} name none parplan knows "
                f"({', '.join(_ARCHITECTURES)})",
            )
        return known[0]
    if not isinstance(model_type, str) or model_type not in _FAMILIES:
        raise HFConfigError(
            "model_type",
            f"unknown model_type {model_type!r}; parplan reads {', '.join(HF_MODEL_TYPES)} configs",
        )
    return str(model_type)


def hf_generator_data(data: dict[str, Any]) -> dict[str, Any]:
    """The ``transformer`` generator data of a parsed config.json (:class:`HFConfigError` if not)."""
    model_type = model_type_of(data)
    return {"kind": "transformer", **_FAMILIES[model_type]({**data, "model_type": model_type})}


def hf_model_data(data: dict[str, Any], path: str | Path = "config.json") -> dict[str, Any]:
    """The data of a parplan model file for a parsed config.json read from ``path``.

    The name is the directory of a file called ``config.json`` (``llama-3-8b/config.json``), else
    the file's stem.
    """
    p = Path(path)
    name = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    return {"name": name or "model", "generator": hf_generator_data(data)}


HF_SCHEMAS: tuple[dict[str, Any], ...] = (
    {
        "type": "object",
        "description": "a Hugging Face config.json (model_type or architectures)",
        "anyOf": [{"required": ["model_type"]}, {"required": ["architectures"]}],
    },
    {
        "type": "object",
        "description": "a model made from a Hugging Face config.json, with generator keys that override",
        "required": ["hf_config"],
        "properties": {"hf_config": {"type": "string"}},
    },
)
"""JSON Schemas of the two other shapes a model file may have (editors' schemas accept them)."""
