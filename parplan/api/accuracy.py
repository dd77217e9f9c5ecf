"""``parplan validate``: predicted all-reduce times beside published nccl-tests measurements.

The phases, each in its own function:

1. **load** (:func:`load_manifest`, :func:`load_cases`): the manifest (``validation/manifest.toml``)
   lists every table with its CSV, the cluster file written from the system's spec sheets, the
   ranks, the measured column and the NCCL_ALGO the run forced; every problem in the manifest, a
   cluster file or a CSV is a :class:`~parplan.errors.ConfigError` naming the file and line.
2. **predict** (:func:`predict_sizes`): each size of a table is timed the way ``parplan
   collective`` does it with ``auto``: NCCL's tuner model picks algorithm, protocol and channels on
   the system the cluster file describes, and the chosen schedule is lowered onto the placement and
   simulated by the event engine (link sharing on, the cluster's transport charged). Where the table
   forced ``NCCL_ALGO``, ``auto`` is restricted to it (:data:`NCCL_ALGO_COUNTERPARTS`), as NCCL is.
   :func:`candidate_algorithms` and pruning serve the other use of :func:`predict_sizes`: the
   fastest of several schedules.
3. **compare**: the signed error ``(predicted - measured) / measured`` per size, and the median and
   maximum of its absolute value per table, per system, overall and per size band (at or above
   ``large_from``, 64 MiB by default, and below).
4. **check**: those figures against the manifest's thresholds (:class:`ThresholdCheck`).

Pruning (on by default): sizes are visited in ascending order and an algorithm is not simulated at
a size when its simulated time at a smaller size already exceeds the best time found at this
size, because a collective's time never falls as its size grows. The pick is the same as when
every algorithm is simulated at every size (``prune=False``; a test checks it), at a fraction of
the cost: a 128-rank ring is only simulated at the sizes where it can win.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from parplan.api.collective import collective_sweep, sweep_sizes
from parplan.api.training_accuracy import TrainingResult, TrainingRowSpec, TrainingStats, predict_rows
from parplan.config.algorithms import algorithm_label, parse_algorithm
from parplan.config.issues import Source, translate
from parplan.config.loader import load_cluster
from parplan.config.nccltests import NcclTestsRow, NcclTestsTable, read_nccl_tests
from parplan.config.readers import read_file
from parplan.config.units import Bytes
from parplan.errors import ConfigError, Issue, ParplanError, UsageError
from parplan.spec import Spec
from parplan.topology.build import build_network
from parplan.topology.network import Network
from parplan.topology.placement import place

DEFAULT_MANIFEST = "validation/manifest.toml"
"""The manifest ``parplan validate`` reads when none is given (relative to the working directory)."""

ELEMENT_BYTES = 4
"""nccl-tests' default data type is float: sizes are whole float32 elements."""

NCCL_ALGO_COUNTERPARTS: dict[str, str] = {
    "ring": "ring",
    "tree": "tree",
    "nvls": "nvls",
    "nvlstree": "nvls_tree",
    "collnetdirect": "collnet_direct",
    "collnetchain": "collnet_chain",
    "pat": "pat",
}
"""NCCL_ALGO values (lower case) and the algorithm of NCCL's tuner each restricts ``auto`` to (the
schedule that runs it is :mod:`parplan.collectives.auto`'s stand-in when parplan has none)."""

MeasuredColumn = Literal[
    "time_us", "in_place_time_us", "algbw_GBps", "in_place_algbw_GBps", "busbw_GBps", "in_place_busbw_GBps"
]
Band = Literal["overall", "large", "small"]
BANDS: tuple[Band, ...] = ("overall", "large", "small")


# -- the manifest ------------------------------------------------------------------------------------


class Limits(Spec):
    """Largest acceptable median and maximum |error| of one size band, in percent (unset: no limit)."""

    median_pct: float | None = Field(default=None, ge=0)
    max_pct: float | None = Field(default=None, ge=0)


class Targets(Spec):
    """Limits per size band: every size, sizes at or above ``large_from``, sizes below it."""

    overall: Limits = Limits()
    large: Limits = Limits()
    small: Limits = Limits()

    def limits(self, band: Band) -> Limits:
        """The limits of one band."""
        result: Limits = getattr(self, band)
        return result


class Thresholds(Targets):
    """The limits ``parplan validate`` fails above, and where the large-size band starts."""

    large_from_bytes: Bytes = Field(default=float(64 * 2**20), alias="large_from", gt=0)


class TableSpec(Spec):
    """One nccl-tests table of the validation set and how to predict it."""

    name: str = Field(min_length=1)
    system: str = Field(min_length=1, description="the system, for the per-system summary")
    csv: str = Field(min_length=1, description="the table, relative to the manifest")
    cluster: str = Field(min_length=1, description="the cluster file, relative to the manifest")
    ranks: int | None = Field(default=None, ge=1, description="use the cluster's first N devices")
    devices: tuple[str, ...] | None = Field(default=None, min_length=1, description="or these, rank 0 first")
    measured: MeasuredColumn = "time_us"
    nccl_algo: str | None = Field(default=None, description="the NCCL_ALGO the run forced, if any")
    note: str | None = None

    @field_validator("nccl_algo")
    @classmethod
    def _known_algo(cls, value: str | None) -> str | None:
        if value is not None and value.lower() not in NCCL_ALGO_COUNTERPARTS:
            raise ValueError(f"unknown NCCL_ALGO {value!r}; valid: {', '.join(NCCL_ALGO_COUNTERPARTS)}")
        return value

    @model_validator(mode="after")
    def _ranks_or_devices(self) -> TableSpec:
        if self.ranks is None and self.devices is None:
            raise ValueError("give ranks (the first N devices) or devices")
        if self.ranks is not None and self.devices is not None and self.ranks != len(self.devices):
            raise ValueError(f"ranks = {self.ranks} but {len(self.devices)} devices are listed")
        return self


class ManifestSpec(Spec):
    """The validation set: thresholds, the targets printed beside them, and the tables."""

    description: str | None = None
    thresholds: Thresholds = Thresholds()
    targets: Targets = Targets()
    tables: tuple[TableSpec, ...] = Field(min_length=1)
    training: tuple[TrainingRowSpec, ...] = Field(
        default=(), description="published training runs, predicted as step times"
    )
    training_thresholds: Limits = Limits()
    training_targets: Limits = Limits()

    @field_validator("tables")
    @classmethod
    def _unique_names(cls, tables: tuple[TableSpec, ...]) -> tuple[TableSpec, ...]:
        seen: set[str] = set()
        for t in tables:
            if t.name in seen:
                raise ValueError(f"table name {t.name!r} is used twice")
            seen.add(t.name)
        return tables

    @model_validator(mode="after")
    def _unique_rows(self) -> ManifestSpec:
        seen = {t.name for t in self.tables}
        for row in self.training:
            if row.name in seen:
                raise ValueError(f"training row name {row.name!r} is used twice (or names a table)")
            seen.add(row.name)
        return self


@dataclass(frozen=True)
class Manifest:
    """A loaded manifest: the spec, where it is, and where its keys are (for located errors)."""

    path: Path
    spec: ManifestSpec
    source: Source

    def resolve(self, relative: str) -> Path:
        """A path of the manifest, relative to the manifest's directory."""
        return self.path.parent / relative


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate a manifest; :class:`ConfigError` with file:line issues when it is wrong."""
    shown = str(path)
    data, positions = read_file(path)
    source = Source.single(shown, positions)
    try:
        spec = ManifestSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(translate(exc, ManifestSpec, data, source)) from None
    return Manifest(Path(path), spec, source)


# -- loading the cases ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ValidationCase:
    """One table ready to predict: its spec, its rows, and the placed ranks on the built cluster."""

    spec: TableSpec
    table: NcclTestsTable
    network: Network
    devices: tuple[str, ...]
    groups: tuple[tuple[int, ...], ...]

    @property
    def algorithm_forced(self) -> str | None:
        """The tuner algorithm the table's NCCL_ALGO restricts ``auto`` to (``None``: auto picks)."""
        if self.spec.nccl_algo is None:
            return None
        return NCCL_ALGO_COUNTERPARTS[self.spec.nccl_algo.lower()]

    def measured_s(self, row: NcclTestsRow) -> float:
        """The measured time of one row, derived from its bandwidth for bandwidth-only tables."""
        return measured_time_s(row, self.spec.measured, len(self.devices))

    def rounding_pct(self) -> float:
        """Largest error the printed precision (0.01 us or 0.01 GB/s) alone can cause, in percent."""
        values = [row.value(self.spec.measured) for row in self.table.rows]
        return max(0.005 / v * 100 for v in values if v)


def measured_time_s(row: NcclTestsRow, column: str, ranks: int) -> float:
    """Seconds from a time (us) column, or from algbw / busbw (GB/s) as nccl-tests defines them:
    algbw = size / time, busbw = algbw x 2(p-1)/p for an all-reduce."""
    value = row.value(column)
    if value is None or value <= 0:
        raise ValueError(f"no positive {column} value")
    if column.endswith("time_us"):
        return value * 1e-6
    algbw_GBps = value
    if column.endswith("busbw_GBps"):
        if ranks < 2:
            raise ValueError("busbw of a single rank is 0 and gives no time")
        algbw_GBps = value * ranks / (2 * (ranks - 1))
    return row.size_bytes / (algbw_GBps * 1e9)


def load_cases(manifest: Manifest, names: Sequence[str] | None = None) -> list[ValidationCase]:
    """Load every table of the manifest (or those named), with every problem found in one error."""
    specs = list(manifest.spec.tables)
    if names:
        known = [t.name for t in specs] + [r.name for r in manifest.spec.training]
        unknown = [n for n in names if n not in known]
        if unknown:
            raise UsageError(f"--table: unknown table {unknown[0]!r}; valid: {', '.join(known)}", "--table")
        specs = [t for t in specs if t.name in names]
    networks: dict[Path, Network] = {}
    issues: list[Issue] = []
    cases: list[ValidationCase] = []
    for spec in specs:
        index = manifest.spec.tables.index(spec)
        try:
            cases.append(_load_case(manifest, index, spec, networks))
        except ConfigError as exc:
            issues.extend(i for i in exc.issues if i not in issues)
    if issues:
        raise ConfigError(issues)
    return cases


def _load_case(
    manifest: Manifest, index: int, spec: TableSpec, networks: dict[Path, Network]
) -> ValidationCase:
    where = ("tables", index)
    csv_path = manifest.resolve(spec.csv)
    cluster_path = manifest.resolve(spec.cluster)
    for key, path in (("csv", csv_path), ("cluster", cluster_path)):
        if not path.is_file():
            raise ConfigError(manifest.source.issue((*where, key), f"no such file: {path}"))
    table = read_nccl_tests(csv_path)
    if spec.measured not in table.columns:
        raise ConfigError(
            table.issue(f"column {spec.measured!r} is missing (the manifest measures {spec.name} by it)")
        )
    resolved = cluster_path.resolve()
    if resolved not in networks:
        networks[resolved] = build_network(load_cluster(cluster_path))
    network = networks[resolved]
    try:
        placement = place(network, spec.devices, count=spec.ranks)
    except ParplanError as exc:
        field_name = "devices" if spec.devices is not None else "ranks"
        raise ConfigError(manifest.source.issue((*where, field_name), str(exc))) from None
    case = ValidationCase(spec, table, network, placement.devices, placement.groups)
    for row in table.rows:
        try:
            case.measured_s(row)
        except ValueError as exc:
            raise ConfigError(table.issue(f"size {row.size_bytes}: {exc}", row.line)) from None
    return case


# -- predicting ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    """The predicted time of one size, the algorithm that gave it and every algorithm simulated."""

    size_bytes: int
    time_s: float
    algorithm: str
    simulated: tuple[str, ...]


def candidate_algorithms(forced: str | None = None) -> list[Any]:
    """Schedules to time and pick the fastest of: the forced one, or every registered schedule with
    its defaults (``auto`` left out: it picks by NCCL's model, not by the simulation)."""
    from parplan.collectives.registry import schedules

    return [parse_algorithm(forced)] if forced is not None else [parse_algorithm(n) for n in schedules()]


def auto_candidates(nccl_algo: str | None = None) -> list[Any]:
    """How ``parplan validate`` predicts: ``auto`` alone, restricted to the tuner algorithm a
    table's NCCL_ALGO forced (as NCCL_ALGO restricts NCCL's own choice)."""
    return [parse_algorithm({"name": "auto", "algorithm": nccl_algo})]


def predict_sizes(
    network: Network,
    devices: Sequence[str],
    groups: Sequence[Sequence[int]],
    candidates: Sequence[Any],
    sizes: Sequence[int],
    *,
    prune: bool = True,
) -> list[Prediction]:
    """The fastest candidate's simulated time at each size (returned in the order of ``sizes``).

    With ``prune`` an algorithm whose time at a smaller size already exceeds the best at this
    size is not simulated (see the module docstring); ties go to the earlier candidate either way.
    """
    labels = [algorithm_label(c) for c in candidates]
    order = {label: i for i, label in enumerate(labels)}
    last: dict[str, float] = {}
    found: dict[int, Prediction] = {}
    group_lists = [list(g) for g in groups]
    for size in sorted(set(sizes)):
        pair = sweep_sizes(size_bytes=float(size), element_bytes=ELEMENT_BYTES)
        best_t, best, ran = math.inf, "", ""
        simulated: list[str] = []
        for spec, label in sorted(zip(candidates, labels, strict=True), key=lambda c: last.get(c[1], -1.0)):
            bound = last.get(label)
            if prune and bound is not None and (bound, order[label]) > (best_t, order.get(best, -1)):
                continue
            sweep = collective_sweep(
                network, devices, [spec], pair, element_bytes=ELEMENT_BYTES, groups=group_lists
            )
            t = sweep.rows[0].time_s
            last[label] = t
            simulated.append(label)
            if (t, order[label]) < (best_t, order.get(best, len(labels))):
                best_t, best = t, label
                ran = sweep.rows[0].chosen or label
        found[size] = Prediction(size, best_t, ran, tuple(sorted(simulated, key=order.__getitem__)))
    return [found[s] for s in sizes]


# -- comparing and checking -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ErrorStats:
    """Median and maximum |error| (percent) over some sizes; ``None`` when there are none."""

    count: int
    median_abs_pct: float | None
    max_abs_pct: float | None

    @classmethod
    def of(cls, errors_pct: Sequence[float]) -> ErrorStats:
        """The figures of a list of signed errors in percent.

        >>> ErrorStats.of([-10.0, 30.0, 5.0])
        ErrorStats(count=3, median_abs_pct=10.0, max_abs_pct=30.0)
        """
        if not errors_pct:
            return cls(0, None, None)
        magnitudes = [abs(e) for e in errors_pct]
        return cls(len(magnitudes), statistics.median(magnitudes), max(magnitudes))

    def figure(self, statistic: str) -> float | None:
        """``median`` or ``max``."""
        return self.median_abs_pct if statistic == "median" else self.max_abs_pct


def error_pct(predicted_s: float, measured_s: float) -> float:
    """The signed error of a prediction in percent: positive when it predicts too long.

    >>> error_pct(1.5, 1.0), error_pct(0.5, 1.0)
    (50.0, -50.0)
    """
    return (predicted_s - measured_s) / measured_s * 100.0


@dataclass(frozen=True)
class SizeResult:
    """One size of one table: measured beside predicted."""

    size_bytes: int
    line: int
    measured_s: float
    predicted_s: float
    algorithm: str
    simulated: tuple[str, ...]

    @property
    def error_pct(self) -> float:
        """Signed error in percent."""
        return error_pct(self.predicted_s, self.measured_s)


@dataclass(frozen=True)
class BandStats:
    """Error figures of a set of sizes: all of them, the large ones and the small ones."""

    overall: ErrorStats
    large: ErrorStats
    small: ErrorStats

    @classmethod
    def of(cls, rows: Sequence[SizeResult], large_from_bytes: float) -> BandStats:
        """Figures of ``rows``, split at ``large_from_bytes``."""
        return cls(
            ErrorStats.of([r.error_pct for r in rows]),
            ErrorStats.of([r.error_pct for r in rows if r.size_bytes >= large_from_bytes]),
            ErrorStats.of([r.error_pct for r in rows if r.size_bytes < large_from_bytes]),
        )

    def band(self, band: Band) -> ErrorStats:
        """The figures of one band."""
        result: ErrorStats = getattr(self, band)
        return result


@dataclass(frozen=True)
class TableResult:
    """A predicted table: what it is, every size, and its figures."""

    spec: TableSpec
    cluster_name: str
    ranks: int
    algorithm_forced: str | None
    rounding_pct: float
    rows: tuple[SizeResult, ...]
    stats: BandStats


@dataclass(frozen=True)
class ThresholdCheck:
    """One figure against its threshold (and the issue's target, printed beside it); ``band``
    ``training`` is the training rows' step-time error."""

    band: Band | Literal["training"]
    statistic: Literal["median", "max"]
    value_pct: float | None
    threshold_pct: float | None
    target_pct: float | None

    @property
    def passed(self) -> bool:
        """True unless the figure exists, has a threshold and is above it."""
        return self.value_pct is None or self.threshold_pct is None or self.value_pct <= self.threshold_pct


@dataclass(frozen=True)
class ValidationReport:
    """Everything ``parplan validate`` found."""

    manifest: str
    large_from_bytes: float
    tables: tuple[TableResult, ...]
    overall: BandStats
    systems: dict[str, BandStats]
    checks: tuple[ThresholdCheck, ...]
    pruned: bool
    simulations_run: int
    simulations_possible: int
    training: tuple[TrainingResult, ...] = ()
    training_stats: TrainingStats = field(default_factory=lambda: TrainingStats(0, None, None))
    failures: tuple[ThresholdCheck, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "failures", tuple(c for c in self.checks if not c.passed))

    @property
    def passed(self) -> bool:
        """True when no figure is above its threshold."""
        return not self.failures


def predict_case(
    case: ValidationCase, *, large_from_bytes: float = 64.0 * 2**20, prune: bool = True
) -> tuple[TableResult, int, int]:
    """One table predicted and compared; also the simulations run and the number possible."""
    candidates = auto_candidates(case.algorithm_forced)
    sizes = [row.size_bytes for row in case.table.rows]
    predictions = predict_sizes(case.network, case.devices, case.groups, candidates, sizes, prune=prune)
    rows = tuple(
        SizeResult(row.size_bytes, row.line, case.measured_s(row), p.time_s, p.algorithm, p.simulated)
        for row, p in zip(case.table.rows, predictions, strict=True)
    )
    result = TableResult(
        spec=case.spec,
        cluster_name=case.network.name,
        ranks=len(case.devices),
        algorithm_forced=case.algorithm_forced,
        rounding_pct=case.rounding_pct(),
        rows=rows,
        stats=BandStats.of(rows, large_from_bytes),
    )
    return result, sum(len(p.simulated) for p in predictions), len(candidates) * len(set(sizes))


def run_validation(
    manifest_path: str | Path = DEFAULT_MANIFEST,
    *,
    tables: Sequence[str] | None = None,
    prune: bool = True,
    progress: Callable[[str], None] | None = None,
) -> ValidationReport:
    """Load, predict, compare and check the validation set (or the tables named).

    Raises :class:`ConfigError` for a bad manifest, cluster file or table and
    :class:`~parplan.errors.UsageError` for an unknown table name; figures above thresholds are not errors:
    they are in :attr:`ValidationReport.failures`.
    """
    manifest = load_manifest(manifest_path)
    cases = load_cases(manifest, tables)
    thresholds = manifest.spec.thresholds
    large_from = float(thresholds.large_from_bytes)
    results: list[TableResult] = []
    run = possible = 0
    for i, case in enumerate(cases, start=1):
        if progress is not None:
            progress(f"[{i}/{len(cases)}] {case.spec.name}: {len(case.devices)} ranks on {case.network.name}")
        result, n_run, n_possible = predict_case(case, large_from_bytes=large_from, prune=prune)
        results.append(result)
        run += n_run
        possible += n_possible
    every = [r for t in results for r in t.rows]
    systems: dict[str, list[SizeResult]] = {}
    for t in results:
        systems.setdefault(t.spec.system, []).extend(t.rows)
    overall = BandStats.of(every, large_from)
    checks: tuple[ThresholdCheck, ...] = tuple(
        ThresholdCheck(
            band,
            statistic,
            overall.band(band).figure(statistic),
            getattr(thresholds.limits(band), f"{statistic}_pct"),
            getattr(manifest.spec.targets.limits(band), f"{statistic}_pct"),
        )
        for band in BANDS
        for statistic in ("median", "max")
    )
    rows = [r for r in manifest.spec.training if not tables or r.name in tables]
    training = predict_rows(rows, manifest.resolve, progress)
    training_stats = TrainingStats.of(training)
    checks += tuple(
        ThresholdCheck(
            "training",
            statistic,
            getattr(training_stats, f"{statistic}_pct"),
            getattr(manifest.spec.training_thresholds, f"{statistic}_pct"),
            getattr(manifest.spec.training_targets, f"{statistic}_pct"),
        )
        for statistic in ("median", "max")
        if training
    )
    return ValidationReport(
        manifest=str(manifest_path),
        large_from_bytes=large_from,
        tables=tuple(results),
        overall=overall,
        systems={name: BandStats.of(rows, large_from) for name, rows in systems.items()},
        checks=checks,
        pruned=prune,
        simulations_run=run,
        simulations_possible=possible,
        training=training,
        training_stats=training_stats,
    )
