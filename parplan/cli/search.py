"""``parplan search SCENARIO``: the fastest sharded plan that fits, found rather than typed.

The scenario's ``search:`` block (or, without one, the default space: every GPU of the cluster,
powers of two for TP, PP and micro-batch size, ZeRO 0/1, FSDP off/full, every recomputation mode)
is enumerated, pruned of what cannot divide the model, batch or cluster, evaluated in closed form
over every candidate at once, ranked (plans that fit first, by step time), and the best
``--top-k`` re-simulated with the event engine (:func:`parplan.api.search.run.search_scenario`).
Printed: the first 20 candidates and the scenario's own plans beside them (with the rank each
would take), the Pareto front over step time, peak memory and devices, what bounds the winner, and
how far the event engine and the closed form disagree on the best plans. The time the search took
goes to stderr (it is the one figure that changes from run to run).

Outputs: ``--json FILE|-`` and ``--csv FILE|-`` hold every evaluated candidate
(:mod:`parplan.report.search`), ``--plot FILE`` draws the front (the ``plot`` extra), ``--html
FILE`` writes one self-contained page with the ranking, the front and the best plans' event
timelines and busiest links (the ``html`` extra). Identical inputs give byte-identical outputs.
``--backend ray`` evaluates the candidate table as Ray tasks (the ``ray`` extra; ``--address`` a
running cluster), with the same results as here; ``--jobs N`` uses N worker processes.

Exit codes: 0 when a plan that fits was found; 1 for an invalid file, a space that is empty, too
large (over ``--limit``) or contradictory (all said before any work), an unreachable Ray cluster,
no candidate that fits, or a Ray cluster lost mid-search (what was gathered is printed and written
first); 2 for usage errors (an output that cannot be written, a bad ``--devices`` list).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer

from parplan.cli.common import STATE, console, show
from parplan.cli.evaluation import BackendChoice, check_backend, progress_bar
from parplan.cli.outputs import check_outputs, emit, stdout_taken, warn, write_file, wrote

if TYPE_CHECKING:
    from parplan.api.parallel import Backend
    from parplan.api.search.run import SearchResult


def parse_devices(text: str | None) -> list[int] | None:
    """``--devices 64,128`` as a list of positive GPU counts (a usage error otherwise).

    >>> parse_devices("64, 128")
    [64, 128]
    """
    if text is None:
        return None
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(f"{text!r}: give GPU counts separated by commas, e.g. 64,128") from None
    if not counts or any(c < 1 for c in counts):
        raise typer.BadParameter(f"{text!r}: give positive GPU counts, e.g. 64,128", param_hint="--devices")
    return counts


def search(
    scenario: Annotated[
        Path,
        typer.Argument(
            help="Scenario file (.yaml, .yml, .toml or .json), with or without a search: block.",
            metavar="SCENARIO",
            show_default=False,
        ),
    ],
    top_k: Annotated[
        int | None,
        typer.Option(
            "--top-k", "-k", min=0, metavar="N", help="Best plans re-simulated with the event engine."
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", min=1, metavar="N", help="Most candidates to enumerate (default: the block's)."
        ),
    ] = None,
    devices: Annotated[
        str | None,
        typer.Option(
            "--devices", metavar="N,...", help="GPU counts to use (default: the block's, else all)."
        ),
    ] = None,
    json_path: Annotated[
        str | None,
        typer.Option("--json", metavar="FILE|-", help="Write every evaluated plan as JSON ('-': stdout)."),
    ] = None,
    csv_path: Annotated[
        str | None,
        typer.Option("--csv", metavar="FILE|-", help="Write one CSV row per evaluated plan ('-': stdout)."),
    ] = None,
    plot_path: Annotated[
        str | None,
        typer.Option(
            "--plot",
            metavar="FILE",
            help="Draw step time against memory with the front (needs the plot extra).",
        ),
    ] = None,
    html_path: Annotated[
        str | None,
        typer.Option(
            "--html",
            metavar="FILE",
            help="Write one self-contained HTML page: the ranking, the front, the best plans' timelines"
            " and busiest links (needs the html extra).",
        ),
    ] = None,
    backend: Annotated[
        BackendChoice,
        typer.Option("--backend", help="Where candidates are evaluated: here or on Ray (the ray extra)."),
    ] = "local",
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            metavar="ADDR",
            help="With --backend ray: a running Ray cluster (host:port or ray://...); default: a local"
            " Ray instance.",
        ),
    ] = None,
    jobs: Annotated[
        int, typer.Option("--jobs", "-j", min=0, metavar="N", help="Worker processes (0: one per CPU).")
    ] = 1,
    seed: Annotated[
        int, typer.Option("--seed", metavar="N", help="Recorded in the outputs; the search is exhaustive.")
    ] = 0,
) -> None:
    """Find the fastest sharded plan that fits: enumerate, rank, re-simulate the best.

    Prints the ranked plans with the scenario's own beside them, the Pareto front over step time,
    peak memory and devices, what bounds the winner, and how far the event engine and the closed
    form disagree on the best plans.
    """
    outputs = {"--json": json_path, "--csv": csv_path, "--plot": plot_path, "--html": html_path}
    check_outputs(
        outputs, files_only=("--plot", "--html"), pictures=("--plot",), pages=("--html",), inputs=[scenario]
    )
    check_backend(backend, address)
    counts = parse_devices(devices)

    from parplan.api.search.run import search_scenario
    from parplan.errors import ParplanError

    with progress_bar() as tick:
        result = search_scenario(
            scenario,
            limit=limit,
            top_k=top_k,
            devices=counts,
            backend=cast("Backend", backend),
            address=address,
            jobs=jobs,
            progress=tick,
            warn=warn,
            seed=seed,
        )
    if not stdout_taken(outputs) and not (STATE.quiet and any(outputs.values())):
        from parplan.report.search import search_view

        show(search_view(result))
    write_outputs(result, outputs)
    if not STATE.quiet:
        c, closed = result.counts, result.closed_form_s
        rate = f"{c.evaluated / closed:,.0f} plans/s" if closed > 0 else "-"
        console(stderr=True).print(
            f"searched {c.evaluated:,} candidates in {result.elapsed_s:.2f} s: enumeration and closed form"
            f" {closed:.2f} s ({rate}), the rest building the network and event simulations",
            style="dim",
        )
    if result.interrupted is not None:
        raise ParplanError(f"{result.interrupted}; the results above cover the candidates evaluated")
    if result.winner is None:
        raise ParplanError("no candidate fits in memory: allow more devices, recomputation or sharding")


def write_outputs(result: SearchResult, outputs: dict[str, str | None]) -> None:
    """JSON, CSV, the HTML page and the front's plot, as asked (each written atomically)."""
    json_path, csv_path, plot_path, html_path = (outputs[k] for k in ("--json", "--csv", "--plot", "--html"))
    if json_path or csv_path or html_path:
        from parplan.report.search import search_csv, search_document

        document = search_document(result)
        if json_path:
            from parplan.report.json_report import dumps

            emit(json_path, dumps(document), "JSON")
        if csv_path:
            emit(csv_path, search_csv(document), "CSV")
        if html_path:
            from parplan.report.html import search_page

            events = {c.name: c.event for c in result.top if c.event is not None}
            emit(html_path, search_page(document, events), "HTML report")
    if plot_path:
        from parplan.report.search import plot_front

        write_file(plot_path, lambda target: plot_front(result, target))
        wrote("plot", plot_path)
