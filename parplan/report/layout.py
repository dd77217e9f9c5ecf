"""Tables that fit the width they get without hiding a column or cutting a number, and lines
without trailing spaces.

The width rule (the README's "Output" section): every table keeps every column. When a table is
wider than the width it gets, its text columns (plan names, strategies, devices, "bound by") wrap
inside their cells, widest first, down to their longest word; number columns never wrap and are
never cut. If the table cannot fit even so, it is printed at its natural width (the terminal
wraps the long lines) rather than cut. Either way the view says so in one dim line at its end
(:class:`FitNote`), naming the columns wrapped and the tables printed wider.

- :class:`Fitted` wraps a rich ``Table`` and applies the rule at render time;
- :class:`FitLog` collects what every :class:`Fitted` of a view did, :class:`FitNote` prints it;
- :func:`trimmed_lines` renders anything to lines of segments without trailing whitespace.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Column, Table
from rich.text import Text

UNBOUNDED = 100_000
"""A width no table reaches: what tables are measured at to find their natural width."""


@dataclass
class FitLog:
    """What the tables of one view did to fit: columns wrapped, tables printed wider than asked."""

    wrapped: dict[str, None] = field(default_factory=dict)
    wider: dict[str, int] = field(default_factory=dict)

    def note(self, width: int) -> str | None:
        """One line saying what was wrapped or printed wider than ``width``, or None when
        everything fitted.

        >>> FitLog({"strategy": None}, {"memory": 96}).note(80)
        'fitted to 80 columns: wrapped strategy; printed wider, nothing cut: memory (96 columns)'
        """
        parts = []
        if self.wrapped:
            parts.append(f"wrapped {', '.join(self.wrapped)}")
        if self.wider:
            tables = ", ".join(f"{name} ({needed} columns)" for name, needed in self.wider.items())
            parts.append(f"printed wider, nothing cut: {tables}")
        if not parts:
            return None
        return f"fitted to {width} columns: " + "; ".join(parts)


@dataclass(frozen=True)
class _Fit:
    """The widths a table's columns get (content widths, padding excluded) and what they need."""

    widths: list[int]
    naturals: list[int]
    overhead: int

    @property
    def total(self) -> int:
        return sum(self.widths) + self.overhead


def _column_range(
    console: Console, options: ConsoleOptions, column: Column, header: bool = True
) -> tuple[int, int]:
    """(least, natural) content width of a column (its ``header`` counted when shown): a wrapping
    column can shrink to its longest word (or its ``min_width``), a ``no_wrap`` one not at all;
    ``max_width`` caps both."""
    least = natural = 0
    for cell in [column.header, *column.cells] if header else list(column.cells):
        low, high = Measurement.get(console, options, cell)
        least, natural = max(least, low), max(natural, high)
    if column.max_width is not None:
        natural = min(natural, column.max_width)
    if column.min_width is not None:
        natural = max(natural, column.min_width)
        least = max(least, min(column.min_width, natural))
    if column.no_wrap:
        least = natural
    return min(least, natural), natural


def fit_widths(console: Console, table: Table, width: int) -> _Fit:
    """The content width of each column so that ``table`` fits ``width`` if it can: wrapping
    columns give up width widest first (as rich does), no column goes below its least width."""
    options = console.options.update_width(UNBOUNDED)
    ranges = [_column_range(console, options, c, table.show_header) for c in table.columns]
    naturals = [natural for _, natural in ranges]
    overhead = Measurement.get(console, options, table).maximum - sum(naturals)
    widths = list(naturals)
    excess = sum(widths) + overhead - width
    while excess > 0:
        shrinkable = [i for i, (least, _) in enumerate(ranges) if widths[i] > least]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: (widths[i], -i))
        widths[widest] -= 1
        excess -= 1
    return _Fit(widths, naturals, overhead)


class Fitted:
    """A table rendered by the width rule (module docstring), logging what it did in ``log``.

    ``name`` says which table it is in the note (``memory``); ``note=False`` for layout grids whose
    wrapping text is prose, not a column anyone reads down (printing one wider is still noted).
    """

    def __init__(self, table: Table, name: str, log: FitLog | None = None, *, note: bool = True) -> None:
        self.table = table
        self.name = name
        self.log = log
        self.note = note
        self._limits = [(c.min_width, c.max_width) for c in table.columns]

    def _fit(self, console: Console, width: int) -> _Fit:
        for column, (low, high) in zip(self.table.columns, self._limits, strict=True):
            column.min_width, column.max_width = low, high
        return fit_widths(console, self.table, width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        """The least width that cuts nothing, and the natural width."""
        least = self._fit(console, 0)
        natural = self._fit(console, UNBOUNDED)
        return Measurement(least.total, natural.total)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        fit = self._fit(console, width)
        if fit.total > width:  # it cannot fit: wrapping would only add lines to what the terminal wraps
            fit = self._fit(console, UNBOUNDED)
        for column, w in zip(self.table.columns, fit.widths, strict=True):
            column.min_width = column.max_width = w  # rich must neither widen nor narrow any column
        if self.log is not None:
            if self.note:
                for column, w, natural in zip(self.table.columns, fit.widths, fit.naturals, strict=True):
                    if w < natural:
                        self.log.wrapped[str(column.header) or self.name] = None
            if fit.total > width:
                self.log.wider[self.name] = max(self.log.wider.get(self.name, 0), fit.total)
        # rendered at the width it needs: rich would squeeze a column to nothing to fit `width`
        yield from console.render(self.table, options.update_width(max(width, fit.total)))


class FitNote:
    """The dim line saying what the tables of a view did to fit (nothing when all fitted).

    Put it last in a ``Group``: it renders after the tables whose log it reads.
    """

    def __init__(self, log: FitLog) -> None:
        self.log = log

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        note = self.log.note(options.max_width)
        if note is not None:
            yield Text(note, style="dim")


def trimmed_lines(console: Console, renderable: RenderableType) -> list[list[Segment]]:
    """``renderable`` rendered as the console prints it (lines longer than the console are not
    cut), each line without trailing whitespace."""
    options = console.options.update(no_wrap=True, overflow="ignore")
    return [_rstrip(line) for line in Segment.split_lines(console.render(renderable, options))]


def _rstrip(line: Iterable[Segment]) -> list[Segment]:
    """A line of segments without its trailing whitespace (styles of the text kept)."""
    segments = list(line)
    while segments:
        last = segments[-1]
        if last.control:
            break
        text = last.text.rstrip()
        if text:
            segments[-1] = Segment(text, last.style)
            break
        segments.pop()
    return segments
