"""``parplan emulate``: the hosts a cluster becomes, ``--check``, a command on every host, bad
input and Ctrl-C (issue 14, item 3). The ``netns`` tests build namespaces and skip without root
or iproute2, saying which."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from parplan.cli.app import app
from parplan.runtime import netns

ROOT = Path(__file__).resolve().parents[2]
SWITCH = str(ROOT / "sample_configs" / "clusters" / "switch-4hosts.yaml")
JETSONS = str(ROOT / "sample_configs" / "clusters" / "edge-jetsons.yaml")
DGX = str(ROOT / "sample_configs" / "clusters" / "dgx-a100-2nodes.yaml")
MISSING = netns.missing_requirements()
needs_netns = pytest.mark.skipif(bool(MISSING), reason="emulated clusters need " + " and ".join(MISSING))
runner = CliRunner()


def invoke(*args: str) -> Any:
    return runner.invoke(app, list(args))


def test_without_options_it_shows_the_hosts_and_builds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns, "_build", lambda *a: pytest.fail("built"))
    result = invoke("emulate", JETSONS)
    assert result.exit_code == 0, result.output
    assert "emulated cluster edge-jetsons: 6 hosts on one bridge" in result.stdout
    assert "h5" in result.stdout and "10.0 Mbit/s" in result.stdout and "60.0 ms" in result.stdout


def test_a_cluster_it_cannot_emulate_is_exit_1_naming_the_field() -> None:
    result = invoke("emulate", DGX)
    assert result.exit_code == 1
    assert "dgx-a100-2nodes.yaml generator.kind: 'hierarchical' cannot be emulated" in result.stderr
    assert "Traceback" not in result.output and result.stdout == ""


def test_without_root_building_is_exit_1_saying_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns, "missing_requirements", lambda: ["root, or the CAP_NET_ADMIN capability"])
    result = invoke("emulate", SWITCH, "--check")
    assert result.exit_code == 1
    assert "error: an emulated cluster needs root, or the CAP_NET_ADMIN capability" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--check", "--", "true"], "give --check or a command, not both"),
        (["--host", "1"], "--host needs a command"),
        (["--delay", "warp", "--check"], "'warp': one of auto, netem, relay, off"),
        (["--size", "huge", "--check"], "--size"),
        (["--size", "10", "--check"], "at least 1 KiB"),
    ],
)
def test_bad_options_are_usage_errors(args: list[str], message: str) -> None:
    result = invoke("emulate", SWITCH, *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr


@pytest.mark.netns
@needs_netns
def test_check_prints_configured_beside_measured_and_tears_down() -> None:
    result = invoke("emulate", SWITCH, "--check", "--size", "1 MiB")
    assert result.exit_code == 0, result.output
    for text in ("round trip", "TCP rate", "200 Mbit/s", "measured/shaped", "torn down"):
        assert text in result.stdout
    prefix = result.stdout.split("namespaces ", 1)[1].split("*", 1)[0]
    assert prefix.startswith("pp-") and netns.our_namespaces(prefix) == []


@pytest.mark.netns
@needs_netns
def test_a_command_runs_on_every_host_and_its_failure_is_exit_1(tmp_path: Path) -> None:
    script = 'echo "$PARPLAN_HOST_INDEX $(ip netns identify)" >> ' + str(tmp_path / "out")
    result = invoke("emulate", SWITCH, "--delay", "off", "--", "sh", "-c", script)
    assert result.exit_code == 0, result.output
    lines = sorted((tmp_path / "out").read_text().splitlines())
    assert [line.split()[0] for line in lines] == ["0", "1", "2", "3"]
    prefix = lines[0].split()[1].rsplit("h0", 1)[0]
    assert netns.our_namespaces(prefix) == []
    failed = invoke("emulate", SWITCH, "--delay", "off", "--host", "2", "--", "sh", "-c", "exit 5")
    assert failed.exit_code == 1
    assert "the command exited 5 on h2" in failed.stderr


@pytest.mark.netns
@needs_netns
def test_ctrl_c_while_a_command_runs_is_exit_130_and_leaves_nothing() -> None:
    argv = [sys.executable, "-m", "parplan", "emulate", SWITCH, "--host", "0", "--"]
    argv += ["sh", "-c", "ip netns identify; sleep 60"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    namespace = proc.stdout.readline().strip()
    prefix = namespace.rsplit("h0", 1)[0]
    assert prefix.startswith("pp-") and len(netns.our_namespaces(prefix)) == 5
    os.kill(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert netns.our_namespaces(prefix) == []
