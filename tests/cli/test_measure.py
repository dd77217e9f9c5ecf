"""``parplan measure`` on the command line: bad options give one usage message each (exit 2), no torch
gives the install hint (exit 1), and one small gloo run prints the nccl-tests-shaped table and writes
``--json -`` and ``--nccl-tests`` files that read back; ``--step`` times a DDP step.

Runs that start ranks are marked ``torch`` and skip with the reason where torch is missing.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parplan.cli.app import app
from parplan.config.nccltests import read_nccl_tests

ROOT = Path(__file__).resolve().parents[2]
SWITCH = str(ROOT / "sample_configs" / "clusters" / "switch-4hosts.yaml")
QUICKSTART = str(ROOT / "sample_configs" / "scenarios" / "quickstart.yaml")
HAVE_TORCH = importlib.util.find_spec("torch") is not None
requires_torch = pytest.mark.skipif(
    not HAVE_TORCH, reason="torch is not installed: nothing to measure on (pip install 'parplan[torch]')"
)
runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ranks", "1"], "at least 2 ranks"),
        (["-s", "lots"], "--size"),
        (["-s", "0"], "whole number of bytes > 0"),
        (["-a", "nope"], "unknown collective algorithm 'nope'"),
        (["-a", "tree:1"], "arity"),
        (["--collective", "broadcast"], "cannot be measured"),
        (["-d", "float8"], "unknown dtype"),
        (["--nnodes", "2"], "together"),
        (["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1"], "below --nnodes"),
        (["--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "nohost"], "HOST:PORT"),
    ],
)
def test_bad_options_are_usage_errors(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["measure", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_without_torch_one_message_and_exit_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "torch.distributed", None)
    result = runner.invoke(app, ["measure", "--ranks", "2", "-s", "1KiB"])
    assert result.exit_code == 1
    assert "pip install 'parplan[torch]'" in result.output
    assert "Traceback" not in result.output


@pytest.mark.torch
@requires_torch
def test_a_small_run_prints_and_writes(tmp_path: Path) -> None:
    text = tmp_path / "run.txt"
    args = [
        "measure",
        "--ranks",
        "2",
        "-a",
        "backend,ring",
        "-b",
        "1KiB",
        "-e",
        "16KiB",
        "-f",
        "4",
        "-w",
        "1",
        "-n",
        "2",
        "--cluster",
        SWITCH,
        "--nccl-tests",
        str(text),
    ]
    shown = runner.invoke(app, args)
    assert shown.exit_code == 0, shown.output
    for column in (
        "size",
        "count",
        "type",
        "redop",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "predicted",
        "error",
    ):
        assert column in shown.output
    assert "predicted: parplan collective on lab-4x-t4; backend as ring" in shown.output
    for algorithm in ("backend", "ring"):
        table = read_nccl_tests(tmp_path / f"run.{algorithm}.txt")
        assert [r.size_bytes for r in table.rows] == [1024, 4096, 16384]
    result = runner.invoke(app, [*args[:-2], "--json", "-"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["command"] == "measure" and document["ranks"] == 2
    assert {r["wrong"] for r in document["results"]} == {0}


@pytest.mark.torch
@requires_torch
def test_step_times_a_ddp_step_beside_simulate(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["measure", "--step", QUICKSTART, "-n", "5", "-w", "1", "--json", str(tmp_path / "s.json")]
    )
    assert result.exit_code == 0, result.output
    assert "predicted on lab-4x-t4" in result.output
    step = json.loads((tmp_path / "s.json").read_text())["step"]
    assert step["plan"] == "dp-ring" and step["ranks"] == 4 and len(step["times_s"]) == 5
    assert step["parameters"] == 1864704 and step["bucket_bytes"] == 25 * 2**20
    assert step["predicted_step_s"] > 0 and step["median_s"] > 0
    bad = runner.invoke(app, ["measure", "--step", QUICKSTART, "--ranks", "3"])
    assert bad.exit_code == 2 and "4 replicas" in bad.output
    few = runner.invoke(app, ["measure", "--step", QUICKSTART, "-n", "3"])
    assert few.exit_code == 2 and "at least 5" in few.output


@pytest.mark.torch
@requires_torch
def test_torchrun_rendezvous_options_pass_through() -> None:
    from parplan.runtime.launch import free_port

    endpoint = f"127.0.0.1:{free_port()}"
    args = [
        "measure",
        "--nnodes",
        "1",
        "--node-rank",
        "0",
        "--rdzv-endpoint",
        endpoint,
        "--ranks",
        "2",
        "-s",
        "1KiB",
        "-w",
        "1",
        "-n",
        "2",
        "--json",
        "-",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["ranks"] == 2 and document["results"][0]["wrong"] == 0
