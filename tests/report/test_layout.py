"""The width rule: text columns wrap widest first, numbers never shrink, nothing is hidden, and
one note says what happened; rendered lines carry no trailing spaces."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from parplan.report.layout import FitLog, FitNote, Fitted, fit_widths, trimmed_lines


def _table() -> Table:
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_header=False)
    table.add_column("name", no_wrap=True)
    table.add_column("about", overflow="fold")
    table.add_column("note", overflow="fold")
    table.add_column("size", justify="right", no_wrap=True)
    table.add_row("a", "a fairly long description of the row", "short words", "1.00 GiB")
    table.add_row("bb", "x", "y", "12.5 MiB")
    return table


def _render(renderable: object, width: int) -> list[str]:
    console = Console(width=width, color_system=None, file=open("/dev/null", "w"))  # noqa: SIM115
    return ["".join(s.text for s in line) for line in trimmed_lines(console, renderable)]  # type: ignore[arg-type]


def test_natural_width_when_it_fits() -> None:
    console = Console(width=200, color_system=None)
    fit = fit_widths(console, _table(), 200)
    assert (
        fit.widths == fit.naturals == [2, 36, 11, 8] and fit.total == 2 + 36 + 11 + 8 + 6
    )  # 2 between columns


def test_the_widest_text_column_gives_way_first_and_numbers_never() -> None:
    console = Console(width=200, color_system=None)
    fit = fit_widths(console, _table(), 50)
    assert fit.total == 50
    assert fit.widths[0] == 2 and fit.widths[3] == 8  # no_wrap columns keep their width
    assert fit.widths[2] == 11 and fit.widths[1] < 36  # the widest text column wrapped alone
    tight = fit_widths(console, _table(), 10)
    assert tight.widths == [2, 11, 5, 8]  # down to the longest words, never below, never cut


def test_fitted_tables_keep_every_column_and_say_so() -> None:
    log = FitLog()
    lines = _render(Group(Fitted(_table(), "rows", log), FitNote(log)), 50)
    assert lines == [
        "a   a fairly long            short words  1.00 GiB",  # exactly 50 wide
        "    description of the row",
        "bb  x                        y            12.5 MiB",
        "fitted to 50 columns: wrapped about",
    ]


def test_a_table_that_cannot_fit_prints_at_its_natural_width() -> None:
    log = FitLog()
    lines = _render(Group(Fitted(_table(), "rows", log), FitNote(log)), 20)
    assert lines[0] == "a   a fairly long description of the row  short words  1.00 GiB"  # whole rows
    assert lines[-1] == "fitted to 20 columns: printed wider, nothing cut: rows (63 columns)"


def test_no_line_ends_in_spaces() -> None:
    grid = Table.grid(padding=(0, 2))
    grid.add_column()
    grid.add_column()
    grid.add_row("label", Text("a value"))
    grid.add_row("longer label", "v")
    assert _render(grid, 80) == ["label         a value", "longer label  v"]
