"""PBT numerics on the toy objective (parplan.plan.pbtsim)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.config.strategy import PerturbExplore, ResampleExplore, TournamentExploit, TruncationExploit
from parplan.errors import PlanError
from parplan.plan.pbtsim import ToyObjective, exploit_pairs, explore_hyperparameters, run_pbt, summary

TRUNCATION = TruncationExploit(kind="truncation", fraction=0.25)
TOURNAMENT = TournamentExploit(kind="tournament", size=2)
PERTURB = PerturbExplore(kind="perturb", factors=(0.8, 1.2))
RESAMPLE = ResampleExplore(kind="resample", probability=0.25)

SCORE_TOLERANCE = 0.02
"""PBT's best score must end within this of the known optimum (0)."""
HYPERPARAMETER_TOLERANCE = 0.15
"""... and its best hyperparameters within this distance of the known best ones (0.6, 0.3)."""


@pytest.mark.parametrize("exploit", [TRUNCATION, TOURNAMENT], ids=["truncation", "tournament"])
@pytest.mark.parametrize(
    ("explore", "population", "generations"),
    [(PERTURB, 8, 30), (RESAMPLE, 16, 20)],
    ids=["perturb", "resample"],
)
@pytest.mark.parametrize("seed", range(5))
def test_pbt_reaches_the_known_optimum_neighbourhood(
    exploit: TruncationExploit | TournamentExploit,
    explore: PerturbExplore | ResampleExplore,
    population: int,
    generations: int,
    seed: int,
) -> None:
    run = run_pbt(population, generations, 4, exploit=exploit, explore=explore, seed=seed)
    assert run.best_score >= -SCORE_TOLERANCE
    assert run.hyperparameter_error <= HYPERPARAMETER_TOLERANCE
    assert run.best_score <= run.objective.optimum_score


def test_pbt_beats_random_search_with_the_same_budget() -> None:
    """Random search: the same members trained as long without exploit/explore end at theta ~ h."""
    toy = ToyObjective()
    pbt, rs = [], []
    for seed in range(10):
        pbt.append(run_pbt(8, 30, 4, exploit=TRUNCATION, explore=PERTURB, seed=seed).best_score)
        h = toy.sample_prior(np.random.default_rng(seed), (8, 2))
        rs.append(float(toy.score(toy.train(np.zeros((8, 2)), h, 30 * 4)).max()))
    assert np.mean(pbt) > np.mean(rs)
    assert np.median(pbt) > np.median(rs) / 4  # scores are <= 0: PBT ends over 4x closer to the optimum


def test_toy_training_converges_to_the_hyperparameters() -> None:
    toy = ToyObjective()
    h = np.array([[0.6, 0.3], [0.1, 0.9]])
    theta = toy.train(np.zeros((2, 2)), h, 200)
    np.testing.assert_allclose(theta, h, atol=1e-12)
    assert toy.score(theta)[0] == pytest.approx(0.0, abs=1e-20)
    one = toy.train(np.zeros((2, 2)), h, 1)
    np.testing.assert_allclose(one, 2 * toy.learning_rate * h)  # one gradient step on -|theta - h|^2


@settings(max_examples=80, deadline=None)
@given(
    scores=st.lists(st.floats(-10, 0, allow_nan=False), min_size=2, max_size=40),
    fraction=st.floats(0.01, 0.5),
    seed=st.integers(0, 2**32 - 1),
)
def test_truncation_copies_bottom_from_top(scores: list[float], fraction: float, seed: int) -> None:
    s = np.array(scores)
    pairs = exploit_pairs(
        s, TruncationExploit(kind="truncation", fraction=fraction), np.random.default_rng(seed)
    )
    n = max(1, int(fraction * len(s)))
    assert len(pairs) == n
    dsts = [d for d, _ in pairs]
    assert len(set(dsts)) == n
    srcs = {src for _, src in pairs}
    assert not srcs & set(dsts)
    ranked = sorted(range(len(s)), key=lambda m: (-s[m], m))
    assert srcs <= set(ranked[:n])
    assert set(dsts) == set(ranked[len(s) - n :])


@settings(max_examples=80, deadline=None)
@given(
    scores=st.lists(st.floats(-10, 0, allow_nan=False), min_size=2, max_size=40),
    size=st.integers(2, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_tournament_only_copies_strictly_better_members(scores: list[float], size: int, seed: int) -> None:
    s = np.array(scores)
    pairs = exploit_pairs(s, TournamentExploit(kind="tournament", size=size), np.random.default_rng(seed))
    dsts = [d for d, _ in pairs]
    assert len(set(dsts)) == len(dsts)
    for dst, src in pairs:
        assert dst != src
        assert s[src] > s[dst]
    best = int(np.argmax(s))
    assert best not in dsts


def test_tournament_with_everyone_always_copies_the_best() -> None:
    s = np.array([0.0, -1.0, -2.0, -3.0])
    pairs = exploit_pairs(s, TournamentExploit(kind="tournament", size=4), np.random.default_rng(0))
    assert pairs == ((1, 0), (2, 0), (3, 0))


def test_explore_perturbs_by_the_factors_or_resamples_from_the_prior() -> None:
    toy = ToyObjective()
    rng = np.random.default_rng(0)
    h = np.array([0.5, 0.25])
    for _ in range(20):
        ratio = explore_hyperparameters(h, PerturbExplore(kind="perturb", factors=(0.5, 3.0)), toy, rng) / h
        assert set(np.round(ratio, 12)) <= {0.5, 3.0}
    never = explore_hyperparameters(h, ResampleExplore(kind="resample", probability=0.0), toy, rng)
    np.testing.assert_array_equal(never, h)
    always = explore_hyperparameters(h, ResampleExplore(kind="resample", probability=1.0), toy, rng)
    assert not np.any(always == h)
    assert np.all((always >= toy.prior_low) & (always < toy.prior_high))


def test_run_is_deterministic_under_its_seed() -> None:
    a = run_pbt(6, 10, 3, exploit=TOURNAMENT, seed=4)
    b = run_pbt(6, 10, 3, exploit=TOURNAMENT, seed=4)
    c = run_pbt(6, 10, 3, exploit=TOURNAMENT, seed=5)
    assert a.best_score_per_generation == b.best_score_per_generation
    assert a.copies_per_generation == b.copies_per_generation
    assert a.best_score_per_generation != c.best_score_per_generation
    assert (
        run_pbt(6, 10, 3, seed=(1, 2)).copies_per_generation
        == run_pbt(6, 10, 3, seed=(1, 2)).copies_per_generation
    )


def test_copies_happen_between_generations_only() -> None:
    run = run_pbt(8, 5, 2, exploit=TRUNCATION, seed=0)
    assert len(run.copies_per_generation) == 5
    assert run.copies_per_generation[-1] == ()
    assert all(len(c) == 2 for c in run.copies_per_generation[:-1])  # floor(0.25 x 8)


def test_summary_is_plain_data_with_the_known_optimum() -> None:
    run = run_pbt(4, 3, 2, seed=0)
    out = summary(run)
    assert out["known_optimum"] == {"score": 0.0, "hyperparameters": [0.6, 0.3]}
    assert len(out["best_score_per_generation"]) == 3  # type: ignore[arg-type]
    assert out["best_score"] == run.best_score_per_generation[-1]


def test_bad_sizes_are_plan_errors() -> None:
    with pytest.raises(PlanError):
        run_pbt(1, 3, 2)
    with pytest.raises(PlanError):
        run_pbt(4, 0, 2)
