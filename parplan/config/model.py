"""Model specs: a graph of layers, written out or made by a generator (``transformer``, ``mlp``).

A node carries its parameter count, forward FLOPs per sample, the bytes of the activation it
passes on per sample (what crosses a partition cut) and the activation bytes it keeps for backward
per sample (what occupies memory). Edges default to a chain in file order. Byte sizes per
parameter, gradient and optimizer-state element default to mixed-precision Adam (2 + 2 + 12).

Supported sizes, far beyond today's models and small enough that every product the planners form
stays finite and fits the engine's integers: per node the ranges of
:data:`parplan.config.units.LIMITS` (1e15 parameters, 1e24 FLOP, 1 EiB); per model
:data:`MAX_MODEL_PARAMS` parameters; generators up to :data:`MAX_GENERATED_LAYERS` layers, and a
transformer up to hidden 131,072, 1,024 heads, a 1,048,576-token sequence, a 4,194,304-word
vocabulary and an FFN multiplier of 64.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from parplan.config.units import Bytes, Count, Flops
from parplan.spec import Spec

MAX_MODEL_PARAMS = 1e17
"""The most parameters a model may have, all nodes together."""
MAX_GENERATED_LAYERS = 10_000
"""The most layers (blocks, or fully connected layers) a generator may make."""


class ModelNodeSpec(Spec):
    """One layer (or block) of the model."""

    id: str = Field(min_length=1)
    params: Count = Field(default=0.0, description="parameter count, e.g. '85M'")
    forward_flops_per_sample: Flops = Field(
        default=0.0, alias="forward_flops", description="forward FLOPs per sample, e.g. '2 GFLOP'"
    )
    activation_bytes_per_sample: Bytes = Field(
        default=0.0, alias="activation", description="output bytes per sample sent to successors"
    )
    saved_activation_bytes_per_sample: Bytes | None = Field(
        default=None,
        alias="saved_activation",
        description="bytes per sample kept for backward (default: the output activation)",
    )

    @property
    def saved_bytes_per_sample(self) -> float:
        """Activation memory this node holds per sample until its backward runs."""
        if self.saved_activation_bytes_per_sample is None:
            return float(self.activation_bytes_per_sample)
        return float(self.saved_activation_bytes_per_sample)


class TransformerGenerator(Spec):
    """A decoder-only transformer: ``embedding``, ``block0 .. block{L-1}``, ``head``; FLOPs per
    sample cover the whole sequence (2 x matmul params x seq plus attention scores), activations are
    seq x hidden.

    The defaults are a GPT-2/GPT-3 block (multi-head attention, GELU MLP of 4 x hidden, LayerNorm,
    biases, learned positions, dropout, dense). The other fields describe today's variants:
    grouped-query attention (``kv_heads``), SwiGLU (three FFN matrices), RMSNorm, no biases,
    rotary or ALiBi positions (no position parameters), and mixture-of-experts blocks (``experts``
    FFNs of ``moe_ffn_hidden`` each, ``top_k`` of them per token, a router of ``hidden x experts``;
    block ``i`` is an MoE block when ``i % moe_every == 0``, Megatron's ``moe_layer_freq``).
    """

    kind: Literal["transformer"]
    layers: int = Field(ge=1, le=MAX_GENERATED_LAYERS)
    hidden: int = Field(ge=1, le=2**17)
    heads: int = Field(ge=1, le=1024)
    sequence_length: int = Field(ge=1, le=2**20, alias="seq_len")
    vocabulary: int = Field(ge=1, le=2**22, alias="vocab")
    ffn_multiplier: float = Field(default=4.0, gt=0, le=64)
    tie_embeddings: bool = True
    kv_heads: int | None = Field(
        default=None, ge=1, le=1024, description="key/value heads (grouped-query attention; default: heads)"
    )
    head_dim: int | None = Field(
        default=None, ge=1, le=2**14, description="width of one attention head (default: hidden / heads)"
    )
    ffn_hidden: int | None = Field(
        default=None, ge=1, le=2**20, description="FFN inner width (overrides ffn_multiplier)"
    )
    activation: Literal["gelu", "swiglu"] = Field(
        default="gelu", description="MLP: gelu (two matrices) or swiglu (gate, up and down: three)"
    )
    norm: Literal["layernorm", "rmsnorm"] = Field(
        default="layernorm", description="layernorm (weight and bias: 2h) or rmsnorm (weight: h)"
    )
    bias: bool = Field(default=True, description="linear layers carry biases (GPT: yes; LLaMA: no)")
    qkv_bias: bool | None = Field(
        default=None, description="the QKV projection carries biases (default: bias; Qwen2: only it)"
    )
    position: Literal["learned", "rope", "alibi"] = Field(
        default="learned", description="position encoding; only learned adds parameters"
    )
    max_positions: int | None = Field(
        default=None, ge=1, le=2**22, description="rows of a learned position table (default: seq_len)"
    )
    final_norm: bool = Field(
        default=False, description="count the final norm's parameters in the head (HF models: yes)"
    )
    dropout: bool = Field(
        default=True, description="dropout after attention and MLP (its masks are saved for backward)"
    )
    experts: int = Field(default=0, ge=0, le=4096, description="MoE experts per MoE block (0, 1: dense)")
    top_k: int = Field(default=2, ge=1, le=64, description="experts each token is routed to")
    moe_ffn_hidden: int | None = Field(
        default=None, ge=1, le=2**20, description="FFN inner width of one expert (default: the dense one)"
    )
    moe_every: int = Field(default=1, ge=1, le=MAX_GENERATED_LAYERS, description="MoE block every n blocks")

    @field_validator("heads")
    @classmethod
    def _divides(cls, heads: int, info: ValidationInfo) -> int:
        hidden = info.data.get("hidden")
        if hidden is not None and hidden % heads:
            raise ValueError(f"hidden ({hidden}) must be divisible by heads ({heads})")
        return heads

    @model_validator(mode="after")
    def _grouped(self) -> TransformerGenerator:
        if self.kv_heads is not None and (self.kv_heads > self.heads or self.heads % self.kv_heads):
            raise ValueError(f"kv_heads ({self.kv_heads}) must divide heads ({self.heads})")
        if self.experts > 1 and self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) must be at most experts ({self.experts})")
        return self

    @property
    def key_value_heads(self) -> int:
        """Key/value heads: ``kv_heads`` or, without grouped-query attention, ``heads``."""
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def ffn_ratio(self) -> float:
        """FFN inner width over hidden: ``ffn_hidden / hidden`` or ``ffn_multiplier``."""
        return self.ffn_multiplier if self.ffn_hidden is None else self.ffn_hidden / self.hidden

    @property
    def is_moe(self) -> bool:
        """Whether some blocks are mixture-of-experts blocks (more than one expert)."""
        return self.experts > 1


class MLPGenerator(Spec):
    """Fully connected layers ``fc0 ..`` between consecutive ``widths`` (input width first)."""

    kind: Literal["mlp"]
    widths: tuple[Annotated[int, Field(ge=1, le=2**24)], ...] = Field(
        min_length=2, max_length=MAX_GENERATED_LAYERS + 1
    )
    bias: bool = True

    @model_validator(mode="after")
    def _supported(self) -> MLPGenerator:
        params = sum(a * b + (b if self.bias else 0) for a, b in pairwise(self.widths))
        _check_params(params, "the widths make")
        return self


ModelGenerator = Annotated[TransformerGenerator | MLPGenerator, Field(discriminator="kind")]


class ModelSpec(Spec):
    """A model: explicit ``nodes`` (and ``edges``), a ``generator`` (possibly made from a Hugging
    Face ``hf_config``), or a ``torch_module`` traced when the model is built."""

    name: str = "model"
    description: str | None = None
    generator: ModelGenerator | None = None
    nodes: tuple[ModelNodeSpec, ...] = ()
    hf_config: str | None = Field(
        default=None,
        description="a Hugging Face config.json (relative to this file) the generator is made from; "
        "generator keys beside it (seq_len, ...) override",
    )
    torch_module: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
        description="'package.module:function' of an installed module returning (torch module, "
        "example input), traced on the meta device (needs the torch extra)",
    )
    edges: tuple[tuple[str, str], ...] | None = Field(
        default=None, description="[from, to] pairs; default: a chain in the order of nodes"
    )
    bytes_per_param: float = Field(default=2.0, gt=0, le=16, description="weights (fp16/bf16: 2)")
    bytes_per_grad: float = Field(default=2.0, gt=0, le=16, description="gradients (fp16/bf16: 2)")
    optimizer_bytes_per_param: float = Field(
        default=12.0,
        ge=0,
        le=64,
        description="optimizer state per parameter (Adam, fp32 master + 2 moments: 12)",
    )
    bytes_per_activation_element: float = Field(
        default=2.0, gt=0, le=16, description="used by generators to size activations"
    )

    @field_validator("nodes")
    @classmethod
    def _unique_ids(cls, nodes: tuple[ModelNodeSpec, ...]) -> tuple[ModelNodeSpec, ...]:
        ids = [n.id for n in nodes]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"node ids used twice: {', '.join(dupes)}")
        return nodes

    @field_validator("edges")
    @classmethod
    def _known_ends(
        cls, edges: tuple[tuple[str, str], ...] | None, info: ValidationInfo
    ) -> tuple[tuple[str, str], ...] | None:
        if edges is not None and "nodes" in info.data:
            known = {n.id for n in info.data["nodes"]}
            for a, b in edges:
                for end in (a, b):
                    if end not in known:
                        raise ValueError(f"edge [{a}, {b}] names unknown node {end!r}")
        return edges

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.torch_module is not None:
            if self.generator is not None or self.nodes:
                raise ValueError("give torch_module alone, without nodes or a generator")
        elif (self.generator is None) == (not self.nodes):
            if self.generator is None:
                raise ValueError("a model needs either nodes or a generator")
            raise ValueError("give either nodes or a generator, not both")
        _check_params(sum(n.params for n in self.nodes), "the nodes have")
        return self


def _check_params(params: float, what: str) -> None:
    if params > MAX_MODEL_PARAMS:
        raise ValueError(
            f"{what} {_count(params)} parameters; parplan supports models of up to {_count(MAX_MODEL_PARAMS)}"
        )


def _count(value: float) -> str:
    """A large count as a person (and the count parser) reads it: ``1.5e18``, ``1e17``."""
    return f"{value:.3g}".replace("e+", "e")
