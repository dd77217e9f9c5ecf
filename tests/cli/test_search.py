"""``parplan search``: the tables, byte-identical outputs, and every bad input as one message with
exit code 1 before any work."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from parplan.api.search import spread
from parplan.cli.app import app
from parplan.report.json_report import SCHEMA_RESOURCE, SEARCH_SCHEMA_RESOURCE, load_schema
from tests.api.search.test_run import FSDP_64, SMALL, small_scenario

runner = CliRunner()
requires_plotly = pytest.mark.skipif(
    importlib.util.find_spec("plotly") is None, reason="plotly is not installed (pip install 'parplan[html]')"
)
requires_matplotlib = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason="matplotlib is not installed (pip install 'parplan[plot]')",
)


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any candidate is evaluated."""

    def evaluated(*args: object) -> None:
        raise AssertionError("candidates were evaluated")

    monkeypatch.setattr(spread, "evaluate_candidates", evaluated)


def test_search_prints_the_ranking_front_bound_and_checks(tmp_path: Path) -> None:
    result = runner.invoke(app, ["search", str(small_scenario(tmp_path, SMALL, FSDP_64))])
    assert result.exit_code == 0, result.output
    out = result.stdout
    for heading in (
        "ranking (closed form)",
        "the scenario's plans",
        "Pareto front",
        "winner: ",
        "event engine",
    ):
        assert heading in out
    assert "fsdp-64" in out and "would rank" in out and "-bound (" in out
    assert "candidates enumerated" in out and "searched " in result.stderr


def test_outputs_are_byte_identical_run_to_run(tmp_path: Path) -> None:
    scenario = str(small_scenario(tmp_path, SMALL, FSDP_64))
    files: dict[str, list[bytes]] = {}
    options = ["--json", "--csv"]
    options += ["--html"] if importlib.util.find_spec("plotly") else []
    for attempt in ("a", "b"):
        args = ["search", scenario, "--top-k", "1", "--seed", "3"]
        for option in options:
            args += [option, str(tmp_path / f"{attempt}.{option[2:]}")]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert result.stdout  # the tables are deterministic too
        files.setdefault("stdout", []).append(result.stdout.encode())
        for option in options:
            files.setdefault(option, []).append((tmp_path / f"{attempt}.{option[2:]}").read_bytes())
    for name, (first, second) in files.items():
        assert first == second, name
    document = json.loads(files["--json"][0])
    assert document["command"] == "search" and document["seed"] == 3
    assert len(document["plans"]) == document["counts"]["evaluated"]
    assert files["--csv"][0].decode().count("\n") == document["counts"]["evaluated"] + 1
    assert document["winner"]["label"] == document["plans"][0]["label"] == document["top"][0]["name"]
    search_validator().validate(document)


def search_validator() -> Any:
    """A validator of the shipped search schema, resolving its reference to the report schema."""
    import jsonschema
    from referencing import Registry, Resource

    names = (SCHEMA_RESOURCE, SEARCH_SCHEMA_RESOURCE)
    registry = Registry().with_resources((name, Resource.from_contents(load_schema(name))) for name in names)
    return jsonschema.Draft202012Validator(load_schema(SEARCH_SCHEMA_RESOURCE), registry=registry)


def test_the_search_schema_rejects_what_it_should(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["search", str(small_scenario(tmp_path, SMALL, FSDP_64)), "--top-k", "1", "--json", "-"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    validator = search_validator()
    validator.validate(document)
    assert document["hand_written"] and document["hand_written"][0]["event"] is not None
    for broken in (
        {**document, "command": "simulate"},
        {**document, "plans": [{**document["plans"][0], "fsdp": "sometimes"}]},
        {**document, "top": [{**document["top"][0], "event": {"name": "x"}}]},  # not a report plan
        {k: v for k, v in document.items() if k != "counts"},
    ):
        assert not validator.is_valid(broken)


def test_json_to_stdout_replaces_the_tables(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["search", str(small_scenario(tmp_path, SMALL)), "--top-k", "0", "--json", "-"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["top"] == []


@requires_plotly
def test_html_page_has_the_ranking_front_and_timelines(tmp_path: Path) -> None:
    out = tmp_path / "search.html"
    result = runner.invoke(app, ["search", str(small_scenario(tmp_path, SMALL)), "--html", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "Ranked candidates" in page
    assert "Step time against memory" in page and "Timeline per device" in page and "Busiest links" in page


@requires_matplotlib
def test_plot_of_the_front(tmp_path: Path) -> None:
    out = tmp_path / "front.png"
    result = runner.invoke(
        app, ["search", str(small_scenario(tmp_path, SMALL)), "--top-k", "0", "--plot", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert out.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("search", "message"),
    [
        ("  tp: [3]\n  pp: [1]\n", "no candidate plan is left"),  # values the model cannot divide
        ("  devices: [7]\n  tp: [2, 4]\n", "no candidate plan is left"),  # devices no tp x pp x dp makes
        ("  limit: 10\n", "over the limit of 10"),  # too large without --limit
    ],
)
def test_bad_spaces_are_one_message_before_any_work(
    tmp_path: Path, no_work: None, search: str, message: str
) -> None:
    result = runner.invoke(app, ["search", str(small_scenario(tmp_path, search))])
    assert result.exit_code == 1, result.output
    assert message in result.stderr and result.stderr.count("error") == 1
    assert "Traceback" not in result.output and result.stdout == ""


def test_an_empty_dimension_is_the_files_error(tmp_path: Path, no_work: None) -> None:
    result = runner.invoke(app, ["search", str(small_scenario(tmp_path, "  tp: []\n"))])
    assert result.exit_code == 1
    assert "search.yaml:6:3 search.tp: tp is empty" in result.stderr and result.stdout == ""


def test_too_large_names_the_size_and_the_option(tmp_path: Path, no_work: None) -> None:
    result = runner.invoke(app, ["search", str(small_scenario(tmp_path, SMALL)), "--limit", "3"])
    assert result.exit_code == 1
    assert "candidates, over the limit of 3" in result.stderr and "--limit " in result.stderr


def test_bad_devices_option_is_a_usage_error(tmp_path: Path, no_work: None) -> None:
    result = runner.invoke(app, ["search", str(small_scenario(tmp_path, SMALL)), "--devices", "64,x"])
    assert result.exit_code == 2
    assert "GPU counts" in result.output


def test_address_needs_the_ray_backend(tmp_path: Path, no_work: None) -> None:
    result = runner.invoke(app, ["search", str(small_scenario(tmp_path, SMALL)), "--address", "127.0.0.1:1"])
    assert result.exit_code == 2
    assert "add --backend ray" in result.output


def test_devices_option_replaces_the_blocks(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        ["search", str(small_scenario(tmp_path, SMALL)), "--devices", "32", "--top-k", "0", "--json", "-"],
    )
    assert result.exit_code == 0, result.output
    assert {p["devices"] for p in json.loads(result.stdout)["plans"]} == {32}
