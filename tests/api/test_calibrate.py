"""``parplan calibrate``'s library: logs refused with one message each, the fit recovering known
values from a log parplan itself generated, a real table's error reduced, the calibrated file
loading and round-tripping, and the same inputs giving the same file."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from parplan.api.calibrate import calibrate, calibrate_measured
from parplan.api.calibrate_fit import apply_values, cluster_model
from parplan.api.calibrate_logs import MeasuredLog, read_log
from parplan.config.loader import load_cluster
from parplan.errors import ConfigError, UsageError
from parplan.topology.build import build_network

ROOT = Path(__file__).resolve().parents[2]
VALIDATION = ROOT / "validation"

BASE: dict[str, Any] = {
    "name": "eth4",
    "generator": {
        "kind": "switch",
        "hosts": 4,
        "device": {"peak_flops": "1 TFLOP/s", "memory": "16 GiB"},
        "link": {"class": "ethernet", "bandwidth": "1 Gbit/s", "latency": "50 us"},
    },
    "transport": {"kind": "gloo"},
}
TRUTH = {"efficiency.ethernet": 0.8, "call_latency": 35e-6, "step_latency": 12e-6}
SIZES = tuple(2**k for k in range(3, 25))


def nccl_tests_text(
    collective: str,
    ranks: int,
    sizes: tuple[int, ...],
    times_s: tuple[float, ...],
    *,
    wrong: int = 0,
    finished: bool = True,
) -> str:
    """A log as nccl-tests prints it (rank lines, the two header lines, rows, the closing lines)."""
    lines = [
        "# nccl-tests version 2.13.9 nccl-headers=22105 nccl-library=22105",
        f"# Collective test starting: {collective}_perf",
        f"# nThread 1 nGpus 1 minBytes {sizes[0]} maxBytes {sizes[-1]} step: 2(factor) warmup iters: 5",
        "#",
        "# Using devices",
        *[
            f"#  Rank {r:2d} Group  0 Pid {4000 + r:6d} on     host-{r} device  0 [0x00] cpu"
            for r in range(ranks)
        ],
        "#",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
        "            (us)  (GB/s)  (GB/s)",
    ]
    for size, t in zip(sizes, times_s, strict=True):
        us = t * 1e6
        algbw = size / t / 1e9
        lines.append(
            f"{size:12d} {size // 4:13d}     float     sum      -1 {us:9.2f} {algbw:7.2f} {algbw:7.2f}"
            f" {wrong:6d} {us:8.2f} {algbw:7.2f} {algbw:7.2f} {0:6d}"
        )
    if finished:
        lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 0.1", "#"]
    return "\n".join(lines) + "\n"


def synthetic_times(ranks: int, truth: dict[str, float] = TRUTH) -> tuple[float, ...]:
    """What parplan predicts on the base cluster with ``truth`` written in."""
    log = MeasuredLog(
        "synthetic", "0" * 64, "all_reduce", ranks, SIZES, (1.0,) * len(SIZES), (0,) * len(SIZES)
    )
    return cluster_model(BASE, "gloo", [log])(truth)[0]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    folder = tmp_path_factory.mktemp("synthetic")
    cluster = folder / "eth4.yaml"
    cluster.write_text(yaml.safe_dump(BASE), encoding="utf-8")
    logs = []
    for ranks in (3, 4):
        path = folder / f"all_reduce_{ranks}.log"
        path.write_text(nccl_tests_text("all_reduce", ranks, SIZES, synthetic_times(ranks)), encoding="utf-8")
        logs.append(path)
    return cluster, logs


# -- the fit ------------------------------------------------------------------------------------------------


def test_synthetic_log_recovers_the_known_values(synthetic: tuple[Path, list[Path]]) -> None:
    cluster, logs = synthetic
    result = calibrate(cluster, logs, date="2026-01-01T00:00:00Z")
    found = {p.key: p for p in result.parameters}
    for key, value in TRUTH.items():
        assert found[key].status == "fitted", found[key]
        assert found[key].after == pytest.approx(value, rel=0.01), key
    # the printed log rounds times to 0.01 us: the fit is as good as the log
    assert result.after.max_abs_pct is not None and result.after.max_abs_pct < 0.5
    assert result.before.median_abs_pct is not None and result.before.median_abs_pct > 5


def test_one_log_of_one_rank_count_cannot_tell_call_from_step_latency(
    synthetic: tuple[Path, list[Path]],
) -> None:
    """gloo's ring on 4 ranks: every size has the same steps, rendezvous aside; whatever is not
    identified is kept and says why, never silently fitted."""
    cluster, logs = synthetic
    result = calibrate(cluster, logs[1:], date="x")
    for p in result.parameters:
        if p.status == "not identified":
            assert p.note and p.after == p.before


def test_calibrating_a_real_table_reduces_its_error(tmp_path: Path) -> None:
    table = VALIDATION / "nccl-tests" / "abci-v100x8-2node-ib-edr.csv"
    result = calibrate(
        VALIDATION / "clusters" / "abci-v100.yaml", [table], collective="all_reduce", ranks=8, date="x"
    )
    assert result.after.median_abs_pct is not None and result.before.median_abs_pct is not None
    assert result.after.median_abs_pct < result.before.median_abs_pct
    assert {p.key: p.status for p in result.parameters}["efficiency.nvlink"] in ("fitted", "not identified")


def test_a_single_node_log_says_nothing_about_the_network() -> None:
    table = VALIDATION / "nccl-tests" / "abci-a100x8-1node-nvswitch.csv"
    result = calibrate(
        VALIDATION / "clusters" / "abci-a100.yaml", [table], collective="all_reduce", ranks=8, date="x"
    )
    status = {p.key: p for p in result.parameters}
    assert status["efficiency.infiniband"].status == "not identified"
    assert status["efficiency.infiniband"].after == status["efficiency.infiniband"].before
    assert (
        "efficiency.infiniband" in result.record.kept and "efficiency.infiniband" not in result.record.fitted
    )


# -- the calibrated file -------------------------------------------------------------------------------------


def test_calibrated_file_loads_round_trips_and_predicts_what_the_fit_said(
    synthetic: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    cluster, logs = synthetic
    result = calibrate(cluster, logs, date="2026-01-01T00:00:00Z")
    out = tmp_path / "eth4.calibrated.yaml"
    out.write_text(result.text, encoding="utf-8")
    spec = load_cluster(out)
    assert spec.calibration is not None
    assert spec.calibration.base == str(cluster)
    assert [log.sha256 for log in spec.calibration.logs] == [read_log(p).sha256 for p in logs]
    assert spec.calibration.date == "2026-01-01T00:00:00Z"
    assert set(spec.calibration.fitted) == set(TRUTH)
    assert spec.generator is not None and spec.generator.link.efficiency == pytest.approx(0.8, rel=0.01)  # type: ignore[union-attr]
    assert spec == result.spec()
    # saved again, it loads to the same spec
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(spec.to_data(), sort_keys=False), encoding="utf-8")
    assert load_cluster(again) == spec
    # the file predicts what the fit reported as "after"
    network = build_network(spec)
    from parplan.api.calibrate_fit import predict

    assert predict(network, result.logs[0]) == pytest.approx(
        result.rows and [r.after_s for r in result.rows if r.log == str(logs[0])], rel=1e-12
    )


def test_calibrating_a_calibrated_file_starts_from_its_values(
    synthetic: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    cluster, logs = synthetic
    out = tmp_path / "c.yaml"
    out.write_text(calibrate(cluster, logs, date="x").text, encoding="utf-8")
    second = calibrate(out, logs, date="x")
    assert second.before.median_abs_pct is not None and second.before.median_abs_pct < 0.5


def test_same_inputs_give_the_same_file(synthetic: tuple[Path, list[Path]]) -> None:
    cluster, logs = synthetic
    first = calibrate(cluster, logs, date="2026-01-01T00:00:00Z")
    second = calibrate(cluster, logs, date="2026-01-01T00:00:00Z")
    assert first.text == second.text
    assert first.rows == second.rows


def test_apply_values_leaves_the_input_alone() -> None:
    data = copy.deepcopy(BASE)
    out = apply_values(data, {"efficiency.ethernet": 0.5, "call_latency": 1e-6}, "gloo")
    assert data == BASE
    assert out["generator"]["link"]["efficiency"] == 0.5 and out["transport"]["call_latency"] == "1 us"


# -- bad logs ------------------------------------------------------------------------------------------


def _log(tmp_path: Path, text: str, name: str = "bad.log") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _times(n: int) -> tuple[float, ...]:
    return tuple(10e-6 * (i + 1) for i in range(n))


def _message(excinfo: pytest.ExceptionInfo[ConfigError]) -> str:
    assert len(excinfo.value.issues) == 1, excinfo.value.issues
    return str(excinfo.value)


def test_truncated_log(tmp_path: Path) -> None:
    text = nccl_tests_text("all_reduce", 2, SIZES[:4], _times(4), finished=False)
    with pytest.raises(ConfigError) as excinfo:
        read_log(_log(tmp_path, text))
    assert "truncated" in _message(excinfo)
    cut = nccl_tests_text("all_reduce", 2, SIZES[:4], _times(4))
    cut = cut[: cut.index("# Out of bounds")].rstrip("\n")
    cut = cut[: cut.rindex(" ")] + "\n"  # the last row loses its last field
    with pytest.raises(ConfigError) as excinfo:
        read_log(_log(tmp_path, cut, "cut.log"))
    assert "truncated" in _message(excinfo)


def test_wrong_results(tmp_path: Path) -> None:
    text = nccl_tests_text("all_reduce", 2, SIZES[:4], _times(4), wrong=3)
    with pytest.raises(ConfigError) as excinfo:
        read_log(_log(tmp_path, text))
    message = _message(excinfo)
    assert "#wrong = 3" in message and "size 8:" in message


def test_in_place_only(tmp_path: Path) -> None:
    text = "# run: all_reduce_perf\nsize_bytes,in_place_time_us\n8,10.0\n16,11.0\n"
    with pytest.raises(ConfigError) as excinfo:
        read_log(_log(tmp_path, text, "x.csv"), ranks=2)
    assert "in-place only" in _message(excinfo)


def test_mixed_collectives(tmp_path: Path) -> None:
    text = nccl_tests_text("all_reduce", 2, SIZES[:4], _times(4)) + nccl_tests_text(
        "all_gather", 2, SIZES[:4], _times(4)
    )
    with pytest.raises(ConfigError) as excinfo:
        read_log(_log(tmp_path, text))
    assert "mixed collectives" in _message(excinfo)
    twice = nccl_tests_text("all_reduce", 2, SIZES[:4], _times(4))
    with pytest.raises(ConfigError) as excinfo:
        read_log(_log(tmp_path, twice + twice, "twice.log"))
    assert "2 result tables" in _message(excinfo)


def test_sizes_not_increasing(tmp_path: Path) -> None:
    text = nccl_tests_text("all_reduce", 2, (8, 32, 16, 64), _times(4))
    with pytest.raises(ConfigError) as excinfo:
        read_log(_log(tmp_path, text))
    assert "must increase" in _message(excinfo)


def test_too_few_points(synthetic: tuple[Path, list[Path]], tmp_path: Path) -> None:
    cluster, _ = synthetic
    log = _log(tmp_path, nccl_tests_text("all_reduce", 2, SIZES[:1], synthetic_times(2)[:1]))
    with pytest.raises(ConfigError) as excinfo:
        calibrate(cluster, [log], date="x")
    assert "too few points to fit: 1 size for 2 parameters" in _message(excinfo)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        read_log(tmp_path / "missing.log")
    with pytest.raises(ConfigError, match="directory"):
        read_log(tmp_path)
    binary = tmp_path / "binary.log"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_log(binary)


def test_collective_and_ranks_must_be_known(tmp_path: Path) -> None:
    csv = _log(tmp_path, "size_bytes,time_us\n8,10.0\n16,11.0\n", "t.csv")
    with pytest.raises(ConfigError, match="--collective"):
        read_log(csv, ranks=2)
    with pytest.raises(ConfigError, match="--ranks"):
        read_log(csv, collective="all_reduce")
    with pytest.raises(UsageError, match="calibrate reads"):
        read_log(csv, collective="broadcast", ranks=2)
    log = _log(tmp_path, nccl_tests_text("all_gather", 2, SIZES[:4], _times(4)))
    with pytest.raises(ConfigError, match="all_gather_perf log, but --collective says all_reduce"):
        read_log(log, collective="all_reduce")
    assert read_log(log).collective == "all_gather" and read_log(log).ranks == 2


def test_every_bundled_table_reads_as_an_all_reduce_log() -> None:
    for path in sorted((VALIDATION / "nccl-tests").glob("*.csv")):
        log = read_log(path, collective="all_reduce", ranks=8)
        assert log.collective == "all_reduce" and len(log.sizes_bytes) >= 3, path.name


def test_calibrate_measured_names_the_logs_when_too_few_points(synthetic: tuple[Path, list[Path]]) -> None:
    cluster, _ = synthetic
    log = MeasuredLog("only-one", "0" * 64, "all_reduce", 4, (8,), (1e-4,), (1,))
    with pytest.raises(ConfigError, match="only-one"):
        calibrate_measured(cluster, [log])
