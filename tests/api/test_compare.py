"""Comparing plans: sweep parsing, variants, de-duplication, Pareto front, ranking, process pools."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.api.knobs import KNOBS, Sweep, parse_setting, parse_sweep, parse_value
from parplan.api.parallel import evaluate_variants
from parplan.api.ranking import pareto_front, rank_results
from parplan.api.results import PlanResult
from parplan.api.variants import (
    Variant,
    as_configured,
    dedupe_variants,
    expand_variants,
    merge_sweeps,
    scaling_key,
)
from parplan.config.loader import load_scenario
from parplan.config.scenario import ScenarioSpec
from parplan.errors import PlanError

SCENARIOS = Path(__file__).resolve().parents[2] / "sample_configs" / "scenarios"


@pytest.fixture(scope="module")
def quickstart() -> ScenarioSpec:
    return load_scenario(SCENARIOS / "quickstart.yaml")


SAMPLE_VALUES = {
    "algorithm": "tree:4",
    "num_replicas": "2",
    "bucket_size": "1MiB",
    "overlap": "off",
    "batch_split": "by_speed",
    "reduce": "sum",
    "microbatches": "2",
    "schedule": "1f1b",
    "num_clients": "3",
    "rounds": "2",
    "local_steps": "2",
    "population_size": "2",
    "generations": "2",
    "tp": "8",
    "pp": "4",
    "dp": "16",
    "cp": "2",
    "ep": "8",
    "virtual_stages": "2",
    "microbatch_size": "2",
    "sequence_parallel": "on",
    "recompute": "selective",
    "zero": "1",
    "fsdp": "full_shard",
}


def test_every_override_knob_can_be_swept_and_set() -> None:
    """One knob table: each knob the evaluator overrides is one a sweep and --set accept."""
    assert set(SAMPLE_VALUES) == set(KNOBS)
    for knob, text in SAMPLE_VALUES.items():
        (value,) = parse_sweep(f"{knob}={text}").values
        assert parse_setting(f"{knob}={text}") == (knob, value)


def test_parse_sweep_values() -> None:
    assert parse_sweep("num_replicas=2, 4,4,8") == Sweep("num_replicas", (2, 4, 8))
    assert parse_sweep("algorithm=ring,tree:2,tree:4,centralized").values == (
        "ring",
        "tree:2",
        "tree:4",
        "centralized",
    )
    assert parse_sweep("overlap=on,off") == Sweep("overlap", (True, False))
    assert parse_sweep("bucket_size=25MiB,1 GB").values == ("25MiB", "1 GB")
    assert parse_setting("schedule=1f1b") == ("schedule", "1f1b")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("algorithm", "expected knob=value1,value2"),
        ("bogus=1", "unknown sweep knob 'bogus'; valid: algorithm, num_replicas"),
        ("algorithm=foo", "unknown algorithm 'foo'; valid: centralized, tree, ring"),
        ("algorithm=tree:1", "arity"),
        ("num_replicas=two", "'two' is not an integer"),
        ("num_replicas=0", "0 must be >= 1"),
        ("overlap=maybe", "is not a boolean"),
        ("schedule=zigzag", "'zigzag' is not one of gpipe, 1f1b"),
        ("bucket_size=lots", "is not a valid size"),
        ("bucket_size=0", "must be more than 0 bytes"),
    ],
)
def test_bad_sweeps_say_why(text: str, message: str) -> None:
    with pytest.raises(PlanError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_sweep(text)


def test_parse_value_names_the_option() -> None:
    with pytest.raises(PlanError, match=r"^--algorithm: 'x'"):
        parse_value("algorithm", "x", where="--algorithm")
    with pytest.raises(PlanError, match="--set: unknown knob 'speed'"):
        parse_setting("speed=9")


def test_expand_variants_applies_sweeps_only_where_they_fit(quickstart: ScenarioSpec) -> None:
    variants = expand_variants(
        quickstart.plans, [parse_sweep("num_replicas=2,4"), parse_sweep("microbatches=2,8")]
    )
    names = [v.name for v in variants]
    assert names[0] == "local"  # no knob applies: evaluated as it is
    assert "dp-ring[num_replicas=2]" in names and "dp-ring[num_replicas=4]" in names
    assert "pipeline-2[microbatches=2]" in names and "pipeline-2[microbatches=8]" in names
    assert len(names) == 1 + 3 * 2 + 2


def test_merge_sweeps_command_line_wins() -> None:
    merged = merge_sweeps(
        [Sweep("num_replicas", (2,)), Sweep("algorithm", ("ring",))], [Sweep("num_replicas", (8,))]
    )
    assert merged == [Sweep("num_replicas", (8,)), Sweep("algorithm", ("ring",))]


def test_dedupe_keeps_the_plan_that_already_had_the_value(quickstart: ScenarioSpec) -> None:
    variants = expand_variants(quickstart.plans, [parse_sweep("algorithm=ring,tree:2,centralized")])
    kept, dropped = dedupe_variants(variants)
    names = [v.name for v in kept]
    assert names == [
        "local",
        "dp-ring[algorithm=ring]",
        "dp-tree[algorithm=tree:2]",
        "dp-centralized[algorithm=centralized]",
        "pipeline-2",
    ]
    assert dropped["dp-tree[algorithm=ring]"] == "dp-ring[algorithm=ring]"
    assert dropped["dp-ring[algorithm=centralized]"] == "dp-centralized[algorithm=centralized]"
    assert len(dropped) == 6


def test_as_configured_finds_the_unswept_variant(quickstart: ScenarioSpec) -> None:
    variants = expand_variants(quickstart.plans, [parse_sweep("num_replicas=2,4")])
    configured = as_configured("dp-ring", variants)
    assert configured is not None and configured.name == "dp-ring[num_replicas=4]"
    assert as_configured("nope", variants) is None


def test_scaling_key(quickstart: ScenarioSpec) -> None:
    by_name = {p.name: p for p in quickstart.plans}
    assert scaling_key(Variant(by_name["dp-tree"])) == ("tree:2", 4)
    assert scaling_key(Variant(by_name["dp-ring"], {"algorithm": "tree:4", "num_replicas": 2})) == (
        "tree:4",
        2,
    )
    assert scaling_key(Variant(by_name["local"])) == ("local", None)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=30))
def test_pareto_front(points: list[tuple[int, int]]) -> None:
    flags = pareto_front([(float(t), float(m)) for t, m in points])

    def dominates(a: tuple[int, int], b: tuple[int, int]) -> bool:
        return a[0] <= b[0] and a[1] <= b[1] and a != b

    for p, on in zip(points, flags, strict=True):
        beaten = any(dominates(q, p) for q in points)
        assert on == (not beaten)
    assert any(flags)


def test_rank_results(quickstart: ScenarioSpec) -> None:
    variants = expand_variants(quickstart.plans, [])
    results = evaluate_variants(quickstart, variants)
    ranked, failed = rank_results(variants, results)
    assert failed == []
    per_sample = [r.time_per_sample_s for r in ranked]
    assert per_sample == sorted(per_sample)
    assert [r.rank for r in ranked] == list(range(1, len(ranked) + 1))
    local = next(r for r in ranked if r.variant_name == "local")
    assert local.speedup == 1.0  # the default baseline is the local plan
    ring = next(r for r in ranked if r.variant_name == "dp-ring")
    assert ring.speedup == pytest.approx(local.time_per_sample_s / ring.time_per_sample_s)
    assert local.pareto  # fastest per sample
    ranked_b, _ = rank_results(variants, results, baseline="dp-ring")
    assert next(r for r in ranked_b if r.variant_name == "dp-ring").speedup == 1.0
    with pytest.raises(PlanError, match="baseline 'nope'"):
        rank_results(variants, results, baseline="nope")


def test_infeasible_plans_rank_last_and_never_on_the_front() -> None:
    scenario = load_scenario(SCENARIOS / "pipeline.yaml")
    variants = expand_variants(scenario.plans, [])
    ranked, _ = rank_results(variants, evaluate_variants(scenario, variants), baseline="1f1b")
    assert ranked[-1].variant_name == "gpipe" and not ranked[-1].result.fits
    assert not ranked[-1].pareto
    assert all(r.result.fits for r in ranked[:-1])


def test_failed_variants_carry_their_error(quickstart: ScenarioSpec) -> None:
    variants = expand_variants(quickstart.plans[:2], [parse_sweep("num_replicas=4,64")])
    results = evaluate_variants(quickstart, variants)
    ranked, failed = rank_results(variants, results)
    assert [name for name, _ in failed] == ["dp-ring[num_replicas=64]"]
    assert "64" in failed[0][1]
    assert len(ranked) == 2


def test_jobs_give_the_same_results_as_one_process(quickstart: ScenarioSpec) -> None:
    variants = expand_variants(quickstart.plans, [parse_sweep("num_replicas=2,4,64")])
    seen: list[tuple[int, int]] = []
    one = evaluate_variants(quickstart, variants, jobs=1)
    two = evaluate_variants(
        quickstart, variants, jobs=2, progress=lambda done, total: seen.append((done, total))
    )
    assert [d for d, _ in seen] == list(range(1, len(variants) + 1))
    for a, b in zip(one, two, strict=True):
        if isinstance(a, str):
            assert a == b
        else:
            assert isinstance(b, PlanResult)
            assert a.to_dict() == b.to_dict()
            assert b.sim is None and b.work is None  # the timeline stays in the worker
    assert [r.variant_name for r in rank_results(variants, one)[0]] == [
        r.variant_name for r in rank_results(variants, two)[0]
    ]
