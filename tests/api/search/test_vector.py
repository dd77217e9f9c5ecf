"""The vectorized evaluation equals the scalar closed form candidate by candidate."""

from __future__ import annotations

import dataclasses
from dataclasses import fields

import numpy as np
import pytest

from parplan.api.search import vector
from parplan.api.search.meshes import Meshes, applies
from parplan.api.search.space import CandidateTable, enumerate_space
from parplan.api.search.vector import BOUND_NAMES, Evaluation, evaluate_candidates
from parplan.api.sharded_analytic import evaluate_sharded
from parplan.config.search import SearchSpec
from parplan.errors import PlanError
from parplan.plan.sharded.costs import transformer_shape
from parplan.plan.sharded.mesh import build_mesh
from tests.api.search.helpers import LLM_SAMPLES, first_candidate, sample, search_of


def _check_rows(name: str, table: CandidateTable, ev: Evaluation, rows: np.ndarray) -> None:
    """Each of ``rows`` equals :func:`evaluate_sharded`: step and MFU to 1e-9, memory to 1e-12,
    the same bound and fit."""
    _, ctx = sample(name)
    search = search_of(name)
    for i in rows:
        est = evaluate_sharded(ctx, table.strategy(int(i), search))
        assert ev.step_time_s[i] == pytest.approx(est.step_time_s, rel=1e-9), table.label(int(i))
        assert ev.mfu[i] == pytest.approx(est.mfu, rel=1e-9)
        peak = max(m.total_bytes for m in est.memory)
        assert ev.peak_memory_bytes[i] == pytest.approx(peak, rel=1e-12), table.label(int(i))
        assert est.bound.startswith(BOUND_NAMES[ev.bound[i]] + "-bound")
        cap = min(m.capacity_bytes for m in est.memory)
        assert ev.fits[i] == (peak <= cap * (1 - search.memory_headroom))


@pytest.mark.parametrize("name", LLM_SAMPLES)
def test_equals_evaluate_sharded_on_a_seeded_sample(name: str) -> None:
    _, ctx = sample(name)
    search = search_of(name)
    table, _ = enumerate_space(ctx, search)
    rows = np.sort(np.random.default_rng(7).choice(len(table), size=min(25, len(table)), replace=False))
    part = table.take(rows)
    _check_rows(name, part, evaluate_candidates(ctx, search, part), np.arange(len(part)))


@pytest.mark.parametrize("name", LLM_SAMPLES)
def test_equals_evaluate_sharded_in_the_whole_space(name: str) -> None:
    """The whole space evaluated at once (every structure sharing the per-block memos), checked on
    a seeded sample of 40 rows plus one seeded row of every (FSDP mode, recompute mode, pipeline or
    not) and every (ZeRO stage, pipeline or not, SP) the space holds."""
    _, ctx = sample(name)
    search = search_of(name)
    table, _ = enumerate_space(ctx, search)
    ev = evaluate_candidates(ctx, search, table)
    rng = np.random.default_rng(11)
    rows = set(rng.choice(len(table), size=min(40, len(table)), replace=False).tolist())
    pipeline = table.pp > 1
    for columns in ((table.fsdp, table.recompute, pipeline), (table.zero, pipeline, table.sequence_parallel)):
        keys = np.stack([c.astype(np.int64) for c in columns], axis=1)
        for key in np.unique(keys, axis=0):
            match = np.flatnonzero(np.all(keys == key, axis=1))
            rows.add(int(rng.choice(match)))
    _check_rows(name, table, ev, np.asarray(sorted(rows)))


def test_reference_path_gives_the_same_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """Structures the array path does not cover (:func:`meshes.applies`) take the layout path, and
    both give the same figures, bit for bit."""
    _, ctx = sample("gpt3-175b-1024xa100")
    search = search_of("gpt3-175b-1024xa100")
    table, _ = enumerate_space(ctx, search)
    part = table.take(np.sort(np.random.default_rng(3).choice(len(table), size=300, replace=False)))
    fast = evaluate_candidates(ctx, search, part)
    monkeypatch.setattr(vector, "applies", lambda *args: False)
    slow = evaluate_candidates(ctx, search, part)
    for f in fields(fast):
        assert np.array_equal(getattr(fast, f.name), getattr(slow, f.name)), f.name


@pytest.mark.parametrize("name", LLM_SAMPLES)
def test_the_samples_take_the_array_path(name: str) -> None:
    ctx, strategy = first_candidate(name)
    mesh = build_mesh(strategy, ctx.network)
    assert applies(ctx, mesh, strategy, transformer_shape(ctx))
    meshes = Meshes(ctx.network)
    assert applies(ctx, mesh, strategy, transformer_shape(ctx), meshes.kind)
    for device in ctx.network.devices[:: max(1, len(ctx.network.devices) // 50)]:
        info = ctx.network.device(device)
        assert meshes.kind(device) == meshes.kind(device) == dataclasses.replace(info, name="", group=None)


def test_order_of_rows_does_not_change_figures() -> None:
    _, ctx = sample("llama3-70b-64xh100")
    search = SearchSpec()
    table, _ = enumerate_space(ctx, search)
    ev = evaluate_candidates(ctx, search, table)
    back = np.arange(len(table))[::-1].copy()
    ev2 = evaluate_candidates(ctx, search, table.take(back))
    assert np.array_equal(ev.step_time_s[back], ev2.step_time_s)
    assert np.array_equal(ev.peak_memory_bytes[back], ev2.peak_memory_bytes)
    assert np.array_equal(ev.take(back).bound, ev2.bound)


@pytest.mark.parametrize("name", LLM_SAMPLES)
def test_search_meshes_equal_build_mesh(name: str) -> None:
    """:class:`meshes.Meshes` gives :func:`build_mesh`'s mesh for every structure of the space,
    with and without hybrid sharding."""
    _, ctx = sample(name)
    search = search_of(name)
    table, _ = enumerate_space(ctx, search)
    meshes = Meshes(ctx.network)
    _, first = np.unique(
        np.stack([table.devices, table.tp, table.pp, table.cp, table.ep], axis=1), axis=0, return_index=True
    )
    for row in first:
        strategy = table.strategy(int(row), search)
        for fsdp in ("none", "hybrid_shard"):
            variant = strategy.model_copy(update={"fsdp": fsdp, "zero": 0})
            mine, theirs = meshes.build(variant), build_mesh(variant, ctx.network)
            assert mine == theirs, table.label(int(row))
            assert mine.sizes == theirs.sizes


def test_search_meshes_refuse_what_build_mesh_refuses() -> None:
    ctx, strategy = first_candidate("llama3-70b-64xh100")
    meshes = Meshes(ctx.network)
    for update in ({"dp": 1000}, {"virtual_stages": 2, "schedule": "1f1b", "pp": 2}):
        bad = strategy.model_copy(update=update)
        with pytest.raises(PlanError) as mine:
            meshes.build(bad)
        with pytest.raises(PlanError) as theirs:
            build_mesh(bad, ctx.network)
        assert str(mine.value) == str(theirs.value)


@pytest.mark.parametrize("name", LLM_SAMPLES)
def test_keys_equal_unique_rows_of_the_stacked_columns(name: str) -> None:
    """``_keys``' one-code-per-row unique equals ``np.unique(axis=0)`` on the stacked (remapped)
    columns, on the whole space and inside seeded structures, and its too-wide fallback too."""
    _, ctx = sample(name)
    table, _ = enumerate_space(ctx, search_of(name))
    remap = {"fsdp": vector._COPIES_KEY}

    def reference(sub: CandidateTable, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        columns = [getattr(sub, n).astype(np.int64) for n in names]
        keyed = [remap[n][c] if n in remap else c for n, c in zip(names, columns, strict=True)]
        _, first, inverse = np.unique(np.stack(keyed, axis=1), axis=0, return_index=True, return_inverse=True)
        return first, inverse.reshape(-1)

    _, structures = vector._keys(table, vector._STRUCTURE)
    for part in [
        table,
        *(table.take(np.flatnonzero(structures == s)) for s in range(0, structures.max() + 1, 7)),
    ]:
        for names in (vector._STRUCTURE, vector._MICRO, vector._SYNC):
            for got, want in zip(vector._keys(part, names, remap), reference(part, names), strict=True):
                assert np.array_equal(got, want)
    wide = (*vector._STRUCTURE,) * 12  # more combinations than one int64 holds: the fallback
    assert np.prod([float(np.ptp(getattr(table, n))) + 1 for n in wide]) >= 2.0**62
    first, inverse = vector._keys(table, wide)
    want = reference(table, wide)
    assert np.array_equal(first, want[0]) and np.array_equal(inverse, want[1])


@pytest.mark.parametrize("enabled", [True, False])
def test_evaluation_pauses_the_collector_and_restores_it(
    enabled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cyclic collector is off while candidates are evaluated and as it was afterwards, also
    when the evaluation raises."""
    import gc

    name = "llama3-70b-64xh100"
    _, ctx = sample(name)
    table, _ = enumerate_space(ctx, search_of(name))
    seen: list[bool] = []
    structure = vector._Evaluator.structure

    def spy(self: vector._Evaluator, rows: np.ndarray) -> None:
        seen.append(gc.isenabled())
        structure(self, rows)

    monkeypatch.setattr(vector._Evaluator, "structure", spy)
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        evaluate_candidates(ctx, search_of(name), table.take(np.arange(min(40, len(table)))))
        assert seen and not any(seen)
        assert gc.isenabled() == enabled

        def boom(self: vector._Evaluator, rows: np.ndarray) -> None:
            raise PlanError("boom")

        monkeypatch.setattr(vector._Evaluator, "structure", boom)
        with pytest.raises(PlanError):
            evaluate_candidates(ctx, search_of(name), table)
        assert gc.isenabled() == enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_network_setup_first_changes_no_figure() -> None:
    """The set-up a benchmark times apart builds what the evaluation would build on first use:
    the figures after it equal those of a context evaluated without it."""
    from parplan.api.evaluate import build_context

    scenario, ctx = sample("llama3-70b-64xh100")
    fresh = build_context(scenario)
    search = search_of("llama3-70b-64xh100")
    table, _ = enumerate_space(fresh, search)
    vector.network_setup(fresh)
    vector.network_setup(fresh)  # again: cached
    first, second = evaluate_candidates(fresh, search, table), evaluate_candidates(ctx, search, table)
    for f in fields(first):
        assert np.array_equal(getattr(first, f.name), getattr(second, f.name)), f.name


def test_clock_memos_live_with_their_network_and_a_warm_evaluation_equals_a_cold_one() -> None:
    """The clock's closed forms and NCCL picks are memoised per network (not per process): a
    context built again starts cold, and an evaluation on warm memos equals the cold one bit
    for bit."""
    from parplan.api.evaluate import build_context
    from parplan.plan.sharded import clock

    scenario, _ = sample("llama3-70b-64xh100")
    fresh = build_context(scenario)
    assert fresh.network not in clock._NETWORK_CACHE
    search = search_of("llama3-70b-64xh100")
    table, _ = enumerate_space(fresh, search)
    cold = evaluate_candidates(fresh, search, table)
    forms, choices = clock._NETWORK_CACHE[fresh.network][3:5]
    assert forms and choices
    assert build_context(scenario).network not in clock._NETWORK_CACHE
    warm = evaluate_candidates(fresh, search, table)
    for f in fields(cold):
        assert np.array_equal(getattr(cold, f.name), getattr(warm, f.name)), f.name
        assert getattr(cold, f.name).tobytes() == getattr(warm, f.name).tobytes(), f.name
