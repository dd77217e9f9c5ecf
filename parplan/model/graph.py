"""A model spec as a DAG of layers: parameters, forward FLOPs and activation sizes per node.

:func:`build_model` expands a generator (``transformer``, ``mlp``) into nodes or takes the explicit
nodes and edges (a chain in file order when no edges are given), rejects cycles and unknown node ids,
and returns a :class:`ModelGraph` whose order is a topological order that keeps file order wherever
the edges allow.

Transformer sizing (GPT-style decoder; ``h`` hidden, ``S`` sequence length, ``V`` vocabulary, ``a``
heads, ``f`` FFN multiplier, ``b`` bytes per activation element; all per sample, i.e. per sequence):

- ``embedding``: ``V*h + S*h`` parameters (token and learned position embeddings), no matmul FLOPs.
- ``block{i}``: ``(4 + 2f) h^2`` matmul weights (QKV, output projection, two FFN matrices) plus
  ``(9 + f) h`` biases and layer-norm weights: ``12 h^2 + 13 h`` at ``f = 4``. Forward FLOPs
  ``2 (4 + 2f) h^2 S + 4 S^2 h`` (the matmuls, then attention scores ``QK^T`` and context ``AV``).
- ``head``: ``V*h`` parameters unless the embeddings are tied (then 0 parameters: it reuses the
  embedding matrix, whose gradient the embedding node already counts), forward FLOPs ``2 V h S``.
  A tied head is recorded in :attr:`ModelGraph.ties` (:class:`TiedWeights`): a plan that puts the
  head on another worker than the embedding keeps a copy of the ``V*h`` word embedding there and
  all-reduces the two copies' gradients, as Megatron-LM does.

For ``layers=24, hidden=2048, heads=16, seq_len=2048, vocab=50257`` this gives 1.315 B parameters,
the GPT-3 "XL" (1.3B) model; :func:`transformer_params` is the closed form.

The generator's other fields (grouped-query attention, SwiGLU, RMSNorm, no biases, RoPE/ALiBi, MoE
blocks, a counted final norm) generalise each term; :func:`block_params`,
:func:`block_forward_flops` and :func:`block_saved_activation_bytes` say how, and reduce to the
formulas above for the defaults. A ``torch_module`` model is traced by :mod:`parplan.model.trace`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING

from parplan.config.model import MLPGenerator, ModelNodeSpec, ModelSpec, TransformerGenerator
from parplan.errors import ModelError
from parplan.model.transformer import activation_coefficients, shape_of_generator

if TYPE_CHECKING:
    import networkx as nx


@dataclass(frozen=True)
class TiedWeights:
    """``params`` weights of node ``owner`` that node ``user`` uses too (a tied LM head reuses the
    word embedding): the user's node counts none of them, so a plan that places the two on
    different workers must hold a copy on the user's and keep the copies' gradients equal."""

    owner: str
    user: str
    params: float


@dataclass(frozen=True, eq=False)
class ModelGraph:
    """The layers of a model as a DAG, in a stable topological order, with totals.

    ``graph`` has one node per layer id with attributes ``params``, ``forward_flops_per_sample``,
    ``activation_bytes_per_sample``, ``saved_bytes_per_sample`` and ``position`` (index in
    ``order``); an edge ``u -> v`` means ``v`` consumes ``u``'s output activation.
    """

    spec: ModelSpec
    graph: nx.DiGraph
    order: tuple[str, ...]
    nodes: tuple[ModelNodeSpec, ...]
    sequence_length: int | None
    ties: tuple[TiedWeights, ...] = ()
    """Weights shared between nodes (a tied embedding and head)."""
    _by_id: dict[str, ModelNodeSpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {n.id: n for n in self.nodes})

    @property
    def name(self) -> str:
        """The model's name from its spec."""
        return self.spec.name

    def node(self, node_id: str) -> ModelNodeSpec:
        """The spec of one node; :class:`ModelError` if there is none of that id."""
        try:
            return self._by_id[node_id]
        except KeyError:
            raise ModelError(f"model {self.spec.name!r} has no node {node_id!r}") from None

    def _position(self, node_id: str) -> int:
        return int(self.graph.nodes[node_id]["position"])

    @property
    def edges(self) -> tuple[tuple[str, str], ...]:
        """Edges ``(producer, consumer)`` ordered by producer then consumer position."""
        pos = {n: i for i, n in enumerate(self.order)}
        return tuple(sorted(self.graph.edges, key=lambda e: (pos[e[0]], pos[e[1]])))

    def predecessors(self, node_id: str) -> tuple[str, ...]:
        """Nodes whose output ``node_id`` consumes, in order."""
        self.node(node_id)
        return tuple(sorted(self.graph.predecessors(node_id), key=self._position))

    def successors(self, node_id: str) -> tuple[str, ...]:
        """Nodes that consume ``node_id``'s output, in order."""
        self.node(node_id)
        return tuple(sorted(self.graph.successors(node_id), key=self._position))

    @property
    def total_params(self) -> float:
        """Parameters of the whole model."""
        return float(sum(n.params for n in self.nodes))

    @property
    def forward_flops_per_sample(self) -> float:
        """Forward FLOPs of one sample (one sequence for a transformer) through the whole model."""
        return float(sum(n.forward_flops_per_sample for n in self.nodes))

    @property
    def saved_activation_bytes_per_sample(self) -> float:
        """Activation bytes held for backward by one sample across all nodes."""
        return float(sum(n.saved_bytes_per_sample for n in self.nodes))

    @property
    def param_bytes(self) -> float:
        """Bytes of the weights (``bytes_per_param`` each)."""
        return self.total_params * self.spec.bytes_per_param

    @property
    def grad_bytes(self) -> float:
        """Bytes of the gradients (``bytes_per_grad`` each)."""
        return self.total_params * self.spec.bytes_per_grad

    @property
    def optimizer_bytes(self) -> float:
        """Bytes of the optimizer state (``optimizer_bytes_per_param`` per parameter)."""
        return self.total_params * self.spec.optimizer_bytes_per_param


def build_model(spec: ModelSpec) -> ModelGraph:
    """The :class:`ModelGraph` of a model spec (generator expanded, explicit graph checked)."""
    gen = spec.generator
    sequence_length: int | None = None
    ties: tuple[TiedWeights, ...] = ()
    if isinstance(gen, TransformerGenerator):
        nodes = transformer_nodes(gen, spec.bytes_per_activation_element)
        edges = _chain(nodes)
        sequence_length = gen.sequence_length
        if gen.tie_embeddings:
            ties = (TiedWeights("embedding", "head", float(gen.vocabulary * gen.hidden)),)
    elif isinstance(gen, MLPGenerator):
        nodes = mlp_nodes(gen, spec.bytes_per_activation_element)
        edges = _chain(nodes)
    elif spec.torch_module is not None:
        from parplan.model.trace import traced_nodes  # imports torch only for such a model

        nodes = traced_nodes(spec)
        edges = _chain(nodes)
    else:
        if not spec.nodes:
            raise ModelError(f"model {spec.name!r} has neither nodes nor a generator")
        nodes = list(spec.nodes)
        edges = list(spec.edges) if spec.edges is not None else _chain(nodes)
    import networkx as nx  # on first use: ~80 ms and 20 MB that a cluster-only command never pays

    graph = nx.DiGraph()
    for n in nodes:
        if n.id in graph:
            raise ModelError(f"model {spec.name!r}: node id {n.id!r} is used twice")
        graph.add_node(n.id)
    for a, b in edges:
        for end in (a, b):
            if end not in graph:
                raise ModelError(f"model {spec.name!r}: edge [{a}, {b}] names unknown node {end!r}")
        graph.add_edge(a, b)
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        pass
    else:
        path = " -> ".join([*(u for u, _ in cycle), cycle[0][0]])
        raise ModelError(f"model {spec.name!r}: the edges form a cycle: {path}")
    position = {n.id: i for i, n in enumerate(nodes)}
    order = tuple(nx.lexicographical_topological_sort(graph, key=position.__getitem__))
    by_id = {n.id: n for n in nodes}
    for i, node_id in enumerate(order):
        n = by_id[node_id]
        graph.nodes[node_id].update(
            params=n.params,
            forward_flops_per_sample=n.forward_flops_per_sample,
            activation_bytes_per_sample=n.activation_bytes_per_sample,
            saved_bytes_per_sample=n.saved_bytes_per_sample,
            position=i,
        )
    return ModelGraph(
        spec=spec,
        graph=graph,
        order=order,
        nodes=tuple(by_id[i] for i in order),
        sequence_length=sequence_length,
        ties=ties,
    )


def _chain(nodes: list[ModelNodeSpec]) -> list[tuple[str, str]]:
    return [(a.id, b.id) for a, b in pairwise(nodes)]


def is_moe_block(gen: TransformerGenerator, layer: int) -> bool:
    """Whether block ``layer`` is a mixture-of-experts block (``layer % moe_every == 0``)."""
    return gen.is_moe and layer % gen.moe_every == 0


def _widths(gen: TransformerGenerator) -> tuple[float, float]:
    """Query and key/value projection widths over hidden (1 and 1 for multi-head attention)."""
    head_dim = gen.hidden // gen.heads if gen.head_dim is None else gen.head_dim
    return gen.heads * head_dim / gen.hidden, gen.key_value_heads * head_dim / gen.hidden


def _mlp_matrices(gen: TransformerGenerator) -> float:
    return 3.0 if gen.activation == "swiglu" else 2.0


def _moe_ratio(gen: TransformerGenerator) -> float:
    return gen.ffn_ratio if gen.moe_ffn_hidden is None else gen.moe_ffn_hidden / gen.hidden


def block_matmul_params(gen: TransformerGenerator, layer: int = 0, *, active: bool = False) -> float:
    """Matmul weights of one transformer block: ``(4 + 2f) h^2`` for a GPT block.

    In general ``(2 q + 2 kv + m f) h^2`` with ``q``/``kv`` the query and key/value widths over
    ``h`` (grouped-query attention shrinks ``kv``) and ``m`` FFN matrices (2 GELU, 3 SwiGLU); an MoE
    block has ``E`` expert FFNs and a ``h x E`` router. ``active``: only the ``top_k`` experts a
    token uses (what its FLOPs see).
    """
    q, kv = _widths(gen)
    attention = 2.0 * q + 2.0 * kv
    if is_moe_block(gen, layer):
        experts = gen.top_k if active else gen.experts
        ffn = experts * _mlp_matrices(gen) * _moe_ratio(gen) + gen.experts / gen.hidden
    else:
        ffn = _mlp_matrices(gen) * gen.ffn_ratio
    return (attention + ffn) * gen.hidden**2


def block_params(gen: TransformerGenerator, layer: int = 0) -> float:
    """Parameters of one transformer block: ``(4 + 2f) h^2 + (9 + f) h`` (``12h^2 + 13h`` at f=4).

    The ``h`` terms: QKV and projection biases (4h), FFN biases (fh + h), two layer norms (4h).
    Without ``bias`` only the norms (and QKV biases with ``qkv_bias``) remain; RMSNorm has no bias
    (h per norm); SwiGLU has two inner biases; MoE blocks have every expert's.
    """
    q, kv = _widths(gen)
    qkv_bias = gen.bias if gen.qkv_bias is None else gen.qkv_bias
    const = (q + 2.0 * kv if qkv_bias else 0.0) + (1.0 if gen.bias else 0.0)
    const += 2.0 * (2.0 if gen.norm == "layernorm" else 1.0)
    per_f = 0.0
    if gen.bias:
        inner = 2.0 if gen.activation == "swiglu" else 1.0
        if is_moe_block(gen, layer):
            const += gen.experts * (1.0 + inner * _moe_ratio(gen))
        else:
            const += 1.0
            per_f = inner
    return block_matmul_params(gen, layer) + (const + per_f * gen.ffn_ratio) * gen.hidden


def block_forward_flops(gen: TransformerGenerator, layer: int = 0) -> float:
    """Forward FLOPs of one block per sequence: ``2 x active matmul params x S + 4 S^2 q h``.

    Attention scores (``QK^T``) and context (``AV``) count the full ``S x S`` (no causal halving),
    the convention of Megatron-LM and Calculon for model FLOPs.
    """
    s = gen.sequence_length
    q, _ = _widths(gen)
    attention = 4.0 * s * s * gen.hidden if q == 1.0 else 4.0 * s * s * q * gen.hidden
    return 2.0 * block_matmul_params(gen, layer, active=True) * s + attention


def block_saved_activation_bytes(
    gen: TransformerGenerator, bytes_per_element: float = 2.0, layer: int = 0
) -> float:
    """Activation bytes one transformer block keeps for backward, per sample (sequence).

    Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (2022),
    eq. 1: ``s b h (34 + 5 a s / h)`` bytes per layer for micro-batch ``b`` with 16-bit activations
    and 1-byte dropout masks, no tensor/sequence parallelism and no recomputation. Per sample
    (``b = 1``) that is ``S h (34 + 5 a S / h)``, scaled here by ``bytes_per_element / 2`` so fp32
    activations double it (the masks are scaled too: a slight overestimate).

    The paper's MLP term (19 of the 34) assumes a 4h GELU MLP, and ``ffn_multiplier`` keeps it; the
    newer fields generalise each term (:func:`parplan.model.transformer.activation_coefficients`):
    ``ffn_hidden``, SwiGLU, grouped-query attention, MoE blocks, no dropout.
    """
    h, s, a = gen.hidden, gen.sequence_length, gen.heads
    if _is_gpt_block(gen):
        return s * h * (34.0 + 5.0 * a * s / h) * bytes_per_element / 2.0
    per_sbh, per_as2b = activation_coefficients(shape_of_generator(gen, bytes_per_element), layer)
    return s * h * (per_sbh + per_as2b * a * s / h) * bytes_per_element / 2.0


def _is_gpt_block(gen: TransformerGenerator) -> bool:
    """The block Korthikanti's eq. 1 describes as is (the generator's defaults, any multiplier)."""
    return (
        gen.kv_heads in (None, gen.heads)
        and gen.head_dim in (None, gen.hidden // gen.heads)
        and gen.ffn_hidden is None
        and gen.activation == "gelu"
        and gen.dropout
        and not gen.is_moe
    )


def transformer_params(gen: TransformerGenerator) -> float:
    """Closed-form parameter count: ``sum of blocks + V h + P h (+ V h untied) (+ final norm)``.

    ``P`` is the learned position table (``max_positions``, default ``S``; none with RoPE/ALiBi).
    """
    if gen.is_moe:
        blocks = sum(block_params(gen, i) for i in range(gen.layers))
    else:
        blocks = gen.layers * block_params(gen)
    return blocks + embedding_params(gen) + head_params(gen)


def embedding_params(gen: TransformerGenerator) -> float:
    """Token embedding ``V h`` plus a learned position table ``P h``."""
    positions = 0
    if gen.position == "learned":
        positions = gen.sequence_length if gen.max_positions is None else gen.max_positions
    return float((gen.vocabulary + positions) * gen.hidden)


def head_params(gen: TransformerGenerator) -> float:
    """The output projection ``V h`` unless tied to the embedding, plus the final norm if counted."""
    norm = (2 if gen.norm == "layernorm" else 1) * gen.hidden if gen.final_norm else 0
    return float((0 if gen.tie_embeddings else gen.vocabulary * gen.hidden) + norm)


def transformer_nodes(gen: TransformerGenerator, bytes_per_element: float = 2.0) -> list[ModelNodeSpec]:
    """``embedding``, ``block0 .. block{L-1}``, ``head`` sized as in the module docstring.

    Activations sent on are ``S h`` elements (the hidden states); the head's output is the logits,
    ``S V`` elements. Saved for backward: a block keeps :func:`block_saved_activation_bytes`; the
    embedding keeps its dropout mask (``S h`` bytes at 16-bit scale); the head keeps its input and
    the logits for the softmax cross-entropy (``S h + S V`` elements).
    """
    h, s, v = gen.hidden, gen.sequence_length, gen.vocabulary
    hidden_states = s * h * bytes_per_element
    nodes = [
        ModelNodeSpec(
            id="embedding",
            params=embedding_params(gen),
            forward_flops_per_sample=0.0,
            activation_bytes_per_sample=hidden_states,
            saved_activation_bytes_per_sample=s * h * bytes_per_element / 2.0,
        )
    ]
    for i in range(gen.layers):
        nodes.append(
            ModelNodeSpec(
                id=f"block{i}",
                params=block_params(gen, i),
                forward_flops_per_sample=block_forward_flops(gen, i),
                activation_bytes_per_sample=hidden_states,
                saved_activation_bytes_per_sample=block_saved_activation_bytes(gen, bytes_per_element, i),
            )
        )
    nodes.append(
        ModelNodeSpec(
            id="head",
            params=head_params(gen),
            forward_flops_per_sample=2.0 * v * h * s,
            activation_bytes_per_sample=s * v * bytes_per_element,
            saved_activation_bytes_per_sample=(s * h + s * v) * bytes_per_element,
        )
    )
    return nodes


def mlp_nodes(gen: MLPGenerator, bytes_per_element: float = 2.0) -> list[ModelNodeSpec]:
    """``fc0 ..`` between consecutive widths: ``in*out (+out)`` params, ``2*in*out`` FLOPs per sample,
    ``out`` activation elements sent on (and, by default, kept for backward)."""
    nodes = []
    for i, (w_in, w_out) in enumerate(pairwise(gen.widths)):
        nodes.append(
            ModelNodeSpec(
                id=f"fc{i}",
                params=float(w_in * w_out + (w_out if gen.bias else 0)),
                forward_flops_per_sample=2.0 * w_in * w_out,
                activation_bytes_per_sample=w_out * bytes_per_element,
            )
        )
    return nodes
