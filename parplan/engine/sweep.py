"""What one all-reduce costs on a cluster, over sizes and algorithms: the library behind
``parplan collective`` (the simulated counterpart of nccl-tests' ``all_reduce_perf``).

Each (algorithm, size) is either simulated in full (the algorithm's schedule lowered onto the
placement and run by the event engine, link sharing on) or evaluated with the closed forms of
:mod:`parplan.engine.analytic`. For the closed forms a real cluster is reduced to a uniform group
by its *bottleneck path*: alpha is the largest path latency and beta the inverse of the smallest
path bandwidth among the pairs of placed devices (all pairs up to 64 ranks, ring neighbours and
rank 0's pairs beyond), intra- and inter-group separately for ``hierarchical``; a rank's
concurrent messages share its port unless every pair of ranks has a link of its own.
:class:`UniformParameters` records which path set the figures, so the CLI can say so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parplan.config.algorithms import algorithm_label, parse_algorithm
from parplan.config.units import human_bytes
from parplan.engine.analytic import allreduce_time
from parplan.engine.result import algorithm_bandwidth, bus_bandwidth
from parplan.errors import CollectiveError, ParplanError
from parplan.topology.network import Network

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

_ALL_PAIRS_UP_TO = 64


@dataclass(frozen=True)
class UniformParameters:
    """A cluster seen as a uniform group: the closed forms' inputs and where they came from."""

    alpha_s: float
    beta_s_per_byte: float
    gamma_s_per_byte: float
    shared_port: bool
    bottleneck: tuple[str, str]
    intra_alpha_s: float | None = None
    intra_beta_s_per_byte: float | None = None
    intra_bottleneck: tuple[str, str] | None = None

    def describe(self) -> str:
        """One line saying which figures the closed forms use."""
        bw = 1.0 / self.beta_s_per_byte / 1e9
        text = (
            f"alpha = {self.alpha_s * 1e6:.3g} us, beta = 1/({bw:.4g} GB/s) from the bottleneck path"
            f" {self.bottleneck[0]} -> {self.bottleneck[1]}"
        )
        if (
            self.intra_alpha_s is not None
            and self.intra_beta_s_per_byte is not None
            and self.intra_bottleneck
        ):
            ibw = 1.0 / self.intra_beta_s_per_byte / 1e9
            text += (
                f"; within groups alpha = {self.intra_alpha_s * 1e6:.3g} us, beta = 1/({ibw:.4g} GB/s)"
                f" ({self.intra_bottleneck[0]} -> {self.intra_bottleneck[1]})"
            )
        text += f"; gamma = {self.gamma_s_per_byte * 1e9:.3g} ns/B"
        text += "; one port per rank" if self.shared_port else "; a link per pair of ranks"
        return text


@dataclass(frozen=True)
class CollectiveRow:
    """One (algorithm, size) measurement, with nccl-tests' figures."""

    algorithm: str
    ranks: int
    size_bytes: float
    count: int
    time_s: float
    fastest: bool = False

    @property
    def algbw_GBps(self) -> float:
        """Algorithm bandwidth in GB/s (1e9 bytes per second)."""
        return algorithm_bandwidth(self.size_bytes, self.time_s) / 1e9

    @property
    def busbw_GBps(self) -> float:
        """Bus bandwidth in GB/s."""
        return bus_bandwidth(self.size_bytes, self.time_s, self.ranks) / 1e9

    def as_dict(self) -> dict[str, Any]:
        """The JSON form of a row."""
        return {
            "algorithm": self.algorithm,
            "ranks": self.ranks,
            "size_bytes": self.size_bytes,
            "count": self.count,
            "time_s": self.time_s,
            "algbw_GBps": _finite(self.algbw_GBps),
            "busbw_GBps": _finite(self.busbw_GBps),
        }


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


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
    traces: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` document: ``{"results": [...]}`` plus what produced them."""
        out: dict[str, Any] = {
            "results": [r.as_dict() for r in self.rows],
            "cluster": self.cluster,
            "mode": "analytic" if self.analytic else "simulated",
            "ranks": len(self.devices),
            "element_bytes": self.element_bytes,
        }
        if self.parameters is not None:
            p = self.parameters
            out["analytic_parameters"] = {
                "alpha_s": p.alpha_s,
                "beta_s_per_byte": p.beta_s_per_byte,
                "gamma_s_per_byte": p.gamma_s_per_byte,
                "shared_port": p.shared_port,
                "bottleneck": list(p.bottleneck),
            }
        return out


def sweep_sizes(
    *,
    size_bytes: float | None = None,
    min_bytes: float | None = None,
    max_bytes: float | None = None,
    step_factor: float = 2.0,
    element_bytes: int = 4,
) -> list[tuple[float, int]]:
    """``(size_bytes, count)`` pairs: one size, or nccl-tests' ``-b``/``-e``/``-f`` sweep.

    Sizes are rounded down to whole elements (at least one). ``-b`` alone is one size; ``-e``
    alone sweeps from one element.
    """
    if element_bytes < 1:
        raise ParplanError(f"element size must be at least 1 byte, got {element_bytes}")
    if size_bytes is not None:
        if min_bytes is not None or max_bytes is not None:
            raise ParplanError("give either a size or a -b/-e sweep, not both")
        raw = [size_bytes]
    else:
        if min_bytes is None and max_bytes is None:
            raise ParplanError("give a size (--size) or a sweep (-b, -e, -f)")
        lo = float(min_bytes) if min_bytes is not None else float(element_bytes)
        hi = float(max_bytes) if max_bytes is not None else lo
        if hi < lo:
            raise ParplanError(f"the sweep's end ({human_bytes(hi)}) is below its start ({human_bytes(lo)})")
        if step_factor <= 1.0 and hi > lo:
            raise ParplanError(f"the step factor must be > 1, got {step_factor:g}")
        raw = []
        s = float(lo)
        while s <= hi * (1 + 1e-12) and len(raw) < 1000:
            raw.append(s)
            s *= step_factor
    out: list[tuple[float, int]] = []
    for s in raw:
        count = max(1, int(s // element_bytes))
        pair = (float(count * element_bytes), count)
        if not out or out[-1] != pair:
            out.append(pair)
    return out


def expand_algorithms(algorithm: str) -> list[Any]:
    """``"all"`` (every registered algorithm with its defaults), one short form, or a comma list."""
    from parplan.collectives.registry import ALGORITHMS

    names = list(ALGORITHMS) if algorithm.strip() == "all" else [a.strip() for a in algorithm.split(",")]
    specs = []
    for name in names:
        if not name:
            continue
        if name.partition(":")[0] not in ALGORITHMS:
            raise CollectiveError(
                f"unknown collective algorithm {name!r}; valid: {', '.join(ALGORITHMS)}, all"
            )
        try:
            specs.append(parse_algorithm(name))
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise CollectiveError(f"invalid algorithm {name!r}: {exc}") from None
    if not specs:
        raise CollectiveError("no algorithm given")
    return specs


def _pairs(devices: Sequence[str]) -> list[tuple[str, str]]:
    p = len(devices)
    if p <= _ALL_PAIRS_UP_TO:
        return [(a, b) for a in devices for b in devices if a != b]
    pairs = {(devices[i], devices[(i + 1) % p]) for i in range(p)}
    pairs |= {(devices[0], d) for d in devices[1:]} | {(d, devices[0]) for d in devices[1:]}
    return sorted(pairs)


def _bottleneck(
    network: Network, pairs: Sequence[tuple[str, str]]
) -> tuple[float, float, tuple[str, str], bool]:
    """Largest latency, smallest bandwidth, the path that has them, and whether every pair is one hop."""
    worst_lat = -1.0
    worst_bw = math.inf
    where = pairs[0]
    direct = True
    for a, b in pairs:
        channels, latency = network.route(a, b)
        bw = float(network.channel_bandwidth_Bps[channels].min())
        direct = direct and len(channels) == 1
        if bw < worst_bw or (bw == worst_bw and latency > worst_lat):
            where = (a, b)
        worst_bw = min(worst_bw, bw)
        worst_lat = max(worst_lat, latency)
    return worst_lat, worst_bw, where, direct


def uniform_parameters(
    network: Network,
    devices: Sequence[str],
    *,
    groups: Sequence[Sequence[int]] | None = None,
    gamma_s_per_byte: float | None = None,
) -> UniformParameters:
    """The uniform group that stands for ``devices`` on ``network`` in the closed forms.

    With ``groups`` of more than one rank, alpha/beta come from the pairs of group leaders and
    the intra figures from pairs within groups (for ``hierarchical``).
    """
    if len(devices) < 2:
        return UniformParameters(0.0, 0.0, 0.0, True, (devices[0], devices[0]))
    if gamma_s_per_byte is None:
        gammas = []
        for d in devices:
            mem = network.device(d).memory_bandwidth_Bps
            gammas.append(3.0 / float(mem) if mem else 0.0)
        gamma = max(gammas)
    else:
        gamma = gamma_s_per_byte
    lat, bw, where, direct = _bottleneck(network, _pairs(devices))
    params = UniformParameters(lat, 1.0 / bw, gamma, not direct, where)
    if groups is not None and any(len(g) > 1 for g in groups) and len(groups) > 1:
        leaders = [devices[g[0]] for g in groups]
        inner = [pair for g in groups for pair in _pairs([devices[r] for r in g])]
        llat, lbw, lwhere, _ = _bottleneck(network, _pairs(leaders))
        ilat, ibw, iwhere, _ = _bottleneck(network, inner)
        params = UniformParameters(llat, 1.0 / lbw, gamma, not direct, lwhere, ilat, 1.0 / ibw, iwhere)
    return params


def collective_sweep(
    network: Network,
    devices: Sequence[str],
    algorithms: Sequence[Any],
    sizes: Sequence[tuple[float, int]],
    *,
    element_bytes: int = 4,
    groups: Sequence[Sequence[int]] | None = None,
    analytic: bool = False,
    gamma_s_per_byte: float | None = None,
    trace_paths: Sequence[str | Path] | None = None,
    progress: Callable[[str], None] | None = None,
) -> CollectiveSweep:
    """Time every algorithm at every size on ``devices`` (rank r on ``devices[r]``).

    ``groups`` are the hierarchical algorithm's groups when its spec has no ``group_size``.
    ``trace_paths`` (simulated mode only, one per algorithm) get a Chrome trace of that
    algorithm's largest size. Raises :class:`ParplanError` subclasses for bad requests.
    """
    from parplan.collectives.registry import build_schedule
    from parplan.engine.simulate import simulate
    from parplan.plan.collective import collective_taskgraph
    from parplan.report.trace import write_chrome_trace

    p = len(devices)
    if p < 1:
        raise ParplanError("a collective needs at least one rank")
    if trace_paths is not None and (analytic or len(trace_paths) != len(algorithms)):
        raise ParplanError("a trace needs simulated mode and one file per algorithm")
    labels = tuple(algorithm_label(a) for a in algorithms)
    params = None
    if analytic:
        params = uniform_parameters(network, devices, groups=groups, gamma_s_per_byte=gamma_s_per_byte)
    rows: list[CollectiveRow] = []
    written: list[str] = []
    for size_bytes, count in sizes:
        times: list[float] = []
        for spec, label in zip(algorithms, labels, strict=True):
            if params is not None:
                t = allreduce_time(
                    spec,
                    p,
                    size_bytes,
                    alpha_s=params.alpha_s,
                    beta_s_per_byte=params.beta_s_per_byte,
                    gamma_s_per_byte=params.gamma_s_per_byte,
                    groups=groups,
                    shared_port=params.shared_port,
                    intra_alpha_s=params.intra_alpha_s,
                    intra_beta_s_per_byte=params.intra_beta_s_per_byte,
                )
            else:
                if progress is not None:
                    progress(f"{label} {size_bytes:.0f} B")
                schedule = build_schedule(spec, p, count, groups=groups)
                graph = collective_taskgraph(schedule, devices, element_bytes)
                result = simulate(graph, network, gamma_s_per_byte=gamma_s_per_byte)
                t = result.makespan_s
                if trace_paths is not None and (size_bytes, count) == sizes[-1]:
                    path = trace_paths[labels.index(label)]
                    write_chrome_trace(result, graph, network, path)
                    written.append(str(path))
            times.append(t)
        best = min(times)
        for label, t in zip(labels, times, strict=True):
            rows.append(CollectiveRow(label, p, size_bytes, count, t, fastest=len(labels) > 1 and t == best))
    return CollectiveSweep(
        cluster=network.name,
        devices=tuple(devices),
        algorithms=labels,
        element_bytes=element_bytes,
        analytic=analytic,
        rows=tuple(rows),
        parameters=params,
        traces=tuple(written),
    )
