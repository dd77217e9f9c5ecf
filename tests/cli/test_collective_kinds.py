"""``parplan collective --collective NAME``: every collective timed, with nccl-tests' busbw for each,
simulated and by closed forms, and clear errors for unknown collectives and algorithms."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from parplan.api.collective import bus_factor, default_algorithm, run_collective
from parplan.collectives.registry import schedules
from parplan.collectives.schedule import COLLECTIVES
from parplan.errors import CollectiveError
from tests.cli.test_collective import SWITCH, app

runner = CliRunner()

BUS_FACTORS = {  # on the sample switch's 4 ranks
    "all_reduce": 2 * 3 / 4,
    "all_gather": 3 / 4,
    "reduce_scatter": 3 / 4,
    "broadcast": 1.0,
    "reduce": 1.0,
}


def _json(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["collective", "--cluster", SWITCH, *args, "--json", "-"])
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_every_collective_is_timed_with_its_busbw(collective: str) -> None:
    doc = _json("--collective", collective, "-a", "all", "--size", "1MiB")
    assert doc["collective"] == collective
    rows = doc["results"]
    assert {r["algorithm"].split(":")[0] for r in rows} == set(schedules(collective))  # 'all': not auto
    for r in rows:
        assert r["time_s"] > 0
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * BUS_FACTORS[collective])
    analytic = _json("--collective", collective, "-a", "all", "--size", "1MiB", "--analytic")
    assert len(analytic["results"]) == len(rows) and all(r["time_s"] > 0 for r in analytic["results"])


def test_default_algorithm_per_collective_and_the_table_title() -> None:
    assert [default_algorithm(c) for c in COLLECTIVES] == ["auto", "ring", "ring", "tree", "tree"]
    doc = _json("--collective", "broadcast", "--size", "1MiB")
    assert [r["algorithm"] for r in doc["results"]] == ["tree"]
    table = runner.invoke(app, ["collective", "--cluster", SWITCH, "--collective", "reduce", "-s", "1KiB"])
    assert table.exit_code == 0 and "reduce on " in table.stdout


def test_the_bus_factors_follow_nccl_tests() -> None:
    assert [bus_factor(c, 4) for c in COLLECTIVES] == [1.5, 0.75, 0.75, 1.0, 1.0]
    assert bus_factor("all_gather", 1) == 0.0


def test_unknown_collectives_and_algorithms_are_clear_errors() -> None:
    with pytest.raises(CollectiveError, match="valid: all_reduce, reduce_scatter"):
        run_collective(SWITCH, collective="all_to_all", size_bytes=1024)
    with pytest.raises(CollectiveError, match=r"unknown broadcast algorithm 'ring'; valid: tree, all"):
        run_collective(SWITCH, collective="broadcast", algorithm="ring", size_bytes=1024)
    result = runner.invoke(app, ["collective", "--cluster", SWITCH, "--collective", "gather", "-s", "1KiB"])
    assert result.exit_code == 2 and "unknown collective 'gather'" in result.output
