"""``parplan calibrate``: fit a cluster file to measured nccl-tests logs, and write the calibrated file.

The phases: **load** the base cluster file and the logs (:mod:`parplan.api.calibrate_logs` refuses
logs a fit cannot trust, one message each); **fit** the cluster's effective bandwidth per link class
crossed, its per-call and per-step latencies (:mod:`parplan.api.calibrate_fit` says how: relative
least squares, Levenberg-Marquardt on numpy); **write** the calibrated cluster file.

The calibrated file is the base file's own content, written out whole with the fitted values in
place, plus a ``calibration:`` record (:class:`parplan.config.cluster.CalibrationRecord`): the base
file and its hash, the logs and their hashes, the date, the method, each parameter fitted or kept
(with why) in human units, and the median error before and after. Whole rather than an overlay on
the base (``base:`` + overrides) because it then loads like any cluster file (``parplan collective
--cluster``, a scenario's ``cluster:``) with nothing new to resolve, and stays what was fitted even
when the base file is edited later; the record still names the base.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from parplan.api.accuracy import ErrorStats, error_pct
from parplan.api.calibrate_fit import (
    FitResult,
    ParameterResult,
    cluster_model,
    fit,
    parameters_of,
    seconds_text,
)
from parplan.api.calibrate_logs import MeasuredLog, file_sha256, read_log
from parplan.config.cluster import CalibrationLog, CalibrationRecord, ClusterSpec
from parplan.config.loader import load_cluster
from parplan.config.readers import read_file
from parplan.errors import ConfigError, Issue, UsageError
from parplan.topology.build import build_network

METHOD = (
    "least squares on relative error over the sizes (Levenberg-Marquardt, numpy; forward-difference "
    "Jacobian from the engine's simulation)"
)


@dataclass(frozen=True)
class ResidualRow:
    """One size of one log: measured, predicted before and after calibration."""

    log: str
    line: int
    size_bytes: int
    measured_s: float
    before_s: float
    after_s: float

    @property
    def before_pct(self) -> float:
        """Signed error before, in percent."""
        return error_pct(self.before_s, self.measured_s)

    @property
    def after_pct(self) -> float:
        """Signed error after, in percent."""
        return error_pct(self.after_s, self.measured_s)


@dataclass(frozen=True)
class Calibration:
    """What ``parplan calibrate`` found and the calibrated file it writes (:attr:`text`)."""

    base: str
    cluster_name: str
    logs: tuple[MeasuredLog, ...]
    parameters: tuple[ParameterResult, ...]
    rows: tuple[ResidualRow, ...]
    before: ErrorStats
    after: ErrorStats
    record: CalibrationRecord
    data: dict[str, Any]
    iterations: int
    simulations: int

    @property
    def text(self) -> str:
        """The calibrated cluster file (YAML)."""
        return calibrated_yaml(self.data, self.base)

    def spec(self) -> ClusterSpec:
        """The calibrated cluster, as loading the file gives it."""
        return ClusterSpec.model_validate(self.data)


def now_utc() -> str:
    """The current time as the record writes it (ISO 8601, seconds, UTC)."""
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def calibrate(
    cluster: str | Path,
    logs: Sequence[str | Path],
    *,
    collective: str | None = None,
    ranks: int | None = None,
    date: str | None = None,
) -> Calibration:
    """Read ``logs`` and fit ``cluster`` to them (``collective`` and ``ranks`` for logs that do not
    say); ``date`` goes into the record (default: now). Raises ConfigError / UsageError."""
    if not logs:
        raise UsageError("give at least one log file to fit", "LOG")
    load_cluster(cluster)  # the base must load on its own (located errors)
    measured: list[MeasuredLog] = []
    issues: list[Issue] = []
    for path in logs:
        try:
            measured.append(read_log(path, collective=collective, ranks=ranks))
        except ConfigError as exc:
            issues.extend(exc.issues)
    if issues:
        raise ConfigError(issues)
    return calibrate_measured(cluster, measured, date=date)


def calibrate_measured(
    cluster: str | Path, logs: Sequence[MeasuredLog], *, date: str | None = None
) -> Calibration:
    """Fit ``cluster`` to already-read logs (also what ``parplan validate --cross`` calls)."""
    data, _ = read_file(cluster)
    if not isinstance(data, dict):
        raise ConfigError(Issue(str(cluster), "", "is not a cluster file"))
    data.pop("calibration", None)  # calibrating a calibrated file starts from its values
    spec = ClusterSpec.model_validate(data)
    network = build_network(spec)
    params = parameters_of(data, spec, network)
    model = cluster_model(data, network.transport.kind, logs)
    measured = [t for log in logs for t in log.measured_s]
    try:
        result = fit(model, params, measured)
    except ConfigError as exc:
        where = ", ".join(log.path for log in logs)
        raise ConfigError(Issue(where, "", exc.issues[0].message)) from None
    rows = _rows(logs, result)
    before = ErrorStats.of([r.before_pct for r in rows])
    after = ErrorStats.of([r.after_pct for r in rows])
    record = _record(cluster, logs, result, before, after, date or now_utc())
    from parplan.api.calibrate_fit import apply_values

    out = apply_values(data, result.values, network.transport.kind)
    out["calibration"] = record.to_data()
    ClusterSpec.model_validate(out)  # what is written loads
    return Calibration(
        str(cluster),
        spec.name,
        tuple(logs),
        result.parameters,
        rows,
        before,
        after,
        record,
        out,
        result.iterations,
        result.simulations,
    )


def _rows(logs: Sequence[MeasuredLog], result: FitResult) -> tuple[ResidualRow, ...]:
    rows: list[ResidualRow] = []
    for log, before, after in zip(logs, result.before_s, result.after_s, strict=True):
        for size, line, m, b, a in zip(
            log.sizes_bytes, log.lines, log.measured_s, before, after, strict=True
        ):
            rows.append(ResidualRow(log.path, line, size, m, b, a))
    return tuple(rows)


def value_text(key: str, value: float) -> str:
    """A parameter's value in human form: ``0.8734`` for an efficiency, ``7.215 us`` for a latency."""
    return f"{value:.4f}" if key.startswith("efficiency.") else seconds_text(value)


def _record(
    cluster: str | Path,
    logs: Sequence[MeasuredLog],
    result: FitResult,
    before: ErrorStats,
    after: ErrorStats,
    date: str,
) -> CalibrationRecord:
    fitted = {p.key: value_text(p.key, p.after) for p in result.parameters if p.status != "not identified"}
    kept = {
        p.key: f"{value_text(p.key, p.before)} ({p.note})"
        for p in result.parameters
        if p.status == "not identified"
    }
    return CalibrationRecord(
        base=str(cluster),
        base_sha256=file_sha256(cluster),
        date=date,
        method=METHOD,
        logs=tuple(
            CalibrationLog(
                path=log.path,
                sha256=log.sha256,
                collective=log.collective,
                ranks=log.ranks,
                sizes=len(log.sizes_bytes),
            )
            for log in logs
        ),
        fitted=fitted,
        kept=kept,
        median_error_pct={
            "before": round(before.median_abs_pct or 0.0, 2),
            "after": round(after.median_abs_pct or 0.0, 2),
        },
    )


def calibrated_yaml(data: dict[str, Any], base: str) -> str:
    """The calibrated file's text: a comment saying what it is, then the data."""
    header = (
        f"# Calibrated by parplan calibrate from {base}: the base file's content with the fitted values\n"
        "# in place; the calibration: block at the end records what was fitted, from which logs, when.\n"
    )
    return header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
