"""The Ray backend: the same results as the local run, an unreachable cluster refused before any
work, a cluster lost mid-sweep keeping what was gathered. One local Ray instance per test session
(these tests share one xdist group, so they run in one worker)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from parplan.api import parallel
from parplan.api.compare import compare_scenario
from parplan.api.knobs import parse_sweep
from parplan.api.parallel import SweepInterrupted, evaluate_variants
from parplan.api.variants import expand_variants
from parplan.cli.app import app
from parplan.config.loader import load_scenario
from parplan.report.json_report import comparison_document, dumps
from tests.api.ray_support import RAY_MARKS, lose_the_cluster_after

QUICKSTART = Path(__file__).resolve().parents[2] / "sample_configs" / "scenarios" / "quickstart.yaml"
pytestmark = RAY_MARKS


def _variants() -> tuple[Any, Any]:
    scenario = load_scenario(QUICKSTART)
    return scenario, expand_variants(scenario.plans, [parse_sweep("num_replicas=2,4,64")])


def test_ray_gives_the_local_results(ray_instance: Any) -> None:
    scenario, variants = _variants()
    seen: list[int] = []
    on_ray = evaluate_variants(scenario, variants, backend="ray", progress=lambda d, t: seen.append(d))
    here = evaluate_variants(scenario, variants)
    assert on_ray == here  # PlanResult equality leaves the timeline out
    assert any(isinstance(r, str) for r in on_ray)  # num_replicas=64 cannot be built: same message
    assert seen == sorted(seen) and seen[-1] == len(variants)
    assert all(r.sim is None for r in on_ray if not isinstance(r, str))


def test_compare_on_ray_writes_the_same_json(ray_instance: Any) -> None:
    def document(backend: str) -> str:
        c = compare_scenario(QUICKSTART, sweeps=["num_replicas=2,4"], backend=backend)  # type: ignore[arg-type]
        return dumps(comparison_document(c))

    assert document("ray") == document("local")


def test_a_cluster_lost_mid_sweep_keeps_what_was_gathered(
    ray_instance: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario, variants = _variants()
    lose_the_cluster_after(monkeypatch, ray_instance, 2)
    with pytest.raises(SweepInterrupted, match="Ray cluster was lost after") as caught:
        evaluate_variants(scenario, variants, backend="ray")
    gathered = [r for r in caught.value.results if r is not None]
    assert 0 < len(gathered) < len(variants)


def test_cli_writes_the_partial_results_then_fails(
    ray_instance: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    lose_the_cluster_after(monkeypatch, ray_instance, 1)
    out = tmp_path / "partial.json"
    result = CliRunner().invoke(
        app, ["compare-strategies", str(QUICKSTART), "--backend", "ray", "--json", str(out)]
    )
    assert result.exit_code == 1, result.output
    assert "the Ray cluster was lost" in result.output
    text = out.read_text(encoding="utf-8")
    assert '"rank": 1' in text and "not evaluated: the Ray cluster was lost" in text


def test_unreachable_cluster_is_one_clear_message_before_any_work() -> None:
    # In a fresh process (this one may already be connected to the session's instance).
    cmd = [sys.executable, "-m", "parplan", "compare-strategies", str(QUICKSTART)]
    cmd += ["--backend", "ray", "--address", "127.0.0.1:1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert "cannot reach the Ray cluster at 127.0.0.1:1" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_missing_ray_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(parallel.BackendError, match=r"pip install 'parplan\[ray\]'"):
        parallel.connect_ray()
