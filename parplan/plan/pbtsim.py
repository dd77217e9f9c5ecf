"""Real population-based training on a seeded toy objective whose optimum is known.

PBT (Jaderberg et al. 2017) as the plan times it, generation by generation: every member trains
``steps`` steps of gradient ascent on a surrogate objective shaped by its hyperparameters ``h``, is
evaluated on the true objective ``Q``, then (except after the last generation) the population
exploits and explores:

- ``truncation(fraction)``: members are ranked by score (ties to the lower id); each of the bottom
  ``n = max(1, floor(fraction x P))`` copies the weights and hyperparameters of a member drawn
  uniformly from the top ``n``.
- ``tournament(size)``: each member meets ``size - 1`` distinct others drawn at random and copies
  the best of them if that one scores strictly higher; all decisions read the scores before any copy.
- ``perturb(factors)``: a member that copied multiplies each hyperparameter by a factor drawn from
  ``factors``; ``resample(probability)``: each hyperparameter of a member that copied is redrawn
  from its prior with that probability.

The toy objective (:class:`ToyObjective`) has weights ``theta`` and hyperparameters ``h`` in R^2:
the true score is ``Q(theta) = -|theta - c|^2`` with ``c = (0.6, 0.3)``, while a member trains by
gradient ascent on the surrogate ``-|theta - h|^2`` (so ``theta`` moves toward ``h`` by a factor
``1 - 2 x learning_rate`` per step). The best hyperparameters are therefore known exactly,
``h* = c`` with score 0, and PBT has to find them by exploring, while exploiting lets a member
keep the progress its weights made. Hyperparameters are positive, like learning rates and decays,
and perturbed multiplicatively; the prior is ``U(0, 1)^2`` and ``theta`` starts at 0. (The toy of
the PBT paper, ``1.2 - |theta|^2`` with one-hot ``h``, needs exploit to copy weights but not
hyperparameters; with the usual copy of both it stalls, so it is not used here.)

>>> run = run_pbt(population=8, generations=30, steps=4, seed=0)
>>> run.best_score_per_generation[-1] > run.best_score_per_generation[0]
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from parplan.config.strategy import PerturbExplore, ResampleExplore, TournamentExploit, TruncationExploit
from parplan.errors import PlanError

FloatArray = npt.NDArray[np.float64]

Exploit = TruncationExploit | TournamentExploit
Explore = PerturbExplore | ResampleExplore


@dataclass(frozen=True)
class ToyObjective:
    """The toy PBT problem: the surrogate each member trains on, the true score and the known optimum."""

    target: tuple[float, float] = (0.6, 0.3)
    learning_rate: float = 0.1
    prior_low: float = 0.0
    prior_high: float = 1.0

    @property
    def optimum_score(self) -> float:
        """The best score any member can reach (at ``theta = h = target``)."""
        return 0.0

    def initial(self, rng: np.random.Generator, population: int) -> tuple[FloatArray, FloatArray]:
        """Starting weights (zero) and hyperparameters (from the prior), shape (population, 2) each."""
        return np.zeros((population, 2)), self.sample_prior(rng, (population, 2))

    def sample_prior(self, rng: np.random.Generator, shape: tuple[int, ...]) -> FloatArray:
        """Hyperparameters drawn from the prior."""
        return rng.uniform(self.prior_low, self.prior_high, size=shape)

    def train(self, theta: FloatArray, h: FloatArray, steps: int) -> FloatArray:
        """``steps`` steps of gradient ascent on each member's surrogate ``-|theta - h|^2``."""
        keep = (1.0 - 2.0 * self.learning_rate) ** steps
        return np.asarray(h + (theta - h) * keep, dtype=np.float64)

    def score(self, theta: FloatArray) -> FloatArray:
        """The true objective of every member (higher is better)."""
        return np.asarray(-np.sum((theta - np.asarray(self.target)) ** 2, axis=1), dtype=np.float64)


def exploit_pairs(
    scores: FloatArray, exploit: Exploit, rng: np.random.Generator
) -> tuple[tuple[int, int], ...]:
    """The copies one exploit step makes, as ``(destination, source)`` member pairs."""
    population = len(scores)
    order = sorted(range(population), key=lambda m: (-float(scores[m]), m))  # best first
    pairs: list[tuple[int, int]] = []
    if isinstance(exploit, TruncationExploit):
        n = max(1, int(exploit.fraction * population))
        top, bottom = order[:n], order[population - n :]
        for dst in sorted(bottom):
            pairs.append((dst, int(top[int(rng.integers(n))])))
        return tuple(pairs)
    meet = min(exploit.size - 1, population - 1)
    for m in range(population):
        others = np.array([o for o in range(population) if o != m])
        opponents = rng.choice(others, size=meet, replace=False)
        best = min((int(o) for o in opponents), key=lambda o: (-float(scores[o]), o))
        if scores[best] > scores[m]:
            pairs.append((m, best))
    return tuple(pairs)


def explore_hyperparameters(
    h: FloatArray, explore: Explore, objective: ToyObjective, rng: np.random.Generator
) -> FloatArray:
    """New hyperparameters for a member that copied ``h`` (one row)."""
    if isinstance(explore, PerturbExplore):
        return np.asarray(h * rng.choice(np.asarray(explore.factors), size=h.shape), dtype=np.float64)
    redraw = rng.random(h.shape) < explore.probability
    return np.where(redraw, objective.sample_prior(rng, h.shape), h)


@dataclass(frozen=True)
class PBTResult:
    """What PBT did, generation by generation (index ``g`` is after generation ``g``'s evaluation)."""

    objective: ToyObjective
    best_score_per_generation: tuple[float, ...]
    mean_score_per_generation: tuple[float, ...]
    best_member_per_generation: tuple[int, ...]
    best_hyperparameters_per_generation: tuple[tuple[float, ...], ...]
    best_theta_per_generation: tuple[tuple[float, ...], ...]
    copies_per_generation: tuple[tuple[tuple[int, int], ...], ...]  # (dst, src) after each generation

    @property
    def best_score(self) -> float:
        """The best score seen in the last generation."""
        return self.best_score_per_generation[-1]

    @property
    def best_hyperparameters(self) -> tuple[float, ...]:
        """Hyperparameters of the best member of the last generation."""
        return self.best_hyperparameters_per_generation[-1]

    @property
    def hyperparameter_error(self) -> float:
        """Distance of the final best hyperparameters from the known best ones."""
        return float(np.linalg.norm(np.subtract(self.best_hyperparameters, self.objective.target)))


def run_pbt(
    population: int,
    generations: int,
    steps: int,
    *,
    exploit: Exploit | None = None,
    explore: Explore | None = None,
    objective: ToyObjective | None = None,
    seed: int | tuple[int, ...] = 0,
) -> PBTResult:
    """Run synchronous PBT on a toy objective; deterministic for a given seed."""
    if population < 2:
        raise PlanError(f"PBT needs a population of at least 2, got {population}")
    if generations < 1 or steps < 1:
        raise PlanError(f"generations and steps must be >= 1, got {generations} and {steps}")
    exploit = exploit or TruncationExploit(kind="truncation")
    explore = explore or PerturbExplore(kind="perturb")
    toy = objective or ToyObjective()
    seeds = [seed] if isinstance(seed, int) else list(seed)
    rng = np.random.default_rng([*seeds, 0x9B7])
    theta, h = toy.initial(rng, population)
    best_s: list[float] = []
    mean_s: list[float] = []
    best_m: list[int] = []
    best_h: list[tuple[float, ...]] = []
    best_t: list[tuple[float, ...]] = []
    copies: list[tuple[tuple[int, int], ...]] = []
    for g in range(generations):
        theta = toy.train(theta, h, steps)
        scores = toy.score(theta)
        b = int(np.argmax(scores))  # first of the best: ties to the lower id
        best_s.append(float(scores[b]))
        mean_s.append(float(np.mean(scores)))
        best_m.append(b)
        best_h.append(tuple(float(v) for v in h[b]))
        best_t.append(tuple(float(v) for v in theta[b]))
        if g == generations - 1:
            copies.append(())
            break
        pairs = exploit_pairs(scores, exploit, rng)
        src_theta, src_h = theta.copy(), h.copy()
        for dst, src in pairs:
            theta[dst] = src_theta[src]
            h[dst] = explore_hyperparameters(src_h[src], explore, toy, rng)
        copies.append(pairs)
    return PBTResult(
        toy, tuple(best_s), tuple(mean_s), tuple(best_m), tuple(best_h), tuple(best_t), tuple(copies)
    )


def summary(result: PBTResult) -> dict[str, object]:
    """Plain data for ``PlanWork.quality``: per-generation bests and the known optimum."""
    toy = result.objective
    return {
        "objective": "toy quadratic: score -|theta - c|^2, members train toward their hyperparameters",
        "best_score_per_generation": list(result.best_score_per_generation),
        "mean_score_per_generation": list(result.mean_score_per_generation),
        "best_hyperparameters_per_generation": [list(h) for h in result.best_hyperparameters_per_generation],
        "best_score": result.best_score,
        "best_hyperparameters": list(result.best_hyperparameters),
        "hyperparameter_error": result.hyperparameter_error,
        "known_optimum": {"score": toy.optimum_score, "hyperparameters": list(toy.target)},
        "copies_per_generation": [[list(p) for p in c] for c in result.copies_per_generation],
    }
