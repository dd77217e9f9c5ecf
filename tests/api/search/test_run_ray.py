"""parplan search on Ray: the same results as here, an unreachable cluster refused before any work,
a cluster lost mid-search keeping the chunks gathered (as compare-strategies' Ray tests do; one
local Ray instance, in the tests' shared xdist group)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from parplan.api.parallel import SweepInterrupted
from parplan.api.search import spread
from parplan.api.search.run import search_scenario
from parplan.cli.app import app
from parplan.report.json_report import dumps
from parplan.report.search import search_document
from tests.api.ray_support import RAY_MARKS, lose_the_cluster_after
from tests.api.search.test_run import SMALL, small_scenario

pytestmark = RAY_MARKS


def test_search_on_ray_writes_the_local_json(ray_instance: Any, tmp_path: Path) -> None:
    path = small_scenario(tmp_path, SMALL)
    seen: list[int] = []
    on_ray = search_scenario(path, top_k=1, backend="ray", progress=lambda d, t: seen.append(d))
    assert dumps(search_document(on_ray)) == dumps(search_document(search_scenario(path, top_k=1)))
    assert len(seen) > 1 and seen == sorted(seen) and seen[-1] == on_ray.counts.evaluated


def test_a_cluster_lost_mid_search_keeps_the_chunks_gathered(
    ray_instance: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = small_scenario(tmp_path, SMALL)
    whole = search_scenario(path, top_k=0)
    lose_the_cluster_after(monkeypatch, ray_instance, 2)
    partial = search_scenario(path, top_k=0, backend="ray")
    assert partial.interrupted is not None and "Ray cluster was lost after" in partial.interrupted
    assert 0 < partial.counts.evaluated < whole.counts.evaluated
    assert partial.counts.evaluated + partial.counts.not_evaluated == whole.counts.evaluated
    gathered = {r.label: r.step_time_s for r in partial.rows()}
    assert all(gathered[r.label] == r.step_time_s for r in whole.rows() if r.label in gathered)


def test_cli_writes_what_was_gathered_then_fails(
    ray_instance: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    lose_the_cluster_after(monkeypatch, ray_instance, 1)
    out = tmp_path / "partial.json"
    path = small_scenario(tmp_path, SMALL)
    result = CliRunner().invoke(
        app, ["search", str(path), "--backend", "ray", "--top-k", "0", "--json", str(out)]
    )
    assert result.exit_code == 1, result.output
    assert "the Ray cluster was lost" in result.stderr and "ranking (closed form)" in result.stdout
    document = json.loads(out.read_text(encoding="utf-8"))
    assert document["interrupted"].startswith("the Ray cluster was lost after")
    assert document["plans"] and document["counts"]["not_evaluated"] > 0


def test_the_chunk_work_is_the_one_ray_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """search hands its chunks to api/parallel.evaluate_chunks (compare's Ray path too)."""
    calls: list[str] = []

    def chunks(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["what"])
        raise SweepInterrupted("stop", [None] * len(args[2]))

    monkeypatch.setattr(spread, "evaluate_chunks", chunks)
    result = search_scenario(small_scenario(tmp_path, SMALL), top_k=0)
    assert calls == ["candidates"] and result.interrupted == "stop" and result.counts.evaluated == 0


def test_unreachable_cluster_is_one_clear_message_before_any_work(tmp_path: Path) -> None:
    path = small_scenario(tmp_path, SMALL)
    cmd = [
        sys.executable,
        "-m",
        "parplan",
        "search",
        str(path),
        "--backend",
        "ray",
        "--address",
        "127.0.0.1:1",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert "cannot reach the Ray cluster at 127.0.0.1:1" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == "" and "searched" not in done.stderr
