"""Adding an all-reduce algorithm is one module plus one ``register(...)`` line: a toy algorithm,
defined in this file alone, works everywhere the built-in ones do.

The toy is the *two-shot* all-reduce: every rank sends chunk ``c`` of its tensor straight to the
chunk's owner, which adds them in (a direct reduce-scatter); each owner then sends its reduced
chunk straight to every other rank (a direct all-gather). Rank ``(c + shift) mod p`` owns chunk
``c``. On a switch every phase is ``p - 1`` concurrent messages through each port, so it takes
``2 alpha + 2(p-1)/p n beta + (p-1)/p n gamma``: the ring's bandwidth with two alphas.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from pydantic import Field
from typer.testing import CliRunner

from parplan.collectives._build import StepBuffer, check_sizes
from parplan.collectives.algorithm import Algorithm, AlgorithmSpecBase, Groups, Traffic, UniformCost
from parplan.collectives.registry import ALGORITHMS, build_schedule, register, unregister
from parplan.collectives.schedule import Schedule, chunk_bounds
from parplan.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_configs"
SWITCH = str(SAMPLES / "clusters" / "switch-4hosts.yaml")

# -- the toy algorithm: everything a module of parplan/collectives would hold ------------------------


def two_shot_all_reduce(num_ranks: int, num_elements: int, *, shift: int = 0) -> Schedule:
    """Direct reduce-scatter to each chunk's owner, then direct all-gather from it."""
    check_sizes(num_ranks, num_elements)
    p = num_ranks
    bounds = chunk_bounds(num_elements, p).tolist()
    buf = StepBuffer()
    into: list[list[int]] = [[] for _ in range(p)]  # the reductions into chunk c at its owner
    for c in range(p):
        owner, lo, size = (c + shift) % p, bounds[c], bounds[c + 1] - bounds[c]
        into[c] = [buf.add(r, owner, lo, size, True, 0) for r in range(p) if r != owner]
    for c in range(p):
        owner, lo, size = (c + shift) % p, bounds[c], bounds[c + 1] - bounds[c]
        for r in range(p):
            if r != owner:
                buf.add(owner, r, lo, size, False, 1, into[c])
    return buf.build(
        algorithm="two_shot",
        collective="all_reduce",
        num_ranks=p,
        num_elements=num_elements,
        phase_names=("reduce_scatter", "all_gather"),
        meta={"shift": shift},
    )


class TwoShotAlgorithm(AlgorithmSpecBase):
    """Direct reduce-scatter then direct all-gather; rank ``(c + shift) mod p`` owns chunk ``c``."""

    name: Literal["two_shot"]
    shift: int = Field(default=0, ge=0)


class TwoShotAllReduce(Algorithm[TwoShotAlgorithm]):
    """The two-shot all-reduce (see the module docstring)."""

    name = "two_shot"
    spec_type = TwoShotAlgorithm
    short_parameter = "shift"
    abbreviation = "2shot"

    def variants(self, num_ranks: int) -> tuple[TwoShotAlgorithm, ...]:
        return (self.default_spec(), TwoShotAlgorithm(name="two_shot", shift=1))

    def build(
        self, spec: TwoShotAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        return two_shot_all_reduce(num_ranks, num_elements, shift=spec.shift)

    def closed_form_s(
        self,
        spec: TwoShotAlgorithm,
        num_ranks: int,
        size_bytes: float,
        cost: UniformCost,
        groups: Groups | None,
    ) -> float:
        p, chunk = num_ranks, size_bytes / num_ranks
        fan = p - 1 if cost.shared_port else 1  # p - 1 messages through one port, or a link each
        a, b, g = cost.alpha_s, cost.beta_s_per_byte, cost.gamma_s_per_byte
        return 2 * a + 2 * fan * chunk * b + (p - 1) * chunk * g

    def traffic(
        self, spec: TwoShotAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        # Rank r sends every chunk it does not own once and its own chunk to p - 1 ranks; it
        # receives the same amounts.
        owned = np.roll(np.diff(chunk_bounds(num_elements, num_ranks)), spec.shift)
        per_rank = num_elements + (num_ranks - 2) * owned
        return per_rank, per_rank.copy()


@pytest.fixture
def toy() -> Iterator[Algorithm[Any]]:
    algorithm = register(TwoShotAllReduce())  # the one registry line
    try:
        yield algorithm
    finally:
        unregister("two_shot")


# -- it works everywhere -----------------------------------------------------------------------------


def test_meets_every_invariant(toy: Algorithm[Any]) -> None:
    from tests.collectives.invariants import check_data_plane, check_parts, check_timing

    check_parts(toy)
    check_data_plane(toy)
    check_timing(toy)


def test_parsed_from_files_and_short_forms(toy: Algorithm[Any], tmp_path: Path) -> None:
    from parplan.config import algorithm_label, load_strategy, parse_algorithm, save_spec

    assert parse_algorithm("two_shot:2") == TwoShotAlgorithm(name="two_shot", shift=2)
    assert algorithm_label(parse_algorithm({"name": "two_shot", "shift": 3})) == "two_shot:3"
    path = tmp_path / "dp.yaml"
    path.write_text("kind: data_parallel\nnum_replicas: 4\naggregation:\n  algorithm: two_shot:1\n")
    strategy = load_strategy(path)
    assert strategy.aggregation.algorithm == TwoShotAlgorithm(name="two_shot", shift=1)
    saved = tmp_path / "saved.json"
    save_spec(strategy, saved)  # written back by its own spec, and loads back equal
    assert json.loads(saved.read_text())["aggregation"]["algorithm"] == {"name": "two_shot", "shift": 1}
    assert load_strategy(saved) == strategy
    path.write_text(
        "kind: data_parallel\nnum_replicas: 4\naggregation:\n"
        "  algorithm:\n    name: two_shot\n    shift: -1\n"
    )
    with pytest.raises(ConfigError, match=r"dp.yaml:6:5 aggregation.algorithm.shift: must be >= 0"):
        load_strategy(path)


def test_built_proven_timed_and_counted_through_the_library(toy: Algorithm[Any]) -> None:
    from parplan.collectives.volumes import expected_traffic
    from parplan.engine.analytic import allreduce_time
    from tests.collectives.cases import run_and_check
    from tests.collectives.invariants import BANDWIDTH_BPS, LINK_LATENCY_S, engine_and_closed_form

    schedule = build_schedule("two_shot:1", 5, 23)
    result = run_and_check(schedule, [np.arange(23, dtype=np.int64) * (r + 1) for r in range(5)])
    sent, received = expected_traffic("two_shot:1", 5, 23)
    np.testing.assert_array_equal(result.bytes_sent, sent * 8)
    np.testing.assert_array_equal(result.bytes_received, received * 8)
    engine, closed, size_bytes = engine_and_closed_form(toy, toy.default_spec(), 8, 2e-11)
    analytic = allreduce_time(
        "two_shot",
        8,
        size_bytes,
        alpha_s=2 * LINK_LATENCY_S,
        beta_s_per_byte=1 / BANDWIDTH_BPS,
        gamma_s_per_byte=2e-11,
    )
    assert analytic == closed == pytest.approx(engine, rel=1e-9)


def test_used_by_a_data_parallel_plan(toy: Algorithm[Any]) -> None:
    from parplan.cli.app import app

    scenario = str(SAMPLES / "scenarios" / "quickstart.yaml")
    args = ["simulate", scenario, "-p", "dp-ring", "-a", "two_shot:1", "--json", "-"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (plan,) = json.loads(result.stdout)["plans"]
    assert plan["overrides"] == {"algorithm": "two_shot:1"} and plan["num_devices"] == 4
    assert {c["algorithm"] for c in plan["collectives"]} == {"two_shot:1"}
    assert plan["step_time_s"] > 0


def test_parplan_collective(toy: Algorithm[Any]) -> None:
    from parplan.cli.app import app

    runner = CliRunner()
    base = ["collective", "-c", SWITCH, "-s", "64MiB", "--json", "-"]
    simulated = runner.invoke(app, [*base, "-a", "two_shot"])
    analytic = runner.invoke(app, [*base, "-a", "two_shot", "--analytic"])
    assert simulated.exit_code == 0 and analytic.exit_code == 0, simulated.output + analytic.output
    (row,) = json.loads(simulated.stdout)["results"]
    assert row["algorithm"] == "two_shot:0" and row["busbw_GBps"] > 0  # labels show the short form
    assert json.loads(analytic.stdout)["results"][0]["time_s"] == pytest.approx(row["time_s"], rel=1e-3)
    table = runner.invoke(app, ["collective", "-c", SWITCH, "-a", "all", "-s", "1MiB"])
    assert table.exit_code == 0, table.output
    assert "2shot:0" in table.stdout and "2shot:0 = two_shot:0" in table.stdout


def test_unregistered_it_is_gone() -> None:
    from parplan.config import parse_algorithm

    register(TwoShotAllReduce())
    unregister("two_shot")
    assert "two_shot" not in ALGORITHMS
    with pytest.raises(ValueError, match="unknown algorithm 'two_shot'"):
        parse_algorithm("two_shot")
