"""``parplan simulate``: the tables, the outputs, overrides, errors and exit codes; fast ``--help``."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from parplan.cli.app import app
from parplan.report.json_report import load_schema

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "sample_configs" / "scenarios"
QUICKSTART = str(SCENARIOS / "quickstart.yaml")
PIPELINE = str(SCENARIOS / "pipeline.yaml")
FEDERATED = str(SCENARIOS / "federated.yaml")
runner = CliRunner()


def run(*args: str) -> object:
    return runner.invoke(app, list(args))


def test_quickstart_tables() -> None:
    result = runner.invoke(app, ["simulate", QUICKSTART])
    assert result.exit_code == 0, result.output
    out = "\n".join(line.rstrip() for line in result.stdout.splitlines())  # rich pads table rows
    assert out.startswith("quickstart · ")
    for name in ("local", "dp-ring", "dp-tree", "dp-centralized", "pipeline-2"):
        assert f"\n{name} " in out
    assert "\nstep          448 ms = compute 179 us + exposed comm 448 ms + idle 0 s\n" in out
    assert "\n              on h0, the device computing longest\n" in out
    assert "algbw" in out and "busbw" in out
    assert "busiest link  h" in out
    assert "bound by" in out
    assert "\x1b[" not in out  # NO_COLOR and not a terminal: plain text
    assert max(len(line) for line in out.splitlines()) <= 120


def test_plan_selection_and_unknown_plan() -> None:
    result = runner.invoke(app, ["simulate", QUICKSTART, "--plan", "dp-ring"])
    assert result.exit_code == 0
    assert "dp-ring" in result.stdout and "\nlocal " not in result.stdout
    result = runner.invoke(app, ["simulate", QUICKSTART, "--plan", "nope"])
    assert result.exit_code == 2  # a bad option value: a usage error
    assert (
        "unknown plan 'nope'; the scenario's plans: local, dp-ring, dp-tree, dp-centralized, pipeline-2"
        in (result.stderr)
    )
    assert "Traceback" not in result.output


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 1
    assert "missing.yaml" in result.stderr and "Traceback" not in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nplans: [\n  - {name: a\n")
    result = runner.invoke(app, ["simulate", str(bad)])
    assert result.exit_code == 1
    assert f"{bad}:" in result.stderr and "error:" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--algorithm", "foo"],
            "--algorithm: 'foo': unknown algorithm 'foo'; valid: centralized, tree, ring",
        ),
        (["--algorithm", "tree:1"], "--algorithm: 'tree:1': arity"),
        (["--bucket-size", "huge"], "--bucket-size: 'huge' is not a valid size"),
        (["--set", "rounds=x"], "--set rounds: 'x' is not an integer"),
        (["--set", "warp=9"], "--set: unknown knob 'warp'"),
    ],
)
def test_bad_override_values_are_usage_errors(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["simulate", QUICKSTART, *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_an_override_a_plan_cannot_take_exits_1() -> None:
    result = runner.invoke(app, ["simulate", QUICKSTART, "--replicas", "64"])
    assert result.exit_code == 1, result.output  # a well-formed value the cluster cannot meet
    assert "plan dp-ring: num_replicas (64) exceeds" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "args",
    [
        ["--replicas", "0"],
        ["--schedule", "zigzag"],
        ["--json", "-", "--csv", "-"],
        ["--trace", "-"],
        ["--plot", "-"],
        ["--bogus"],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    result = runner.invoke(app, ["simulate", QUICKSTART, *args])
    assert result.exit_code == 2, result.output


def test_overrides_apply_where_they_fit(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = runner.invoke(
        app,
        [
            "simulate",
            QUICKSTART,
            "--replicas",
            "2",
            "--algorithm",
            "tree:2",
            "--bucket-size",
            "1MiB",
            "--no-overlap",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["overrides"] == {
        "algorithm": "tree:2",
        "num_replicas": 2,
        "bucket_size": "1MiB",
        "overlap": False,
    }
    by_name = {p["name"]: p for p in doc["plans"]}
    assert by_name["dp-ring"]["description"] == "data_parallel ×2 tree:2, 1 MiB buckets, no overlap"
    assert by_name["dp-centralized"]["description"] == by_name["dp-ring"]["description"]
    assert by_name["local"]["description"] == "local"  # not a data-parallel plan: untouched


def test_override_that_changes_nothing_warns() -> None:
    result = runner.invoke(app, ["simulate", QUICKSTART, "--plan", "local", "--microbatches", "4"])
    assert result.exit_code == 0
    assert "warning: --microbatches changes none of the plans simulated" in result.stderr


def test_set_knob_on_federated_plans() -> None:
    result = runner.invoke(
        app, ["simulate", FEDERATED, "-p", "fedavg-all", "--set", "rounds=3", "--json", "-"]
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)["plans"][0]
    assert plan["units_per_run"] == 3 and len(plan["quality"]["loss_per_round"]) == 3


def test_federated_quality_is_shown() -> None:
    result = runner.invoke(app, ["simulate", FEDERATED, "-p", "fedavg-random-4"])
    assert result.exit_code == 0
    assert "loss/round" in result.stdout and "accuracy" in result.stdout
    assert "\nround         15.1 s = compute" in result.stdout


def test_infeasible_plan_marked_but_exit_0_without_plan() -> None:
    result = runner.invoke(app, ["simulate", PIPELINE])
    assert result.exit_code == 0
    gpipe = next(line for line in result.stdout.splitlines() if line.startswith("gpipe "))
    assert "✗" in gpipe
    assert "bound by      memory on n0.d3" in result.stdout


def test_infeasible_named_plan_exits_1_after_printing() -> None:
    result = runner.invoke(app, ["simulate", PIPELINE, "--plan", "gpipe"])
    assert result.exit_code == 1
    assert "gpipe" in result.stdout and "bound by" in result.stdout  # the results are still shown
    assert "error: plan gpipe does not fit: out of memory on 4 device(s): n0.d3 needs 98 GiB" in result.stderr


def test_json_to_stdout_validates_and_replaces_the_tables() -> None:
    result = runner.invoke(app, ["simulate", QUICKSTART, "--json", "-"])
    assert result.exit_code == 0
    doc = json.loads(result.stdout)  # nothing but JSON on stdout
    jsonschema.validate(doc, load_schema())
    assert doc["version"] == 1 and doc["command"] == "simulate"
    assert doc["scenario"] == {
        "name": "quickstart",
        "description": doc["scenario"]["description"],
        "file": QUICKSTART,
    }
    assert [p["name"] for p in doc["plans"]] == [
        "local",
        "dp-ring",
        "dp-tree",
        "dp-centralized",
        "pipeline-2",
    ]


def test_identical_inputs_give_identical_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert runner.invoke(app, ["simulate", PIPELINE, "--json", str(a)]).exit_code == 0
    assert runner.invoke(app, ["simulate", PIPELINE, "--json", str(b)]).exit_code == 0
    assert a.read_bytes() == b.read_bytes()


def test_csv_parses_back_to_the_json(tmp_path: Path) -> None:
    js, cs = tmp_path / "r.json", tmp_path / "r.csv"
    result = runner.invoke(app, ["simulate", PIPELINE, "--json", str(js), "--csv", str(cs)])
    assert result.exit_code == 0
    assert f"wrote JSON {js}" in result.stderr and f"wrote CSV {cs}" in result.stderr
    doc = json.loads(js.read_text())
    rows = list(csv.DictReader(io.StringIO(cs.read_text())))
    assert [r["name"] for r in rows] == [p["name"] for p in doc["plans"]]
    for row, plan in zip(rows, doc["plans"], strict=True):
        assert float(row["step_time_s"]) == plan["step_time_s"]
        assert float(row["throughput_samples_per_s"]) == plan["throughput_samples_per_s"]
        assert row["fits"] == str(plan["fits"]).lower()


def test_quiet_with_files_prints_nothing(tmp_path: Path) -> None:
    result = runner.invoke(app, ["--quiet", "simulate", QUICKSTART, "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 0
    assert result.stdout == "" and result.stderr == ""
    assert (tmp_path / "r.json").is_file()


def test_unwritable_output_is_a_clean_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", QUICKSTART, "--json", str(tmp_path / "no" / "r.json")])
    assert result.exit_code == 2  # checked before anything runs: a usage error
    assert f"directory {tmp_path / 'no'} does not exist" in result.stderr and "Traceback" not in result.output
    result = runner.invoke(app, ["simulate", QUICKSTART, "--csv", str(tmp_path)])
    assert result.exit_code == 2 and "is a directory" in result.stderr


def test_trace_one_plan_and_one_file_per_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec  # traces need no matplotlib
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a)
    )
    one = tmp_path / "one.json"
    result = runner.invoke(app, ["simulate", QUICKSTART, "--plan", "dp-ring", "--trace", str(one)])
    assert result.exit_code == 0, result.output
    assert f"wrote trace of dp-ring {one}" in result.stderr
    events = json.loads(one.read_text())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    threads = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"h0", "h1", "h2", "h3"} <= threads  # one lane per device, plus the links
    assert {e["cat"] for e in slices} >= {"forward", "backward", "allreduce"}
    doc = json.loads(runner.invoke(app, ["simulate", QUICKSTART, "-p", "dp-ring", "--json", "-"]).stdout)
    end_us = max(e["ts"] + e["dur"] for e in slices)
    assert end_us == pytest.approx(doc["plans"][0]["step_time_s"] * 1e6, rel=1e-6)  # the whole step
    many = tmp_path / "t.json"
    result = runner.invoke(
        app, ["simulate", QUICKSTART, "-p", "local", "-p", "pipeline-2", "--trace", str(many)]
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.json", "t.local.json", "t.pipeline-2.json"]
    for name in ("t.local.json", "t.pipeline-2.json"):
        assert any(e["ph"] == "X" for e in json.loads((tmp_path / name).read_text())["traceEvents"])


@pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None, reason="needs the plot extra (matplotlib)"
)
def test_plot_writes_a_png(tmp_path: Path) -> None:
    target = tmp_path / "timeline.png"
    result = runner.invoke(app, ["simulate", QUICKSTART, "--plan", "pipeline-2", "--plot", str(target)])
    assert result.exit_code == 0, result.output
    assert target.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_plot_without_matplotlib_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a)
    )
    result = runner.invoke(app, ["simulate", QUICKSTART, "--plot", str(tmp_path / "t.png")])
    assert result.exit_code == 1
    assert "pip install 'parplan[plot]'" in result.stderr
    assert result.stdout == ""  # checked before anything is simulated


HEAVY = ("numpy", "networkx", "pydantic", "matplotlib", "parplan.engine", "parplan.plan")


def _imported(*args: str) -> set[str]:
    """Modules imported by ``python -m parplan ARGS`` (read from -X importtime)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "parplan", *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "120"},
        cwd=ROOT,
    )
    return {
        line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")
    }


def test_help_does_not_import_the_simulation_stack() -> None:
    modules = _imported("--help")
    assert "parplan.cli.simulate" in modules and "parplan.cli.compare" in modules  # commands registered
    assert not {m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY)}


def test_command_help_does_not_import_numpy_or_networkx() -> None:
    # typer itself loads pydantic to convert a command's parameters, so only the rest is checked here
    for command in ("simulate", "compare-strategies"):
        modules = _imported(command, "--help")
        assert not {m for m in modules if m.split(".")[0] in {"numpy", "networkx", "matplotlib"}}
        assert not {m for m in modules if m.startswith(("parplan.engine", "parplan.plan", "parplan.report"))}
