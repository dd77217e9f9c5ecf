"""The measured logs ``parplan calibrate`` fits: read, checked, turned into (size, seconds) points.

A log is nccl-tests output as ``all_reduce_perf``, ``all_gather_perf`` and ``reduce_scatter_perf``
print it (or ``parplan measure --nccl-tests``, which writes the same format), or one of the
repository's CSV tables (:mod:`parplan.config.nccltests` reads both). :func:`read_log` refuses, with
one message naming the file and line, every log a fit cannot trust:

- unreadable (missing, a directory, not UTF-8) or malformed (a row with missing fields);
- truncated: printed output without nccl-tests' closing ``# Avg bus bandwidth`` line;
- ``#wrong`` above 0 at any size (the run computed wrong results);
- in-place only (the fit uses out-of-place times, as nccl-tests' first columns);
- two collectives named in one file, or two result tables in one file;
- a size column that does not increase;
- a collective other than all-reduce, all-gather and reduce-scatter, or none named and none given;
- no way to tell the number of ranks (no ``#  Rank`` lines and no ``--ranks``).

Too few points for the parameters is checked by the fit (:mod:`parplan.api.calibrate_fit`), which
knows how many parameters the data identifies.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parplan.api.collective import bus_factor
from parplan.config.nccltests import NcclTestsRow, NcclTestsTable, read_nccl_tests
from parplan.errors import ConfigError, Issue, UsageError

CALIBRATED_COLLECTIVES: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter")
"""The collectives calibrate reads logs of (their perf binaries: ``all_reduce_perf`` ...)."""

OUT_OF_PLACE: tuple[str, ...] = ("time_us", "algbw_GBps", "busbw_GBps")
"""The out-of-place columns a time is taken from, in order of preference."""


@dataclass(frozen=True)
class MeasuredLog:
    """One log ready to fit: its points, the collective, where its ranks sit.

    ``devices`` (rank r on ``devices[r]``) is ``None`` for the cluster's first ``ranks`` devices;
    ``algorithm`` is what predicts it (``None``: what ``parplan collective`` runs by default).
    """

    path: str
    sha256: str
    collective: str
    ranks: int
    sizes_bytes: tuple[int, ...]
    measured_s: tuple[float, ...]
    lines: tuple[int, ...]
    devices: tuple[str, ...] | None = None
    algorithm: Any = None

    def subset(self, keep: tuple[int, ...]) -> MeasuredLog:
        """The same log with only the points at indices ``keep``."""
        return MeasuredLog(
            self.path,
            self.sha256,
            self.collective,
            self.ranks,
            tuple(self.sizes_bytes[i] for i in keep),
            tuple(self.measured_s[i] for i in keep),
            tuple(self.lines[i] for i in keep),
            self.devices,
            self.algorithm,
        )


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes (hex); a ConfigError naming the file when it cannot be read."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as exc:
        raise ConfigError(Issue(str(path), "", f"cannot read: {exc.strerror or exc}")) from None


def read_log(path: str | Path, *, collective: str | None = None, ranks: int | None = None) -> MeasuredLog:
    """Read one log and check it can be fitted (see the module docstring for what is refused).

    ``collective`` (``all_reduce``, ``all_gather``, ``reduce_scatter``) and ``ranks`` say what the
    log does not; when the log says it too, both must agree.
    """
    if Path(path).is_dir():
        raise ConfigError(Issue(str(path), "", "is a directory, not a log file"))
    table = read_nccl_tests(path)
    digest = file_sha256(path)
    return log_from_table(table, digest, collective=collective, ranks=ranks)


def log_from_table(
    table: NcclTestsTable,
    sha256: str,
    *,
    collective: str | None = None,
    ranks: int | None = None,
    column: str | None = None,
    devices: tuple[str, ...] | None = None,
    algorithm: Any = None,
) -> MeasuredLog:
    """A checked :class:`MeasuredLog` from a parsed table; ``column`` forces the measured column."""
    _check_runs(table)
    kind = _collective(table, collective)
    count = _ranks(table, ranks if devices is None else len(devices))
    _check_rows(table)
    column = column or _column(table)
    sizes: list[int] = []
    times: list[float] = []
    lines: list[int] = []
    for row in table.rows:
        seconds = _seconds(row, column, kind, count)
        if seconds is None:
            continue
        sizes.append(row.size_bytes)
        times.append(seconds)
        lines.append(row.line)
    return MeasuredLog(
        table.path, sha256, kind, count, tuple(sizes), tuple(times), tuple(lines), devices, algorithm
    )


def _check_runs(table: NcclTestsTable) -> None:
    if len(table.collectives) > 1:
        named = ", ".join(f"{name}_perf (line {line})" for name, line in table.collectives)
        raise ConfigError(
            table.issue(
                f"mixed collectives in one file: {named}; give each run its own file", table.collectives[1][1]
            )
        )
    if len(table.header_lines) > 1:
        where = ", ".join(str(n) for n in table.header_lines)
        raise ConfigError(
            table.issue(
                f"{len(table.header_lines)} result tables in one file (column headers on lines {where}); "
                "give each run its own file",
                table.header_lines[1],
            )
        )
    if table.finished is False:
        last = table.rows[-1].line
        raise ConfigError(
            table.issue(
                "truncated: the log ends without nccl-tests' closing '# Avg bus bandwidth' line "
                f"(last row on line {last}); the run was cut short",
                last,
            )
        )


def _collective(table: NcclTestsTable, given: str | None) -> str:
    named = table.collectives[0] if table.collectives else None
    if given is not None:
        if given not in CALIBRATED_COLLECTIVES:
            raise UsageError(
                f"--collective: calibrate reads {', '.join(CALIBRATED_COLLECTIVES)}, not {given!r}",
                "--collective",
            )
        if named is not None and named[0] != given:
            raise ConfigError(
                table.issue(f"is a {named[0]}_perf log, but --collective says {given}", named[1])
            )
        return given
    if named is None:
        raise ConfigError(
            table.issue(
                "names no perf binary (all_reduce_perf, all_gather_perf, reduce_scatter_perf); "
                "say which collective it measured with --collective"
            )
        )
    if named[0] not in CALIBRATED_COLLECTIVES:
        valid = ", ".join(f"{c}_perf" for c in CALIBRATED_COLLECTIVES)
        raise ConfigError(table.issue(f"is a {named[0]}_perf log; calibrate reads {valid}", named[1]))
    return named[0]


def _ranks(table: NcclTestsTable, given: int | None) -> int:
    if given is not None:
        if given < 2:
            raise UsageError(f"--ranks: a collective needs at least 2 ranks, got {given}", "--ranks")
        if table.ranks is not None and table.ranks != given:
            raise ConfigError(table.issue(f"lists {table.ranks} ranks, but {given} are given"))
        return given
    if table.ranks is None:
        raise ConfigError(
            table.issue("lists no '#  Rank N Group ...' lines; give the number of ranks (--ranks)")
        )
    if table.ranks < 2:
        raise ConfigError(
            table.issue(f"ran on {table.ranks} rank: nothing moved between ranks, nothing to fit")
        )
    return table.ranks


def _check_rows(table: NcclTestsTable) -> None:
    for row in table.rows:
        for wrong, where in ((row.wrong, "out-of-place"), (row.in_place_wrong, "in-place")):
            if wrong:
                raise ConfigError(
                    table.issue(
                        f"size {row.size_bytes}: #wrong = {wrong} ({where}): the run computed wrong "
                        "results, its times are not to be trusted",
                        row.line,
                    )
                )
    for before, row in zip(table.rows, table.rows[1:], strict=False):
        if row.size_bytes <= before.size_bytes:
            raise ConfigError(
                table.issue(
                    f"size {row.size_bytes} is not above the size before it ({before.size_bytes}, line "
                    f"{before.line}): the size column must increase",
                    row.line,
                )
            )


def _column(table: NcclTestsTable) -> str:
    for column in OUT_OF_PLACE:
        if column in table.columns and any(row.value(column) for row in table.rows):
            return column
    if any(c.startswith("in_place_") for c in table.columns):
        raise ConfigError(
            table.issue(
                "in-place only: calibrate fits out-of-place times (nccl-tests' first time, algbw, "
                "busbw columns) and this log has none"
            )
        )
    raise ConfigError(table.issue("has no time, algbw or busbw values to fit"))


def _seconds(row: NcclTestsRow, column: str, collective: str, ranks: int) -> float | None:
    """The row's time in seconds from ``column`` (a time, or algbw / busbw as nccl-tests defines
    them); ``None`` when the row has no positive value there."""
    value = row.value(column)
    if value is None or value <= 0:
        return None
    if column.endswith("time_us"):
        return value * 1e-6
    algbw_GBps = value if column.endswith("algbw_GBps") else value / bus_factor(collective, ranks)
    return row.size_bytes / (algbw_GBps * 1e9)
