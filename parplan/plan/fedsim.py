"""Real federated averaging on a seeded synthetic problem, so a plan reports quality beside time.

The problem is binary logistic regression with non-IID clients, after the ``Synthetic(alpha, beta)``
data sets of Li et al. (FedProx, 2020) cut down to two classes: a global model ``w0 ~ N(0, I)``;
client ``i`` labels its data with its own model ``w_i = w0 + alpha * N(0, I)`` (concept shift) and
draws features around its own centre ``x ~ N(beta * N(0, I), I)`` (covariate shift); labels are
``y ~ Bernoulli(sigmoid(2 x . w_i))``. Shard sizes follow the plan's ``samples_per_client``.

FedAvg (McMahan et al. 2017) as the plan times it: each round the server sends the global weights
to the selected clients; each runs ``local_steps`` steps of gradient descent on minibatches of
``min(batch_size, shard)`` samples drawn without replacement from its shard (its whole shard when
``batch_size`` is ``None`` or at least the shard: FedAvg with B = infinity); the server replaces the
global weights by the average of the returned ones, weighted by the clients' sample counts
(``fedavg``) or plainly (``mean``). Minibatches come from a generator seeded by
``(seed, round, client)``, so a client's draws do not depend on who else was selected.
The loss reported each round is the federated objective: the mean log-loss over every client's
data (all clients, not only the selected ones), i.e. clients weighted by their sample counts.

:func:`selection_schedule` is the one place that decides which clients take part in each round;
the time model in :mod:`parplan.plan.strategies.federated` and the numerics here both use it.

>>> problem = make_problem([40, 40, 80], seed=1)
>>> schedule = selection_schedule(AllSelection(), 3, rounds=5)
>>> run = run_fedavg(problem, schedule, local_steps=2)
>>> run.loss_per_round[-1] < run.initial_loss
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from parplan.config.strategy import AllSelection, FastestSelection, RandomSelection, RoundRobinSelection
from parplan.errors import PlanError

FloatArray = npt.NDArray[np.float64]

MAX_SIM_SAMPLES = 200_000
"""Most samples the numerics hold in total; larger shards are scaled down in proportion (every
client keeps at least :data:`MIN_SIM_SHARD`), while the FedAvg weights keep the declared sizes."""

MIN_SIM_SHARD = 8
"""Fewest samples a client's simulated shard is cut down to."""

Selection = AllSelection | RandomSelection | RoundRobinSelection | FastestSelection


def selection_schedule(
    selection: Selection,
    num_clients: int,
    rounds: int,
    *,
    round_trip_s: Sequence[float] | None = None,
) -> tuple[tuple[int, ...], ...]:
    """The clients (sorted ids) that take part in each round.

    ``all``: every client. ``random``: ``k`` distinct clients drawn uniformly each round from a
    generator seeded by ``(selection.seed, round)``, so any round is reproducible on its own.
    ``round_robin``: round ``r`` takes clients ``r*k .. r*k+k-1`` modulo ``num_clients``.
    ``fastest``: the ``k`` clients with the shortest ``round_trip_s`` (ties to the lower id), the
    same every round.

    >>> selection_schedule(RoundRobinSelection(kind="round_robin", k=2), 3, rounds=3)
    ((0, 1), (0, 2), (1, 2))
    """
    if num_clients < 1 or rounds < 1:
        raise PlanError(f"need at least one client and one round, got {num_clients} and {rounds}")
    if isinstance(selection, AllSelection):
        return tuple(tuple(range(num_clients)) for _ in range(rounds))
    k = selection.k
    if k > num_clients:
        raise PlanError(f"client_selection.k ({k}) exceeds num_clients ({num_clients})")
    if isinstance(selection, RandomSelection):
        out = []
        for r in range(rounds):
            rng = np.random.default_rng([selection.seed, r])
            out.append(tuple(sorted(int(c) for c in rng.choice(num_clients, size=k, replace=False))))
        return tuple(out)
    if isinstance(selection, RoundRobinSelection):
        return tuple(tuple(sorted({(r * k + j) % num_clients for j in range(k)})) for r in range(rounds))
    if round_trip_s is None or len(round_trip_s) != num_clients:
        raise PlanError("fastest-k selection needs an estimated round trip for every client")
    order = sorted(range(num_clients), key=lambda c: (float(round_trip_s[c]), c))
    chosen = tuple(sorted(order[:k]))
    return tuple(chosen for _ in range(rounds))


@dataclass(frozen=True)
class FedProblem:
    """A federated data set: one shard of features (with a bias column) and 0/1 labels per client.

    ``declared_samples`` are the shard sizes the plan names (FedAvg weights); the arrays may hold
    fewer when the total was scaled down to :data:`MAX_SIM_SAMPLES`.
    """

    features: tuple[FloatArray, ...]
    labels: tuple[FloatArray, ...]
    declared_samples: tuple[int, ...]

    @property
    def num_clients(self) -> int:
        """Number of clients (shards)."""
        return len(self.features)

    @property
    def simulated_samples(self) -> int:
        """Samples actually held across all shards."""
        return int(sum(len(y) for y in self.labels))


def _scaled_shards(samples: Sequence[int]) -> list[int]:
    total = sum(samples)
    if total <= MAX_SIM_SAMPLES:
        return list(samples)
    scale = MAX_SIM_SAMPLES / total
    return [max(MIN_SIM_SHARD, round(n * scale)) if n > 0 else 0 for n in samples]


def make_problem(
    samples_per_client: Sequence[int],
    *,
    dim: int = 10,
    heterogeneity: float = 0.5,
    feature_shift: float = 0.5,
    seed: int | tuple[int, ...] = 0,
) -> FedProblem:
    """A seeded non-IID logistic-regression problem with the given shard sizes.

    ``heterogeneity`` (alpha) spreads the clients' labelling models around the global one and
    ``feature_shift`` (beta) spreads their feature centres; both 0 gives IID shards.
    """
    if not samples_per_client:
        raise PlanError("a federated problem needs at least one client")
    if any(n < 0 for n in samples_per_client):
        raise PlanError(f"client sample counts must be >= 0, got {list(samples_per_client)}")
    if sum(samples_per_client) <= 0:
        raise PlanError("the clients hold no samples at all")
    seeds = [seed] if isinstance(seed, int) else list(seed)
    rng = np.random.default_rng([*seeds, 0xFED])
    w0 = rng.normal(size=dim)
    feats, labels = [], []
    for n in _scaled_shards(samples_per_client):
        w_i = w0 + heterogeneity * rng.normal(size=dim)
        centre = feature_shift * rng.normal(size=dim)
        x = rng.normal(size=(n, dim)) + centre
        p = 1.0 / (1.0 + np.exp(-2.0 * (x @ w_i)))
        y = (rng.random(n) < p).astype(np.float64)
        feats.append(np.hstack([x, np.ones((n, 1))]))
        labels.append(y)
    return FedProblem(tuple(feats), tuple(labels), tuple(int(n) for n in samples_per_client))


def _loss_and_grad(w: FloatArray, x: FloatArray, y: FloatArray) -> tuple[float, FloatArray]:
    """Mean log-loss of logistic regression and its gradient (numerically stable)."""
    z = x @ w
    loss = float(np.mean(np.logaddexp(0.0, z) - y * z))
    p = 0.5 * (1.0 + np.tanh(0.5 * z))  # sigmoid without overflow
    grad = x.T @ (p - y) / max(len(y), 1)
    return loss, grad


def global_loss_accuracy(problem: FedProblem, w: FloatArray) -> tuple[float, float]:
    """The federated objective (mean log-loss over every sample of every client) and accuracy."""
    x = np.vstack(problem.features)
    y = np.concatenate(problem.labels)
    z = x @ w
    loss = float(np.mean(np.logaddexp(0.0, z) - y * z))
    accuracy = float(np.mean((z > 0) == (y > 0.5)))
    return loss, accuracy


@dataclass(frozen=True)
class FedAvgResult:
    """What FedAvg did, round by round (index ``r`` is after round ``r``)."""

    initial_loss: float
    loss_per_round: tuple[float, ...]
    accuracy_per_round: tuple[float, ...]
    selected_per_round: tuple[tuple[int, ...], ...]
    weights: FloatArray

    @property
    def final_accuracy(self) -> float:
        """Accuracy of the global model after the last round."""
        return self.accuracy_per_round[-1]


def run_fedavg(
    problem: FedProblem,
    selected_per_round: Sequence[Sequence[int]],
    *,
    local_steps: int = 1,
    aggregation: str = "fedavg",
    learning_rate: float = 0.5,
    batch_size: int | None = None,
    seed: int = 0,
) -> FedAvgResult:
    """Run FedAvg (or plain-mean aggregation) over the given per-round client selections."""
    if batch_size is not None and batch_size < 1:
        raise PlanError(f"batch_size must be >= 1, got {batch_size}")
    if aggregation not in ("fedavg", "mean"):
        raise PlanError(f"unknown federated aggregation {aggregation!r}; valid: fedavg, mean")
    if local_steps < 1:
        raise PlanError(f"local_steps must be >= 1, got {local_steps}")
    dim = problem.features[0].shape[1]
    w = np.zeros(dim)
    initial_loss, _ = global_loss_accuracy(problem, w)
    losses, accs, selected = [], [], []
    for r, chosen in enumerate(selected_per_round):
        ids = [int(c) for c in chosen]
        for c in ids:
            if not 0 <= c < problem.num_clients:
                raise PlanError(f"selected client {c} does not exist ({problem.num_clients} clients)")
        if ids:
            local = np.empty((len(ids), dim))
            for row, c in enumerate(ids):
                x, y = problem.features[c], problem.labels[c]
                n = len(y)
                batch = n if batch_size is None else min(batch_size, n)
                rng = np.random.default_rng([seed, r, c]) if batch < n else None
                w_c = w.copy()
                for _ in range(local_steps):
                    if rng is not None:
                        pick = rng.choice(n, size=batch, replace=False)
                        _, g = _loss_and_grad(w_c, x[pick], y[pick])
                    else:
                        _, g = _loss_and_grad(w_c, x, y)
                    w_c -= learning_rate * g
                local[row] = w_c
            if aggregation == "fedavg":
                weights = np.array([problem.declared_samples[c] for c in ids], dtype=np.float64)
                if weights.sum() <= 0:
                    weights = np.ones(len(ids))
            else:
                weights = np.ones(len(ids))
            w = (weights / weights.sum()) @ local
        loss, acc = global_loss_accuracy(problem, w)
        losses.append(loss)
        accs.append(acc)
        selected.append(tuple(ids))
    return FedAvgResult(initial_loss, tuple(losses), tuple(accs), tuple(selected), w)
