"""``parplan measure`` on the command line: bad options give one usage message each (exit 2), no torch
gives the install hint (exit 1), and one small gloo run prints the nccl-tests-shaped table and writes
``--json -`` and ``--nccl-tests`` files that read back; ``--step`` times a DDP step.

Runs that start ranks are marked ``torch`` and skip with the reason where torch is missing.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
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
        assert table.ranks == 2  # its '#  Rank N Group' lines: parplan calibrate needs no --ranks
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


EMULATED = """\
name: emu-pair
generator:
  kind: switch
  hosts: 2
  device: {peak_flops: 1 TFLOP/s, memory: 8 GiB}
  link: {bandwidth: 200 Mbit/s, latency: 0.5 ms}
transport: {kind: gloo}
"""


def test_emulate_refuses_torchrun_options_step_and_other_rank_counts(tmp_path: Path) -> None:
    cluster = tmp_path / "emu.yaml"
    cluster.write_text(EMULATED)
    cases = [
        (["--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "h:1"], "runs on this machine"),
        (["--step", QUICKSTART], "drop --emulate"),
        (["--ranks", "3"], "emulates 2 ranks, got 3"),
    ]
    for extra, message in cases:
        result = runner.invoke(app, ["measure", "--emulate", str(cluster), *extra])
        assert result.exit_code == 2, result.output
        assert message in " ".join(result.output.split()), result.output


def test_emulate_names_what_it_cannot_build(tmp_path: Path) -> None:
    torus = str(ROOT / "sample_configs" / "clusters" / "torus-4x4.toml")
    result = runner.invoke(app, ["measure", "--emulate", torus])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and "torus-4x4.toml" in result.output


@pytest.mark.torch
@pytest.mark.netns
@requires_torch
def test_measure_on_an_emulated_cluster_is_exact_predicted_and_torn_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from parplan.runtime import netns

    missing = netns.missing_requirements()
    if missing:
        pytest.skip("emulated clusters need " + " and ".join(missing))
    made: list[str] = []  # this run's prefix (other tests build clusters of their own meanwhile)
    new_prefix = netns.new_prefix

    def recorded() -> str:
        made.append(new_prefix())
        return made[-1]

    monkeypatch.setattr(netns, "new_prefix", recorded)
    cluster = tmp_path / "emu.yaml"
    cluster.write_text(EMULATED)
    out = tmp_path / "emu.json"
    args = ["--emulate", str(cluster), "-a", "backend,ring", "-s", "1MiB", "-w", "1", "-n", "5"]
    result = runner.invoke(app, ["measure", *args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    rows = document["results"]
    assert {r["algorithm"] for r in rows} == {"backend", "ring"}
    assert all(r["wrong"] == 0 for r in rows)
    # 1 MiB across 200 Mbit/s links: the ring moves 2 x (p-1)/p x 1 MiB per host, at least 42 ms; the
    # prediction is of the same file, so it must be in the measurement's range (a loaded 2-core
    # machine slows the ranks down, never speeds the links up).
    for row in rows:
        assert row["time_s"] > 0.035
        assert 0.3 < row["predicted_s"] / row["time_s"] < 1.5
    assert made, "no emulated cluster was built"
    after = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    assert not [n for n in after if n.startswith(made[0])]
