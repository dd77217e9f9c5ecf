"""How the closed forms see one algorithm on a real cluster, and the check that they agree with it.

The closed forms (:mod:`parplan.engine.analytic`) price a *uniform* group: every message pays one
``alpha`` and moves its bytes at one ``beta``, and a rank's port is the busiest link. A real
cluster is reduced to such a group by its bottleneck path (:func:`~parplan.api.uniform.
uniform_parameters`). That is exact when the algorithm's messages all see that path and no link
carries more than a port; on a hierarchical cluster neither holds: a ring on eight channels sends
one eighth of its bytes through each of eight NICs, so the bottleneck path's 25 GB/s NIC stands for
200 GB/s of real capacity, and the ring was priced 8x too slow.

:func:`fit_algorithm` routes the algorithm's own traffic on the network (each distinct rank pair
once, from :meth:`~parplan.collectives.algorithm.Algorithm.pair_traffic`, which the ring answers
without building its p^2 steps), adds up the bytes each link carries and finds the busiest link.
Where the algorithm's traffic is balanced (every rank sends and receives as much as every other,
as in the ring and halving-doubling) the bandwidth term is set by that link, so beta becomes
``busiest link time / bytes through a rank``: the closed form's inputs made right; where it is
not balanced (trees), beta is at least what makes the closed form's bandwidth term cover the
busiest link's busy time. Alpha is the schedule's latency critical path (the engine at zero
bytes, :func:`latency_critical_path_s`) spread over the closed form's latency rounds, so on a
ring or torus topology a tree step is charged its own path's hops, not the longest path's (the
old bottleneck alpha charged every step rank 0's p/2-hop path). Either way
the fit says whether the network is uniform for the algorithm (one path latency, one path width,
no link above a port's load); where it is not, :func:`~parplan.api.collective.collective_sweep` runs the event
engine at the sweep's smallest and largest sizes, so the report can say by how much the closed form
differs and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from parplan.collectives.algorithm import AlgorithmSpecBase, Groups, UniformCost, schedule_pair_traffic
from parplan.collectives.registry import get
from parplan.collectives.schedule import IntArray, Schedule
from parplan.config.units import human_bandwidth, human_bytes, human_seconds
from parplan.plan.collective import endpoint_devices
from parplan.topology.network import Network

if TYPE_CHECKING:
    from parplan.api.uniform import UniformParameters

FloatArray = npt.NDArray[np.float64]

TOLERANCE = 0.05
"""Largest relative difference between the closed form and the engine that is not reported."""

CHECK_STEP_BUDGET = 200_000
"""Most schedule steps an agreement check simulates; past it the check is skipped (and said so)."""

_EXACT = 1e-9


@dataclass(frozen=True)
class AlgorithmFit:
    """One algorithm's closed-form inputs on a cluster and what they assume."""

    algorithm: str
    parameters: UniformParameters
    uniform: bool
    """Every message sees one path latency and width and no link carries more than a port: the
    closed form is exact here (as tested against the engine on uniform clusters)."""
    assumes: str
    reason: str
    """Why the network is not uniform for the algorithm ("" when it is)."""
    steps: int


@dataclass(frozen=True)
class AnalyticCheck:
    """The closed form against the event engine for one algorithm at one size."""

    algorithm: str
    size_bytes: float
    analytic_s: float
    simulated_s: float | None
    """None when the schedule was over :data:`CHECK_STEP_BUDGET` steps (not simulated)."""
    assumes: str
    reason: str

    @property
    def difference(self) -> float | None:
        """``simulated / analytic - 1`` (None when not simulated)."""
        if self.simulated_s is None or self.analytic_s <= 0:
            return None
        return self.simulated_s / self.analytic_s - 1.0

    @property
    def agrees(self) -> bool:
        """Within :data:`TOLERANCE` (a skipped check does not agree: nothing was shown)."""
        d = self.difference
        return d is not None and abs(d) <= TOLERANCE

    def warning(self) -> str:
        """``analytic assumes X; the simulation differs by Y% here because Z`` (or why unchecked)."""
        d = self.difference
        if d is None:
            return (
                f"{self.algorithm}: analytic assumes {self.assumes}; not checked against the simulation "
                f"(over {CHECK_STEP_BUDGET} steps), and it may differ because {self.reason}"
            )
        return (
            f"{self.algorithm}: analytic assumes {self.assumes}; the simulation differs by {d * 100:+.0f}% "
            f"at {human_bytes(self.size_bytes)} here because {self.reason}"
        )


def latency_critical_path_s(schedule: Schedule, pair_keys: IntArray, pair_latency_s: FloatArray) -> float:
    """The longest chain of path latencies through ``schedule``'s dependencies: what the engine
    takes for it when bytes cost nothing (``pair_keys`` sorted ``src * p + dst``, with each pair's
    latency). Steps are processed in blocks that depend only on earlier blocks (a ring's rounds, a
    tree's levels), so a 200,000-step schedule costs a few hundred numpy calls, not a Python loop.
    """
    n = schedule.num_steps
    if n == 0:
        return 0.0
    p = schedule.num_ranks
    keys = schedule.src.astype(np.int64) * p + schedule.dst.astype(np.int64)
    latency = pair_latency_s[np.searchsorted(pair_keys, keys)]
    offsets, deps = schedule.dep_offsets, schedule.dep_indices
    has = np.diff(offsets) > 0
    last = np.full(n, -1, dtype=np.int64)
    if len(deps):
        last[has] = np.maximum.reduceat(deps, offsets[:-1][has])
    reach = np.maximum.accumulate(last)  # the latest step any step up to here waits for
    finish = np.zeros(n)
    start = 0
    while start < n:
        end = int(np.searchsorted(reach, start, side="left"))  # first step waiting on this block
        ready = np.zeros(end - start)
        lo, hi = int(offsets[start]), int(offsets[end])
        if hi > lo:
            inner = has[start:end]
            ready[inner] = np.maximum.reduceat(finish[deps[lo:hi]], offsets[start:end][inner] - lo)
        finish[start:end] = ready + latency[start:end]
        start = end
    return float(finish.max())


def _gbps(bandwidth_Bps: float) -> str:
    return human_bandwidth(bandwidth_Bps)


def _reads_intra(
    spec: AlgorithmSpecBase,
    p: int,
    params: UniformParameters,
    groups: Groups | None,
    collective: str = "all_reduce",
) -> bool:
    """Whether the algorithm's closed form uses the within-group figures (a two-level algorithm)."""
    if params.intra_beta_s_per_byte is None:
        return False
    found = get(spec.name, collective)
    base = UniformCost(params.alpha_s, params.beta_s_per_byte, 0.0, params.shared_port)
    probe = replace(
        base, intra_alpha_s=2 * params.alpha_s + 1e-6, intra_beta_s_per_byte=2 * params.beta_s_per_byte
    )
    size = 1 << 20
    return found.time_s(spec, p, size, base, groups) != found.time_s(spec, p, size, probe, groups)


def fit_algorithm(
    network: Network,
    devices: Sequence[str],
    spec: AlgorithmSpecBase,
    label: str,
    params: UniformParameters,
    groups: Groups | None,
    count: int,
    element_bytes: int,
    collective: str = "all_reduce",
) -> AlgorithmFit:
    """The closed-form inputs for ``spec`` on ``devices`` (see the module docstring), from its
    schedule of ``count`` elements routed on ``network``."""
    p = len(devices)
    bottleneck = params.bottleneck
    base_assumes = (
        f"every message crosses the bottleneck path {bottleneck[0]} -> {bottleneck[1]} "
        f"({human_seconds(params.alpha_s)}, {_gbps(1.0 / params.beta_s_per_byte)})"
        if params.beta_s_per_byte > 0
        else "no traffic"
    )
    if p < 2:
        return AlgorithmFit(label, params, True, base_assumes, "", 0)
    found = get(spec.name, collective)
    if found.switch_capabilities:  # switch ranks: their devices come from the built schedule
        schedule = found.build(spec, p, max(count, p), groups)
        ends = endpoint_devices(schedule, devices, network)  # the ranks' devices, then switch ranks'
        traffic = schedule_pair_traffic(schedule)
    else:
        ends = list(devices)
        traffic = found.pair_traffic(spec, p, max(count, p), groups)
    e = len(ends)
    src, dst = traffic.src, traffic.dst
    pair_bytes = traffic.elements.astype(np.float64) * element_bytes
    load = np.zeros(len(network.channel_bandwidth_Bps))
    latencies: list[float] = []
    widths: list[float] = []
    ports: dict[tuple[str, int], set[int]] = {}  # the links each rank's messages leave / arrive on
    for k, (s, d) in enumerate(zip(src.tolist(), dst.tolist(), strict=True)):
        channels, latency = network.route(ends[s], ends[d])
        np.add.at(load, channels, pair_bytes[k])
        latencies.append(latency)
        widths.append(float(network.channel_bandwidth_Bps[channels].min()) if len(channels) else np.inf)
        if len(channels):
            if s < p:  # a switch rank is no port of the model's
                ports.setdefault(("out", s), set()).add(int(channels[0]))
            if d < p:
                ports.setdefault(("in", d), set()).add(int(channels[-1]))
    sent = np.bincount(src, weights=pair_bytes, minlength=e)[:p]
    received = np.bincount(dst, weights=pair_bytes, minlength=e)[:p]
    # The bytes the uniform model puts on its busiest link: a rank's port, or a pair's own link.
    port_bytes = float(max(sent.max(), received.max()) if params.shared_port else pair_bytes.max())
    busy_s = load / network.channel_bandwidth_Bps
    busiest = int(np.argmax(busy_s))
    load_s = float(busy_s[busiest])
    port_s = port_bytes * params.beta_s_per_byte
    one_latency = max(latencies) - min(latencies) <= _EXACT * max(latencies)
    one_width = max(widths) - min(widths) <= _EXACT * max(widths)
    loads_match = abs(load_s - port_s) <= _EXACT * max(port_s, 1e-300)
    most_ports = max((len(v) for v in ports.values()), default=1)
    one_port = most_ports == 1 or not params.shared_port
    uniform = one_latency and one_width and loads_match and one_port
    reasons = []
    if not one_latency:
        low, high = human_seconds(min(latencies)), human_seconds(max(latencies))
        reasons.append(f"its messages see path latencies from {low} to {high}")
    if not one_width:
        reasons.append(f"paths from {_gbps(min(widths))} to {_gbps(max(widths))} wide")
    if not loads_match:
        share = float(load[busiest]) / port_bytes if port_bytes > 0 else float("inf")
        reasons.append(
            f"its busiest link {network.channel_names[busiest]} "
            f"({_gbps(network.channel_bandwidth_Bps[busiest])}) "
            f"carries {share:.3g}x the bytes through a rank"
        )
    if not one_port:
        reasons.append(f"a rank uses up to {most_ports} links at once where the closed form has one port")
    estimate = found.closed_form_estimate(spec, p, groups)
    if estimate:
        uniform = False
        reasons.append(estimate)
    reason = "; ".join(reasons)
    balanced = bool(np.ptp(sent) <= _EXACT * sent.max() and np.ptp(received) <= _EXACT * received.max())
    if uniform:  # the closed form is exact with the figures of the paths the algorithm uses
        exact = replace(params, alpha_s=max(latencies), beta_s_per_byte=1.0 / max(widths))
        return AlgorithmFit(label, exact, True, base_assumes, "", traffic.steps)
    if _reads_intra(spec, p, params, groups, collective) or port_bytes <= 0:
        return AlgorithmFit(label, params, uniform, base_assumes, reason, traffic.steps)
    # The busiest link sets the bandwidth term (beta = its time per byte through a rank); alpha is
    # the latency critical path of the schedule spread over the closed form's latency rounds. With
    # C independent channels a step waits for its own channel's reduction only: gamma / C.
    size = max(count, p) * element_bytes
    if balanced:
        beta = load_s / port_bytes
    else:  # its bandwidth term at least the busiest link's busy time, else the bottleneck path's
        beta = max(
            params.beta_s_per_byte, load_s / found.time_s(spec, p, size, UniformCost(0.0, 1.0, 0.0), groups)
        )
    channel_count = traffic.channels
    alpha, alpha_how = max(latencies), human_seconds(max(latencies))
    rounds = found.time_s(spec, p, size, UniformCost(1.0, 0.0, 0.0), groups)
    if traffic.steps <= CHECK_STEP_BUDGET and rounds > 0:
        pair_keys = src * p + dst
        critical_s = latency_critical_path_s(
            found.build(spec, p, max(count, p), groups), pair_keys, np.asarray(latencies)
        )
        if abs(critical_s / rounds - alpha) > _EXACT * alpha:  # not every round at the longest path
            alpha = critical_s / rounds
            alpha_how = (
                f"{human_seconds(critical_s)} of path latencies on its critical path over {rounds:g} rounds"
            )
    if not balanced and (alpha, beta) == (params.alpha_s, params.beta_s_per_byte):
        return AlgorithmFit(label, params, False, base_assumes, reason, traffic.steps)
    fitted = replace(
        params,
        alpha_s=alpha,
        beta_s_per_byte=beta,
        gamma_s_per_byte=params.gamma_s_per_byte / channel_count,
    )
    assumes = (
        f"its bytes move at the pace of its busiest link {network.channel_names[busiest]} "
        f"(beta = 1/({_gbps(1.0 / beta)}) per byte through a rank, alpha {alpha_how}"
        + (f", reductions overlapped over {channel_count} channels)" if channel_count > 1 else ")")
    )
    return AlgorithmFit(label, fitted, False, assumes, reason, traffic.steps)
