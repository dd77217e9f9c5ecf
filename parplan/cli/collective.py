"""``parplan collective``: what one collective costs on a cluster, like nccl-tests' *_perf.

    parplan collective --cluster CLUSTER --algorithm ring --ranks 8 --size 64MiB
    parplan collective --cluster CLUSTER -a all -b 8 -e 1GiB -f 2
    parplan collective --cluster CLUSTER --collective all_gather -b 1KiB -e 1GiB

``--collective`` picks all_reduce (the default), all_gather, reduce_scatter, broadcast, reduce or
all_to_all; busbw follows nccl-tests for each (all-reduce 2(p-1)/p x algbw, all-gather,
reduce-scatter and all-to-all (p-1)/p, broadcast and reduce 1). Without ``--algorithm`` every
collective is timed with ``auto`` (NCCL's pick per size; the collective's ring on a cluster that
names no GPU architecture, pairwise for an all-to-all).

Prints a row per size with the size, the element count, the time (us) and nccl-tests' algbw and
busbw (GB/s). ``--algorithm all`` (or a comma list) compares algorithms side by side and marks the
fastest per size. By default every transfer is simulated with link sharing on; ``--analytic``
uses the closed forms on the placement's bottleneck path (the note above the table says which
path). Outputs, as in every command: ``--json FILE|-`` (``{"results": [...], ...}``),
``--csv FILE|-`` (one row per algorithm and size) and ``--trace FILE`` (a Chrome trace of the
largest size, one file per algorithm when several: ``FILE.<algorithm>.json``); when ``-`` sends
JSON or CSV to stdout the table is not printed.

Exit codes: 0 on success; 1 for an invalid cluster file or a request it cannot meet (more ranks
than devices); 2 for usage errors: a bad size, algorithm, device name or output path (checked
before anything runs).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from parplan.cli.common import STATE, show
from parplan.cli.outputs import check_outputs, emit, per_plan_paths, stdout_taken, warn, write_file, wrote

if TYPE_CHECKING:
    from parplan.api.collective import CollectiveTrace

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
        str | None,
        typer.Option(
            "--algorithm",
            "-a",
            help="An algorithm of the collective (auto: as NCCL's tuner picks; ring, tree:4, ...; a bad"
            " name lists them all), a comma list, or 'all' (default: auto, for every collective).",
            show_default=False,
        ),
    ] = None,
    collective_name: Annotated[
        str,
        typer.Option(
            "--collective",
            help="all_reduce, all_gather, reduce_scatter, broadcast, reduce or all_to_all.",
        ),
    ] = "all_reduce",
    protocol: Annotated[
        str | None,
        typer.Option(
            "--protocol",
            help="Force NCCL's protocol: ll, ll128 or simple (as NCCL_PROTO does).",
            show_default=False,
        ),
    ] = None,
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
    json_path: Annotated[
        str | None,
        typer.Option("--json", metavar="FILE|-", help="Write the results as JSON ('-': stdout)."),
    ] = None,
    csv_path: Annotated[
        str | None,
        typer.Option(
            "--csv", metavar="FILE|-", help="Write one CSV row per algorithm and size ('-': stdout)."
        ),
    ] = None,
    trace: Annotated[
        str | None,
        typer.Option(
            "--trace",
            metavar="FILE",
            help="Write a Chrome trace of the largest size; several algorithms: FILE.<algorithm>.json.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Time one collective on a cluster: the simulated counterpart of nccl-tests' *_perf."""
    outputs = {"--json": json_path, "--csv": csv_path, "--trace": trace}
    check_outputs(outputs, files_only=("--trace",), inputs=[cluster])

    from parplan.api.collective import ELEMENT_BYTES, run_collective

    if dtype not in ELEMENT_BYTES:
        raise typer.BadParameter(
            f"unknown dtype {dtype!r}; valid: {', '.join(ELEMENT_BYTES)}", param_hint="--dtype"
        )
    if analytic and trace is not None:
        raise typer.BadParameter("a trace needs a simulation; drop --analytic", param_hint="--trace")
    if devices is not None and ranks is not None and ranks != len(devices.split(",")):
        raise typer.BadParameter("--ranks and --devices disagree; give one", param_hint="--ranks")

    element_bytes = ELEMENT_BYTES[dtype]
    sweep = min_bytes is not None or max_bytes is not None
    result = run_collective(
        cluster,
        algorithm=algorithm,
        collective=collective_name,
        ranks=ranks,
        devices=[d.strip() for d in devices.split(",") if d.strip()] if devices is not None else None,
        size_bytes=_size(size if size is not None or sweep else DEFAULT_SIZE, "--size", dtype, element_bytes),
        min_bytes=_size(min_bytes, "-b", dtype, element_bytes),
        max_bytes=_size(max_bytes, "-e", dtype, element_bytes),
        step_factor=step_factor,
        element_bytes=element_bytes,
        analytic=analytic,
        trace=trace is not None,
        protocol=protocol,
    )
    if not stdout_taken(outputs) and not (STATE.quiet and any(outputs.values())):
        from parplan.report.collective import collective_view

        show(collective_view(result, dtype, note=not STATE.quiet))
    if json_path is not None:
        from parplan.report.collective import collective_document
        from parplan.report.json_report import dumps

        emit(json_path, dumps(collective_document(result)), "JSON")
    if csv_path is not None:
        from parplan.report.collective import collective_csv

        emit(csv_path, collective_csv(result), "CSV")
    if trace is not None:
        for path in _write_traces(result.traces, trace):
            wrote("trace", path)


def _size(text: str | None, option: str, dtype: str, element_bytes: int) -> int | None:
    """A size option in whole bytes; malformed or fractional is a usage error, and a size that
    is not a whole number of elements is timed rounded down (at least one element), with a warning."""
    if text is None:
        return None
    from parplan.config.units import human_bytes, parse_bytes

    try:
        value = parse_bytes(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None
    if value <= 0:
        raise typer.BadParameter(f"{text!r}: a size must be more than 0 bytes", param_hint=option)
    if value != int(value):
        raise typer.BadParameter(f"{text!r} is not a whole number of bytes", param_hint=option)
    size_bytes = int(value)
    if size_bytes % element_bytes:
        timed = max(1, size_bytes // element_bytes) * element_bytes
        warn(
            f"{option} {text}: not a whole number of {dtype} elements ({element_bytes} B each);"
            f" {human_bytes(timed, precision='short')} is timed"
            + (" and so are the sweep's other sizes, rounded down" if option != "--size" else "")
        )
    return size_bytes


def _write_traces(traces: Sequence[CollectiveTrace], trace: str) -> list[str]:
    """One Chrome trace per algorithm (``FILE.<algorithm>.json`` when several); the paths written."""
    from parplan.report.collective import write_collective_trace

    paths = per_plan_paths(trace, [t.algorithm for t in traces])
    for item, path in zip(traces, paths, strict=True):
        write_file(path, functools.partial(write_collective_trace, item))
    return paths
