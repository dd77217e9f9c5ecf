"""The search space: its size, its pruning and that every candidate left lays out."""

from __future__ import annotations

import numpy as np
import pytest

from parplan.api.search.space import (
    COLUMNS,
    FSDP_MODES,
    RECOMPUTE_MODES,
    SearchError,
    enumerate_space,
    space_size,
)
from parplan.config.search import SearchSpec
from parplan.plan.sharded.costs import layout_plan
from tests.api.search.helpers import LLM_SAMPLES, sample


def _search(name: str) -> SearchSpec:
    scenario, _ = sample(name)
    return scenario.search or SearchSpec(algorithms=("auto", "ring"), bucket_sizes=("25 MiB", "100 MiB"))


@pytest.mark.parametrize("name", LLM_SAMPLES)
def test_counts_add_up_and_size_needs_no_enumeration(name: str) -> None:
    _, ctx = sample(name)
    search = _search(name)
    table, size = enumerate_space(ctx, search)
    assert size.enumerated == space_size(ctx, search)
    assert size.remaining == len(table) > 0
    assert size.enumerated == size.remaining + sum(size.pruned.values())
    for column in COLUMNS:
        assert getattr(table, column).shape == (len(table),)


@pytest.mark.parametrize("name", LLM_SAMPLES)
def test_every_sampled_candidate_validates_and_lays_out(name: str) -> None:
    _, ctx = sample(name)
    search = _search(name)
    table, _ = enumerate_space(ctx, search)
    rows = np.random.default_rng(17).choice(len(table), size=min(40, len(table)), replace=False)
    labels = set()
    for row in rows:
        strategy = type(table.strategy(int(row), search)).model_validate(
            table.strategy(int(row), search).to_data()
        )
        layout = layout_plan(ctx, strategy)
        assert layout.mesh.size == table.devices[row]
        assert layout.mesh.dp == table.dp[row]
        labels.add(table.label(int(row)))
    assert len(labels) == len(rows)  # labels tell candidates apart


def test_rules_hold_on_every_row() -> None:
    _, ctx = sample("gpt3-175b-1024xa100")
    table, _ = enumerate_space(ctx, _search("gpt3-175b-1024xa100"))
    mp = table.tp * table.pp * table.cp
    assert np.all(table.devices == table.dp * mp)
    assert np.all(96 % table.tp == 0)
    assert np.all(table.pp * table.virtual_stages <= 96)
    assert np.all(1536 % (table.dp * table.microbatch_size) == 0)
    assert not np.any(table.sequence_parallel & (table.tp == 1))
    assert not np.any((table.zero > 0) & (table.fsdp != 0))
    interleaved = table.virtual_stages > 1
    m = 1536 // (table.dp * table.microbatch_size)
    assert np.all(m[interleaved] % table.pp[interleaved] == 0)
    assert not np.any((table.virtual_stages > 1) & (table.pp == 1))


def test_duplicates_collapse() -> None:
    _, ctx = sample("gpt3-175b-1024xa100")
    search = SearchSpec(
        algorithms=("auto", "ring", "tree:2"), bucket_sizes=("25 MiB", "50 MiB"), zero=(0, 1, 3)
    )
    table, size = enumerate_space(ctx, search)
    sharded = (table.zero > 0) | (table.fsdp > 0)
    assert not np.any(sharded & (table.algorithm > 0))  # no DP all-reduce: one algorithm row
    assert not np.any(((table.zero == 3) | (table.fsdp > 0)) & (table.bucket > 0))
    keys = np.stack([getattr(table, c).astype(np.int64) for c in COLUMNS], axis=1)
    assert len(np.unique(keys, axis=0)) == len(table)
    assert size.pruned["algorithm variants of a plan without a data-parallel all-reduce"] > 0


def test_defaults_follow_the_model_and_the_cluster() -> None:
    _, ctx = sample("llama3-70b-64xh100")
    table, _ = enumerate_space(ctx, SearchSpec())
    assert set(np.unique(table.tp)) <= {1, 2, 4, 8}  # 8 GPUs per node, 8 KV heads
    assert set(np.unique(table.microbatch_size)) <= {1, 2, 4, 8}
    assert set(np.unique(table.devices)) == {64}
    assert set(FSDP_MODES[i] for i in np.unique(table.fsdp)) == {"none", "full_shard"}
    assert set(RECOMPUTE_MODES[i] for i in np.unique(table.recompute)) == set(RECOMPUTE_MODES)


def test_enumeration_is_deterministic_and_take_keeps_rows() -> None:
    _, ctx = sample("llama3-70b-64xh100")
    a, _ = enumerate_space(ctx, SearchSpec())
    b, _ = enumerate_space(ctx, SearchSpec())
    for column in COLUMNS:
        assert np.array_equal(getattr(a, column), getattr(b, column))
    part = a.take(np.array([3, 1]))
    assert len(part) == 2 and part.label(0) == a.label(3) and part.label(1) == a.label(1)
    assert len(a.take(slice(0, 5))) == 5


def test_bad_spaces_say_why() -> None:
    _, ctx = sample("llama3-70b-64xh100")
    with pytest.raises(SearchError, match="over the limit of 10"):
        enumerate_space(ctx, SearchSpec(limit=10))
    with pytest.raises(SearchError, match="more than the cluster's 64 GPUs"):
        enumerate_space(ctx, SearchSpec(devices=(128,)))
    with pytest.raises(SearchError, match=r"no candidate plan is left.*does not divide"):
        enumerate_space(ctx, SearchSpec(devices=(63,), tp=(2,)))
