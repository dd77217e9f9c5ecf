"""The transformer as kernels: one device's share of a block's forward work, and its activations.

A sharded plan needs more than a block's FLOPs: which GEMMs run, of what shape, how many bytes each
kernel moves, and what a block keeps for backward under tensor (``tp``), sequence (``sp``) and
context (``cp``) parallelism and recomputation. :func:`shape_of` reads a :class:`TransformerShape`
from a model made by the ``transformer`` generator; :func:`block_ops`, :func:`embedding_ops` and
:func:`head_ops` list the forward :class:`Op` s of one micro-batch on one device;
:func:`block_activation_bytes` is Korthikanti et al. (2022) generalised.

What is counted (``b`` micro-batch, ``S`` sequence, ``T = b S / cp`` local tokens, ``h`` hidden,
``e`` bytes per activation element):

- GEMMs (``qkv``, ``proj``, ``mlp_up``, ``mlp_down``, ``router``, ``experts_*``, ``logits``):
  ``2 m n k`` FLOPs; bytes read and written are the two operands and the result, each once.
  Megatron's split: QKV and the first FFN matrix split their columns over ``tp``, the output
  projection and the second FFN matrix their rows; SwiGLU's gate and up matrices run as one GEMM
  (eager: as the PyTorch models write them, ``wq``/``wk``/``wv`` and ``w1``/``w3`` separate GEMMs).
- Attention: with ``flash_attention`` one fused kernel whose FLOPs are what FlashAttention-2
  executes under a causal mask, and whose bytes are Q, K, V and the output once. It skips the tiles
  above the diagonal but computes the diagonal tiles whole and masks them after: the forward's loop
  over key blocks of query block ``m`` stops at ``ceil_div((m + 1) kBlockM, kBlockN)``
  (``flash_fwd_kernel.h``, ``n_block_max``), the backward's loop over query blocks of key block
  ``n`` starts at ``n kBlockN / kBlockM`` (``flash_bwd_kernel.h``, ``m_block_min``). So a query row
  meets ``(S + B) / 2`` keys on average for tiles of ``B`` = :data:`FLASH_CAUSAL_BLOCK` rows, not
  ``S / 2`` (:func:`flash_causal_keys`: +1.6% at ``S`` = 8192, +3.1% at 4096). Its backward runs two
  memory-bound kernels beside the main one (``run_flash_bwd_seqk_parallel`` in
  ``flash_bwd_launch_template.h``; ``flash_bwd_preprocess_kernel.h``): ``dot_do_o`` reads ``dO`` and
  ``O`` for the row sums and zeroes the fp32 ``dQ`` accumulator the main kernel adds into across key
  blocks; ``convert_dQ`` turns that accumulator into ``dQ`` (:func:`flash_backward_passes`; ops
  with no forward work). Source: flash-attn 2.5.6. The FlashAttention-2 paper's rates
  (:data:`~parplan.plan.compute.ATTENTION_BACKWARD_RATE`) time the main kernel's FLOPs here; its
  benchmark timed the whole call, where at its longest sequence (16k, no mask) the two small
  kernels are about 1% of the backward, so that much is counted twice there. The causal tiles'
  unequal work leaves the last SMs busy after the others: ``causal_grid`` lets the roofline time
  that tail (:mod:`parplan.plan.tiles`; not with context parallelism, whose ring steps pair
  chunks differently). Without
  flash attention, the score and context GEMMs compute the full ``S x S`` (masked entries included)
  and a softmax kernel streams the scores. *Model* FLOPs (for MFU) are a separate convention:
  :func:`model_flops_per_token` counts the full ``S x S`` as Megatron-LM, Calculon and PaLM do.
- Context parallelism (ring attention): each rank holds ``S / cp`` queries and sees every key, so
  its attention work is ``1 / cp`` of the whole; K and V of the whole sequence stream through it.
- Norms, GELU/SwiGLU, dropout and residual adds are memory bound; their FLOPs are small estimates
  (a handful per element) so a roofline still charges them by bytes. With ``sp`` they touch
  ``1 / tp`` of the tokens.
- MoE blocks: a router GEMM, the token dispatch and combine copies, and the local experts' GEMMs on
  ``T x top_k x capacity_factor`` token slots (an even share: each of ``ep`` ranks sends its tokens'
  ``top_k`` copies and receives as many), each expert's FFN split over ``tp`` like a dense one.

``backward_flops_factor`` is backward FLOPs over forward FLOPs: 2 for a GEMM (activation and weight
gradients), 2.5 for FlashAttention (its backward recomputes the scores: 5 matmuls against 2), 1 for
the memory-bound kernels; ``backward_bytes_factor`` likewise for bytes.

Kernel style (``kernels``). ``fused`` (the default: Megatron-LM's fused layer norm, bias-GeLU,
masked softmax and RoPE, or a compiled graph) counts every memory-bound chain as one kernel that
reads its inputs and writes its outputs once, as above. ``eager`` counts the kernels PyTorch runs
op by op without ``torch.compile`` in torchtitan's Llama (``torchtitan/models/llama/model.py``) and
Hugging Face's ``modeling_llama.py``: every op reads and writes whole tensors, at the dtype the code
casts them to. Per element (``e`` bytes per activation element, ``f = 4`` for fp32, ``m`` a mask
byte; the per-row statistics, ``T`` elements, are left out), forward / backward bytes:

- RMSNorm (torchtitan's ``RMSNorm``, HF's ``LlamaRMSNorm``, ATen's composite ``rms_norm``):
  ``x.float()`` (e+f), ``pow(2)`` (2f), ``mean(-1)`` (f), ``x * rsqrt(.)`` (2f), ``.type_as(x)``
  (f+e), ``* weight`` (2e): ``4e + 7f``. Backward, autograd op by op: ``* weight`` (dx 2e, dW as
  mul 3e and sum e), cast (e+f), ``x * r`` (dx 2f, dr as mul 3f and sum f), mean's expand (f),
  pow's ``grad * 2 * x.pow(1)`` (7f), the two gradients of ``x.float()`` summed (3f), cast (f+e):
  ``8e + 19f``.
- LayerNorm (``torch.nn.LayerNorm``): ATen's native kernel is already one kernel: ``2e``; its
  backward reads ``dy`` and ``x`` twice (input gradient; weight and bias gradients) and writes
  ``dx``: ``5e``.
- RoPE (torchtitan's ``apply_rotary_emb``), per rotated element of Q and K: ``.float()`` (e+f), the
  complex multiply by ``freqs_cis`` (2f), ``.type_as`` (f+e): ``2e + 4f``; backward the same three
  in reverse: ``2e + 4f``. (HF's ``q * cos + rotate_half(q) * sin`` in 16 bits is ``12e``.)
- Attention layout: ``repeat_kv`` materialises K and V at every query head when grouped
  (``expand(...).reshape``: read ``kv`` heads, write ``heads``), backward sums them back; the
  attention kernel then reads the repeated K and V, and is SDPA's FlashAttention-2
  (``kernel="flash2"``, which the roofline times by its measured share of peak). The transposes
  into and out of SDPA are views (the flash kernel takes strided inputs and returns the layout
  ``.contiguous()`` keeps).
  Without flash attention the core is ``matmul``, scale (2e), causal-mask add (2e), softmax in fp32
  (``e + f``), cast back (``f + e``), dropout (``2e + m``), ``matmul``; backward the same bytes.
- SwiGLU (torchtitan's ``FeedForward``, HF's ``LlamaMLP``): ``w1`` and ``w3`` are two GEMMs (the
  input read twice), then ``silu`` (2e) and ``*`` (3e): ``5e`` per inner element; backward ``*``
  (two products: 6e) and ``silu_backward`` (3e): ``9e``.
- GeLU (``nn.GELU``, the bias folded into the GEMM by ``addmm``): one kernel, ``2e`` / ``3e``.
- Residual: the add ``x + branch`` (3e); backward the two gradients meeting at ``x`` are summed
  (3e). With dropout, ``native_dropout`` first (``2e + m`` both ways).
- Gradients of a tensor several eager GEMMs read (the attention norm's output feeds ``wq``, ``wk``
  and ``wv``; the MLP norm's, SwiGLU's ``w1`` and ``w3``): autograd sums their input gradients
  pairwise before the norm's backward (``InputBuffer::accumulate``), one add (3e) per extra reader,
  charged to that norm's backward (an aten trace of the block's backward shows two ``add`` after
  the ``wq``/``wk``/``wv`` GEMMs and one after ``w1``/``w3``).
- Cross-entropy (torchtitan's ``cross_entropy(pred.float(), labels)``, HF's ``logits.float()``), per
  logit: the cast (e+f) and ``log_softmax`` (2f), ``nll_loss`` reads one entry a row: ``e + 3f``;
  backward ``nll_loss``'s zero-filled gradient (f), ``log_softmax_backward`` (3f), the cast (f+e):
  ``e + 5f``. A row longer than one block's shared memory (48 KiB, ``sharedMemPerBlock``: 12,288
  fp32 logits; Llama 3's 128,256 are 501 KiB) is not held on chip: ATen's ``cunn_SoftMaxForward``
  (``aten/src/ATen/native/cuda/SoftMax.cu``, chosen when ``cunn_SoftMaxForwardSmem`` cannot hold the
  row) reads it three times (the max, the sum of exponentials, then the output pass) and
  ``cunn_SoftMaxBackward`` twice (the gradient's sum, then the input-gradient pass): ``e + 5f``
  forward, ``e + 6f`` backward (:data:`SOFTMAX_SMEM_BYTES`; the L2 cache, which may hold short
  rows' re-reads, is not modelled).
- Embedding: the lookup as fused; backward ``embedding_dense_backward`` zero-fills the whole
  ``V / tp x h`` table gradient before adding the rows.

Each piece stays one :class:`Op` (its bytes summed over its kernels, the backward as
``backward_bytes_factor``), so the eager style adds bytes, not launches: at the token counts of
training (thousands of tokens a micro-batch) every kernel moves megabytes and its few microseconds
of launch do not matter. FLOPs are unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from parplan.config.model import TransformerGenerator

if TYPE_CHECKING:
    from parplan.model.graph import ModelGraph

OpKind = Literal["gemm", "attention", "elementwise", "norm", "embedding", "loss"]
Recompute = Literal["none", "selective", "op", "full"]
Kernels = Literal["fused", "eager"]

FP32_BYTES = 4.0
"""Bytes of an fp32 element: eager code upcasts norms, RoPE and the loss to it."""

CAUSAL_FRACTION = 0.5
"""Share of the ``S x S`` scores a causal mask keeps (``(S + 1) / 2S``, 1/2 for long sequences);
FlashAttention-2 computes whole tiles along the diagonal beyond it (:func:`flash_causal_keys`)."""

FLASH_CAUSAL_BLOCK = 128
"""Tile rows along the causal diagonal of FlashAttention-2 at head dimensions up to 128 on A100 and
H100 (which runs FA2's sm80 kernels): the forward's ``kBlockM`` (``Flash_fwd_kernel_traits<Headdim,
128, 64, 4, ...>`` in ``run_mha_fwd_hdim128``, 128 x 128 at 64) and the backward's ``kBlockN``
(``Flash_bwd_kernel_traits<Headdim, 64, 128, ...>`` in ``run_mha_bwd_hdim128`` with 144 KiB of
shared memory a block, 128 x 128 at 64); head dimensions above 128 use 64-key backward tiles
(``flash_fwd_launch_template.h``, ``flash_bwd_launch_template.h``, flash-attn 2.5.6)."""

BACKWARD_FLOPS: dict[str, float] = {
    "gemm": 2.0,
    "attention": 2.5,
    "elementwise": 1.0,
    "norm": 1.0,
    "embedding": 1.0,
    "loss": 1.0,
}
"""Backward FLOPs per forward FLOP of each kind of kernel (module docstring)."""

BACKWARD_BYTES: dict[str, float] = {
    "gemm": 2.0,  # dgrad reads dY and W, writes dX; wgrad reads dY and X, writes dW
    "attention": 2.0,  # reads Q, K, V, O, dO; writes dQ, dK, dV
    "elementwise": 1.5,  # reads dY and the saved input, writes dX
    "norm": 1.5,
    "embedding": 1.0,  # scatter-add of the gradient rows
    "loss": 1.0,  # writes the logits' gradient
}
"""Backward bytes per forward byte of each kind of kernel."""

SOFTMAX_SMEM_BYTES = 48 * 1024
"""Shared memory of one CUDA thread block by default (``sharedMemPerBlock``): an fp32 softmax row
that does not fit is streamed from memory once per pass of ATen's multi-pass kernel."""

MASK_BYTES = 1.0
"""Bytes of one dropout-mask element (Korthikanti et al. keep masks as bytes)."""


@dataclass(frozen=True)
class TransformerShape:
    """Everything a sharded plan needs to know of a decoder-only transformer's architecture.

    ``experts`` 0 or 1 is a dense model; more makes block ``i`` an MoE block when
    ``i % moe_every == 0``. ``ffn_hidden`` is the dense FFN's inner width (rounded to an integer
    when it came from a fractional multiplier).
    """

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    vocabulary: int
    sequence_length: int
    activation: Literal["gelu", "swiglu"]
    tie_embeddings: bool
    experts: int
    top_k: int
    moe_ffn_hidden: int
    moe_every: int
    bytes_per_element: float
    head_dim: int = 0
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    bias: bool = True
    qkv_bias: bool = True
    position: Literal["learned", "rope", "alibi"] = "learned"
    position_rows: int = 0
    final_norm: bool = False
    dropout: bool = True
    name: str = field(default="transformer", compare=False)

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)

    # -- architecture ----------------------------------------------------------------------------
    def is_moe(self, layer: int = 0) -> bool:
        """Whether block ``layer`` is a mixture-of-experts block."""
        return self.experts > 1 and layer % self.moe_every == 0

    @property
    def q_width(self) -> int:
        """Width of the query projection's output, ``heads x head_dim``."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Width of the key (and of the value) projection's output, ``kv_heads x head_dim``."""
        return self.kv_heads * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        """FFN weight matrices: 2 (GELU: up, down) or 3 (SwiGLU: gate, up, down)."""
        return 3 if self.activation == "swiglu" else 2

    def _norm_params(self) -> int:
        return (2 if self.norm == "layernorm" else 1) * self.hidden

    def _ffn_params(self, inner: int) -> int:
        h, m = self.hidden, self.mlp_matrices
        bias = ((m - 1) * inner + h) if self.bias else 0
        return m * h * inner + bias

    def attention_params(self) -> float:
        """QKV and output projection weights (and biases)."""
        h, q, kv = self.hidden, self.q_width, self.kv_width
        biases = (q + 2 * kv if self.qkv_bias else 0) + (h if self.bias else 0)
        return float(h * (q + 2 * kv) + q * h + biases)

    def mlp_params(self, i: int = 0) -> float:
        """The FFN of block ``i``: one dense FFN, or the router and every expert of an MoE block."""
        if self.is_moe(i):
            return float(self.hidden * self.experts + self.experts * self._ffn_params(self.moe_ffn_hidden))
        return float(self._ffn_params(self.ffn_hidden))

    def block_params(self, i: int = 0) -> float:
        """Parameters of block ``i`` (MoE blocks count every expert)."""
        return self.attention_params() + self.mlp_params(i) + 2 * self._norm_params()

    def expert_params(self, i: int = 0) -> float:
        """Parameters of block ``i`` that live in experts (0 for a dense block)."""
        return self.experts * float(self._ffn_params(self.moe_ffn_hidden)) if self.is_moe(i) else 0.0

    def embedding_params(self) -> float:
        """Token embedding plus a learned position table."""
        return float((self.vocabulary + self.position_rows) * self.hidden)

    def head_params(self) -> float:
        """The output projection unless tied to the embedding, plus the final norm if counted."""
        tied = 0 if self.tie_embeddings else self.vocabulary * self.hidden
        return float(tied + (self._norm_params() if self.final_norm else 0))

    def total_params(self) -> float:
        """Every parameter of the model."""
        blocks = sum(self.block_params(i) for i in range(self.layers))
        return blocks + self.embedding_params() + self.head_params()

    def active_block_params(self, i: int = 0) -> float:
        """Parameters one token uses in block ``i``: ``top_k`` experts of an MoE block."""
        if not self.is_moe(i):
            return self.block_params(i)
        inactive = (self.experts - self.top_k) * float(self._ffn_params(self.moe_ffn_hidden))
        return self.block_params(i) - inactive


def shape_of_generator(gen: TransformerGenerator, bytes_per_element: float = 2.0) -> TransformerShape:
    """The :class:`TransformerShape` a ``transformer`` generator describes."""
    ffn = gen.ffn_hidden if gen.ffn_hidden is not None else round(gen.ffn_multiplier * gen.hidden)
    rows = 0
    if gen.position == "learned":
        rows = gen.sequence_length if gen.max_positions is None else gen.max_positions
    return TransformerShape(
        layers=gen.layers,
        hidden=gen.hidden,
        heads=gen.heads,
        kv_heads=gen.key_value_heads,
        ffn_hidden=ffn,
        vocabulary=gen.vocabulary,
        sequence_length=gen.sequence_length,
        activation=gen.activation,
        tie_embeddings=gen.tie_embeddings,
        experts=gen.experts,
        top_k=gen.top_k,
        moe_ffn_hidden=gen.moe_ffn_hidden if gen.moe_ffn_hidden is not None else ffn,
        moe_every=gen.moe_every,
        bytes_per_element=bytes_per_element,
        head_dim=gen.head_dim if gen.head_dim is not None else gen.hidden // gen.heads,
        norm=gen.norm,
        bias=gen.bias,
        qkv_bias=gen.bias if gen.qkv_bias is None else gen.qkv_bias,
        position=gen.position,
        position_rows=rows,
        final_norm=gen.final_norm,
        dropout=gen.dropout,
    )


def shape_of(model: ModelGraph, sequence_length: int | None = None) -> TransformerShape | None:
    """The transformer a model graph was generated from; ``None`` when it is not a transformer.

    ``sequence_length`` (a scenario's ``training.sequence_length``) overrides the model's: the
    tokens a sample has are the training run's, not the context the model was built for (a Hugging
    Face config's ``max_position_embeddings`` becomes the model's ``seq_len`` otherwise). A learned
    position table keeps the model's rows.
    """
    gen = model.spec.generator
    if not isinstance(gen, TransformerGenerator):
        return None
    shape = replace(shape_of_generator(gen, model.spec.bytes_per_activation_element), name=model.name)
    if sequence_length is not None and sequence_length != shape.sequence_length:
        shape = replace(shape, sequence_length=sequence_length)
    return shape


def model_flops_per_token(shape: TransformerShape) -> float:
    """Training FLOPs per token for model FLOPs utilisation: ``6 N + 12 L q S``.

    ``N`` is the parameters a token uses (active experts only) without the embedding tables (their
    lookup is no matmul; an untied head's ``V h`` stays in, as in PaLM's appendix B);
    ``12 L q S`` is the attention scores and context, forward and backward, over the full
    ``S x S`` (no causal halving), the convention of PaLM, Megatron-LM and Calculon. With tied
    embeddings the logits GEMM is added (``6 V h``) so the head is counted either way.
    """
    n = sum(shape.active_block_params(i) for i in range(shape.layers)) + shape.vocabulary * shape.hidden
    return 6.0 * n + 12.0 * shape.layers * shape.q_width * shape.sequence_length


# -- ops ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """One kernel of one device's share of a layer, forward (see the module docstring)."""

    name: str
    kind: OpKind
    flops: float
    bytes_moved: float
    gemm_mnk: tuple[int, int, int] | None = None
    backward_flops_factor: float = 1.0
    backward_bytes_factor: float = 1.0
    kernel: str | None = None
    """The implementation when it sets the rate (``flash2``: PyTorch SDPA's FlashAttention-2)."""
    backward_bytes_moved: float | None = None
    """Bytes of a kernel only the backward runs (its forward moves nothing, so no factor of the
    forward's bytes gives them): FlashAttention-2's backward pre- and post-processing."""
    causal_grid: tuple[int, int] | None = None
    """A causal FlashAttention-2 launch as (batch x heads, tiles per head): its blocks' work grows
    with the tile index (:mod:`parplan.plan.tiles`)."""


def _gemm(name: str, m: float, n: float, k: float, e: float, *, weight_copies: float = 1.0) -> Op:
    """A GEMM ``[m, k] x [k, n]``: ``2 m n k`` FLOPs; bytes of both operands and the result.

    ``weight_copies``: distinct ``[k, n]`` weights read (grouped expert GEMMs read several).
    """
    return Op(
        name=name,
        kind="gemm",
        flops=2.0 * m * n * k,
        bytes_moved=e * (m * k + weight_copies * k * n + m * n),
        gemm_mnk=(max(1, math.ceil(m)), max(1, math.ceil(n)), max(1, math.ceil(k))),
        backward_flops_factor=BACKWARD_FLOPS["gemm"],
        backward_bytes_factor=BACKWARD_BYTES["gemm"],
    )


def _memory_op(name: str, kind: OpKind, elements: float, flops_per_element: float, bytes_: float) -> Op:
    return Op(
        name=name,
        kind=kind,
        flops=flops_per_element * elements,
        bytes_moved=bytes_,
        backward_flops_factor=BACKWARD_FLOPS[kind],
        backward_bytes_factor=BACKWARD_BYTES[kind],
    )


def _eager_op(
    name: str, kind: OpKind, elements: float, flops_per_element: float, fwd: float, bwd: float
) -> Op:
    """A memory-bound piece run as several eager kernels: ``fwd`` and ``bwd`` bytes an element."""
    return Op(
        name=name,
        kind=kind,
        flops=flops_per_element * elements,
        bytes_moved=fwd * elements,
        backward_flops_factor=BACKWARD_FLOPS[kind],
        backward_bytes_factor=bwd / fwd,
    )


def eager_bytes_per_element(piece: str, e: float, mask: float = MASK_BYTES) -> tuple[float, float]:
    """(forward, backward) bytes per element of one piece run eagerly (module docstring)."""
    f = FP32_BYTES
    table = {
        "rmsnorm": (4.0 * e + 7.0 * f, 8.0 * e + 19.0 * f),
        "layernorm": (2.0 * e, 5.0 * e),
        "rope": (2.0 * e + 4.0 * f, 2.0 * e + 4.0 * f),
        "swiglu": (5.0 * e, 9.0 * e),
        "gelu": (2.0 * e, 3.0 * e),
        "residual": (3.0 * e, 3.0 * e),
        "dropout": (2.0 * e + mask, 2.0 * e + mask),
        "softmax": (2.0 * e + 2.0 * e + (e + f) + (f + e), 2.0 * e + 2.0 * e + (e + f) + (f + e)),
        "cross_entropy": (e + 3.0 * f, e + 5.0 * f),
    }
    return table[piece]


def _norm(
    shape: TransformerShape, name: str, tokens: float, kernels: Kernels = "fused", consumers: int = 1
) -> Op:
    """LayerNorm (mean, variance, scale, shift: ~5 FLOPs an element) or RMSNorm (~4).

    ``consumers``: the eager GEMMs reading the norm's output (three for ``wq``/``wk``/``wv``, two
    for SwiGLU's ``w1``/``w3``); autograd sums their input gradients before the norm's backward
    (module docstring), which this op's backward carries.
    """
    elements = tokens * shape.hidden
    per = 5.0 if shape.norm == "layernorm" else 4.0
    if kernels == "eager":
        fwd, bwd = eager_bytes_per_element(shape.norm, shape.bytes_per_element)
        bwd += (consumers - 1) * eager_bytes_per_element("residual", shape.bytes_per_element)[1]
        return _eager_op(name, "norm", elements, per, fwd, bwd)
    return _memory_op(name, "norm", elements, per, 2.0 * elements * shape.bytes_per_element)


def _residual(shape: TransformerShape, name: str, tokens: float, kernels: Kernels = "fused") -> Op:
    """Dropout (if any) and the residual add: read two tensors, write one (and the mask)."""
    elements = tokens * shape.hidden
    mask = MASK_BYTES if shape.dropout else 0.0
    if kernels == "eager":
        fwd, bwd = eager_bytes_per_element("residual", shape.bytes_per_element)
        if shape.dropout:
            d_fwd, d_bwd = eager_bytes_per_element("dropout", shape.bytes_per_element)
            fwd, bwd = fwd + d_fwd, bwd + d_bwd
        return _eager_op(name, "elementwise", elements, 2.0, fwd, bwd)
    return _memory_op(name, "elementwise", elements, 2.0, elements * (3.0 * shape.bytes_per_element + mask))


def _tokens(shape: TransformerShape, microbatch: int, cp: int) -> float:
    return microbatch * shape.sequence_length / cp


def _kv_heads_local(shape: TransformerShape, tp: int) -> float:
    """Key/value heads on one TP rank: ``kv / tp``, at least one (replicated when ``kv < tp``)."""
    return max(shape.kv_heads / tp, 1.0)


def _repeat_kv(shape: TransformerShape, tokens: float, heads: float, kv: float) -> tuple[Op, ...]:
    """Eager grouped-query attention's ``repeat_kv`` copies of K and V at every query head."""
    if heads <= kv:
        return ()
    e, hd = shape.bytes_per_element, shape.head_dim
    copy = 2.0 * tokens * (kv + heads) * hd * e  # K and V: read kv heads, write heads
    return (_memory_op("repeat_kv", "elementwise", 2.0 * tokens * heads * hd, 0.0, copy),)


def flash_causal_block(head_dim: int) -> int:
    """Rows of the tile along which FlashAttention-2 walks the causal diagonal: its forward's query
    block (``kBlockM``) and its backward's key block (``kBlockN``), :data:`FLASH_CAUSAL_BLOCK` up to
    head dimension 128, 64 above (module docstring).

    >>> flash_causal_block(128), flash_causal_block(256)
    (128, 64)
    """
    return FLASH_CAUSAL_BLOCK if head_dim <= 128 else FLASH_CAUSAL_BLOCK // 2


def flash_causal_keys(sequence: int, head_dim: int) -> float:
    """Keys FlashAttention-2 multiplies per query row under a causal mask, on average: whole tiles
    of :func:`flash_causal_block` rows up to and including the diagonal one, so
    ``(S + block) / 2`` for ``S`` a multiple of the block (every key of a sequence shorter than one
    tile), where the mask itself keeps ``(S + 1) / 2`` (module docstring).

    >>> flash_causal_keys(8192, 128), flash_causal_keys(16, 128)
    (4160.0, 16.0)
    """
    block = flash_causal_block(head_dim)
    tiles = math.ceil(sequence / block)
    pairs = block * block * (tiles - 1) * tiles / 2.0 + (sequence - (tiles - 1) * block) * sequence
    return pairs / sequence


def flash_backward_passes(elements: float, rows: float, e: float) -> tuple[Op, Op]:
    """FlashAttention-2's backward's two memory-bound kernels beside its main one, for ``elements``
    query elements (rows x head dimension) in ``rows`` rows of ``e`` bytes: ``dot_do_o`` reads
    ``dO`` and ``O``, writes the fp32 row sums and zeroes the fp32 ``dQ`` accumulator
    (``2e + 4`` bytes an element); ``convert_dQ`` reads the accumulator and writes ``dQ``
    (``4 + e``). Their forward moves nothing (module docstring).
    """
    f = FP32_BYTES
    prep_bytes = (2.0 * e + f) * elements + f * rows
    prep = Op("attention_bwd_prep", "elementwise", 0.0, 0.0, backward_bytes_moved=prep_bytes)
    convert = Op("attention_bwd_dq", "elementwise", 0.0, 0.0, backward_bytes_moved=(f + e) * elements)
    return prep, convert


def _causal_grid(shape: TransformerShape, microbatch: int, heads: float) -> tuple[int, int]:
    """FlashAttention-2's launch grid of a causal core: ``b x h`` rows of ``S / block`` tiles."""
    tiles = math.ceil(shape.sequence_length / flash_causal_block(shape.head_dim))
    return max(1, round(microbatch * heads)), tiles


def attention_ops(
    shape: TransformerShape,
    *,
    microbatch: int,
    tp: int,
    cp: int,
    flash_attention: bool,
    kernels: Kernels = "fused",
) -> tuple[Op, ...]:
    """The attention core (between the QKV and output projections) of one device, forward."""
    e, s, b, hd = shape.bytes_per_element, shape.sequence_length, microbatch, shape.head_dim
    heads = shape.heads / tp
    kv = _kv_heads_local(shape, tp)
    tokens = _tokens(shape, microbatch, cp)
    layout: tuple[Op, ...] = ()
    if kernels == "eager":
        layout = _repeat_kv(shape, tokens, heads, kv)
        kv = max(kv, heads)  # the core reads the repeated K and V
    rows = tokens * heads  # query rows over every local head
    qo_bytes = 2.0 * tokens * heads * hd * e
    kv_bytes = 2.0 * b * s * kv * hd * e  # the whole sequence's K and V (ring attention streams it)
    if flash_attention:
        keys = flash_causal_keys(s, hd)
        return (
            *layout,
            Op(
                name="attention",
                kind="attention",
                flops=4.0 * rows * keys * hd,
                bytes_moved=qo_bytes + kv_bytes + 4.0 * rows,  # + the fp32 log-sum-exp per row
                gemm_mnk=(max(1, math.ceil(rows)), max(1, math.ceil(keys)), hd),
                backward_flops_factor=BACKWARD_FLOPS["attention"],
                backward_bytes_factor=BACKWARD_BYTES["attention"],
                kernel="flash2" if kernels == "eager" else None,  # PyTorch's SDPA
                causal_grid=_causal_grid(shape, microbatch, heads) if cp == 1 else None,
            ),
            *flash_backward_passes(rows * hd, rows, e),
        )
    scores = rows * s
    mask = (e + MASK_BYTES) if shape.dropout else 0.0
    if kernels == "eager":
        fwd, _ = eager_bytes_per_element("softmax", e)
        drop = eager_bytes_per_element("dropout", e)[0] if shape.dropout else 0.0
        softmax = _eager_op("softmax", "elementwise", scores, 5.0, fwd + drop, fwd + drop)
    else:
        softmax = _memory_op("softmax", "elementwise", scores, 5.0, scores * (2.0 * e + mask))
    return (
        *layout,
        Op(
            "attn_scores",
            "gemm",
            2.0 * rows * s * hd,
            qo_bytes / 2.0 + kv_bytes / 2.0 + scores * e,
            (max(1, math.ceil(rows)), s, hd),
            BACKWARD_FLOPS["gemm"],
            BACKWARD_BYTES["gemm"],
        ),
        softmax,
        Op(
            "attn_context",
            "gemm",
            2.0 * rows * s * hd,
            scores * e + kv_bytes / 2.0 + qo_bytes / 2.0,
            (max(1, math.ceil(rows)), hd, s),
            BACKWARD_FLOPS["gemm"],
            BACKWARD_BYTES["gemm"],
        ),
    )


def _dense_mlp(shape: TransformerShape, tokens: float, tp: int, kernels: Kernels = "fused") -> tuple[Op, ...]:
    e, h = shape.bytes_per_element, shape.hidden
    inner = shape.ffn_hidden / tp
    up_ops: tuple[Op, ...]
    if shape.activation == "swiglu" and kernels == "eager":  # w1 and w3 as two GEMMs
        up_ops = (_gemm("mlp_gate", tokens, inner, h, e), _gemm("mlp_up", tokens, inner, h, e))
    else:
        up_ops = (_gemm("mlp_up", tokens, 2.0 * inner if shape.activation == "swiglu" else inner, h, e),)
    return (
        *up_ops,
        _activation(shape, "mlp_activation", tokens * inner, kernels),
        _gemm("mlp_down", tokens, h, inner, e),
    )


def _activation(shape: TransformerShape, name: str, elements: float, kernels: Kernels = "fused") -> Op:
    """GELU (tanh form, ~8 FLOPs an element) or SwiGLU (silu(gate) x up: ~5), memory bound."""
    e = shape.bytes_per_element
    if kernels == "eager":
        per = 5.0 if shape.activation == "swiglu" else 8.0
        return _eager_op(name, "elementwise", elements, per, *eager_bytes_per_element(shape.activation, e))
    if shape.activation == "swiglu":
        return _memory_op(name, "elementwise", elements, 5.0, 3.0 * elements * e)
    return _memory_op(name, "elementwise", elements, 8.0, 2.0 * elements * e)


def _moe_mlp(
    shape: TransformerShape,
    tokens: float,
    *,
    tp: int,
    sp: bool,
    ep: int,
    capacity_factor: float,
    kernels: Kernels = "fused",
) -> tuple[Op, ...]:
    e, h = shape.bytes_per_element, shape.hidden
    router_tokens = tokens / tp if sp else tokens
    slots = tokens * shape.top_k * capacity_factor
    local = max(shape.experts / ep, 1.0)
    inner = shape.moe_ffn_hidden / tp
    up = 2.0 * inner if shape.activation == "swiglu" else inner
    per_expert = max(1, math.ceil(slots / local))  # a grouped GEMM: each expert's rows on its own
    up_op = _gemm("experts_up", slots, up, h, e, weight_copies=local)
    down_op = _gemm("experts_down", slots, h, inner, e, weight_copies=local)
    return (
        _gemm("router", router_tokens, shape.experts, h, e),
        _memory_op("dispatch", "elementwise", slots * h, 0.0, 2.0 * slots * h * e),
        replace(up_op, gemm_mnk=(per_expert, *_mnk(up_op)[1:])),
        _activation(shape, "experts_activation", slots * inner, kernels),
        replace(down_op, gemm_mnk=(per_expert, *_mnk(down_op)[1:])),
        _memory_op("combine", "elementwise", slots * h, 2.0, (slots * h + tokens * h) * e),
    )


def _mnk(op: Op) -> tuple[int, int, int]:
    return op.gemm_mnk if op.gemm_mnk is not None else (1, 1, 1)


def block_ops(
    shape: TransformerShape,
    *,
    microbatch: int,
    tp: int,
    sp: bool,
    cp: int,
    flash_attention: bool,
    ep: int = 1,
    capacity_factor: float = 1.0,
    layer: int = 0,
    kernels: Kernels = "fused",
) -> tuple[Op, ...]:
    """Forward kernels of block ``layer`` for one micro-batch on one device, in execution order.

    The TP/SP/CP/EP communication between them is the plan's (not listed here). ``kernels``: the
    memory-bound work as fused chains or as PyTorch's eager kernels (module docstring).
    """
    e, h = shape.bytes_per_element, shape.hidden
    tokens = _tokens(shape, microbatch, cp)
    seq_tokens = tokens / tp if sp else tokens  # norms, dropout and residuals under SP
    heads = shape.heads / tp
    kv = _kv_heads_local(shape, tp)
    eager = kernels == "eager"
    ops: list[Op] = [_norm(shape, "attn_norm", seq_tokens, kernels, consumers=3 if eager else 1)]
    if kernels == "eager":  # torchtitan's wq, wk, wv and Hugging Face's q/k/v_proj: three GEMMs
        hd = shape.head_dim
        ops += [_gemm(n, tokens, w * hd, h, e) for n, w in (("q", heads), ("k", kv), ("v", kv))]
    else:
        ops.append(_gemm("qkv", tokens, (heads + 2.0 * kv) * shape.head_dim, h, e))
    if shape.position == "rope":
        elements = tokens * (heads + kv) * shape.head_dim
        if kernels == "eager":
            ops.append(_eager_op("rope", "elementwise", elements, 3.0, *eager_bytes_per_element("rope", e)))
        else:
            ops.append(_memory_op("rope", "elementwise", elements, 3.0, 2.0 * elements * e))
    ops.extend(
        attention_ops(
            shape, microbatch=microbatch, tp=tp, cp=cp, flash_attention=flash_attention, kernels=kernels
        )
    )
    ops.append(_gemm("proj", tokens, h, heads * shape.head_dim, e))
    ops.append(_residual(shape, "attn_residual", seq_tokens, kernels))
    split_up = eager and shape.activation == "swiglu" and not shape.is_moe(layer)  # w1 and w3
    ops.append(_norm(shape, "mlp_norm", seq_tokens, kernels, consumers=2 if split_up else 1))
    if shape.is_moe(layer):
        ops.extend(
            _moe_mlp(shape, tokens, tp=tp, sp=sp, ep=ep, capacity_factor=capacity_factor, kernels=kernels)
        )
    else:
        ops.extend(_dense_mlp(shape, tokens, tp, kernels))
    ops.append(_residual(shape, "mlp_residual", seq_tokens, kernels))
    return tuple(ops)


def embedding_ops(
    shape: TransformerShape,
    *,
    microbatch: int,
    tp: int,
    cp: int,
    sp: bool = False,
    kernels: Kernels = "fused",
) -> tuple[Op, ...]:
    """The (vocabulary-parallel) token lookup, and the position add and dropout when learned.

    Each TP rank reads the rows of its ``V / tp`` slice and writes a full ``T x h`` partial (the
    plan's all-reduce, or with ``sp`` reduce-scatter, sums them; the add and dropout then touch the
    rank's ``1 / tp`` of the tokens under SP). Eager, the backward also zero-fills the rank's whole
    table gradient before adding the rows.
    """
    e, h = shape.bytes_per_element, shape.hidden
    tokens = _tokens(shape, microbatch, cp)
    lookup = tokens * h * e * (1.0 + 1.0 / tp) + 8.0 * tokens  # rows read, partial written, int64 ids
    embedding = _memory_op("embedding", "embedding", tokens * h, 0.0, lookup)
    if kernels == "eager":
        table = shape.vocabulary / tp * h * e
        embedding = replace(embedding, backward_bytes_factor=(lookup + table) / lookup)
    ops = [embedding]
    if shape.position == "learned" or shape.dropout:
        elements = tokens * h / (tp if sp else 1)
        mask = MASK_BYTES if shape.dropout else 0.0
        if kernels == "eager":
            fwd, bwd = eager_bytes_per_element("residual", e)
            if shape.dropout:
                fwd, bwd = (
                    fwd + eager_bytes_per_element("dropout", e)[0],
                    bwd + eager_bytes_per_element("dropout", e)[1],
                )
            ops.append(_eager_op("embedding_add", "elementwise", elements, 2.0, fwd, bwd))
        else:
            ops.append(_memory_op("embedding_add", "elementwise", elements, 2.0, elements * (3.0 * e + mask)))
    return tuple(ops)


def head_ops(
    shape: TransformerShape,
    *,
    microbatch: int,
    tp: int,
    cp: int,
    sp: bool = False,
    kernels: Kernels = "fused",
) -> tuple[Op, ...]:
    """The final norm, the logits GEMM (vocabulary split over ``tp``) and the cross-entropy.

    Fused, the loss is Megatron's vocabulary-parallel cross-entropy: the logits are read, upcast to
    fp32 and normalised (~5 FLOPs an element, ``e + 8`` bytes). Eager, it is ``cross_entropy`` on
    ``logits.float()`` (module docstring).
    """
    e, h = shape.bytes_per_element, shape.hidden
    tokens = _tokens(shape, microbatch, cp)
    vocab = shape.vocabulary / tp
    logits = tokens * vocab
    if kernels == "eager":
        fwd, bwd = eager_bytes_per_element("cross_entropy", e)
        if vocab * FP32_BYTES > SOFTMAX_SMEM_BYTES:  # the row is read once per pass
            fwd, bwd = fwd + 2.0 * FP32_BYTES, bwd + FP32_BYTES
        loss = _eager_op("loss", "loss", logits, 5.0, fwd, bwd)
    else:
        loss = _memory_op("loss", "loss", logits, 5.0, logits * (e + 8.0))
    return (
        _norm(shape, "final_norm", tokens / tp if sp else tokens, kernels),
        _gemm("logits", tokens, vocab, h, e),
        loss,
    )


# -- activation memory ----------------------------------------------------------------------------


def activation_coefficients(shape: TransformerShape, layer: int = 0) -> tuple[float, float]:
    """Korthikanti's per-layer activation bytes as ``(c1, c2)``: ``s b h c1 + a s^2 b c2``.

    For 16-bit activations and byte masks, without parallelism or recomputation. GPT's block gives
    ``(34, 5)``: attention 11 (QKV input 2, Q and K 4, V 2, projection input 2, dropout mask 1),
    MLP 19 (input 2, GELU input 8, second GEMM input 8, mask 1), two norm inputs 4; the core's
    softmax output 2, its dropout mask 1 and dropout output 2 per score. Generalised: K and V scale
    with ``kv_heads``; the FFN's with its width (SwiGLU keeps three inner tensors); an MoE block
    keeps the fp32 router logits and, per routed copy, its input, inner tensors and output; no
    dropout drops the masks and the dropout output.
    """
    h = shape.hidden
    q, kv = shape.q_width / h, shape.kv_width / h
    mask = MASK_BYTES if shape.dropout else 0.0
    attention = 2.0 + 2.0 * q + 4.0 * kv + 2.0 * q + mask
    inner_tensors = 3.0 if shape.activation == "swiglu" else 2.0
    if shape.is_moe(layer):
        ratio = shape.moe_ffn_hidden / h
        copies = float(shape.top_k)
        mlp = 2.0 + 4.0 * shape.experts / h + copies * (4.0 + 2.0 * inner_tensors * ratio) + mask
    else:
        mlp = 2.0 + 2.0 * inner_tensors * shape.ffn_hidden / h + mask
    core = 5.0 if shape.dropout else 2.0
    return attention + mlp + 4.0, core


def _split_coefficients(shape: TransformerShape, layer: int) -> tuple[float, float]:
    """``c1`` split into the part TP leaves whole (norm inputs, QKV/MLP inputs, masks) and the rest."""
    c1, _ = activation_coefficients(shape, layer)
    mask = MASK_BYTES if shape.dropout else 0.0
    whole = 4.0 + 2.0 + mask + 2.0 + mask  # two norm inputs; QKV input, attention mask; MLP input, mask
    if shape.is_moe(layer):
        whole += 4.0 * shape.experts / shape.hidden  # the router runs on every token of the TP group
    return whole, c1 - whole


def block_activation_bytes(
    shape: TransformerShape,
    *,
    microbatch: int,
    tp: int,
    sp: bool,
    cp: int,
    recompute: Recompute,
    flash_attention: bool,
    layer: int = 0,
    kernels: Kernels = "fused",
    ep: int = 1,
    capacity_factor: float = 1.0,
) -> float:
    """Bytes block ``layer`` keeps for backward on one device, per micro-batch.

    ``recompute="op"`` (torchtitan's per-op policy) keeps the block's input and the outputs the
    policy saves from :func:`block_ops` (``kernels``, ``ep`` and ``capacity_factor`` say which ops
    run; :mod:`parplan.model.checkpointing`). The other modes:

    Korthikanti et al. 2022, Table 2 (``s`` here is the local ``S / cp``):

    ============================  =====================================
    no parallelism                ``s b h (34 + 5 a s / h)``
    tensor parallel               ``s b h (10 + 24 / t + 5 a s / (h t))``
    tensor + sequence parallel    ``s b h / t (34 + 5 a s / h)``
    ... + selective recompute     the ``a s^2`` term dropped
    full recompute                ``2 s b h`` (``/ t`` with SP: the sharded input is what is kept)
    ============================  =====================================

    Generalised by :func:`activation_coefficients`. With ``flash_attention`` the ``s^2`` term is
    never stored: FlashAttention keeps its output (already counted) and an fp32 log-sum-exp per
    query and head (``4 a s b / t``). With context parallelism the score term covers the local
    ``s`` queries against all ``S`` keys. Activations of ``bytes_per_element`` other than 2 scale the
    16-bit terms; masks stay one byte.
    """
    s = shape.sequence_length / cp
    b, t = microbatch, tp
    scale = shape.bytes_per_element / 2.0
    sbh = s * b * shape.hidden
    if recompute == "op":
        from parplan.model.checkpointing import op_policy_saved_bytes

        ops = block_ops(
            shape,
            microbatch=microbatch,
            tp=tp,
            sp=sp,
            cp=cp,
            flash_attention=flash_attention,
            ep=ep,
            capacity_factor=capacity_factor,
            layer=layer,
            kernels=kernels,
        )
        e = shape.bytes_per_element
        return op_policy_saved_bytes(ops, sbh * e / (t if sp else 1), e)
    if recompute == "full":
        return 2.0 * sbh * scale / (t if sp else 1)
    whole, split = _split_coefficients(shape, layer)
    masks = 2.0 * MASK_BYTES if shape.dropout else 0.0  # bytes whatever the activations' dtype
    whole_bytes = (whole - masks) * scale + masks
    split_bytes = split * scale
    per_sbh = (whole_bytes + split_bytes) / t if sp else whole_bytes + split_bytes / t
    memory = sbh * per_sbh
    if flash_attention:
        memory += 4.0 * shape.heads * s * b / t
    elif recompute != "selective":
        # softmax and dropout outputs (16-bit) and the dropout mask (byte); without dropout the softmax
        per_score = (4.0 * scale + MASK_BYTES) if shape.dropout else 2.0 * scale
        memory += shape.heads * s * shape.sequence_length * b * per_score / t
    return memory
