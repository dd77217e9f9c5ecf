"""The vectorized evaluation equals the scalar closed form candidate by candidate."""

from __future__ import annotations

import numpy as np
import pytest

from parplan.api.search.space import enumerate_space
from parplan.api.search.vector import BOUND_NAMES, evaluate_candidates
from parplan.api.sharded_analytic import evaluate_sharded
from parplan.config.search import SearchSpec
from tests.api.search.helpers import LLM_SAMPLES, sample


def _search(name: str) -> SearchSpec:
    scenario, _ = sample(name)
    return scenario.search or SearchSpec(
        algorithms=("auto", "ring"), bucket_sizes=("25 MiB", "100 MiB"), zero=(0, 1, 3)
    )


@pytest.mark.parametrize("name", LLM_SAMPLES)
def test_equals_evaluate_sharded_on_a_seeded_sample(name: str) -> None:
    _, ctx = sample(name)
    search = _search(name)
    table, _ = enumerate_space(ctx, search)
    rows = np.sort(np.random.default_rng(7).choice(len(table), size=min(25, len(table)), replace=False))
    part = table.take(rows)
    ev = evaluate_candidates(ctx, search, part)
    for i in range(len(part)):
        est = evaluate_sharded(ctx, part.strategy(i, search))
        assert ev.step_time_s[i] == pytest.approx(est.step_time_s, rel=1e-9), part.label(i)
        assert ev.mfu[i] == pytest.approx(est.mfu, rel=1e-9)
        peak = max(m.total_bytes for m in est.memory)
        assert ev.peak_memory_bytes[i] == pytest.approx(peak, rel=1e-12)
        assert est.bound.startswith(BOUND_NAMES[ev.bound[i]] + "-bound")
        cap = min(m.capacity_bytes for m in est.memory)
        assert ev.fits[i] == (peak <= cap * (1 - search.memory_headroom))


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
