"""``parplan collective``: what one all-reduce costs on a cluster, like nccl-tests' all_reduce_perf.

    parplan collective --cluster CLUSTER --algorithm ring --ranks 8 --size 64MiB
    parplan collective --cluster CLUSTER -a all -b 8 -e 1GiB -f 2

Prints a row per size with the size, the element count, the time (us) and nccl-tests' algbw and
busbw (GB/s). ``--algorithm all`` (or a comma list) compares algorithms side by side and marks the
fastest per size. By default every transfer is simulated with link sharing on; ``--analytic``
uses the closed forms on the placement's bottleneck path (the note above the table says which
path). ``--json`` prints ``{"results": [...]}`` instead of the table; ``--trace FILE`` writes a
Chrome trace of the largest size (one file per algorithm when several: ``FILE.<algorithm>.json``).

Exit codes: 0 on success, 1 for invalid input (bad cluster file, unknown device or algorithm,
more ranks than devices), 2 for usage errors.
"""

from __future__ import annotations

import json as jsonlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from parplan.cli.common import STATE, console

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from parplan.engine.sweep import CollectiveRow, CollectiveSweep

DEFAULT_SIZE = "32MiB"
"""nccl-tests' default when no size is given."""


def collective(
    cluster: Annotated[
        Path,
        typer.Option(
            "--cluster", "-c", help="Cluster file (.yaml, .yml, .toml or .json).", show_default=False
        ),
    ],
    algorithm: Annotated[
        str,
        typer.Option(
            "--algorithm",
            "-a",
            help="ring, tree:K, centralized[:ROOT], halving_doubling, double_binary_tree, hierarchical[:G],"
            " a comma list, or 'all'.",
        ),
    ] = "ring",
    ranks: Annotated[
        int | None, typer.Option("--ranks", "-n", min=1, help="Use the first N devices (default: all).")
    ] = None,
    devices: Annotated[
        str | None,
        typer.Option("--devices", help="Comma-separated devices, rank 0 first.", show_default=False),
    ] = None,
    size: Annotated[
        str | None,
        typer.Option("--size", "-s", help=f"One tensor size, e.g. 64MiB (default {DEFAULT_SIZE})."),
    ] = None,
    min_bytes: Annotated[
        str | None, typer.Option("--minbytes", "-b", help="Sweep start, e.g. 8 or 1KiB.", show_default=False)
    ] = None,
    max_bytes: Annotated[
        str | None, typer.Option("--maxbytes", "-e", help="Sweep end, e.g. 1GiB.", show_default=False)
    ] = None,
    step_factor: Annotated[
        float, typer.Option("--stepfactor", "-f", help="Multiply the size by this between rows.")
    ] = 2.0,
    dtype: Annotated[
        str,
        typer.Option("--dtype", "-d", help="Element type: float32, float16, bfloat16, float64, int8, ..."),
    ] = "float32",
    analytic: Annotated[
        bool, typer.Option("--analytic", help="Closed forms on the bottleneck path instead of simulating.")
    ] = False,
    json: Annotated[
        bool, typer.Option("--json", help='Print {"results": [...]} instead of the table.')
    ] = False,
    trace: Annotated[
        Path | None,
        typer.Option("--trace", help="Write a Chrome trace of the largest size.", show_default=False),
    ] = None,
) -> None:
    """Time one all-reduce on a cluster: the simulated counterpart of nccl-tests' all_reduce_perf."""
    from parplan.config.loader import load_cluster
    from parplan.config.units import parse_bytes
    from parplan.engine.sweep import ELEMENT_BYTES, collective_sweep, expand_algorithms, sweep_sizes
    from parplan.topology.build import build_network
    from parplan.topology.placement import place

    if dtype not in ELEMENT_BYTES:
        raise typer.BadParameter(
            f"unknown dtype {dtype!r}; valid: {', '.join(ELEMENT_BYTES)}", param_hint="--dtype"
        )
    if analytic and trace is not None:
        raise typer.BadParameter("a trace needs a simulation; drop --analytic", param_hint="--trace")
    if devices is not None and ranks is not None and ranks != len(devices.split(",")):
        raise typer.BadParameter("--ranks and --devices disagree; give one", param_hint="--ranks")
    element_bytes = ELEMENT_BYTES[dtype]

    def size_of(text: str | None, option: str) -> float | None:
        if text is None:
            return None
        try:
            return parse_bytes(text)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint=option) from None

    sweep = min_bytes is not None or max_bytes is not None
    sizes = sweep_sizes(
        size_bytes=size_of(size if size is not None or sweep else DEFAULT_SIZE, "--size"),
        min_bytes=size_of(min_bytes, "-b"),
        max_bytes=size_of(max_bytes, "-e"),
        step_factor=step_factor,
        element_bytes=element_bytes,
    )
    specs = expand_algorithms(algorithm)
    network = build_network(load_cluster(cluster))
    chosen = [d.strip() for d in devices.split(",") if d.strip()] if devices is not None else None
    placement = place(network, chosen, count=ranks)
    trace_paths = None
    if trace is not None:
        from parplan.cli.outputs import per_plan_paths
        from parplan.config.algorithms import algorithm_label

        trace_paths = per_plan_paths(str(trace), [algorithm_label(s) for s in specs])
    result = collective_sweep(
        network,
        placement.devices,
        specs,
        sizes,
        element_bytes=element_bytes,
        groups=[list(g) for g in placement.groups],
        analytic=analytic,
        trace_paths=trace_paths,
    )
    if json:
        typer.echo(jsonlib.dumps(result.as_dict(), indent=2))
    else:
        _print_table(result, dtype)
    if not STATE.quiet:
        from parplan.cli.outputs import wrote

        for path in result.traces:
            wrote("trace", path)


def _print_table(result: CollectiveSweep, dtype: str) -> None:
    from rich.table import Table

    out = console()
    mode = "closed forms" if result.analytic else "simulated"
    title = f"all_reduce on {result.cluster}: {len(result.devices)} ranks, {dtype}, {mode}"
    if result.parameters is not None and not STATE.quiet:
        out.print(f"analytic: {result.parameters.describe()}", style="dim")
    table = Table(title=title)
    table.add_column("size (B)", justify="right", no_wrap=True)
    table.add_column("count", justify="right", no_wrap=True)
    names = result.algorithms
    if len(names) == 1:
        for col in ("time (us)", "algbw (GB/s)", "busbw (GB/s)"):
            table.add_column(col, justify="right")
        for row in result.rows:
            table.add_row(
                f"{row.size_bytes:.0f}",
                str(row.count),
                f"{row.time_s * 1e6:.2f}",
                _gbps(row.algbw_GBps),
                _gbps(row.busbw_GBps),
            )
        _print_unsqueezed(out, table)
        return
    for name in names:
        table.add_column(_short(name), justify="right", no_wrap=True)
    table.add_column("fastest", no_wrap=True)
    table.add_column("busbw (GB/s)", justify="right", no_wrap=True)
    by_size: dict[float, list[CollectiveRow]] = {}
    for row in result.rows:
        by_size.setdefault(row.size_bytes, []).append(row)
    for size_bytes, rows in by_size.items():
        best = next((r for r in rows if r.fastest), rows[0])
        cells = [f"{r.time_s * 1e6:.6g}{'*' if r.fastest else ' '}" for r in rows]
        table.add_row(
            f"{size_bytes:.0f}", str(rows[0].count), *cells, _short(best.algorithm), _gbps(best.busbw_GBps)
        )
    _print_unsqueezed(out, table)
    legend = ", ".join(f"{_short(n)} = {n}" for n in names if _short(n) != n)
    out.print(f"times in us; * fastest at that size{'; ' + legend if legend else ''}", style="dim")


_SHORT = {
    "centralized": "central",
    "halving_doubling": "hd",
    "double_binary_tree": "dbt",
    "hierarchical": "hier",
}


def _short(label: str) -> str:
    name, sep, arg = label.partition(":")
    return f"{_SHORT.get(name, name)}{sep}{arg}"


def _print_unsqueezed(out: Console, table: Table) -> None:
    """Print at the table's natural width when the console is narrower: numbers are never cut."""
    from rich.console import Console
    from rich.measure import Measurement

    natural = Measurement.get(out, out.options.update_width(10_000), table).maximum
    if natural > out.width:
        out = Console(
            width=natural,
            highlight=False,
            emoji=False,
            soft_wrap=False,
            force_terminal=out.is_terminal,
            no_color=out.no_color,
        )
    out.print(table)


def _gbps(value: float) -> str:
    return f"{value:.2f}" if value < float("inf") else "inf"
