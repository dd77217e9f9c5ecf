"""What a one-size ``parplan collective`` (and the engine-scale benchmark's case) may import: nothing
it does not use, so start-up time and memory stay small (issue 15). networkx, the model, strategy
and scenario specs, the analytic-mode fitting and the optional extras stay out; a failure names
the module that came back and the test says which import path to make lazy again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "sample_configs" / "clusters"

NEVER = (
    "networkx",
    "matplotlib",
    "plotly",
    "torch",
    "scipy",
    "pandas",
    "ray",
    "parplan.model",
    "parplan.config.model",
    "parplan.config.strategy",
    "parplan.config.scenario",
    "parplan.config.search",
    "parplan.api.analytic_fit",
    "parplan.api.evaluate",
    "parplan.plan.strategies",
    "parplan.report.tables",
)
"""Modules (and their submodules) a one-size collective on a cluster file must not import."""

_RUN = """
import json, runpy, sys
sys.argv = ["parplan", *sys.argv[1:]]
try:
    runpy.run_module("parplan", run_name="__main__")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
with open(OUT, "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def _modules_after(tmp_path: Path, code: str, *args: str) -> list[str]:
    """``sys.modules`` at the end of ``python -c CODE ARGS`` (``CODE`` writes them to ``OUT``)."""
    out = tmp_path / "modules.json"
    proc = subprocess.run(
        [sys.executable, "-c", f"OUT = {str(out)!r}\n{code}", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "120", "NO_COLOR": "1"},
        cwd=ROOT,
        check=False,
    )
    assert out.exists(), proc.stderr
    found = json.loads(out.read_text())
    assert found.get("code", 0) in (0, None), proc.stderr
    modules: list[str] = found["modules"]
    return modules


def _forbidden(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == n or m.startswith(n + ".") for n in NEVER)]


@pytest.mark.parametrize("cluster", ["switch-4hosts.yaml", "torus-4x4.toml", "dgx-a100-2nodes.yaml"])
def test_one_size_collective_imports_nothing_it_does_not_use(tmp_path: Path, cluster: str) -> None:
    modules = _modules_after(tmp_path, _RUN, "collective", "-c", str(CLUSTERS / cluster), "-s", "1MiB")
    assert "parplan.engine.simulate" in modules  # it did simulate
    assert _forbidden(modules) == [], "make these imports lazy again"


def test_engine_scale_case_imports_no_networkx(tmp_path: Path) -> None:
    """What ``benchmarks/engine_scale.py --case switch ...`` imports, with the network built."""
    code = """
import json, sys
from parplan.collectives.registry import build_schedule
from parplan.config.cluster import ClusterSpec
from parplan.engine.simulate import simulate
from parplan.plan.collective import collective_taskgraph
from parplan.plan.collective_run import call_overhead_s
from parplan.topology.build import build_network
link = {"bandwidth": "50 GB/s", "latency": "500 ns"}
device = {"peak_flops": "312 TFLOP/s", "memory": "80 GiB"}
for kind in ("switch", "ring", "fat_tree", "torus2d"):
    gen = {"kind": kind, "device": device, "link": link}
    gen.update({"x": 4, "y": 4} if kind == "torus2d" else {"k": 4} if kind == "fat_tree" else {"hosts": 64})
    net = build_network(ClusterSpec.model_validate({"name": kind, "generator": gen}))
    net.route(net.devices[0], net.devices[-1])
with open(OUT, "w") as f:
    json.dump({"modules": sorted(sys.modules)}, f)
"""
    modules = _modules_after(tmp_path, code)
    assert [m for m in modules if m.split(".")[0] == "networkx"] == []
    assert _forbidden(modules) == []
