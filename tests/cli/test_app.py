"""The app's entry point: global flags are accepted after the command too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from parplan.cli.app import hoist_global_flags

QUICKSTART = Path(__file__).resolve().parents[2] / "sample_configs" / "scenarios" / "quickstart.yaml"


def test_global_flags_move_before_the_command_but_not_past_double_dash() -> None:
    hoisted = hoist_global_flags(["simulate", "x.yaml", "--debug", "-q"])
    assert hoisted == ["--debug", "-q", "simulate", "x.yaml"]
    assert hoist_global_flags(["simulate", "--", "-q"]) == ["simulate", "--", "-q"]


def test_quiet_after_the_command_works_from_the_console(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "parplan", "simulate", str(QUICKSTART), "--plan", "local"]
    cmd += ["--json", str(out), "-q"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert out.read_text().startswith("{")
