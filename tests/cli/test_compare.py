"""``parplan compare-strategies``: ranking, sweeps, baselines, --jobs, --top, outputs and errors."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from parplan.cli.app import app
from parplan.report.json_report import load_schema

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "sample_configs" / "scenarios"
QUICKSTART = str(SCENARIOS / "quickstart.yaml")
PIPELINE = str(SCENARIOS / "pipeline.yaml")
TORUS = str(SCENARIOS / "torus-data-parallel.yaml")
runner = CliRunner()


def compare_json(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["compare-strategies", *args, "--json", "-"])
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    jsonschema.validate(doc, load_schema())
    return doc


def test_algorithms_ranked_with_speedups() -> None:
    result = runner.invoke(app, ["compare-strategies", TORUS])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("torus-data-parallel · ")
    assert lines[1].split()[:5] == ["#", "plan", "step", "per", "sample"]
    ring = next(line for line in lines if line.split()[1:2] == ["ring"])
    assert "1.00×" in ring  # the scenario's baseline
    assert "speed-up against ring" in result.stdout
    assert "●" in lines[2]  # the fastest plan is on the Pareto front
    doc = compare_json(TORUS)
    times = [p["time_per_sample_s"] for p in doc["plans"]]
    assert times == sorted(times)
    assert doc["baseline"] == "ring" and doc["ranking"] == "time_per_sample"
    by_name = {p["name"]: p for p in doc["plans"]}
    assert by_name["ring"]["speedup"] == 1.0
    for p in doc["plans"]:
        assert p["speedup"] == pytest.approx(by_name["ring"]["time_per_sample_s"] / p["time_per_sample_s"])


def test_sweeps_cross_plans_and_dedupe() -> None:
    doc = compare_json(QUICKSTART, "--sweep", "algorithm=ring,tree:2", "--sweep", "num_replicas=2,4")
    names = [p["name"] for p in doc["plans"]]
    assert "dp-ring[algorithm=ring,num_replicas=2]" in names
    assert "dp-tree[algorithm=tree:2,num_replicas=4]" in names
    assert "dp-tree[algorithm=ring,num_replicas=2]" not in names  # same as dp-ring's
    assert (
        doc["duplicates"]["dp-tree[algorithm=ring,num_replicas=2]"]
        == "dp-ring[algorithm=ring,num_replicas=2]"
    )
    assert doc["sweeps"] == [
        {"knob": "algorithm", "values": ["ring", "tree:2"]},
        {"knob": "num_replicas", "values": [2, 4]},
    ]
    swept = next(p for p in doc["plans"] if p["name"] == "dp-tree[algorithm=tree:2,num_replicas=4]")
    assert swept["plan"] == "dp-tree" and swept["overrides"] == {"algorithm": "tree:2", "num_replicas": 4}


def test_jobs_2_ranks_like_jobs_1() -> None:
    args = [QUICKSTART, "--sweep", "algorithm=ring,tree:2,centralized", "--sweep", "num_replicas=2,3,4,8"]
    one = runner.invoke(app, ["compare-strategies", *args, "--jobs", "1", "--json", "-"])
    two = runner.invoke(app, ["compare-strategies", *args, "--jobs", "2", "--json", "-"])
    assert one.exit_code == two.exit_code == 0
    assert one.stdout == two.stdout  # same ranking, same figures, same bytes
    assert len(json.loads(one.stdout)["failed"]) == 3  # 8 replicas on 4 hosts, once per algorithm


def test_top_limits_the_table_not_the_files() -> None:
    result = runner.invoke(app, ["compare-strategies", TORUS, "--top", "2"])
    assert result.exit_code == 0
    ranks = [line.split()[0] for line in result.stdout.splitlines()[2:] if line[:1].isdigit()]
    assert ranks == ["1", "2"]
    assert "2 more plan(s) not shown (--top 2)" in result.stdout
    assert len(compare_json(TORUS, "--top", "2")["plans"]) == 4


def test_infeasible_plans_are_marked_and_ranked_last() -> None:
    result = runner.invoke(app, ["compare-strategies", PIPELINE])
    assert result.exit_code == 0
    gpipe = next(line for line in result.stdout.splitlines() if " gpipe " in line)
    assert (
        gpipe.split()[0] == "4"
        and "98.0 GiB ✗" in gpipe
        and "memory: n0.d3 98.0 GiB > 80.0 GiB (+3)" in gpipe
    )
    doc = compare_json(PIPELINE)
    assert doc["plans"][-1]["name"] == "gpipe" and doc["plans"][-1]["fits"] is False
    assert doc["plans"][-1]["pareto"] is False


def test_variants_that_cannot_be_built_are_listed() -> None:
    result = runner.invoke(app, ["compare-strategies", QUICKSTART, "--sweep", "num_replicas=4,64"])
    assert result.exit_code == 0
    assert "✗ cannot be planned: " in result.stdout and "dp-ring[num_replicas=64]" in result.stdout
    result = runner.invoke(
        app, ["compare-strategies", QUICKSTART, "-p", "dp-ring", "--sweep", "num_replicas=64"]
    )
    assert result.exit_code == 1
    assert "error: no plan could be evaluated" in result.stderr


def test_baselines() -> None:
    doc = compare_json(QUICKSTART, "--baseline", "dp-tree")
    assert doc["baseline"] == "dp-tree"
    assert next(p for p in doc["plans"] if p["name"] == "dp-tree")["speedup"] == 1.0
    # a swept plan's name means the variant that is the plan as configured (4 replicas)
    doc = compare_json(QUICKSTART, "--sweep", "num_replicas=2,4", "--baseline", "dp-ring")
    assert doc["baseline"] == "dp-ring[num_replicas=4]"
    # copied from the table, with spaces
    doc = compare_json(QUICKSTART, "--sweep", "num_replicas=2,4", "--baseline", "dp-ring[num_replicas=2]")
    assert doc["baseline"] == "dp-ring[num_replicas=2]"
    result = runner.invoke(app, ["compare-strategies", QUICKSTART, "--baseline", "nope"])
    assert result.exit_code == 2  # a bad option value: a usage error
    assert "baseline 'nope' is not a plan or variant compared; choose from: local, dp-ring" in result.stderr


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        ("algorithm", "expected knob=value1,value2"),
        ("speed=1,2", "unknown sweep knob 'speed'"),
        ("algorithm=ring,warp", "sweep algorithm: 'warp': unknown algorithm 'warp'; valid:"),
        ("num_replicas=2,x", "sweep num_replicas: 'x' is not an integer"),
    ],
)
def test_bad_sweeps_are_usage_errors(sweep: str, message: str) -> None:
    result = runner.invoke(app, ["compare-strategies", QUICKSTART, "--sweep", sweep])
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize(
    "args", [["--jobs", "-1"], ["--top", "0"], ["--json", "-", "--csv", "-"], ["--plot", "-"]]
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    assert runner.invoke(app, ["compare-strategies", QUICKSTART, *args]).exit_code == 2


def test_missing_scenario_exits_1(tmp_path: Path) -> None:
    result = runner.invoke(app, ["compare-strategies", str(tmp_path / "none.yaml")])
    assert result.exit_code == 1 and "none.yaml" in result.stderr


def test_sweep_that_fits_no_plan_warns() -> None:
    result = runner.invoke(app, ["compare-strategies", QUICKSTART, "-p", "local", "--sweep", "rounds=1,2"])
    assert result.exit_code == 0
    assert "warning: sweep rounds changes none of the plans compared" in result.stderr


def test_csv_parses_back(tmp_path: Path) -> None:
    js, cs = tmp_path / "c.json", tmp_path / "c.csv"
    args = [
        "compare-strategies",
        QUICKSTART,
        "--sweep",
        "num_replicas=2,64",
        "--json",
        str(js),
        "--csv",
        str(cs),
    ]
    assert runner.invoke(app, args).exit_code == 0
    doc = json.loads(js.read_text())
    rows = list(csv.DictReader(io.StringIO(cs.read_text())))
    assert [r["name"] for r in rows] == [p["name"] for p in doc["plans"]] + [f["name"] for f in doc["failed"]]
    for row, plan in zip(rows, doc["plans"], strict=False):
        assert int(row["rank"]) == plan["rank"]
        assert row["pareto"] == str(plan["pareto"]).lower()
        assert float(row["time_per_sample_s"]) == plan["time_per_sample_s"]
    assert rows[-1]["error"] and rows[-1]["rank"] == ""


def test_identical_inputs_give_identical_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for target in (a, b):
        assert runner.invoke(app, ["compare-strategies", PIPELINE, "--json", str(target)]).exit_code == 0
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None, reason="needs the plot extra (matplotlib)"
)
def test_plot_writes_a_png(tmp_path: Path) -> None:
    target = tmp_path / "scaling.png"
    args = ["compare-strategies", QUICKSTART, "--sweep", "num_replicas=2,4", "--plot", str(target)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert target.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert f"wrote plot {target}" in result.stderr


def test_no_progress_bar_when_not_a_terminal() -> None:
    result = runner.invoke(app, ["compare-strategies", QUICKSTART, "--sweep", "num_replicas=2,3,4"])
    assert result.exit_code == 0
    assert "evaluating plans" not in result.output and "\r" not in result.output


def test_progress_bar_waits_shows_and_is_gone_before_the_ranking(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal: nothing for a single variant or before the delay; shown while variants
    remain; stopped (transient, so erased) when the last one finishes."""
    import io as _io

    from rich.console import Console

    from parplan.cli import evaluation

    terminal = Console(file=_io.StringIO(), force_terminal=True)
    monkeypatch.setattr(evaluation, "console", lambda stderr=False: terminal)
    bar = evaluation.progress_bar()
    with bar as tick:
        assert tick is not None
        tick(1, 1)
        assert bar.bar is None  # a single variant
        tick(1, 3)
        assert bar.bar is None  # before the delay
        bar.started -= evaluation.PROGRESS_DELAY_S
        tick(2, 3)
        assert bar.bar is not None and bar.bar.live.is_started
        tick(3, 3)
        assert not bar.bar.live.is_started
