"""``parplan calibrate`` and ``parplan validate --cross`` through typer's CliRunner: tables printed,
the calibrated file written (and loadable), JSON, one clear message per bad log, usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from parplan.cli.app import app
from parplan.config.loader import load_cluster
from tests.api.test_calibrate import BASE, SIZES, nccl_tests_text, synthetic_times

ROOT = Path(__file__).resolve().parents[2]
VALIDATION = ROOT / "validation"
runner = CliRunner()


def files(tmp_path: Path) -> tuple[Path, Path]:
    cluster = tmp_path / "eth4.yaml"
    cluster.write_text(yaml.safe_dump(BASE), encoding="utf-8")
    log = tmp_path / "all_reduce_3.log"
    log.write_text(nccl_tests_text("all_reduce", 3, SIZES, synthetic_times(3)), encoding="utf-8")
    return cluster, log


def test_calibrate_prints_and_writes_a_loadable_file(tmp_path: Path) -> None:
    cluster, log = files(tmp_path)
    out = tmp_path / "out.yaml"
    result = runner.invoke(
        app,
        ["calibrate", "--cluster", str(cluster), str(log), "-o", str(out), "--date", "2026-01-01T00:00:00Z"],
    )
    assert result.exit_code == 0, result.stderr
    assert "efficiency.ethernet" in result.stdout and "residuals per size" in result.stdout
    assert "median |error|" in result.stdout and f"wrote calibrated cluster {out}" in result.stderr
    spec = load_cluster(out)
    assert spec.calibration is not None and spec.calibration.logs[0].path == str(log)


def test_calibrate_json_on_stdout_and_default_output(tmp_path: Path, monkeypatch: object) -> None:
    cluster, log = files(tmp_path)
    import os

    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = runner.invoke(
            app, ["calibrate", "--cluster", str(cluster), str(log), "--json", "-", "--date", "d"]
        )
    finally:
        os.chdir(here)
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["command"] == "calibrate" and document["after"]["count"] == len(SIZES)
    assert (tmp_path / "eth4.calibrated.yaml").is_file()


def test_calibrate_bad_log_is_one_red_message(tmp_path: Path) -> None:
    cluster, _ = files(tmp_path)
    bad = tmp_path / "bad.log"
    bad.write_text(
        nccl_tests_text("all_reduce", 3, SIZES[:4], synthetic_times(3)[:4], wrong=1), encoding="utf-8"
    )
    result = runner.invoke(
        app, ["calibrate", "--cluster", str(cluster), str(bad), "-o", str(tmp_path / "o.yaml")]
    )
    assert result.exit_code == 1
    assert "#wrong = 1" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "o.yaml").exists()


def test_calibrate_usage_errors(tmp_path: Path) -> None:
    cluster, log = files(tmp_path)
    result = runner.invoke(app, ["calibrate", "--cluster", str(cluster), str(log), "-o", str(cluster)])
    assert result.exit_code == 2  # would overwrite the cluster file
    result = runner.invoke(
        app, ["calibrate", "--cluster", str(cluster), str(log), "--collective", "broadcast"]
    )
    assert result.exit_code == 2 and "calibrate reads" in result.stderr


def test_validate_cross_on_the_h100_box(tmp_path: Path) -> None:
    out = tmp_path / "cross.json"
    result = runner.invoke(
        app,
        [
            "validate",
            "--manifest",
            str(VALIDATION / "manifest.toml"),
            "--cross",
            "--table",
            "h100x4-nvswitch-algo-ring",
            "--table",
            "h100x4-nvswitch-default-1node",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert "calibrated on" in result.stdout and "spec sheet" in result.stdout
    document = json.loads(out.read_text(encoding="utf-8"))
    assert len(document["fits"]) == 2 and len(document["pairs"]) == 2
    assert {p["target"] for p in document["pairs"]} == {
        "h100x4-nvswitch-algo-ring",
        "h100x4-nvswitch-default-1node",
    }
