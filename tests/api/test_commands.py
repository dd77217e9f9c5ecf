"""The one library call behind each command: what it returns, what it warns about, what it raises."""

from __future__ import annotations

from pathlib import Path

import pytest

from parplan.api.compare import compare_scenario
from parplan.api.knobs import KnobOptions
from parplan.api.simulate import simulate_scenario
from parplan.errors import ParplanError

SCENARIOS = Path(__file__).resolve().parents[2] / "sample_configs" / "scenarios"
QUICKSTART = SCENARIOS / "quickstart.yaml"


def test_simulate_scenario_returns_what_the_reports_need() -> None:
    run = simulate_scenario(QUICKSTART, plans=["local", "dp-ring"])
    assert [r.name for r in run.results] == ["local", "dp-ring"]
    assert run.failed == [] and run.problems() == [] and run.named
    assert run.scenario.name and run.scenario_file == str(QUICKSTART)
    assert set(run.network.devices) >= {run.results[0].critical_device}
    assert run.overrides == {}


def test_simulate_scenario_reads_knobs_in_a_fixed_order_and_warns_about_unused_ones() -> None:
    warnings: list[str] = []
    knobs = KnobOptions(
        options={"algorithm": ("--algorithm", "tree:4"), "microbatches": ("--microbatches", None)},
        settings=["rounds=3", "num_replicas=2"],
    )
    run = simulate_scenario(QUICKSTART, plans=["dp-ring"], knobs=knobs, warn=warnings.append)
    assert list(run.overrides) == ["algorithm", "rounds", "num_replicas"]
    assert run.results[0].description.startswith("data_parallel ×2 tree:4")
    assert warnings == ["--set rounds changes none of the plans simulated (it applies to federated plans)"]


def test_simulate_scenario_lists_plans_that_cannot_be_built_and_raises_for_bad_requests() -> None:
    run = simulate_scenario(QUICKSTART, plans=["dp-ring"], knobs=KnobOptions(settings=["num_replicas=64"]))
    assert run.results == [] and [name for name, _ in run.failed] == ["dp-ring"]
    assert run.problems()[0].startswith("plan dp-ring: ")
    with pytest.raises(ParplanError, match="unknown plan 'nope'"):
        simulate_scenario(QUICKSTART, plans=["nope"])
    twice = KnobOptions(options={"algorithm": ("--algorithm", None)}, settings=["algorithm=ring"] * 2)
    with pytest.raises(ParplanError, match=r"--set algorithm given twice \(or together with --algorithm\)"):
        simulate_scenario(QUICKSTART, knobs=twice)


def test_compare_scenario_ranks_warns_and_places_variants_on_the_scaling_plot() -> None:
    warnings: list[str] = []
    seen: list[tuple[int, int]] = []
    comparison = compare_scenario(
        QUICKSTART,
        sweeps=["num_replicas=2,4", "rounds=1"],
        plans=["local", "dp-ring"],
        progress=lambda done, total: seen.append((done, total)),
        warn=warnings.append,
    )
    names = [r.variant_name for r in comparison.ranked]
    assert sorted(names) == ["dp-ring[num_replicas=2]", "dp-ring[num_replicas=4]", "local"]
    assert comparison.baseline == "local" and comparison.failed == []
    assert [s.knob for s in comparison.sweeps] == ["num_replicas", "rounds"]
    assert seen[-1] == (3, 3)
    assert warnings == ["sweep rounds changes none of the plans compared"]
    points = {(series, replicas) for series, replicas, _, _ in comparison.scaling_points()}
    assert points == {("ring", 2), ("ring", 4), ("local", None)}


def test_compare_scenario_without_any_evaluated_plan_returns_the_failures() -> None:
    warnings: list[str] = []
    comparison = compare_scenario(
        QUICKSTART, sweeps=["num_replicas=64"], plans=["dp-ring"], baseline="dp-ring", warn=warnings.append
    )
    assert comparison.ranked == [] and [n for n, _ in comparison.failed] == ["dp-ring[num_replicas=64]"]
    assert warnings == ["baseline dp-ring[num_replicas=64] could not be evaluated; no speed-ups shown"]
    with pytest.raises(ParplanError, match="baseline 'nope' is not a plan or variant compared"):
        compare_scenario(QUICKSTART, baseline="nope")


def test_validate_paths_reports_every_file_and_never_raises(tmp_path: Path) -> None:
    from parplan.api.validate_config import validate_paths

    empty = tmp_path / "empty"
    empty.mkdir()
    reports = validate_paths([SCENARIOS / "pipeline.yaml", empty, tmp_path / "missing.yaml"])
    assert [(r.kind, r.valid) for r in reports] == [("scenario", True), (None, False), (None, False)]
    (warning,) = reports[0].issues  # the memory fit of a valid scenario is checked too
    assert warning.severity == "warning" and "does not fit in device memory" in warning.message
    assert [i.message for i in reports[1].issues] == ["directory holds no .yaml, .yml, .toml or .json files"]
    assert [i.message for i in reports[2].issues] == ["does not exist"]
    found = validate_paths([SCENARIOS.parent / "partitions"])
    assert [Path(r.path).name for r in found] == ["gpt-1.3b-4stage.yaml"] and found[0].kind == "partition"


def test_file_schemas() -> None:
    import json

    from parplan.api.schema import file_schemas

    every = file_schemas()
    assert every.kinds == ("cluster", "model", "strategy", "partition", "scenario")
    assert sorted(json.loads(every.document())) == sorted(every.kinds)
    assert list(every.files()) == [f"{k}.schema.json" for k in every.kinds]
    one = file_schemas("model")
    assert json.loads(one.document())["title"] == "parplan model file"
    with pytest.raises(ParplanError, match="unknown file kind 'nope'"):
        file_schemas("nope")
