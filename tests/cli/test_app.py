"""The app's entry point: global flags are accepted after the command too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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


HEAVY = ("networkx", "matplotlib", "torch", "numpy", "scipy")


@pytest.mark.parametrize(
    "args", [None, ["collective", "--help"], ["simulate", "--help"], ["compare-strategies", "--help"]]
)
def test_start_up_imports_no_heavy_package(args: list[str] | None) -> None:
    # Start-up stays lazy (issue 15: <= 0.15 s; benchmarks/startup.py prints the figure): importing
    # the app, and a command's --help, load none of networkx, matplotlib, torch, numpy or scipy.
    code = "import sys\nfrom parplan.cli.app import app\n"
    if args is not None:
        code += (
            "from typer.testing import CliRunner\n"
            f"result = CliRunner().invoke(app, {args!r})\n"
            "assert result.exit_code == 0, result.output\n"
        )
    code += f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
