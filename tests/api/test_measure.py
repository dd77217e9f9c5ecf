"""``parplan measure`` as a library: requests are checked, and 2- and 3-rank gloo runs over loopback
of the backend's all_reduce / all_gather / reduce_scatter / all_to_all and of parplan's ring,
tree:2, pairwise and bruck are
exact (#wrong 0), predicted on a cluster file, and written as JSON and as nccl-tests text that
:mod:`parplan.config.nccltests` reads back.

The torch runs are marked ``torch`` and skip with the reason where torch is missing. Each
(collective, ranks) is one launch shared by its tests (module-scoped), kept tiny: torchrun and
torch take seconds to start and the machine has 2 cores.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import jsonschema
import pytest

from parplan.api.measure import (
    BACKEND,
    MeasuredRow,
    Measurement,
    expand_measure_algorithms,
    measure,
    measure_request,
    predicted_algorithm,
)
from parplan.config.nccltests import parse_nccl_tests
from parplan.errors import RuntimeCheckError, UsageError
from parplan.report.json_report import dumps
from parplan.report.measure import measure_document, nccl_tests_text

ROOT = Path(__file__).resolve().parents[2]
SWITCH = ROOT / "sample_configs" / "clusters" / "switch-4hosts.yaml"
HAVE_TORCH = importlib.util.find_spec("torch") is not None
requires_torch = pytest.mark.skipif(
    not HAVE_TORCH, reason="torch is not installed: nothing to measure on (pip install 'parplan[torch]')"
)
ALGORITHMS = {
    "all_reduce": "backend,ring,tree:2",
    "all_gather": "backend,ring",
    "reduce_scatter": "backend,ring",
    "all_to_all": "backend,pairwise,ring,bruck",
}

ROW_SCHEMA = {
    "type": "object",
    "required": [
        "collective",
        "algorithm",
        "ranks",
        "size_bytes",
        "count",
        "time_s",
        "algbw_GBps",
        "busbw_GBps",
        "wrong",
        "predicted_s",
        "predicted_as",
        "error",
    ],
    "properties": {
        "ranks": {"type": "integer", "minimum": 2},
        "size_bytes": {"type": "integer", "minimum": 1},
        "count": {"type": "integer", "minimum": 1},
        "time_s": {"type": "number", "exclusiveMinimum": 0},
        "wrong": {"type": "integer", "minimum": 0},
        "predicted_s": {"type": ["number", "null"]},
        "error": {"type": ["number", "null"]},
    },
}
DOCUMENT_SCHEMA = {
    "type": "object",
    "required": [
        "tool",
        "command",
        "results",
        "collective",
        "backend",
        "ranks",
        "dtype",
        "iters",
        "warmup_iters",
        "torch",
        "cluster",
        "hosts",
    ],
    "properties": {
        "command": {"const": "measure"},
        "results": {"type": "array", "minItems": 1, "items": ROW_SCHEMA},
    },
}


def test_requests_are_checked_one_message_each() -> None:
    with pytest.raises(UsageError, match="at least 2 ranks, got 1"):
        measure_request(ranks=1, size_bytes=1024)
    with pytest.raises(UsageError, match="cannot be measured; valid: all_reduce"):
        measure_request(ranks=2, collective="broadcast", size_bytes=1024)
    with pytest.raises(UsageError, match="unknown dtype 'float8'"):
        measure_request(ranks=2, dtype="float8", size_bytes=1024)
    with pytest.raises(UsageError, match="sweep"):
        measure_request(ranks=2, min_bytes=4096, max_bytes=1024)
    with pytest.raises(UsageError, match="unknown collective algorithm 'nope'; valid: backend, centralized"):
        measure_request(ranks=2, algorithm="nope", size_bytes=1024)
    with pytest.raises(UsageError, match="'auto' picks an algorithm per call"):
        measure_request(ranks=2, algorithm="auto", size_bytes=1024)
    with pytest.raises(UsageError, match="-n >= 1"):
        measure_request(ranks=2, iters=0, size_bytes=1024)


def test_algorithms_expand_to_labels() -> None:
    assert expand_measure_algorithms("backend, tree, ring", "all_reduce") == ("backend", "tree:2", "ring")
    every = expand_measure_algorithms("all", "all_reduce")
    assert every[0] == BACKEND and "ring" in every and "auto" not in every
    assert expand_measure_algorithms("all", "all_gather") == ("backend", "ring")
    assert predicted_algorithm(BACKEND, "all_reduce", "gloo") == "ring"
    assert predicted_algorithm(BACKEND, "all_reduce", "nccl") == "auto"
    assert predicted_algorithm("tree:2", "all_reduce", "gloo") == "tree:2"
    every_exchange = ("backend", "pairwise", "ring", "bruck", "hierarchical")
    assert expand_measure_algorithms("all", "all_to_all") == every_exchange
    assert predicted_algorithm(BACKEND, "all_to_all", "gloo") == "ring"  # gloo's: a linear shift


def test_sharded_collectives_round_to_whole_shards() -> None:
    request = measure_request(ranks=3, collective="all_gather", min_bytes=4, max_bytes=64, step_factor=4)
    assert [count for _, count in request.sizes] == [3, 15]  # 1 and 4 elements -> 3; 16 -> 15
    assert all(size == 4 * count for size, count in request.sizes)


def test_row_figures() -> None:
    row = MeasuredRow("all_reduce", "ring", 4, 1_000_000, 250_000, 0.001, 0, predicted_s=0.0011)
    assert row.algbw_GBps == pytest.approx(1.0)
    assert row.busbw_GBps == pytest.approx(1.5)
    assert row.error == pytest.approx(0.1)
    gather = MeasuredRow("all_gather", "ring", 4, 1_000_000, 250_000, 0.001, 0)
    assert gather.busbw_GBps == pytest.approx(0.75) and gather.error is None


def test_missing_torch_gives_one_clear_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "torch.distributed", None)
    request = measure_request(ranks=2, size_bytes=1024)
    with pytest.raises(RuntimeCheckError, match=r"needs the torch extra: pip install 'parplan\[torch\]'"):
        measure(request, ranks=2)


@pytest.fixture(
    scope="module", params=[(c, p) for c in ALGORITHMS for p in (2, 3)], ids=lambda cp: f"{cp[0]}-{cp[1]}"
)
def run(request: pytest.FixtureRequest) -> Measurement:
    if not HAVE_TORCH:
        pytest.skip("torch is not installed: nothing to measure on (pip install 'parplan[torch]')")
    collective, ranks = request.param
    checked = measure_request(
        ranks=ranks,
        algorithm=ALGORITHMS[collective],
        collective=collective,
        min_bytes=96,
        max_bytes=96 * 1024,
        step_factor=32,
        warmup_iters=1,
        iters=2,
        timeout_s=120,
    )
    return measure(checked, ranks=ranks, cluster=SWITCH)


@pytest.mark.torch
@requires_torch
def test_every_row_is_exact_and_predicted(run: Measurement) -> None:
    request = run.request
    assert run.backend == "gloo" and run.ranks in (2, 3) and run.cluster == "lab-4x-t4"
    assert {r.algorithm for r in run.rows} == set(request.algorithms)
    assert len(run.rows) == len(request.algorithms) * len(request.sizes) == len(request.algorithms) * 3
    for row in run.rows:
        assert row.wrong == 0, row
        assert row.collective == request.collective and row.ranks == run.ranks
        assert 0 < row.time_s < 10
        assert row.predicted_s is not None and row.predicted_s > 0 and row.error is not None
        assert row.predicted_as == (row.algorithm if row.algorithm != BACKEND else "ring")
        if request.collective != "all_reduce":
            assert row.count % run.ranks == 0


@pytest.mark.torch
@requires_torch
def test_json_document_follows_the_schema(run: Measurement) -> None:
    document = json.loads(dumps(measure_document(run)))
    jsonschema.validate(document, DOCUMENT_SCHEMA)
    assert document["collective"] == run.request.collective


@pytest.mark.torch
@requires_torch
def test_nccl_tests_text_reads_back(run: Measurement) -> None:
    for algorithm in run.request.algorithms:
        table = parse_nccl_tests(nccl_tests_text(run, algorithm), f"{algorithm}.txt")
        rows = [r for r in run.rows if r.algorithm == algorithm]
        assert table.format == "printed"
        assert table.columns == ("time_us", "algbw_GBps", "busbw_GBps")
        assert [r.size_bytes for r in table.rows] == [r.size_bytes for r in rows]
        for got, row in zip(table.rows, rows, strict=True):
            assert got.time_us == pytest.approx(row.time_s * 1e6, rel=0.01, abs=0.01)
            assert got.busbw_GBps == pytest.approx(row.busbw_GBps, abs=0.006)
        assert any("parplan measure" in note for note in table.notes)


@pytest.mark.torch
@requires_torch
def test_the_emulation_seam_runs_one_torchrun_per_host() -> None:
    """``measure_on_hosts`` takes the host slots an emulated cluster makes; two slots on this
    machine stand in for two hosts (a torchrun each, one c10d rendezvous)."""
    from parplan.api.measure import measure_on_hosts
    from parplan.runtime.hosts import HostSlot

    hosts = [HostSlot("a", "127.0.0.1", nproc=2), HostSlot("b", "127.0.0.1", nproc=1)]
    request = measure_request(
        ranks=3,
        algorithm="backend,ring,hierarchical",
        size_bytes=4000,
        warmup_iters=1,
        iters=2,
        timeout_s=120,
    )
    result = measure_on_hosts(hosts, request, cluster=SWITCH)
    assert result.ranks == 3 and result.hosts == ("a", "b")
    assert [r.algorithm for r in result.rows] == ["backend", "ring", "hierarchical"]
    assert all(r.wrong == 0 and r.predicted_s is not None for r in result.rows)


@pytest.mark.torch
@requires_torch
def test_every_registered_schedule_is_exact_over_send_recv() -> None:
    """Every all-reduce schedule of the registry, run step by step over isend/irecv on 3 ranks
    with chunks that do not divide evenly, gives exactly the sum (float32 and int32)."""
    from parplan.collectives.registry import schedules

    for dtype in ("float32", "int32"):
        request = measure_request(
            ranks=3, algorithm="all", size_bytes=4 * 1001, dtype=dtype, warmup_iters=0, iters=1, timeout_s=120
        )
        result = measure(request, ranks=3)
        assert len(result.rows) == 1 + len(schedules())
        assert {(r.algorithm, r.wrong) for r in result.rows} == {(a, 0) for a in request.algorithms}
