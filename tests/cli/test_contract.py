"""One contract for options, outputs and bad input, across every command (issue 12's CLI items).

Each test names the item it holds to: clean messages for bad values, one meaning per exit code,
one shape per output option, outputs checked before any work, the wrong kind of file named as
such, the width rule, the colour rule, the stream rule and a speed-up always against a named plan.
"""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from parplan.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_configs"
QUICKSTART = str(SAMPLES / "scenarios" / "quickstart.yaml")
SWITCH = str(SAMPLES / "clusters" / "switch-4hosts.yaml")
MODEL = str(SAMPLES / "models" / "mlp-small.yaml")
MANIFEST = str(ROOT / "validation" / "manifest.toml")
PYDANTIC_DUMP = re.compile(r"validation error for|errors\.pydantic\.dev|Input should be|function-before")
runner = CliRunner()


def invoke(*args: str) -> Any:
    return runner.invoke(app, list(args))


# -- 1. bad values give one clean message, never pydantic's dump ------------------------------------


@pytest.mark.parametrize("algorithm", ["tree:x", "ring:0", "double_binary_tree:32", "tree:1", "warp"])
def test_a_bad_algorithm_reads_the_same_in_every_command(algorithm: str) -> None:
    runs = [
        invoke("simulate", QUICKSTART, "-p", "local", "-a", algorithm),
        invoke("compare-strategies", QUICKSTART, "-p", "local", "--sweep", f"algorithm={algorithm}"),
        invoke("collective", "-c", SWITCH, "-s", "1KiB", "-a", algorithm),
    ]
    for result in runs:
        assert result.exit_code == 2, result.output
        assert f"'{algorithm}'" in result.stderr
        assert not PYDANTIC_DUMP.search(result.output), result.output
        assert "Traceback" not in result.output and result.stdout == ""
    details = {r.stderr.rsplit(f"'{algorithm}': ", 1)[-1] for r in runs[:2]}
    assert len(details) == 1  # simulate -a and a sweep say the same thing


def test_an_override_the_strategy_rejects_reads_like_a_file_error() -> None:
    from parplan.api.knobs import apply_overrides
    from parplan.config.loader import load_strategy
    from parplan.errors import ConfigError

    strategy = load_strategy(SAMPLES / "strategies" / "data-parallel.yaml")
    with pytest.raises(ConfigError) as err:
        apply_overrides(strategy, {"num_replicas": 0, "overlap": "maybe"})
    assert str(err.value).splitlines() == [
        "overrides num_replicas: must be >= 1, got 0",
        "overrides aggregation.overlap: expected true or false, got 'maybe'",
    ]


def test_a_size_of_zero_is_refused_not_timed_as_one_element() -> None:
    for option in ("-s", "-b", "-e"):
        result = invoke("collective", "-c", SWITCH, option, "0")
        assert result.exit_code == 2, result.output
        assert "must be more than 0 bytes" in result.stderr and result.stdout == ""


def test_a_size_that_is_not_whole_elements_is_said() -> None:
    result = invoke("collective", "-c", SWITCH, "-s", "6", "--json", "-")
    assert result.exit_code == 0, result.output
    assert "not a whole number of float32 elements (4 B each); 4 B is timed" in result.stderr
    assert json.loads(result.stdout)["results"][0]["size_bytes"] == 4


# -- 2. exit codes: 0 done, 1 bad files or infeasible, 2 usage, 3 bug, 130 interrupted ---------------

BAD_VALUES = [
    ("simulate", QUICKSTART, "--bucket-size", "huge"),
    ("simulate", QUICKSTART, "--set", "rounds=x"),
    ("simulate", QUICKSTART, "--set", "warp=1"),
    ("simulate", QUICKSTART, "--plan", "nope"),
    ("compare-strategies", QUICKSTART, "--sweep", "num_replicas=two"),
    ("compare-strategies", QUICKSTART, "--sweep", "bogus=1"),
    ("compare-strategies", QUICKSTART, "--baseline", "nope"),
    ("compare-strategies", QUICKSTART, "--plan", "nope"),
    ("collective", "-c", SWITCH, "-b", "1MiB", "-e", "1KiB"),
    ("collective", "-c", SWITCH, "-b", "1KiB", "-e", "1MiB", "-f", "1"),
    ("collective", "-c", SWITCH, "--devices", "h0,nope"),
    ("collective", "-c", SWITCH, "-s", "1.5"),
    ("validate", "--manifest", MANIFEST, "--table", "nope"),
]


@pytest.mark.parametrize("args", BAD_VALUES, ids=lambda a: " ".join(Path(x).name for x in a))
def test_a_bad_option_value_is_a_usage_error_everywhere(args: tuple[str, ...]) -> None:
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert "Usage: parplan" in result.stderr and "Error: Invalid value" in result.stderr
    assert result.stdout == "" and "Traceback" not in result.output


def test_requests_the_files_cannot_meet_and_bad_files_exit_1(tmp_path: Path) -> None:
    assert invoke("simulate", QUICKSTART, "--replicas", "64").exit_code == 1  # 64 replicas on 4 hosts
    assert invoke("collective", "-c", SWITCH, "--ranks", "9").exit_code == 1
    assert invoke("simulate", str(tmp_path / "missing.yaml")).exit_code == 1
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nplans: [\n")
    assert invoke("compare-strategies", str(bad)).exit_code == 1


def test_interrupted_is_130(monkeypatch: pytest.MonkeyPatch) -> None:
    import parplan.api.simulate

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(parplan.api.simulate, "simulate_scenario", interrupted)
    result = invoke("simulate", QUICKSTART)
    assert result.exit_code == 130 and "interrupted" in result.stderr


COMMANDS = ["simulate", "compare-strategies", "collective", "validate-config", "schema", "validate"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_documents_the_exit_codes(command: str) -> None:
    text = " ".join(invoke(command, "--help").stdout.split())
    assert "Exit codes: 0 done; 1 invalid input files or an infeasible request; 2 usage error" in text
    assert "3 internal error" in text and "130 interrupted" in text


# -- 3. one shape per option: --json FILE|-, --csv FILE|-; byte counts are integers ---------------------


def test_collective_json_and_csv_take_a_file_or_stdout(tmp_path: Path) -> None:
    to_stdout = invoke("collective", "-c", SWITCH, "-b", "8", "-e", "64", "-f", "8", "--json", "-")
    assert to_stdout.exit_code == 0, to_stdout.output
    rows = json.loads(to_stdout.stdout)["results"]  # nothing but JSON on stdout
    assert [r["size_bytes"] for r in rows] == [8, 64]
    assert '"size_bytes": 8,' in to_stdout.stdout  # an integer, not 8.0
    target = tmp_path / "c.json"
    table = tmp_path / "c.csv"
    both = invoke("collective", "-c", SWITCH, "-s", "1KiB", "--json", str(target), "--csv", str(table))
    assert both.exit_code == 0, both.output
    assert "all_reduce on lab-4x-t4" in both.stdout  # files asked for: the table still prints
    assert json.loads(target.read_text())["results"][0]["size_bytes"] == 1024
    (row,) = csv.DictReader(io.StringIO(table.read_text()))
    assert row["size_bytes"] == "1024" and row["algorithm"] == "auto"  # the all-reduce default
    again = invoke("collective", "-c", SWITCH, "-s", "1KiB", "--json", str(target))
    assert again.exit_code == 0, again.output  # a report of parplan's own is written over
    csv_out = invoke("collective", "-c", SWITCH, "-s", "1KiB", "--csv", "-")
    assert csv_out.stdout.splitlines()[0] == "algorithm,ranks,size_bytes,count,time_s,algbw_GBps,busbw_GBps"


def test_validate_config_json_takes_a_file_or_stdout(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    result = invoke("validate-config", str(SAMPLES / "strategies" / "local.yaml"), "--json", str(target))
    assert result.exit_code == 0 and "1 file: valid" in result.stdout
    assert json.loads(target.read_text())["valid"] is True
    assert json.loads(invoke("validate-config", "--json", "-", MODEL).stdout)["files"][0]["kind"] == "model"


def test_byte_counts_are_integers_in_json_and_csv(tmp_path: Path) -> None:
    target, table = tmp_path / "r.json", tmp_path / "r.csv"
    args = ("simulate", str(SAMPLES / "scenarios" / "population-based.yaml"), "-p", "single-run")
    result = invoke(*args, "--json", str(target), "--csv", str(table))
    assert result.exit_code == 0, result.output

    def byte_fields(value: Any, key: str = "") -> list[Any]:
        if isinstance(value, dict):
            return [x for k, v in value.items() for x in byte_fields(v, k)]
        if isinstance(value, list):
            return [x for v in value for x in byte_fields(v, key)]
        return [value] if key.endswith("_bytes") and value is not None else []

    found = byte_fields(json.loads(target.read_text()))
    assert found and all(isinstance(v, int) for v in found)  # activations were 17.9e9 with decimals
    (row,) = csv.DictReader(io.StringIO(table.read_text()))
    assert row["peak_memory_bytes"].isdigit()


# -- 4. outputs are checked before any work -----------------------------------------------------------

ENTRIES = {
    "simulate": ("parplan.api.simulate", "simulate_scenario"),
    "compare-strategies": ("parplan.api.compare", "compare_scenario"),
    "collective": ("parplan.api.collective", "run_collective"),
    "validate-config": ("parplan.api.validate_config", "validate_paths"),
    "validate": ("parplan.api.accuracy", "run_validation"),
    "schema": ("parplan.api.schema", "file_schemas"),
}

NO_DIR = "/nonexistent/parplan/x"
BAD_OUTPUTS = [
    ("simulate", QUICKSTART, "--json", f"{NO_DIR}.json"),
    ("simulate", QUICKSTART, "--csv", f"{NO_DIR}.csv"),
    ("simulate", QUICKSTART, "--trace", f"{NO_DIR}.json"),
    ("simulate", QUICKSTART, "--plot", "step.bmp"),
    ("simulate", QUICKSTART, "--json", QUICKSTART),
    ("simulate", QUICKSTART, "--json", "-c"),
    ("compare-strategies", QUICKSTART, "--json", f"{NO_DIR}.json"),
    ("compare-strategies", QUICKSTART, "--csv", str(SAMPLES)),
    ("compare-strategies", QUICKSTART, "--plot", "scaling.bmp"),
    ("collective", "-c", SWITCH, "--json", f"{NO_DIR}.json"),
    ("collective", "-c", SWITCH, "--csv", f"{NO_DIR}.csv"),
    ("collective", "-c", SWITCH, "--trace", f"{NO_DIR}.json"),
    ("validate-config", MODEL, "--json", f"{NO_DIR}.json"),
    ("validate-config", "--json", MODEL, QUICKSTART),  # would have overwritten the model file
    ("validate", "--manifest", MANIFEST, "--json", f"{NO_DIR}.json"),
    ("validate", "--manifest", MANIFEST, "--csv", f"{NO_DIR}.csv"),
    ("schema", "--output", QUICKSTART),
]


@pytest.mark.parametrize("args", BAD_OUTPUTS, ids=lambda a: " ".join(Path(x).name for x in a))
def test_a_bad_output_fails_before_any_work(args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    module, name = ENTRIES[args[0]]

    def must_not_run(*a: object, **k: object) -> None:
        raise AssertionError(f"{name} ran although an output was bad")

    monkeypatch.setattr(importlib.import_module(module), name, must_not_run)
    before = {p: p.read_bytes() for p in (Path(QUICKSTART), Path(MODEL))}
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert "Error: Invalid value for --" in result.stderr and result.stdout == ""
    assert all(p.read_bytes() == data for p, data in before.items())


def test_plot_names_the_formats_it_draws() -> None:
    result = invoke("simulate", QUICKSTART, "--plot", "step.bmp")
    assert ".bmp is not a picture format parplan writes (PNG, SVG, PDF)" in result.stderr


# -- 5. the wrong kind of file is named as such ------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("simulate", SWITCH),
            "is a cluster file, not a scenario (parplan simulate takes a scenario);"
            " give it to parplan collective --cluster",
        ),
        (
            ("compare-strategies", MODEL),
            "is a model file, not a scenario (parplan compare-strategies takes"
            " a scenario); name it in a scenario's model key",
        ),
        (
            ("collective", "-c", QUICKSTART),
            "is a scenario file, not a cluster (parplan collective --cluster"
            " takes a cluster); give it to parplan simulate or parplan compare-strategies",
        ),
    ],
)
def test_the_wrong_kind_of_file_says_what_it_is_and_where_it_goes(
    args: tuple[str, ...], message: str
) -> None:
    result = invoke(*args)
    assert result.exit_code == 1
    (line,) = [line for line in result.stderr.splitlines() if line]  # one line, not five missing keys
    assert line.startswith(f"error: {args[-1]} {message}")


def test_validate_config_kind_mismatch_says_what_the_file_is() -> None:
    result = invoke("validate-config", "--kind", "cluster", QUICKSTART)
    assert result.exit_code == 1
    assert result.stdout.splitlines()[0] == (
        f"{QUICKSTART} is a scenario file, read as a cluster because of --kind"
        " (drop --kind to check it as a scenario)"
    )


def test_a_generator_kind_that_is_not_a_name_is_an_invalid_file_not_a_bug(tmp_path: Path) -> None:
    path = tmp_path / "odd.yaml"
    path.write_text("name: x\ngenerator: {kind: []}\n")
    result = invoke("validate-config", str(path))
    assert result.exit_code == 1, result.output
    assert "internal error" not in result.output and result.stdout.startswith(str(path))


# -- 6. width: never drop a column, no trailing spaces -------------------------------------------------


def _table_lines(text: str) -> list[str]:
    return text.splitlines()


def test_piped_output_has_every_column_at_its_natural_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS")  # not a terminal and no COLUMNS: the table's own width
    result = invoke("simulate", QUICKSTART)
    assert result.exit_code == 0
    lines = _table_lines(result.stdout)
    assert lines[1].split() == [
        "plan",
        "strategy",
        "time",
        "compute",
        "exposed",
        "idle",
        "samples/s",
        "peak",
        "memory",
    ]
    assert "pipeline-2      model_parallel 2 stages, 4 mb 1f1b" in result.stdout  # not folded
    assert "optimizer  activations" in result.stdout  # the memory breakdown is there
    assert "fitted to" not in result.stdout
    assert all(line == line.rstrip() for line in lines)


@pytest.mark.parametrize("columns", ["60", "80"])
def test_a_narrow_terminal_keeps_every_column_and_says_what_it_did(
    columns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    simulated = invoke("simulate", QUICKSTART, "-p", "pipeline-2")
    compared = invoke("compare-strategies", QUICKSTART)
    for result in (simulated, compared):
        assert result.exit_code == 0
        lines = _table_lines(result.stdout)
        assert lines[-1].startswith(f"fitted to {columns} columns: ")
        assert all(line == line.rstrip() for line in lines)
    assert "strategy" in simulated.stdout.splitlines()[1] and "activations" in simulated.stdout
    header = compared.stdout.splitlines()[1].split()
    assert {"compute", "comm", "idle", "memory", "bound"} <= set(header)


def test_text_columns_wrap_to_fit_and_the_last_line_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "110")
    args = (
        "simulate",
        str(SAMPLES / "scenarios" / "federated.yaml"),
        "-p",
        "fedavg-fastest-4",
        "-p",
        "fedavg-all",
    )
    lines = _table_lines(invoke(*args).stdout)
    assert max(len(line) for line in lines) <= 110  # it fits: nothing printed wider
    assert lines[-1] == "fitted to 110 columns: wrapped strategy, devices"
    assert lines[2].split()[:4] == ["fedavg-fastest-4", "federated", "8", "clients,"]  # folded, not cut
    assert lines[3].split() == ["fastest", "4,", "10", "round(s)"]


# -- 7. human numbers in every table ---------------------------------------------------------------------

EXPONENT = re.compile(r"\d[eE][+-]?\d")


def test_collective_and_validate_tables_are_for_people() -> None:
    table = invoke(
        "collective",
        "-c",
        str(SAMPLES / "clusters" / "dgx-a100-2nodes.yaml"),
        "-a",
        "all",
        "-b",
        "1KiB",
        "-e",
        "1GiB",
        "-f",
        "1024",
    )
    assert table.exit_code == 0, table.output
    assert not EXPONENT.search(table.stdout)
    assert "1.00 GiB" in table.stdout and "268M" in table.stdout and " GB/s" in table.stdout
    analytic = invoke("collective", "-c", SWITCH, "--analytic", "-s", "1GiB")
    assert "beta = 1/(25.0 MB/s)" in analytic.stdout and not EXPONENT.search(analytic.stdout)


def test_notes_use_human_times() -> None:
    result = invoke(
        "simulate", str(SAMPLES / "scenarios" / "population-based.yaml"), "-p", "pbt-truncation-32"
    )
    assert "mean generation 113 s, 10 generations in 18.8 min" in " ".join(result.stdout.split())


# -- 8. colour and streams -------------------------------------------------------------------------------


def _on_a_terminal(args: list[str], env: dict[str, str]) -> str:
    """What ``parplan ARGS`` writes to a real terminal (a pseudo-terminal) as its stdout."""
    leader, follower = pty.openpty()
    base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "parplan", *args],
        stdout=follower,
        stderr=subprocess.DEVNULL,
        env={**base, "COLUMNS": "120", **env},
        cwd=ROOT,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=120)
    os.close(leader)
    return b"".join(chunks).decode("utf-8", "replace")


def test_no_color_on_a_terminal_means_no_styling_at_all() -> None:
    args = ["validate-config", str(SAMPLES / "strategies" / "local.yaml")]
    assert "\x1b[" in _on_a_terminal(args, {})  # a terminal: the check mark is bold green
    plain = _on_a_terminal(args, {"NO_COLOR": "1"})
    assert "\x1b[" not in plain and "✓" in plain
    assert "\x1b[" in _on_a_terminal(args, {"NO_COLOR": ""})  # set but empty: no effect (no-color.org)


def test_results_on_stdout_errors_on_stderr(tmp_path: Path) -> None:
    one = invoke("validate-config", str(ROOT / "tests" / "config" / "invalid" / "wrong-type.yaml"))
    assert one.exit_code == 1 and one.stderr == ""
    assert one.stdout.splitlines()[-1] == "1 file: invalid"  # a summary for one file too
    schema = invoke("schema", "--output", str(tmp_path / "s"))
    assert schema.stdout == "" and schema.stderr.count("wrote schema") == 5


# -- 9. speed-ups are always against a named plan -------------------------------------------------------


def test_without_a_baseline_or_local_plan_speedups_are_against_the_first_plan() -> None:
    text = invoke("compare-strategies", QUICKSTART, "-p", "dp-tree", "-p", "dp-ring")
    assert "speed-up against dp-tree (the first plan)" in text.stdout
    assert "—" not in text.stdout.split("ranked by")[0]
    doc = json.loads(
        invoke("compare-strategies", QUICKSTART, "-p", "dp-tree", "-p", "dp-ring", "--json", "-").stdout
    )
    assert doc["baseline"] == "dp-tree" and doc["baseline_rule"] == "first"
    speedups: dict[str, float] = {p["name"]: p["speedup"] for p in doc["plans"]}
    assert speedups["dp-tree"] == 1.0 and speedups["dp-ring"] > 1
    local = json.loads(invoke("compare-strategies", QUICKSTART, "-p", "local", "--json", "-").stdout)
    assert local["baseline_rule"] == "first_local"
    asked = json.loads(
        invoke("compare-strategies", QUICKSTART, "-p", "local", "-b", "local", "--json", "-").stdout
    )
    assert asked["baseline_rule"] == "requested"
