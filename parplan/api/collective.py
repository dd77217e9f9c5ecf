"""What one collective costs on a cluster, over sizes and algorithms: the library behind ``parplan
collective`` (the simulated counterpart of nccl-tests' ``all_reduce_perf``).

:func:`run_collective` is the one call the command makes: it loads the cluster, places the ranks,
expands the sizes and algorithms and runs :func:`collective_sweep`. Each (algorithm, size) is either
simulated in full (the algorithm's schedule lowered onto the placement and run by the event engine,
link sharing on) or evaluated with the closed forms of :mod:`parplan.engine.analytic` on the
uniform group that stands for the placed devices (:mod:`parplan.api.uniform`). Asked for traces,
the sweep returns what to trace (each algorithm's largest size); writing them is the report's job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

from parplan.api.knobs import algorithm_problem
from parplan.api.uniform import UniformParameters, closed_form_time, uniform_parameters
from parplan.collectives.algorithm import AlgorithmSpecBase
from parplan.collectives.auto import AutoAlgorithm
from parplan.collectives.registry import algorithms, get, resolve, schedules
from parplan.collectives.schedule import COLLECTIVES
from parplan.collectives.specs import parse_algorithm
from parplan.config.units import format_bytes
from parplan.engine.result import SimResult, algorithm_bandwidth, bus_bandwidth
from parplan.errors import CollectiveError, ParplanError, UsageError
from parplan.plan.collective_run import CollectiveRun, resolve_run
from parplan.taskgraph import TaskGraph
from parplan.topology.network import Network

if TYPE_CHECKING:
    from parplan.api.analytic_fit import AlgorithmFit, AnalyticCheck

ELEMENT_BYTES: dict[str, int] = {
    "int8": 1,
    "uint8": 1,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "int32": 4,
    "uint32": 4,
    "float32": 4,
    "float": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "double": 8,
}
"""Bytes per element of the data types nccl-tests knows (``-d``), by name."""


def bus_factor(collective: str, num_ranks: int) -> float:
    """nccl-tests' busbw over algbw for ``collective`` on ``num_ranks`` ranks: ``2(p-1)/p`` for an
    all-reduce, ``(p-1)/p`` for an all-gather, reduce-scatter or all-to-all (alltoall_perf's),
    1 for a broadcast or reduce
    (0 on one rank, where nothing moves).

    >>> bus_factor("all_reduce", 4), bus_factor("all_gather", 4), bus_factor("broadcast", 4)
    (1.5, 0.75, 1.0)
    """
    if num_ranks <= 1:
        return 0.0
    if collective == "all_reduce":
        return 2.0 * (num_ranks - 1) / num_ranks
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (num_ranks - 1) / num_ranks
    return 1.0


@dataclass(frozen=True)
class CollectiveRow:
    """One (algorithm, size) measurement, with nccl-tests' figures."""

    algorithm: str
    ranks: int
    size_bytes: int
    count: int
    time_s: float
    fastest: bool = False
    collective: str = "all_reduce"
    chosen: str | None = None
    """What ``auto`` (or a forced protocol) ran at this size, e.g. ``auto=ring/ll128/8ch``."""
    symmetry: dict[str, int] | None = None
    """Simulated once per orbit of a rank shift (exactly; :mod:`parplan.api.symmetric`): the shift,
    orbit size, channel orbits and transfers of the full run; None when simulated in full."""

    @property
    def algbw_GBps(self) -> float:
        """Algorithm bandwidth in GB/s (1e9 bytes per second)."""
        return algorithm_bandwidth(self.size_bytes, self.time_s) / 1e9

    @property
    def busbw_GBps(self) -> float:
        """Bus bandwidth in GB/s, as nccl-tests defines it for the collective (:func:`bus_factor`)."""
        if self.collective == "all_reduce":  # the engine's formula, digit for digit
            return bus_bandwidth(self.size_bytes, self.time_s, self.ranks) / 1e9
        algbw = algorithm_bandwidth(self.size_bytes, self.time_s)
        return algbw * bus_factor(self.collective, self.ranks) / 1e9


@dataclass(frozen=True)
class CollectiveTrace:
    """What to trace for one algorithm: its simulation at the sweep's largest size."""

    algorithm: str
    result: SimResult
    graph: TaskGraph
    network: Network


@dataclass(frozen=True)
class CollectiveSweep:
    """Every row of a sweep, sizes ascending, algorithms in the order asked."""

    cluster: str
    devices: tuple[str, ...]
    algorithms: tuple[str, ...]
    element_bytes: int
    analytic: bool
    rows: tuple[CollectiveRow, ...]
    parameters: UniformParameters | None = None
    traces: tuple[CollectiveTrace, ...] = field(default=())
    collective: str = "all_reduce"
    checks: tuple[AnalyticCheck, ...] = field(default=())
    """Analytic mode: the closed form against the engine for each algorithm the cluster is not
    uniform for (see :mod:`parplan.api.analytic_fit`)."""

    def warnings(self) -> list[str]:
        """One line per algorithm whose closed form differs from the engine beyond the tolerance
        (or could not be checked)."""
        return [c.warning() for c in self.checks if not c.agrees]


def sweep_sizes(
    *,
    size_bytes: float | None = None,
    min_bytes: float | None = None,
    max_bytes: float | None = None,
    step_factor: float = 2.0,
    element_bytes: int = 4,
) -> list[tuple[int, int]]:
    """``(size_bytes, count)`` pairs: one size, or nccl-tests' ``-b``/``-e``/``-f`` sweep.

    Sizes are rounded down to whole elements (at least one). ``-b`` alone is one size; ``-e``
    alone sweeps from one element. A size that is not more than 0 bytes, a sweep that ends below
    its start or does not grow is a :class:`~parplan.errors.UsageError`.

    >>> sweep_sizes(min_bytes=8, max_bytes=32)
    [(8, 2), (16, 4), (32, 8)]
    """
    if element_bytes < 1:
        raise ParplanError(f"element size must be at least 1 byte, got {element_bytes}")
    for option, value in (("--size", size_bytes), ("-b", min_bytes), ("-e", max_bytes)):
        if value is not None and not value > 0:
            raise UsageError(f"{option}: a size must be more than 0 bytes, got {value:g} B", option)
    if size_bytes is not None:
        if min_bytes is not None or max_bytes is not None:
            raise UsageError("give either a size (--size) or a -b/-e sweep, not both", "--size")
        raw = [float(size_bytes)]
    else:
        if min_bytes is None and max_bytes is None:
            raise UsageError("give a size (--size) or a sweep (-b, -e, -f)", "--size")
        lo = float(min_bytes) if min_bytes is not None else float(element_bytes)
        hi = float(max_bytes) if max_bytes is not None else lo
        if hi < lo:
            raise UsageError(
                f"the sweep's end (-e {format_bytes(hi)}) is below its start (-b {format_bytes(lo)})", "-e"
            )
        if step_factor <= 1.0 and hi > lo:
            raise UsageError(f"-f: the step factor must be more than 1, got {step_factor:g}", "-f")
        raw = []
        s = float(lo)
        while s <= hi * (1 + 1e-12) and len(raw) < 1000:
            raw.append(s)
            s *= step_factor
    out: list[tuple[int, int]] = []
    for s in raw:
        count = max(1, int(s // element_bytes))
        pair = (count * element_bytes, count)
        if not out or out[-1] != pair:
            out.append(pair)
    return out


class AlgorithmOptionError(UsageError, CollectiveError):
    """An algorithm given on the command line that is unknown or malformed: a usage error (exit
    code 2), and a :class:`CollectiveError` for callers that catch those."""


def check_collective(collective: str) -> str:
    """``collective`` if it is one parplan times, else a usage error (a CollectiveError) listing them."""
    if collective not in COLLECTIVES:
        raise AlgorithmOptionError(
            f"--collective: unknown collective {collective!r}; valid: {', '.join(COLLECTIVES)}",
            "--collective",
        )
    return collective


def default_algorithm(collective: str = "all_reduce") -> str:
    """The algorithm ``parplan collective`` times when none is named: ``auto`` (NCCL's pick per
    size) for every collective, else the first registered for it."""
    table = algorithms(check_collective(collective))
    return "auto" if "auto" in table else next(iter(table))


def algorithm_label(spec: AlgorithmSpecBase, collective: str = "all_reduce") -> str:
    """The short form of a spec of ``collective``'s algorithm ``spec.name``: ``tree:4``, ``ring``."""
    return get(spec.name, collective).label(spec)


def expand_algorithms(algorithm: str, collective: str = "all_reduce") -> list[AlgorithmSpecBase]:
    """``"all"`` (every algorithm registered for ``collective``, with its defaults), one short
    form, or a comma list; an unknown or malformed one is an :class:`AlgorithmOptionError`.

    >>> [algorithm_label(s) for s in expand_algorithms("ring, tree:4")]
    ['ring', 'tree:4']
    >>> [algorithm_label(s, "broadcast") for s in expand_algorithms("all", "broadcast")]
    ['tree', 'ring']
    """
    table = algorithms(check_collective(collective))
    every = schedules(collective)  # 'all' leaves out auto, which picks among the others
    names = every if algorithm.strip() == "all" else [a.strip() for a in algorithm.split(",")]
    specs = []
    for name in names:
        if not name:
            continue
        if name.partition(":")[0] not in table:
            what = "collective" if collective == "all_reduce" else collective
            raise AlgorithmOptionError(
                f"--algorithm: unknown {what} algorithm {name!r}; valid: {', '.join(table)}, all",
                "--algorithm",
            )
        if collective != "all_reduce":
            try:
                specs.append(resolve(name, collective)[1])
            except CollectiveError as exc:
                raise AlgorithmOptionError(f"--algorithm: {exc}", "--algorithm") from None
            continue
        problem = algorithm_problem(name)
        if problem is not None:
            raise AlgorithmOptionError(f"--algorithm: {name!r}: {problem}", "--algorithm")
        specs.append(parse_algorithm(name))
    if not specs:
        raise AlgorithmOptionError("--algorithm: no algorithm given", "--algorithm")
    return specs


def _simulate(
    network: Network,
    devices: Sequence[str],
    run: CollectiveRun,
    count: int,
    element_bytes: int,
    groups: Sequence[Sequence[int]] | None,
    gamma_s_per_byte: float | None,
    collective: str = "all_reduce",
    *,
    per_task: bool = False,
) -> tuple[SimResult, TaskGraph | None]:
    """The run's schedule of ``count`` elements lowered onto ``devices`` and simulated, with its
    protocol (NCCL's LL / LL128 / Simple under the ``nccl`` transport), per-channel rate ceiling
    and per-call cost. Where the schedule and the cluster are symmetric it runs once per orbit,
    exactly (:mod:`parplan.api.symmetric`; the result's ``meta["symmetry"]`` says so, and there is
    no graph), unless ``per_task``: a trace needs every transfer's times, so it runs in full."""
    from parplan.api.symmetric import simulate_symmetric
    from parplan.engine.simulate import simulate
    from parplan.plan.collective import collective_taskgraph

    if not per_task:
        result = simulate_symmetric(
            network,
            devices,
            run.spec,
            count,
            element_bytes,
            groups=groups,
            collective=collective,
            protocol=run.protocol,
            call_overhead_s=run.call_overhead_s,
            max_rate_Bps=run.max_rate_Bps,
            gamma_s_per_byte=gamma_s_per_byte,
        )
        if result is not None:
            return result, None
    schedule = get(run.spec.name, collective).build(run.spec, len(devices), count, groups)
    graph = collective_taskgraph(
        schedule,
        devices,
        element_bytes,
        protocol=run.protocol,
        call_overhead_s=run.call_overhead_s,
        max_rate_Bps=run.max_rate_Bps,
        network=network,
    )
    return simulate(graph, network, gamma_s_per_byte=gamma_s_per_byte), graph


def collective_sweep(
    network: Network,
    devices: Sequence[str],
    algorithms: Sequence[AlgorithmSpecBase],
    sizes: Sequence[tuple[int, int]],
    *,
    element_bytes: int = 4,
    groups: Sequence[Sequence[int]] | None = None,
    analytic: bool = False,
    gamma_s_per_byte: float | None = None,
    trace: bool = False,
    progress: Callable[[str], None] | None = None,
    collective: str = "all_reduce",
    protocol: str | None = None,
) -> CollectiveSweep:
    """Time every algorithm (of ``collective``) at every size on ``devices`` (rank r on ``devices[r]``).

    ``groups`` (the ranks of each node) reach the algorithms that use them. ``auto`` picks per size
    as NCCL's tuner would on the system the placed ranks form (:mod:`parplan.topology.nccl_system`);
    ``protocol`` forces NCCL's protocol (as NCCL_PROTO does). With ``trace``
    (simulated mode only) the result carries each algorithm's simulation at the largest size, to
    trace. Raises :class:`ParplanError` subclasses for bad requests.
    """
    p = len(devices)
    if p < 1:
        raise ParplanError("a collective needs at least one rank")
    if trace and analytic:
        raise ParplanError("a trace needs simulated mode")
    labels = tuple(algorithm_label(a, collective) for a in algorithms)
    system = None
    if not analytic and any(isinstance(a, AutoAlgorithm) for a in algorithms):
        from parplan.topology.nccl_system import nccl_system

        system = nccl_system(network, devices)
    params = None
    fits: list[AlgorithmFit] = []
    if analytic:
        from parplan.api.analytic_fit import fit_algorithm

        params = uniform_parameters(network, devices, groups=groups, gamma_s_per_byte=gamma_s_per_byte)
        largest_count = max(count for _, count in sizes)
        fits = [
            fit_algorithm(
                network, devices, spec, label, params, groups, largest_count, element_bytes, collective
            )
            for spec, label in zip(algorithms, labels, strict=True)
        ]
    rows: list[CollectiveRow] = []
    traces: list[CollectiveTrace] = []
    for size_bytes, count in sizes:
        times: list[float] = []
        chosen: list[str | None] = []
        symmetries: list[dict[str, int] | None] = []
        for i, (spec, label) in enumerate(zip(algorithms, labels, strict=True)):
            name = None
            symmetry = None
            if fits:
                t = closed_form_time(spec, p, size_bytes, fits[i].parameters, groups, collective)
            else:
                if progress is not None:
                    progress(f"{label} {size_bytes:.0f} B")
                run = resolve_run(spec, size_bytes, system, network.transport, protocol, collective)
                name = run.chosen
                traced = trace and (size_bytes, count) == sizes[-1]
                result, graph = _simulate(
                    network, devices, run, count, element_bytes, groups, gamma_s_per_byte, collective,
                    per_task=traced,
                )  # fmt: skip
                t = result.makespan_s
                symmetry = cast("dict[str, int] | None", result.meta.get("symmetry"))
                if traced and graph is not None:
                    traces.append(CollectiveTrace(label, result, graph, network))
            times.append(t)
            chosen.append(name)
            symmetries.append(symmetry)
        best = min(times)
        for label, t, name, sym in zip(labels, times, chosen, symmetries, strict=True):
            fastest = len(labels) > 1 and t == best
            rows.append(CollectiveRow(label, p, size_bytes, count, t, fastest, collective, name, sym))
    ends = sorted({min(sizes)[0], max(sizes)[0]})  # latency-bound and bandwidth-bound ends
    checks = [
        _check(
            network, devices, spec, fit, row, element_bytes, groups, gamma_s_per_byte, progress, collective
        )
        for spec, fit in zip(algorithms, fits, strict=False)
        if not fit.uniform
        for row in rows
        if row.algorithm == fit.algorithm and row.size_bytes in ends
    ]
    return CollectiveSweep(
        cluster=network.name,
        devices=tuple(devices),
        algorithms=labels,
        element_bytes=element_bytes,
        analytic=analytic,
        rows=tuple(rows),
        parameters=params,
        traces=tuple(traces),
        collective=collective,
        checks=tuple(checks),
    )


def _check(
    network: Network,
    devices: Sequence[str],
    spec: AlgorithmSpecBase,
    fit: AlgorithmFit,
    row: CollectiveRow,
    element_bytes: int,
    groups: Sequence[Sequence[int]] | None,
    gamma_s_per_byte: float | None,
    progress: Callable[[str], None] | None,
    collective: str = "all_reduce",
) -> AnalyticCheck:
    """The closed form of one algorithm against one simulation at ``row``'s size (the sweep's
    smallest and largest sizes are checked)."""
    from parplan.api.analytic_fit import CHECK_STEP_BUDGET, AnalyticCheck

    simulated = None
    if fit.steps <= CHECK_STEP_BUDGET:
        if progress is not None:
            progress(f"checking {fit.algorithm} {row.size_bytes:.0f} B")
        run = CollectiveRun.as_named(spec, network.transport, collective=collective)
        result, _ = _simulate(
            network, devices, run, row.count, element_bytes, groups, gamma_s_per_byte, collective
        )
        simulated = result.makespan_s
    return AnalyticCheck(fit.algorithm, row.size_bytes, row.time_s, simulated, fit.assumes, fit.reason)


def run_collective(
    cluster: str | Path,
    *,
    algorithm: str | None = None,
    collective: str = "all_reduce",
    ranks: int | None = None,
    devices: Sequence[str] | None = None,
    size_bytes: float | None = None,
    min_bytes: float | None = None,
    max_bytes: float | None = None,
    step_factor: float = 2.0,
    element_bytes: int = 4,
    analytic: bool = False,
    trace: bool = False,
    protocol: str | None = None,
) -> CollectiveSweep:
    """``parplan collective``: the sizes (one, or a ``-b``/``-e``/``-f`` sweep) and algorithms
    of ``collective`` (a short form, a comma list or ``all``; None: :func:`default_algorithm`)
    timed on the cluster file's first ``ranks`` devices (or ``devices``, rank 0 first), ranks
    grouped by node; ``protocol`` forces NCCL's. Raises :class:`ParplanError` subclasses for bad
    input (a bad file, an unknown collective, algorithm or device, too many ranks)."""
    from parplan.api.kinds import load_expected
    from parplan.topology.build import build_network
    from parplan.topology.placement import place

    sizes = sweep_sizes(
        size_bytes=size_bytes,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        step_factor=step_factor,
        element_bytes=element_bytes,
    )
    specs = expand_algorithms(algorithm or default_algorithm(collective), collective)
    network = build_network(load_expected(cluster, "cluster", command="parplan collective --cluster"))
    if devices is not None:
        known = set(network.devices)
        unknown = [d for d in devices if d not in known]
        if unknown:
            raise UsageError(
                f"--devices: no device {unknown[0]!r} in cluster {network.name!r}; its devices:"
                f" {_some(network.devices)}",
                "--devices",
            )
    placement = place(network, list(devices) if devices is not None else None, count=ranks)
    return collective_sweep(
        network,
        placement.devices,
        specs,
        sizes,
        element_bytes=element_bytes,
        groups=[list(g) for g in placement.groups],
        analytic=analytic,
        trace=trace,
        protocol=protocol,
        collective=collective,
    )


def _some(names: Sequence[str], shown: int = 8) -> str:
    """The first ``shown`` names, then how many more.

    >>> _some([f"h{i}" for i in range(10)], 3)
    'h0, h1, h2, … (10 in all)'
    """
    if len(names) <= shown:
        return ", ".join(names)
    return ", ".join(names[:shown]) + f", … ({len(names)} in all)"
