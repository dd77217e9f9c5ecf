"""Read nccl-tests results: the repository's CSV tables and nccl-tests' own printed output.

Two formats, told apart by their first non-comment line:

- **CSV** (``validation/nccl-tests/*.csv``): ``#`` lines (system, settings, source; kept verbatim
  as :attr:`NcclTestsTable.notes`), one column header that names ``size_bytes`` and any of
  ``time_us``, ``algbw_GBps``, ``busbw_GBps`` (and the ``in_place_`` variants), then one row per
  size. An empty cell is a value the source did not print.
- **printed** (what ``all_reduce_perf`` and friends write to stdout): the ``#`` header line that
  names the columns (``size count type redop [root] time algbw busbw #wrong time algbw busbw
  #wrong``; older versions say ``error`` for ``#wrong`` and have no ``root``), then rows of
  whitespace-separated fields. The first time/algbw/busbw are out-of-place, the second in-place.
  Log lines between rows (``NCCL INFO``, ``# Avg bus bandwidth``) are skipped. The ``#wrong``
  counts are kept (``N/A`` and the older ``error`` column, a float, are not counts: ``None``).

Beside the rows, a table records what calibration needs to judge a log (:mod:`parplan.api.calibrate`
refuses logs it cannot fit, with one message each): the collectives it names
(:attr:`NcclTestsTable.collectives`, from a perf binary's name such as ``all_reduce_perf`` anywhere
in the file, e.g. nccl-tests' ``# Collective test starting: all_gather_perf`` or a ``# run:`` note),
the ranks printed in its ``#  Rank  N Group ...`` lines, every column header line (two mean two runs
in one file), and, for printed output, whether the closing ``# Avg bus bandwidth`` line is there.

Anything malformed raises :class:`~parplan.errors.ConfigError` with one issue naming the file and
line: a truncated row, a value that is not a number, a missing ``size_bytes`` column, no rows.

>>> table = parse_nccl_tests("# demo\\nsize_bytes,time_us\\n8,12.5\\n16,\\n", "t.csv")
>>> [(r.size_bytes, r.time_us) for r in table.rows], table.notes
([(8, 12.5), (16, None)], ('demo',))
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from parplan.errors import ConfigError, Issue

VALUE_COLUMNS: tuple[str, ...] = (
    "time_us",
    "algbw_GBps",
    "busbw_GBps",
    "in_place_time_us",
    "in_place_algbw_GBps",
    "in_place_busbw_GBps",
)
"""The measured columns a table may have, in microseconds and GB/s (1e9 bytes per second)."""

_PRINTED_NAMES = ("time", "algbw", "busbw")


@dataclass(frozen=True)
class NcclTestsRow:
    """One size of a table; ``line`` is where it sits in the file (1-based)."""

    line: int
    size_bytes: int
    time_us: float | None = None
    algbw_GBps: float | None = None
    busbw_GBps: float | None = None
    in_place_time_us: float | None = None
    in_place_algbw_GBps: float | None = None
    in_place_busbw_GBps: float | None = None
    wrong: int | None = None
    in_place_wrong: int | None = None

    def value(self, column: str) -> float | None:
        """The value of one of :data:`VALUE_COLUMNS` (``None`` when not printed)."""
        if column not in VALUE_COLUMNS:
            raise KeyError(column)
        result: float | None = getattr(self, column)
        return result


@dataclass(frozen=True)
class NcclTestsTable:
    """A whole table: where it came from, its ``#`` notes, its columns and its rows."""

    path: str
    format: Literal["csv", "printed"]
    notes: tuple[str, ...]
    columns: tuple[str, ...]
    header_line: int
    rows: tuple[NcclTestsRow, ...]
    collectives: tuple[tuple[str, int], ...] = ()
    """Each collective a perf binary name in the file names (``all_reduce`` for ``all_reduce_perf``),
    with the line it is first named on, in order."""
    ranks: int | None = None
    """The ranks listed in nccl-tests' ``#  Rank  N Group ...`` lines (``None``: none listed)."""
    header_lines: tuple[int, ...] = ()
    """Every column header line of the file (printed output: one per run)."""
    finished: bool | None = None
    """Printed output: whether the run's closing ``# Avg bus bandwidth`` line is there."""

    def issue(self, message: str, line: int | None = None) -> Issue:
        """An issue about this table, at ``line`` (default: the column header)."""
        return Issue(self.path, "", message, self.header_line if line is None else line)


def read_nccl_tests(path: str | Path) -> NcclTestsTable:
    """Read one nccl-tests table (CSV or printed output) from a file."""
    shown = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(Issue(shown, "", f"cannot read: {exc.strerror or exc}")) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(Issue(shown, "", "is not UTF-8 text", line)) from None
    return parse_nccl_tests(text, shown)


def parse_nccl_tests(text: str, path: str = "<text>") -> NcclTestsTable:
    """Parse the text of a table; ``path`` is only used in messages."""
    lines = text.splitlines()
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if "," in stripped:
            return _parse_csv(lines, path)
        break
    return _parse_printed(lines, path)


_PERF_NAME = re.compile(
    r"\b(all_reduce|all_gather|reduce_scatter|broadcast|reduce|alltoall|sendrecv|scatter|gather|hypercube)_perf\b"
)
_RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\s+Group\b")


def _collectives(lines: list[str]) -> tuple[tuple[str, int], ...]:
    """The collectives named by perf binaries in ``lines``, each with its first line."""
    found: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        for match in _PERF_NAME.finditer(line):
            found.setdefault(match.group(1), number)
    return tuple(found.items())


def _ranks(lines: list[str]) -> int | None:
    ranks = {int(m.group(1)) for line in lines if (m := _RANK_LINE.match(line.strip()))}
    return len(ranks) or None


def _fail(path: str, line: int, message: str) -> ConfigError:
    return ConfigError(Issue(path, "", message, line))


def _number(text: str, column: str, path: str, line: int) -> float | None:
    """A finite, non-negative number, or ``None`` for an empty cell."""
    cell = text.strip()
    if not cell:
        return None
    try:
        value = float(cell)
    except ValueError:
        raise _fail(path, line, f"{cell!r} in column {column} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise _fail(path, line, f"{cell!r} in column {column} must be a finite number >= 0")
    return value


def _size(text: str, path: str, line: int) -> int:
    cell = text.strip()
    try:
        value = int(cell)
    except ValueError:
        raise _fail(path, line, f"size {cell!r} is not a whole number of bytes") from None
    if value < 1:
        raise _fail(path, line, f"size {value} must be at least 1 byte")
    return value


def _notes(lines: list[str]) -> tuple[str, ...]:
    return tuple(line.strip()[1:].strip() for line in lines if line.strip().startswith("#"))


def _parse_csv(lines: list[str], path: str) -> NcclTestsTable:
    header_line = 0
    columns: list[str] = []
    rows: list[NcclTestsRow] = []
    seen: dict[int, int] = {}
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        cells = stripped.split(",")
        if not columns:
            header_line, columns = number, [c.strip() for c in cells]
            _check_csv_header(columns, path, number)
            continue
        if len(cells) != len(columns):
            raise _fail(
                path,
                number,
                f"row has {len(cells)} fields, the header has {len(columns)} ({','.join(columns)}):"
                " truncated or extra values",
            )
        size = _size(cells[0], path, number)
        if size in seen:
            raise _fail(path, number, f"size {size} appears twice (first on line {seen[size]})")
        seen[size] = number
        values: dict[str, Any] = {
            name: _number(cell, name, path, number) for name, cell in zip(columns[1:], cells[1:], strict=True)
        }
        rows.append(NcclTestsRow(number, size, **values))
    if not columns:
        raise _fail(
            path, max(len(lines), 1), "no column header (e.g. size_bytes,time_us,algbw_GBps,busbw_GBps)"
        )
    if not rows:
        raise _fail(path, header_line, "the table has a header but no rows")
    return NcclTestsTable(
        path,
        "csv",
        _notes(lines),
        tuple(columns[1:]),
        header_line,
        tuple(rows),
        collectives=_collectives(lines),
        ranks=_ranks(lines),
        header_lines=(header_line,),
    )


def _check_csv_header(columns: list[str], path: str, line: int) -> None:
    if columns[0] != "size_bytes":
        raise _fail(path, line, f"the first column must be size_bytes, not {columns[0]!r}")
    for name in columns[1:]:
        if name not in VALUE_COLUMNS:
            raise _fail(path, line, f"unknown column {name!r}; valid: size_bytes, {', '.join(VALUE_COLUMNS)}")
    repeated = sorted({c for c in columns if columns.count(c) > 1})
    if repeated:
        raise _fail(path, line, f"column {repeated[0]!r} appears twice")


def _parse_printed(lines: list[str], path: str) -> NcclTestsTable:
    header: list[str] = []
    header_line = 0
    positions: dict[str, int] = {}
    wrong_at: list[int] = []
    header_lines: list[int] = []
    finished = False
    rows: list[NcclTestsRow] = []
    for number, line in enumerate(lines, start=1):
        fields = line.split()
        if not fields:
            continue
        if fields[0].startswith("#"):
            names = [f.lstrip("#") for f in fields if f.lstrip("#")]
            if names[:2] == ["size", "count"] and "time" in names:
                header, header_line = names, number
                header_lines.append(number)
                positions = _printed_positions(header)
                wrong_at = [i for i, h in enumerate(header) if h == "wrong" and "#wrong" in fields]
            elif names[:3] == ["Avg", "bus", "bandwidth"]:
                finished = True
            continue
        if not _is_integer(fields[0]):
            continue  # a log line between rows
        if not header:
            raise _fail(path, number, "a row before the column header ('#  size  count  type ...')")
        if len(fields) != len(header):
            raise _fail(
                path,
                number,
                f"row has {len(fields)} fields, the header has {len(header)}: truncated or extra values",
            )
        values: dict[str, Any] = {n: _number(fields[i], n, path, number) for n, i in positions.items()}
        wrong = [_count(fields[i], path, number) for i in wrong_at]
        rows.append(
            NcclTestsRow(
                number,
                _size(fields[0], path, number),
                **values,
                wrong=wrong[0] if wrong else None,
                in_place_wrong=wrong[1] if len(wrong) > 1 else None,
            )
        )
    if not header:
        raise _fail(
            path, max(len(lines), 1), "no nccl-tests column header ('#  size  count  type ...') found"
        )
    if not rows:
        raise _fail(path, header_line, "the table has a header but no rows")
    columns = tuple(c for c in VALUE_COLUMNS if c in positions)
    return NcclTestsTable(
        path,
        "printed",
        _notes(lines),
        columns,
        header_line,
        tuple(rows),
        collectives=_collectives(lines),
        ranks=_ranks(lines),
        header_lines=tuple(header_lines),
        finished=finished,
    )


def _count(text: str, path: str, line: int) -> int | None:
    """A ``#wrong`` cell: a whole count, or ``None`` for ``N/A`` (validation off)."""
    if text.upper() == "N/A":
        return None
    if not text.isdigit():
        raise _fail(path, line, f"{text!r} in column #wrong is not a count")
    return int(text)


def _printed_positions(header: list[str]) -> dict[str, int]:
    """Field index of each value column: first time/algbw/busbw out-of-place, second in-place."""
    out: dict[str, int] = {}
    for name in _PRINTED_NAMES:
        found = [i for i, h in enumerate(header) if h == name]
        unit = "us" if name == "time" else "GBps"
        if found:
            out[f"{name}_{unit}"] = found[0]
        if len(found) > 1:
            out[f"in_place_{name}_{unit}"] = found[1]
    return out


def _is_integer(text: str) -> bool:
    return text.isdigit()
