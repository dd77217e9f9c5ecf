"""The search's builders kept across evaluations on one network (:mod:`parplan.api.search.memo`):
figures read back from them equal figures built afresh, bit for bit, and settings or contexts
that change what the memos hold do not read another's."""

from __future__ import annotations

import dataclasses

import pytest

from parplan.api.evaluate import build_context
from parplan.api.search import memo
from parplan.api.search.space import enumerate_space
from parplan.api.search.vector import Evaluation, evaluate_candidates
from parplan.config.search import SearchSpec
from parplan.model.transformer import Op, TransformerShape
from parplan.plan.base import PlanContext
from parplan.plan.sharded.costs import transformer_shape
from tests.api.search.helpers import LLM_SAMPLES, sample


def _assert_same(a: Evaluation, b: Evaluation) -> None:
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert x.dtype == y.dtype and x.shape == y.shape, f.name
        assert x.tobytes() == y.tobytes(), f.name


def _fresh(name: str) -> tuple[PlanContext, SearchSpec]:
    scenario, _ = sample(name)
    return build_context(scenario), scenario.search or SearchSpec()


@pytest.mark.parametrize("name", LLM_SAMPLES)
def test_kept_builders_give_the_figures_of_fresh_ones(name: str) -> None:
    """An evaluation reading every memo back (the second on the network) equals the first, and
    one after :func:`memo.forget` builds anew and equals both."""
    ctx, search = _fresh(name)
    table, _ = enumerate_space(ctx, search)
    first = evaluate_candidates(ctx, search, table)
    kept = memo.builders(ctx, search, _shape(ctx))
    again = evaluate_candidates(ctx, search, table)
    assert memo.builders(ctx, search, _shape(ctx)) is kept  # read back, not rebuilt
    memo.forget(ctx.network)
    rebuilt = evaluate_candidates(ctx, search, table)
    assert memo.builders(ctx, search, _shape(ctx)) is not kept
    _assert_same(first, again)
    _assert_same(first, rebuilt)


def _shape(ctx: PlanContext) -> TransformerShape:
    return transformer_shape(ctx)


@pytest.mark.parametrize(
    "change",
    [{"dtype": "fp16"}, {"kernels": "eager"}, {"flash_attention": False}, {"tp_comm_overlap": True}],
    ids=lambda c: next(iter(c)),
)
def test_other_search_settings_do_not_read_the_first_searchs_memos(change: dict[str, object]) -> None:
    """A search with other shared settings on the same network builds its own memos: its figures
    equal those on a network that never saw the first search."""
    ctx, search = _fresh("llama3-70b-64xh100")
    table, _ = enumerate_space(ctx, search)
    evaluate_candidates(ctx, search, table)
    other = search.model_copy(update=change)
    table2, _ = enumerate_space(ctx, other)
    after = evaluate_candidates(ctx, other, table2)
    clean, _ = _fresh("llama3-70b-64xh100")
    _assert_same(after, evaluate_candidates(clean, other, table2))


def test_contexts_alike_but_for_the_batch_share_the_builders_and_their_figures() -> None:
    """A context with another global batch on the same network reads the first one's memos (no
    memo reads the training block) and gets the figures of an evaluation with none kept."""
    ctx, search = _fresh("llama3-70b-64xh100")
    table, _ = enumerate_space(ctx, search)
    evaluate_candidates(ctx, search, table)
    half = dataclasses.replace(
        ctx,
        training=ctx.training.model_copy(update={"global_batch_size": ctx.training.global_batch_size // 2}),
    )
    table2, _ = enumerate_space(half, search)
    kept = memo.builders(half, search, _shape(half))
    assert kept is memo.builders(ctx, search, _shape(ctx))
    warm = evaluate_candidates(half, search, table2)
    memo.forget(ctx.network)
    cold = evaluate_candidates(half, search, table2)
    assert len(table2)  # candidates of the half batch (other micro-batch counts)
    _assert_same(warm, cold)


@pytest.mark.parametrize("name", LLM_SAMPLES)
def test_memos_per_mesh_shape_give_the_figures_of_each_mesh_on_its_own(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Structures of one mesh shape share its stage types, static figures, sums and stage
    classes, and find its groups from runs of ranks (:meth:`Meshes.shape`); with no mesh known
    by shape (each mesh worked out on its own, its groups from their devices) the figures are the
    same, bit for bit."""
    from parplan.api.search.meshes import Meshes

    ctx, search = _fresh(name)
    table, _ = enumerate_space(ctx, search)
    shared = evaluate_candidates(ctx, search, table)
    memo.forget(ctx.network)
    monkeypatch.setattr(Meshes, "shape", lambda self, mesh: None)
    alone = evaluate_candidates(ctx, search, table)
    _assert_same(shared, alone)


@pytest.mark.parametrize("name", LLM_SAMPLES)
def test_rooflines_sharing_their_ops_seconds_equal_fresh_ones(name: str) -> None:
    """Rooflines of every recomputation, micro-batch size and SP sharing one memo of op seconds
    (the chunk builder's, per device kind and dtype) give the block figures and memory-bound share
    of a Roofline of their own, bit for bit, whichever is worked out first."""
    from parplan.plan.sharded.blocks import Roofline
    from parplan.plan.sharded.costs import block_figures, block_memory_share
    from parplan.plan.sharded.mesh import build_mesh
    from tests.api.search.helpers import first_candidate

    ctx, strategy = first_candidate(name)
    mesh = build_mesh(strategy, ctx.network)
    info = ctx.network.device(mesh.devices[0])
    shared: dict[tuple[Op, bool], float] = {}
    separate = 0
    variants = [
        {"recompute": recompute, "microbatch_size": size, "sequence_parallel": sp and strategy.tp > 1}
        for size in (1, 2)
        for sp in (False, True)
        for recompute in ("full", "none", "selective", "op")
    ]
    for update in variants:
        s = strategy.model_copy(update=update)
        roof = Roofline(ctx, s, _shape(ctx), info, op_memo=shared)
        own: dict[tuple[Op, bool], float] = {}
        alone = Roofline(ctx, s, _shape(ctx), info, op_memo=own)
        assert block_figures(ctx, s, mesh, info, roof=roof) == block_figures(ctx, s, mesh, info, roof=alone)
        assert block_memory_share(ctx, s, mesh, info, roof=roof) == block_memory_share(ctx, s, mesh, info)
        separate += len(own)
    assert len(shared) * 3 < separate  # the recomputation variants ran the same ops: timed once
