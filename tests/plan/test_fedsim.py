"""FedAvg numerics and client selection (parplan.plan.fedsim)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.config.strategy import AllSelection, FastestSelection, RandomSelection, RoundRobinSelection
from parplan.errors import PlanError
from parplan.plan import fedsim
from parplan.plan.fedsim import make_problem, run_fedavg, selection_schedule


def _random(k: int, seed: int = 0) -> RandomSelection:
    return RandomSelection(kind="random", k=k, seed=seed)


# -- selection ----------------------------------------------------------------------------------
def test_all_selects_every_client_every_round() -> None:
    assert selection_schedule(AllSelection(), 3, rounds=2) == ((0, 1, 2), (0, 1, 2))


def test_round_robin_takes_clients_in_turn_and_wraps() -> None:
    sched = selection_schedule(RoundRobinSelection(kind="round_robin", k=3), 5, rounds=5)
    assert sched == ((0, 1, 2), (0, 3, 4), (1, 2, 3), (0, 1, 4), (2, 3, 4))
    counts = np.bincount(np.concatenate(sched), minlength=5)
    assert counts.tolist() == [3, 3, 3, 3, 3]  # 5 rounds x 3 = 15 picks, each client equally often


def test_fastest_picks_the_shortest_round_trips_with_ties_to_lower_ids() -> None:
    trips = [5.0, 1.0, 3.0, 1.0, 0.5]
    sched = selection_schedule(FastestSelection(kind="fastest", k=3), 5, rounds=4, round_trip_s=trips)
    assert set(sched) == {(1, 3, 4)}
    tie = selection_schedule(FastestSelection(kind="fastest", k=1), 3, rounds=1, round_trip_s=[2.0, 1.0, 1.0])
    assert tie == ((1,),)


def test_fastest_needs_round_trips() -> None:
    with pytest.raises(PlanError, match="round trip"):
        selection_schedule(FastestSelection(kind="fastest", k=1), 3, rounds=1)


def test_k_larger_than_clients_is_an_error() -> None:
    with pytest.raises(PlanError, match="exceeds"):
        selection_schedule(_random(4), 3, rounds=1)


def test_random_selection_is_seeded_and_reproducible_per_round() -> None:
    a = selection_schedule(_random(3, seed=7), 10, rounds=20)
    b = selection_schedule(_random(3, seed=7), 10, rounds=20)
    c = selection_schedule(_random(3, seed=8), 10, rounds=20)
    assert a == b
    assert a != c
    # a round depends only on (seed, round): a shorter run is a prefix of a longer one
    assert selection_schedule(_random(3, seed=7), 10, rounds=5) == a[:5]
    assert len(set(a)) > 5  # the selection really varies between rounds


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), data=st.data(), rounds=st.integers(1, 10), seed=st.integers(0, 2**31))
def test_random_selection_invariants(n: int, data: st.DataObject, rounds: int, seed: int) -> None:
    k = data.draw(st.integers(1, n))
    for chosen in selection_schedule(_random(k, seed), n, rounds=rounds):
        assert len(chosen) == k == len(set(chosen))
        assert list(chosen) == sorted(chosen)
        assert all(0 <= c < n for c in chosen)


# -- the problem --------------------------------------------------------------------------------
def test_problem_shards_follow_the_sizes_and_the_seed() -> None:
    p = make_problem([5, 0, 12], seed=3)
    assert [len(y) for y in p.labels] == [5, 0, 12]
    assert p.features[2].shape == (12, 11)  # 10 features + bias column
    q = make_problem([5, 0, 12], seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(p.features, q.features, strict=True))
    r = make_problem([5, 0, 12], seed=4)
    assert not np.array_equal(p.features[0], r.features[0])


def test_huge_shards_are_scaled_down_but_keep_their_declared_weights() -> None:
    declared = [1_000_000, 3_000_000, 10]
    p = make_problem(declared, seed=0)
    sizes = [len(y) for y in p.labels]
    assert p.simulated_samples <= fedsim.MAX_SIM_SAMPLES + len(declared) * fedsim.MIN_SIM_SHARD
    assert sizes[1] == pytest.approx(3 * sizes[0], rel=1e-3)
    assert sizes[2] == fedsim.MIN_SIM_SHARD
    assert p.declared_samples == tuple(declared)


def test_problem_rejects_no_data() -> None:
    with pytest.raises(PlanError):
        make_problem([0, 0])
    with pytest.raises(PlanError):
        make_problem([])


# -- FedAvg -------------------------------------------------------------------------------------
def test_fedavg_loss_decreases() -> None:
    p = make_problem([100, 200, 300, 400], seed=0)
    run = run_fedavg(p, selection_schedule(AllSelection(), 4, rounds=15), local_steps=3)
    losses = np.array(run.loss_per_round)
    assert run.initial_loss == pytest.approx(np.log(2.0))  # zero weights: p = 1/2 everywhere
    assert losses[-1] < 0.7 * run.initial_loss
    assert np.all(np.diff(losses) <= 1e-12)  # full participation: monotone on this problem
    assert run.final_accuracy > 0.75
    part = run_fedavg(p, selection_schedule(_random(2), 4, rounds=15), local_steps=3)
    assert part.loss_per_round[-1] < 0.8 * part.initial_loss


def test_one_local_step_fedavg_is_full_batch_gradient_descent() -> None:
    """With one local step and every client, FedAvg's sample-weighted average of the clients'
    models is exactly one gradient step on the pooled data (FedSGD); a plain mean is not."""
    p = make_problem([30, 70, 200], seed=5)
    rounds, lr = 6, 0.5
    run = run_fedavg(p, selection_schedule(AllSelection(), 3, rounds=rounds), local_steps=1, learning_rate=lr)
    x, y = np.vstack(p.features), np.concatenate(p.labels)
    w = np.zeros(x.shape[1])
    for _ in range(rounds):
        prob = 1.0 / (1.0 + np.exp(-(x @ w)))
        w -= lr * x.T @ (prob - y) / len(y)
    np.testing.assert_allclose(run.weights, w, rtol=1e-10, atol=1e-12)
    mean = run_fedavg(
        p,
        selection_schedule(AllSelection(), 3, rounds=rounds),
        local_steps=1,
        aggregation="mean",
        learning_rate=lr,
    )
    assert not np.allclose(mean.weights, w, rtol=1e-3)


def test_single_client_fedavg_is_local_gradient_descent() -> None:
    p = make_problem([50], seed=2)
    a = run_fedavg(p, selection_schedule(AllSelection(), 1, rounds=4), local_steps=5)
    b = run_fedavg(p, selection_schedule(AllSelection(), 1, rounds=20), local_steps=1)
    np.testing.assert_allclose(a.weights, b.weights, rtol=1e-12)


def test_fedavg_and_mean_agree_on_equal_shards_and_differ_on_unequal_ones() -> None:
    sched = selection_schedule(AllSelection(), 4, rounds=10)
    equal = make_problem([100] * 4, seed=1)
    a = run_fedavg(equal, sched, local_steps=3)
    b = run_fedavg(equal, sched, local_steps=3, aggregation="mean")
    np.testing.assert_allclose(a.weights, b.weights, rtol=1e-12)
    unequal = make_problem([20, 40, 500, 2000], seed=1)
    fa = run_fedavg(unequal, sched, local_steps=3)
    me = run_fedavg(unequal, sched, local_steps=3, aggregation="mean")
    assert not np.allclose(fa.loss_per_round, me.loss_per_round, rtol=1e-3)
    # FedAvg minimises the sample-weighted objective the loss reports; the plain mean over-weights
    # the small clients and ends worse on it
    assert fa.loss_per_round[-1] < me.loss_per_round[-1]


def test_run_is_deterministic_and_records_the_selection() -> None:
    p = make_problem([40, 60, 80, 100, 120], seed=9)
    sched = selection_schedule(_random(2, seed=3), 5, rounds=8)
    a = run_fedavg(p, sched, local_steps=2)
    b = run_fedavg(p, sched, local_steps=2)
    assert a.loss_per_round == b.loss_per_round
    assert a.selected_per_round == sched
    assert len(a.loss_per_round) == len(a.accuracy_per_round) == 8


def test_bad_arguments_are_plan_errors() -> None:
    p = make_problem([10, 10], seed=0)
    with pytest.raises(PlanError, match="aggregation"):
        run_fedavg(p, [(0,)], aggregation="median")
    with pytest.raises(PlanError, match="does not exist"):
        run_fedavg(p, [(0, 2)])
    with pytest.raises(PlanError, match="local_steps"):
        run_fedavg(p, [(0,)], local_steps=0)


def test_minibatch_local_steps() -> None:
    p = make_problem([300, 500, 200], seed=4)
    sched = selection_schedule(AllSelection(), 3, rounds=10)
    full = run_fedavg(p, sched, local_steps=4)
    big = run_fedavg(p, sched, local_steps=4, batch_size=500)  # at least every shard: full batch
    np.testing.assert_array_equal(full.weights, big.weights)
    mini = run_fedavg(p, sched, local_steps=4, batch_size=32, seed=1)
    again = run_fedavg(p, sched, local_steps=4, batch_size=32, seed=1)
    other = run_fedavg(p, sched, local_steps=4, batch_size=32, seed=2)
    np.testing.assert_array_equal(mini.weights, again.weights)
    assert not np.array_equal(mini.weights, other.weights)
    assert not np.allclose(mini.weights, full.weights, rtol=1e-3)
    assert mini.loss_per_round[-1] < 0.8 * mini.initial_loss
    # a client's minibatches depend on (seed, round, client) only, not on who else was selected
    alone = run_fedavg(p, [(1,)], local_steps=3, batch_size=16, seed=5)
    together = run_fedavg(p, [(0, 1)], local_steps=3, batch_size=16, seed=5, aggregation="mean")
    solo0 = run_fedavg(p, [(0,)], local_steps=3, batch_size=16, seed=5)
    np.testing.assert_allclose(together.weights, (alone.weights + solo0.weights) / 2, rtol=1e-12)
    with pytest.raises(PlanError, match="batch_size"):
        run_fedavg(p, sched, batch_size=0)
