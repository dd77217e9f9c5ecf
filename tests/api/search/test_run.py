"""search_scenario: the order of its steps (size check before any work), ranking, the Pareto front,
chunking that changes nothing, and the re-simulated best plans."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from parplan.api.pareto import non_dominated
from parplan.api.search import run, spread
from parplan.api.search.run import front_rows, rank_rows, search_scenario
from parplan.api.search.space import SearchError
from parplan.api.search.spread import chunk_bounds
from parplan.api.search.vector import Evaluation
from parplan.report.json_report import dumps
from parplan.report.search import search_document

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "sample_configs"


def small_scenario(tmp_path: Path, search: str, plans: str = "") -> Path:
    """A Llama-3-70B-on-64-H100 scenario with the given search: block (YAML lines, indented 2)."""
    text = (
        "name: small-search\n"
        f"cluster: {SAMPLES / 'clusters' / 'dgx-h100-8nodes.yaml'}\n"
        f"model: {SAMPLES / 'models' / 'llama-3.1-70b.yaml'}\n"
        "training: {global_batch_size: 128}\n"
        f"search:\n{search}"
    )
    if plans:
        text += f"plans:\n{plans}"
    path = tmp_path / "search.yaml"
    path.write_text(text, encoding="utf-8")
    return path


SMALL = """  devices: [64]
  tp: [4, 8]
  pp: [1, 4]
  virtual_stages: [1]
  microbatch_size: [1, 2]
  recompute: [selective, full]
  top_k: 2
"""
FSDP_64 = "  - name: fsdp-64\n    strategy: {kind: sharded, dp: 64, recompute: full, fsdp: full_shard}\n"


def evaluation(step: list[float], memory: list[float], fits: list[bool]) -> Evaluation:
    n = len(step)
    return Evaluation(
        step_time_s=np.asarray(step, dtype=np.float64),
        peak_memory_bytes=np.asarray(memory, dtype=np.float64),
        mfu=np.zeros(n),
        fits=np.asarray(fits, dtype=bool),
        bound=np.zeros(n, dtype=np.int8),
    )


def test_rank_puts_fitting_plans_first_by_step_ties_by_row() -> None:
    ev = evaluation([3.0, 1.0, 2.0, 1.0, 0.5], [1, 1, 1, 1, 1], [True, True, True, True, False])
    assert rank_rows(ev).tolist() == [1, 3, 2, 0, 4]


def test_front_equals_non_dominated_over_every_candidate() -> None:
    rng = np.random.default_rng(7)
    n = 600
    step = np.round(rng.uniform(1, 10, n), 1)  # rounded: ties on every axis
    memory = np.round(rng.uniform(1, 80, n), 0)
    fits = rng.uniform(size=n) < 0.8
    devices = rng.choice([32, 64, 128], size=n)
    ev = evaluation(step.tolist(), memory.tolist(), fits.tolist())
    table: Any = SimpleNamespace(devices=devices)
    fitting = np.flatnonzero(fits)
    flags = non_dominated([(step[i], memory[i], float(devices[i])) for i in fitting])
    expected = np.zeros(n, dtype=bool)
    expected[fitting[np.asarray(flags)]] = True
    assert front_rows(table, ev).tolist() == expected.tolist()


def test_chunks_cover_every_row_once() -> None:
    for rows, workers in [(1, 1), (10, 1), (1000, 3), (300_000, 2)]:
        bounds = chunk_bounds(rows, workers)
        assert bounds[0][0] == 0 and bounds[-1][1] == rows
        assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
        assert max(b - a for a, b in bounds) <= max(spread.CHUNK_ROWS, math.ceil(rows / 4))


def test_size_is_checked_before_any_enumeration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def enumerated(*args: object) -> None:
        raise AssertionError("enumerated a space over its limit")

    monkeypatch.setattr(run, "enumerate_space", enumerated)
    with pytest.raises(SearchError, match=r"over the limit of 5; .* --limit \d+"):
        search_scenario(small_scenario(tmp_path, SMALL), limit=5)


def test_search_ranks_resimulates_and_places_the_scenarios_plans(tmp_path: Path) -> None:
    result = search_scenario(small_scenario(tmp_path, SMALL, FSDP_64))
    assert result.counts.evaluated == len(result.table) > 0
    assert result.counts.fitting + result.counts.over_memory == result.counts.evaluated
    steps = [r.step_time_s for r in result.rows() if r.fits]
    assert steps == sorted(steps)
    winner = result.winner
    assert winner is not None and winner.pareto and result.winner_bound
    assert [c.name for c in result.top] == [r.label for r in result.rows(2)]
    for checked in result.top:
        assert checked.analytic is not None and checked.event is not None
        assert checked.analytic.step_time_s == pytest.approx(
            result.evaluation.step_time_s[result.order[result.top.index(checked)]], rel=1e-9
        )
        assert checked.disagreement is not None and abs(checked.disagreement) < 0.25
    (hand,) = result.hand_written
    assert hand.name == "fsdp-64" and hand.analytic is not None and hand.would_rank is not None
    assert winner.step_time_s <= hand.analytic.step_time_s


def test_chunking_and_workers_change_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = small_scenario(tmp_path, SMALL)
    whole = dumps(search_document(search_scenario(path, top_k=1)))
    monkeypatch.setattr(spread, "CHUNK_ROWS", 7)
    seen: list[tuple[int, int]] = []
    chunked = search_scenario(path, top_k=1, jobs=2, progress=lambda d, t: seen.append((d, t)))
    assert dumps(search_document(chunked)) == whole
    assert len(seen) > 3 and seen[-1][0] == seen[-1][1] == chunked.counts.evaluated


def test_a_plain_scenario_searches_the_default_space(tmp_path: Path) -> None:
    path = tmp_path / "plain.yaml"
    text = (SAMPLES / "scenarios" / "llama3-70b-64xh100.yaml").read_text(encoding="utf-8")
    text = text.replace("../", f"{SAMPLES}/")
    head, _, plans = text.partition("\nsearch:")
    path.write_text(head + "\nplans:" + plans.partition("\nplans:")[2], encoding="utf-8")
    result = search_scenario(path, top_k=0, limit=50_000)
    assert result.search.devices is None and result.search.virtual_stages == (1, 2)  # the defaults
    assert result.counts.evaluated > 100 and len(result.hand_written) == 4


def test_algorithms_and_buckets_are_named_in_the_rows(tmp_path: Path) -> None:
    space = (
        SMALL
        + "  algorithms: [ring, 'tree:2']\n  bucket_sizes: [25 MiB, 100 MiB]\n  zero: [0]\n  fsdp: [none]\n"
    )
    result = search_scenario(small_scenario(tmp_path, space), top_k=0, limit=10_000)
    assert {r.fields["algorithm"] for r in result.rows()} >= {"ring"}
    assert {r.fields["bucket_bytes"] for r in result.rows()} <= {25 * 2**20, 100 * 2**20}
    assert result.search.limit == 10_000 and result.search.algorithms  # the block kept, the limit replaced
