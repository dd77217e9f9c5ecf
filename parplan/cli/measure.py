"""``parplan measure``: time collectives on torch.distributed as nccl-tests does, beside parplan's prediction.

    parplan measure --ranks 2 -a backend,ring,tree:2 -b 1KiB -e 4MiB -f 4
    parplan measure -a all --cluster lab.yaml --size 1MiB --json run.json --nccl-tests run.txt
    parplan measure --nnodes 2 --node-rank 0 --rdzv-endpoint 10.0.0.1:29500 --ranks 4   # a real cluster
    parplan measure --emulate sample_configs/clusters/edge-jetsons.yaml -a backend,ring -s 4MiB  # root

Starts the ranks with torchrun (``--ranks`` local processes over the loopback interface; with
``--nnodes``/``--node-rank``/``--rdzv-endpoint`` this machine's ranks of a cluster, the command
run once per machine), gloo on CPUs and NCCL when CUDA is present (``--backend`` forces one).
``backend`` times the backend's own collective; a parplan algorithm (``ring``, ``tree:2``, ...;
``all``: the backend and every schedule) runs its schedule step by step over send/recv. Each
size runs ``-w`` warm-up iterations, then ``-n`` timed ones, out of place; the time is the mean
per rank, the largest over ranks; ``#wrong`` counts elements that differ from the exact result.
With ``--cluster`` every row also shows the time ``parplan collective`` predicts and the error.
``--emulate CLUSTER`` builds that cluster file as network namespaces on this machine (``parplan
emulate``; root needed), runs one torchrun per emulated host and predicts on the same file unless
``--cluster`` names another; the namespaces are removed on every exit.
``--json FILE|-`` writes the results, ``--nccl-tests FILE`` the rows as nccl-tests prints them
(``FILE.<algorithm>.txt`` per algorithm when several), which ``parplan calibrate`` reads.

Exit codes: 0 done (also when ``#wrong`` > 0: the table says so); 1 torch missing, a rank failed
or timed out, or a bad cluster file; 2 bad options (a size, algorithm, fewer than 2 ranks).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from parplan.cli.common import STATE, show
from parplan.cli.outputs import check_outputs, emit, per_plan_paths, stdout_taken, write_file, wrote

if TYPE_CHECKING:
    from parplan.runtime.launch import Rendezvous

DEFAULT_SIZE = "32MiB"
"""nccl-tests' default when no size is given."""


def measure(
    ranks: Annotated[
        int | None,
        typer.Option(
            "--ranks",
            help="Ranks (processes) on this machine (default: one per core, 2 to 8).",
            show_default=False,
        ),
    ] = None,
    algorithm: Annotated[
        str,
        typer.Option(
            "--algorithm",
            "-a",
            help="backend (the backend's own collective), a parplan algorithm"
            " (ring, tree:2, ...), a comma list, or all.",
        ),
    ] = "backend",
    collective_name: Annotated[
        str, typer.Option("--collective", help="all_reduce, all_gather, reduce_scatter or all_to_all.")
    ] = "all_reduce",
    backend: Annotated[
        str, typer.Option("--backend", help="auto (nccl with CUDA, else gloo), gloo or nccl.")
    ] = "auto",
    size: Annotated[
        str | None,
        typer.Option(
            "--size", "-s", help=f"One size, e.g. 1MiB (default {DEFAULT_SIZE}).", show_default=False
        ),
    ] = None,
    min_bytes: Annotated[
        str | None, typer.Option("--minbytes", "-b", help="Sweep start.", show_default=False)
    ] = None,
    max_bytes: Annotated[
        str | None, typer.Option("--maxbytes", "-e", help="Sweep end.", show_default=False)
    ] = None,
    step_factor: Annotated[float, typer.Option("--stepfactor", "-f", help="Size factor between rows.")] = 2.0,
    dtype: Annotated[
        str, typer.Option("--dtype", "-d", help="float32, float64, float16, bfloat16, int32, ...")
    ] = "float32",
    warmup_iters: Annotated[
        int, typer.Option("--warmup-iters", "-w", help="Untimed iterations per size.")
    ] = 5,
    iters: Annotated[int, typer.Option("--iters", "-n", help="Timed iterations per size.")] = 20,
    cluster: Annotated[
        Path | None,
        typer.Option(
            "--cluster",
            "-c",
            help="Predict every row on this cluster file and show the error.",
            show_default=False,
        ),
    ] = None,
    json_path: Annotated[
        str | None, typer.Option("--json", metavar="FILE|-", help="Write the results as JSON ('-': stdout).")
    ] = None,
    nccl_tests: Annotated[
        str | None,
        typer.Option(
            "--nccl-tests",
            metavar="FILE",
            help="Write the rows in nccl-tests' printed format.",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds before the ranks are stopped.")
    ] = 300.0,
    nnodes: Annotated[
        int | None, typer.Option("--nnodes", min=1, help="torchrun: machines in all.", show_default=False)
    ] = None,
    node_rank: Annotated[
        int | None,
        typer.Option("--node-rank", min=0, help="torchrun: this machine's index.", show_default=False),
    ] = None,
    step: Annotated[
        Path | None,
        typer.Option(
            "--step",
            metavar="SCENARIO",
            help="Time one DDP step of the scenario's first data-parallel"
            " plan (a synthetic model of its size; -n steps, median) beside simulate's.",
            show_default=False,
        ),
    ] = None,
    emulate: Annotated[
        Path | None,
        typer.Option(
            "--emulate",
            metavar="CLUSTER",
            help="Run the ranks on this cluster file built as network namespaces (root;"
            " see parplan emulate), predicted on it unless --cluster names another.",
            show_default=False,
        ),
    ] = None,
    delay: Annotated[
        str, typer.Option("--delay", help="With --emulate: auto, netem, relay or off (see parplan emulate).")
    ] = "auto",
    rdzv_endpoint: Annotated[
        str | None,
        typer.Option(
            "--rdzv-endpoint", metavar="HOST:PORT", help="torchrun: the rendezvous.", show_default=False
        ),
    ] = None,
) -> None:
    """Time collectives on torch.distributed (gloo, NCCL) as nccl-tests does, beside parplan's prediction."""
    outputs = {"--json": json_path, "--nccl-tests": nccl_tests}
    inputs = [p for p in (cluster, emulate) if p is not None]
    check_outputs(outputs, files_only=("--nccl-tests",), inputs=inputs)

    from parplan.api.measure import default_ranks, measure, measure_emulated, measure_request

    rendezvous = _rendezvous(nnodes, node_rank, rdzv_endpoint)
    if emulate is not None and rendezvous is not None:
        raise typer.BadParameter("an emulated cluster runs on this machine: drop torchrun's"
                                 " --nnodes/--node-rank/--rdzv-endpoint", param_hint="--emulate")  # fmt: skip
    if step is not None:
        if emulate is not None:
            raise typer.BadParameter("--step runs on loopback: drop --emulate", param_hint="--step")
        _measure_step(step, ranks, cluster, iters, warmup_iters, timeout, json_path, outputs)
        return
    emulated = None
    if emulate is not None:
        from parplan.api.emulate import load_emulated_hosts

        emulated = load_emulated_hosts(emulate)
        hosted = sum(h.nproc for h in emulated)
        if ranks is not None and ranks != hosted:
            raise typer.BadParameter(f"{emulate} emulates {hosted} ranks, got {ranks}", param_hint="--ranks")
        ranks = hosted
    local = default_ranks() if ranks is None else ranks
    sweep = min_bytes is not None or max_bytes is not None
    request = measure_request(
        ranks=local * (rendezvous.nnodes if rendezvous is not None else 1),
        algorithm=algorithm,
        collective=collective_name,
        size_bytes=_size(size if size is not None or sweep else DEFAULT_SIZE, "--size"),
        min_bytes=_size(min_bytes, "-b"),
        max_bytes=_size(max_bytes, "-e"),
        step_factor=step_factor,
        dtype=dtype,
        warmup_iters=warmup_iters,
        iters=iters,
        backend=backend,
        timeout_s=timeout,
    )
    if emulated is not None:
        assert emulate is not None
        result = measure_emulated(request, emulate, emulated, predict_on=cluster, delay_method=delay)
    else:
        result = measure(request, ranks=local, cluster=cluster, rendezvous=rendezvous)
    if not stdout_taken(outputs) and not (STATE.quiet and any(outputs.values())):
        from parplan.report.measure import measure_view

        show(measure_view(result))
    if json_path is not None:
        from parplan.report.json_report import dumps
        from parplan.report.measure import measure_document

        emit(json_path, dumps(measure_document(result)), "JSON")
    if nccl_tests is not None:
        from parplan.report.measure import nccl_tests_text

        names = list(request.algorithms)
        for name, path in zip(names, per_plan_paths(nccl_tests, names), strict=True):
            text = nccl_tests_text(result, name)
            write_file(path, functools.partial(_write_text, text=text))
            wrote("nccl-tests text", path)


def _measure_step(
    scenario: Path,
    ranks: int | None,
    cluster: Path | None,
    iters: int,
    warmup_iters: int,
    timeout: float,
    json_path: str | None,
    outputs: dict[str, str | None],
) -> None:
    """``--step``: one DDP step measured beside simulate's prediction."""
    from parplan.api.measure import measure_step

    if outputs.get("--nccl-tests") is not None:
        raise typer.BadParameter("a step is not a collective: drop --nccl-tests", param_hint="--step")
    result = measure_step(
        scenario, ranks=ranks, cluster=cluster, steps=iters, warmup_steps=warmup_iters, timeout_s=timeout
    )
    if not stdout_taken(outputs) and not (STATE.quiet and json_path is not None):
        from parplan.report.measure import step_view

        show(step_view(result))
    if json_path is not None:
        from parplan.report.json_report import dumps
        from parplan.report.measure import step_document

        emit(json_path, dumps(step_document(result)), "JSON")


def _write_text(target: str, *, text: str) -> None:
    from parplan.report.output import write_atomic

    write_atomic(target, text)


def _rendezvous(nnodes: int | None, node_rank: int | None, endpoint: str | None) -> Rendezvous | None:
    """torchrun's pass-through options: all three or none."""
    from parplan.runtime.launch import Rendezvous

    given = [v is not None for v in (nnodes, node_rank, endpoint)]
    if not any(given):
        return None
    if not all(given) or nnodes is None or node_rank is None or endpoint is None:
        raise typer.BadParameter(
            "give --nnodes, --node-rank and --rdzv-endpoint together", param_hint="--nnodes"
        )
    if node_rank >= nnodes:
        raise typer.BadParameter(
            f"must be below --nnodes ({nnodes}), got {node_rank}", param_hint="--node-rank"
        )
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise typer.BadParameter(f"{endpoint!r} is not HOST:PORT", param_hint="--rdzv-endpoint")
    return Rendezvous(nnodes, node_rank, endpoint)


def _size(text: str | None, option: str) -> int | None:
    """A size option in whole bytes (``1MiB``, ``4096``); malformed or not positive: a usage error."""
    if text is None:
        return None
    from parplan.config.units import parse_bytes

    try:
        value = parse_bytes(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None
    if not value > 0 or value != int(value):
        raise typer.BadParameter(f"{text!r}: a size must be a whole number of bytes > 0", param_hint=option)
    return int(value)
