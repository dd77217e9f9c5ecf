"""``parplan collective``: nccl-tests-like tables, sweeps, --algorithm all, --json, --analytic, --trace."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from parplan.cli.app import app
from parplan.report.humanize import size as human_size

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = sorted(p for p in (ROOT / "sample_configs" / "clusters").iterdir() if p.is_file())
"""Every sample cluster file (not clusters/large/: a 5,128-GPU sweep of every algorithm takes minutes)."""
SWITCH = str(ROOT / "sample_configs" / "clusters" / "switch-4hosts.yaml")
runner = CliRunner()


def run_json(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["collective", *args, "--json", "-"])
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


@pytest.mark.parametrize("cluster", CLUSTERS, ids=lambda p: p.name)
def test_every_sample_cluster(cluster: Path) -> None:
    doc = run_json("--cluster", str(cluster), "--algorithm", "all", "--size", "1MiB")
    rows = doc["results"]
    assert {r["algorithm"] for r in rows} == {
        "centralized:0",
        "tree:2",
        "ring",
        "halving_doubling",
        "double_binary_tree",
        "hierarchical",
        "nccl_tree",
    }
    for r in rows:
        assert set(r) >= {"algorithm", "ranks", "size_bytes", "time_s", "algbw_GBps", "busbw_GBps"}
        assert r["size_bytes"] == 2**20 and r["time_s"] > 0
        assert r["algbw_GBps"] == pytest.approx(r["size_bytes"] / r["time_s"] / 1e9)
        p = r["ranks"]
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 2 * (p - 1) / p)
    analytic = run_json("--cluster", str(cluster), "--algorithm", "all", "--size", "1MiB", "--analytic")
    assert analytic["mode"] == "analytic" and len(analytic["results"]) == len(rows)
    assert analytic["analytic_parameters"]["alpha_s"] >= 0
    table = runner.invoke(
        app,
        [
            "collective",
            "--cluster",
            str(cluster),
            "-a",
            "all",
            "-b",
            "8",
            "-e",
            "1GiB",
            "-f",
            "64",
            "--analytic",
        ],
    )
    assert table.exit_code == 0, table.output
    assert not re.search(r"\d[eE][+-]?\d", table.stdout)  # human numbers, never 1.21389e+06


def test_sweep_table_like_all_reduce_perf() -> None:
    result = runner.invoke(app, ["collective", "--cluster", SWITCH, "-b", "8", "-e", "1KiB", "-f", "2"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "all_reduce on lab-4x-t4: 4 ranks, float32, simulated" in lines[0]
    header = next(line for line in lines if " size " in line)
    assert header.split()[1::2] == ["size", "count", "time", "algbw", "busbw", "ran"]  # ran: what auto picked
    sizes = [line.split("│")[1].strip() for line in lines if line.startswith("│")]
    assert sizes == ["8 B", "16 B", "32 B", "64 B", "128 B", "256 B", "512 B", "1.00 KiB"]  # for people


def test_algorithm_all_marks_the_fastest() -> None:
    result = runner.invoke(
        app, ["collective", "--cluster", SWITCH, "-a", "all", "-b", "1KiB", "-e", "64MiB", "-f", "64"]
    )
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == 3
    assert all(row.count("*") == 1 for row in rows)
    doc = run_json("--cluster", SWITCH, "-a", "all", "-b", "1KiB", "-e", "64MiB", "-f", "64")
    for size in {r["size_bytes"] for r in doc["results"]}:
        times = {r["algorithm"]: r["time_s"] for r in doc["results"] if r["size_bytes"] == size}
        fastest = min(times, key=lambda a: times[a])
        short = {
            "halving_doubling": "hd",
            "double_binary_tree": "dbt",
            "hierarchical": "hier",
            "centralized:0": "central:0",
        }.get(fastest, fastest)
        row = next(r for r in rows if r.split("│")[1].strip() == human_size(size))
        assert short in row.split("│")[-3]


def test_analytic_matches_the_simulation_on_a_uniform_switch() -> None:
    # 4 ranks on one switch: a uniform group, where the closed forms are exact.
    for algorithm in ("ring", "tree:3", "centralized", "double_binary_tree", "halving_doubling"):
        sim = run_json("--cluster", SWITCH, "-a", algorithm, "-s", "64MiB")["results"][0]["time_s"]
        closed = run_json("--cluster", SWITCH, "-a", algorithm, "-s", "64MiB", "--analytic")
        assert closed["results"][0]["time_s"] == pytest.approx(sim, rel=1e-3), algorithm
        assert closed["analytic_parameters"]["bottleneck"][0].startswith("h")


def test_analytic_says_which_path_it_used() -> None:
    result = runner.invoke(app, ["collective", "--cluster", SWITCH, "--analytic", "-s", "1MiB"])
    assert result.exit_code == 0, result.output
    assert "analytic: alpha = 100 us" in result.stdout  # two 50 us hops
    assert "from the bottleneck path" in result.stdout


def test_ranks_devices_and_dtype() -> None:
    doc = run_json("--cluster", SWITCH, "--ranks", "2", "-s", "1000", "-d", "float16")
    assert doc["results"][0]["ranks"] == 2 and doc["results"][0]["count"] == 500
    doc = run_json("--cluster", SWITCH, "--devices", "h3,h1,h0", "-s", "1KiB")
    assert doc["results"][0]["ranks"] == 3


def test_trace(tmp_path: Path) -> None:
    path = tmp_path / "ring.json"
    result = runner.invoke(app, ["collective", "--cluster", SWITCH, "-s", "1MiB", "--trace", str(path)])
    assert result.exit_code == 0, result.output
    events = json.loads(path.read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) == 2 * 3 * 4  # 2(p-1) rounds of p sends
    several = tmp_path / "t.json"
    result = runner.invoke(
        app, ["collective", "--cluster", SWITCH, "-a", "ring,tree:2", "-s", "1KiB", "--trace", str(several)]
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "t.ring.json").exists() and (tmp_path / "t.tree_2.json").exists()


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["-a", "butterfly"], 2, "valid: centralized"),
        (["--ranks", "9"], 1, "only 4 devices"),
        (["--devices", "h0,nope"], 2, "nope"),
        (["-s", "lots"], 2, "lots"),
        (["--analytic", "--trace", "x.json"], 2, "drop --analytic"),
        (["-d", "float8"], 2, "unknown dtype"),
        (["-b", "1MiB", "-e", "1KiB"], 2, "below its start"),
        (["-a", "tree:1"], 2, "'tree:1': arity: must be >= 2, got 1"),
        (["-a", "ring,tree:x"], 2, "the arity after ':' must be an integer"),
    ],
)
def test_errors(args: list[str], code: int, message: str) -> None:
    result = runner.invoke(app, ["collective", "--cluster", SWITCH, *args])
    assert result.exit_code == code, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert "pydantic" not in result.output


def test_missing_cluster_file() -> None:
    result = runner.invoke(app, ["collective", "--cluster", "nope.yaml"])
    assert result.exit_code == 1
    assert "nope.yaml" in result.output
