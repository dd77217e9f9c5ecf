"""merge_worker_updates: sample-weighted gradient average and its errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.errors import RuntimeCheckError
from parplan.runtime import WorkerUpdate, merge_worker_updates


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 8), st.integers(1, 6), st.data())
def test_merge_equals_mean_over_all_samples(workers: int, dim: int, data: st.DataObject) -> None:
    rng = np.random.default_rng(data.draw(st.integers(0, 10**6)))
    per_sample = [rng.normal(size=(data.draw(st.integers(1, 9)), dim)) for _ in range(workers)]
    updates = [WorkerUpdate(g.mean(axis=0), len(g)) for g in per_sample]
    merged = merge_worker_updates(updates)
    assert merged.num_samples == sum(len(g) for g in per_sample)
    np.testing.assert_allclose(
        merged.gradient, np.concatenate(per_sample).mean(axis=0), rtol=1e-12, atol=1e-14
    )


def test_merge_does_not_alias_inputs() -> None:
    g = np.array([1.0, 2.0])
    merged = merge_worker_updates([WorkerUpdate(g, 3)])
    merged.gradient[0] = 99.0
    assert g[0] == 1.0


@pytest.mark.parametrize(
    ("updates", "message"),
    [
        ([], "no worker updates"),
        ([WorkerUpdate(np.ones(2), 0)], "reports 0 samples"),
        ([WorkerUpdate(np.ones(2), 2), WorkerUpdate(np.ones(2), -1)], "worker 1 reports -1 samples"),
        ([WorkerUpdate(np.ones(2), 2), WorkerUpdate(np.ones(3), 1)], r"worker 1's gradient has shape \(3,\)"),
    ],
)
def test_merge_errors(updates: list[WorkerUpdate], message: str) -> None:
    with pytest.raises(RuntimeCheckError, match=message):
        merge_worker_updates(updates)
