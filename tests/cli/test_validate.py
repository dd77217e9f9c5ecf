"""``parplan validate-config`` and ``parplan schema`` through typer's CliRunner, plus the app's
global behaviour: exit codes, --version, --quiet, --debug, NO_COLOR and a fast --help."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from parplan import __version__
from parplan.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted(p for p in (ROOT / "sample_configs").rglob("*") if p.is_file())
INVALID = ROOT / "tests" / "config" / "invalid"
FIXTURES = sorted(
    p for p in INVALID.iterdir() if p.suffix != ".expected" and p.with_name(p.name + ".expected").exists()
)


runner = CliRunner()


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# -- valid files ---------------------------------------------------------------------------------------


def test_every_sample_is_valid() -> None:
    result = runner.invoke(app, ["validate-config", *map(str, SAMPLES)])
    assert result.exit_code == 0, result.output
    checked = [line for line in lines(result.stdout) if line.startswith("✓ ")]
    assert len(checked) == len(SAMPLES)
    assert all(
        line.endswith(("(cluster)", "(model)", "(strategy)", "(partition)", "(scenario)")) for line in checked
    )
    assert not re.search(r"\d[eE][+-]?\d", result.stdout)  # human numbers in messages too
    # the summary is a result: on stdout, last; nothing on stderr
    assert lines(result.stdout)[-1] == f"{len(SAMPLES)} files: {len(SAMPLES)} valid, 0 invalid"
    assert result.stderr == ""


def test_a_directory_means_every_config_file_inside(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    result = runner.invoke(app, ["validate-config", "sample_configs"])
    assert result.exit_code == 0
    assert lines(result.stdout)[0] == "✓ sample_configs/clusters/dgx-a100-128nodes.yaml (cluster)"
    info = "population_size: info: 32 members on 16 devices: 2 waves per generation"
    assert f"sample_configs/strategies/population-based.yaml:6:1 {info}" in result.stdout


def test_quiet_prints_only_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    result = runner.invoke(app, ["--quiet", "validate-config", "sample_configs"])
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")


def test_kind_option_reads_files_as_that_kind(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: only\n")
    result = runner.invoke(app, ["validate-config", "--kind", "model", str(path)])
    assert result.exit_code == 1
    assert lines(result.stdout) == [
        f"{path}:1:1 a model needs either nodes or a generator",
        "1 file: invalid",
    ]
    model = str(ROOT / "sample_configs/models/mlp-small.yaml")
    result = runner.invoke(app, ["validate-config", "-k", "cluster", model])
    assert result.exit_code == 1
    # the kind of file it is comes first, then what reading it as a cluster found
    assert lines(result.stdout)[0] == (
        f"{model} is a model file, read as a cluster because of --kind (drop --kind to check it as a model)"
    )
    assert "unknown key 'generator'" not in result.stdout  # a model's generator is not a cluster generator:
    assert "generator.kind: unknown kind 'mlp'" in result.stdout


# -- invalid files -------------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_each_invalid_fixture_gives_exactly_its_message(
    monkeypatch: pytest.MonkeyPatch, fixture: Path
) -> None:
    monkeypatch.chdir(INVALID)
    expected = lines(fixture.with_name(fixture.name + ".expected").read_text())
    result = runner.invoke(app, ["validate-config", fixture.name])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)  # no traceback: a clean exit
    assert lines(result.stdout) == [*expected, "1 file: invalid"]
    assert len(expected) == 1
    assert result.stderr == ""


def test_every_fixture_has_its_own_message() -> None:
    messages = [fixture.with_name(fixture.name + ".expected").read_text() for fixture in FIXTURES]
    assert len(set(messages)) == len(messages) >= 30


def test_many_files_report_everything_and_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(INVALID)
    names = [
        "tree-arity-1.yaml",
        "../../../sample_configs/models/gpt-1.3b.yaml",
        "wrong-type.yaml",
        "missing.yaml",
    ]
    result = runner.invoke(app, ["validate-config", *names])
    assert result.exit_code == 1
    assert lines(result.stdout) == [
        "tree-arity-1.yaml:5:3 aggregation.algorithm.arity: must be >= 2, got 1",
        "✓ ../../../sample_configs/models/gpt-1.3b.yaml (model)",
        "wrong-type.yaml:2:1 num_replicas: expected an integer, got 'four'",
        "missing.yaml does not exist",
        "4 files: 1 valid, 3 invalid",
    ]
    assert result.stderr == ""


def test_json_report(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(INVALID)
    result = runner.invoke(
        app,
        [
            "validate-config",
            "--json",
            "-",
            "error-in-referenced-file.yaml",
            "../../../sample_configs/strategies/local.yaml",
        ],
    )
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report == {
        "version": 1,
        "valid": False,
        "files": [
            {
                "path": "error-in-referenced-file.yaml",
                "kind": "scenario",
                "valid": False,
                "issues": [
                    {
                        "path": "referenced/bad-reduce.yaml",
                        "line": 5,
                        "column": 3,
                        "field": "aggregation.reduce",
                        "message": "must be 'mean', 'sum' or 'weighted_by_samples', got 'average'",
                        "severity": "error",
                    }
                ],
            },
            {
                "path": "../../../sample_configs/strategies/local.yaml",
                "kind": "strategy",
                "valid": True,
                "issues": [],
            },
        ],
    }
    ok = runner.invoke(
        app, ["validate-config", "--json", "-", str(ROOT / "sample_configs/scenarios/population-based.yaml")]
    )
    assert ok.exit_code == 0
    (entry,) = json.loads(ok.stdout)["files"]
    assert entry["valid"] and [i["severity"] for i in entry["issues"]] == ["info"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.binary(max_size=200), suffix=st.sampled_from([".yaml", ".toml", ".json"]))
def test_junk_files_never_crash_the_command(tmp_path: Path, content: bytes, suffix: str) -> None:
    path = tmp_path / f"junk{suffix}"
    path.write_bytes(content)
    result = runner.invoke(app, ["validate-config", str(path)])
    assert result.exit_code in (0, 1)
    assert isinstance(result.exception, SystemExit) or result.exception is None
    assert "internal error" not in result.output and "Traceback" not in result.output
    if result.exit_code == 1:
        assert all(line.startswith(str(path)) for line in lines(result.stdout)[:-1])
        assert lines(result.stdout)[-1] == "1 file: invalid"


# -- usage, errors, colour -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["validate-config"],
        ["validate-config", "--kind", "bogus", "x.yaml"],
        ["validate-config", "--frobnicate", "x.yaml"],
        ["no-such-command"],
        ["schema", "bogus"],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "Usage:" in result.output


def test_version_and_help() -> None:
    assert runner.invoke(app, ["--version"]).stdout == f"parplan {__version__}\n"
    for flag in ("-h", "--help"):
        result = runner.invoke(app, [flag])
        assert result.exit_code == 0
        assert "validate-config" in result.stdout and "schema" in result.stdout
    result = runner.invoke(app, ["validate-config", "-h"])
    assert "path:line:column field: message" in " ".join(result.stdout.split())


def test_help_does_not_import_the_heavy_stack() -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from parplan.cli.app import app\n"
        "result = CliRunner().invoke(app, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "print(sorted(m for m in ('numpy', 'networkx', 'pydantic', 'yaml') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_parplan_errors_are_red_messages_and_debug_shows_them(tmp_path: Path) -> None:
    missing = tmp_path / "none.yaml"
    result = runner.invoke(app, ["simulate", str(missing)])
    assert result.exit_code == 1
    assert lines(result.stderr) == [f"error: {missing} does not exist"]
    result = runner.invoke(app, ["--debug", "simulate", str(missing)])
    from parplan.errors import ConfigError

    assert isinstance(result.exception, ConfigError)


def test_an_output_directory_that_cannot_be_used_is_a_usage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = runner.invoke(app, ["schema", "--output", str(blocker)])
    assert result.exit_code == 2
    assert f"{blocker} is not a directory" in result.stderr


def test_bugs_are_reported_as_internal_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    import parplan.api.validate_config

    def broken(path: object, kind: object = None) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(parplan.api.validate_config, "validate_file", broken)
    result = runner.invoke(app, ["validate-config", "x.yaml"])
    assert result.exit_code == 3
    assert lines(result.stderr) == [
        "internal error: RuntimeError: boom",
        "this is a bug in parplan; rerun with --debug for the traceback",
    ]
    assert isinstance(runner.invoke(app, ["--debug", "validate-config", "x.yaml"]).exception, RuntimeError)


def test_no_color_wins_over_force_color(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = str(INVALID / "wrong-type.yaml")
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR")
    coloured = runner.invoke(app, ["validate-config", bad])
    assert "\x1b[" in coloured.stdout
    monkeypatch.setenv("NO_COLOR", "1")
    plain = runner.invoke(app, ["validate-config", bad])
    assert "\x1b[" not in plain.stdout
    assert plain.exit_code == coloured.exit_code == 1
    assert lines(plain.stdout) == [
        f"{bad}:2:1 num_replicas: expected an integer, got 'four'",
        "1 file: invalid",
    ]


# -- schema --------------------------------------------------------------------------------------------


def test_schema_prints_one_kind_or_all() -> None:
    one = runner.invoke(app, ["schema", "strategy"])
    assert one.exit_code == 0
    assert json.loads(one.stdout)["title"] == "parplan strategy file"
    every = runner.invoke(app, ["schema"])
    assert sorted(json.loads(every.stdout)) == ["cluster", "model", "partition", "scenario", "strategy"]


def test_schema_writes_files(tmp_path: Path) -> None:
    out = tmp_path / "schemas"
    result = runner.invoke(app, ["schema", "--output", str(out)])
    assert result.exit_code == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == [f"{k}.schema.json" for k in ("cluster", "model", "partition", "scenario", "strategy")]
    assert result.stdout == ""  # the files are the results; saying so is a note on stderr
    assert lines(result.stderr) == [
        f"wrote schema {out / n}"
        for n in (
            "cluster.schema.json",
            "model.schema.json",
            "strategy.schema.json",
            "partition.schema.json",
            "scenario.schema.json",
        )
    ]
    assert json.loads((out / "model.schema.json").read_text())["$schema"].endswith("2020-12/schema")
