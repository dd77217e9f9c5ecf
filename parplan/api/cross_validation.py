"""``parplan validate --cross``: calibrate on one table, predict the others of the same hardware.

The manifest's tables are grouped by hardware (same ``system`` and the same cluster file); a group
of two or more tables is a cross case: the ABCI A100 nodes at 1 to 16 nodes, the HGX H100 box at 2,
4 and 6 GPUs and with NCCL_ALGO forced. For each table of such a group, ``parplan calibrate`` fits
the spec-sheet cluster file to that table alone (:func:`parplan.api.calibrate.calibrate_measured`,
each size predicted as ``parplan validate`` predicts it: ``auto``, restricted by the table's
NCCL_ALGO), and every other table of the group is predicted twice, on the spec-sheet file and on the
calibrated one. The report puts the two errors side by side: calibration earns its keep when the
calibrated column is the smaller one on tables it never saw.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from parplan.api.accuracy import (
    DEFAULT_MANIFEST,
    ErrorStats,
    ValidationCase,
    auto_candidates,
    error_pct,
    load_cases,
    load_manifest,
)
from parplan.api.calibrate import calibrate_measured
from parplan.api.calibrate_fit import predict
from parplan.api.calibrate_logs import MeasuredLog, file_sha256, log_from_table
from parplan.topology.build import build_network


@dataclass(frozen=True)
class CrossFit:
    """One calibration of a cross case: the table it was fitted on and what it found."""

    system: str
    source: str
    fitted: dict[str, str]
    before: ErrorStats
    after: ErrorStats


@dataclass(frozen=True)
class CrossPair:
    """One table predicted with the spec-sheet file and with a file calibrated on another table."""

    system: str
    source: str
    target: str
    spec_sheet: ErrorStats
    calibrated: ErrorStats
    spec_sheet_pct: tuple[float, ...]
    calibrated_pct: tuple[float, ...]


@dataclass(frozen=True)
class CrossReport:
    """Every fit and every predicted pair, and the figures over all pairs."""

    manifest: str
    fits: tuple[CrossFit, ...]
    pairs: tuple[CrossPair, ...]
    spec_sheet: ErrorStats
    calibrated: ErrorStats


def case_log(case: ValidationCase, manifest_dir: Path) -> MeasuredLog:
    """A validation table as a log to fit or predict: its measured column, its placed devices, and
    ``auto`` restricted by its NCCL_ALGO."""
    path = manifest_dir / case.spec.csv
    return log_from_table(
        case.table,
        file_sha256(path),
        collective="all_reduce",
        column=case.spec.measured,
        devices=case.devices,
        algorithm=auto_candidates(case.algorithm_forced)[0],
    )


def cross_groups(cases: Sequence[ValidationCase]) -> list[list[ValidationCase]]:
    """Tables of one hardware (system and cluster file), groups of two or more, in manifest order."""
    groups: dict[tuple[str, str], list[ValidationCase]] = {}
    for case in cases:
        groups.setdefault((case.spec.system, case.spec.cluster), []).append(case)
    return [g for g in groups.values() if len(g) > 1]


def run_cross_validation(
    manifest_path: str | Path = DEFAULT_MANIFEST,
    *,
    tables: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> CrossReport:
    """Calibrate on each table of every hardware with several tables, predict the others."""
    manifest = load_manifest(manifest_path)
    cases = load_cases(manifest, tables)
    fits: list[CrossFit] = []
    pairs: list[CrossPair] = []
    for group in cross_groups(cases):
        logs = {c.spec.name: case_log(c, manifest.path.parent) for c in group}
        cluster = manifest.resolve(group[0].spec.cluster)
        base = group[0].network
        spec_sheet = {name: predict(base, log) for name, log in logs.items()}
        for source in group:
            if progress is not None:
                progress(f"calibrating {group[0].network.name} on {source.spec.name}")
            calibration = calibrate_measured(cluster, [logs[source.spec.name]], date="-")
            fits.append(
                CrossFit(
                    source.spec.system,
                    source.spec.name,
                    dict(calibration.record.fitted),
                    calibration.before,
                    calibration.after,
                )
            )
            network = build_network(calibration.spec())
            for target in group:
                if target is source:
                    continue
                log = logs[target.spec.name]
                before = [
                    error_pct(p, m) for p, m in zip(spec_sheet[target.spec.name], log.measured_s, strict=True)
                ]
                after = [error_pct(p, m) for p, m in zip(predict(network, log), log.measured_s, strict=True)]
                pairs.append(
                    CrossPair(
                        source.spec.system,
                        source.spec.name,
                        target.spec.name,
                        ErrorStats.of(before),
                        ErrorStats.of(after),
                        tuple(before),
                        tuple(after),
                    )
                )
    return CrossReport(
        str(manifest_path),
        tuple(fits),
        tuple(pairs),
        ErrorStats.of([e for p in pairs for e in p.spec_sheet_pct]),
        ErrorStats.of([e for p in pairs for e in p.calibrated_pct]),
    )
