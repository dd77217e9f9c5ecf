"""``parplan calibrate``: fit a cluster file to measured nccl-tests logs and write the calibrated file.

    parplan calibrate --cluster clusters/dgx.yaml all_reduce.log all_gather.log -o dgx-calibrated.yaml
    parplan calibrate --cluster validation/clusters/hgx-h100-8gpu.yaml \\
        validation/nccl-tests/h100x4-nvswitch-default-1node.csv --ranks 4 --collective all_reduce

Logs are nccl-tests output (all_reduce_perf, all_gather_perf, reduce_scatter_perf; ``parplan measure
--nccl-tests`` writes the same) or the repository's CSV tables. ``--collective`` and ``--ranks`` say
what a log does not (a CSV table, a log without its header). Prints each parameter before and after
and the residuals per size before and after; writes the calibrated cluster file to ``--output``
(default: ``<cluster>.calibrated.yaml`` in the current directory; ``-``: stdout).

Exit codes: 0 done, 1 a bad log or cluster file (one message each, with file:line), 2 usage errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from parplan.cli.common import STATE, show


def calibrate(
    logs: Annotated[list[Path], typer.Argument(metavar="LOG...", help="nccl-tests logs or CSV tables.")],
    cluster: Annotated[Path, typer.Option("--cluster", "-c", help="The cluster file to calibrate.")],
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", metavar="FILE|-", help="The calibrated cluster file ('-': stdout)."),
    ] = None,
    collective: Annotated[
        str | None,
        typer.Option(help="all_reduce, all_gather or reduce_scatter, for logs that do not name it."),
    ] = None,
    ranks: Annotated[
        int | None, typer.Option(help="Ranks of the run, for logs without '#  Rank' lines.")
    ] = None,
    json_path: Annotated[
        str | None,
        typer.Option("--json", metavar="FILE|-", help="Also write the fit as JSON ('-': stdout)."),
    ] = None,
    date: Annotated[
        str | None,
        typer.Option(help="The date recorded in the file (default: now, UTC); fixed for reproducible files."),
    ] = None,
) -> None:
    """Fit a cluster's link efficiencies and per-call / per-step latencies to measured nccl-tests logs."""
    from parplan.cli.outputs import check_outputs, emit, stdout_taken

    target = output if output is not None else f"{cluster.stem}.calibrated.yaml"
    outputs = {"--output": target, "--json": json_path}
    check_outputs(outputs, inputs=[cluster, *logs])

    from parplan.api.calibrate import calibrate as run
    from parplan.report.calibrate import calibration_document, calibration_view

    result = run(cluster, logs, collective=collective, ranks=ranks, date=date)
    if not stdout_taken(outputs) and not STATE.quiet:
        show(calibration_view(result))
    emit(target, result.text, "calibrated cluster")
    if json_path is not None:
        from parplan.report.json_report import dumps

        emit(json_path, dumps(calibration_document(result)), "JSON")
