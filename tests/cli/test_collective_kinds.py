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
    "all_to_all": 3 / 4,
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
    assert [default_algorithm(c) for c in COLLECTIVES] == ["auto"] * 6  # NCCL's pick, for all of them
    doc = _json("--collective", "broadcast", "--size", "1MiB")
    assert [r["algorithm"] for r in doc["results"]] == ["auto"]
    table = runner.invoke(app, ["collective", "--cluster", SWITCH, "--collective", "reduce", "-s", "1KiB"])
    assert table.exit_code == 0 and "reduce on " in table.stdout


def test_the_bus_factors_follow_nccl_tests() -> None:
    assert [bus_factor(c, 4) for c in COLLECTIVES] == [1.5, 0.75, 0.75, 1.0, 1.0, 0.75]
    assert bus_factor("all_gather", 1) == 0.0


def test_unknown_collectives_and_algorithms_are_clear_errors() -> None:
    with pytest.raises(CollectiveError, match="valid: all_reduce, reduce_scatter"):
        run_collective(SWITCH, collective="all_to_allv", size_bytes=1024)
    unknown = r"unknown broadcast algorithm 'hd'; valid: tree, ring, auto, all"
    with pytest.raises(CollectiveError, match=unknown):
        run_collective(SWITCH, collective="broadcast", algorithm="hd", size_bytes=1024)
    result = runner.invoke(app, ["collective", "--cluster", SWITCH, "--collective", "gather", "-s", "1KiB"])
    assert result.exit_code == 2 and "unknown collective 'gather'" in result.output


@pytest.mark.parametrize("collective", ["reduce_scatter", "all_gather", "broadcast", "reduce"])
def test_auto_is_the_default_of_every_collective_and_says_what_ran(collective: str) -> None:
    """On a cluster with a GPU architecture ``auto`` picks per size as NCCL's tuner does (LL for a
    few bytes, Simple on every channel for large ones; chains show their segments)."""
    h100 = "validation/clusters/azure-ndv5-h100.yaml"
    sweep = ["-b", "8", "-e", "128MiB", "-f", "2048", "--json", "-"]
    result = runner.invoke(app, ["collective", "--cluster", h100, "--collective", collective, *sweep])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["results"]
    assert [r["algorithm"] for r in rows] == ["auto"] * 3
    assert rows[0]["chosen"].startswith("auto=ring/ll/1ch")
    assert rows[-1]["chosen"].startswith("auto=ring/simple/")
    if collective in ("broadcast", "reduce"):
        assert rows[-1]["chosen"].endswith("seg") and int(rows[-1]["chosen"].split("/")[-1][:-3]) > 1
    assert rows[-1]["busbw_GBps"] > 100  # NVSwitch-class bandwidth on one H100 node
