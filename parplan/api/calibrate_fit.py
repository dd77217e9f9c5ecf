"""The fit behind ``parplan calibrate``: which parameters, how they enter a cluster file, the solver.

**Parameters.** Each is a value of the cluster file that the engine reads:

- ``efficiency.CLASS``: the achievable efficiency of every link of that class (``nvlink``,
  ``infiniband`` ...): the effective bandwidth of the class is its line rate times this factor;
- ``call_latency``: the transport's cost per collective call (``transport.call_latency``);
- ``step_latency``: what every message (every step of a schedule) pays beyond the base model:
  the transport's per-message overhead, written as ``send_overhead`` = ``recv_overhead`` = half
  of it. Under ``nccl`` it adds to NCCL's per-step latency (hwLat); under ``gloo`` / ``mpi`` it is
  LogGP's o, the transport's per-message cost. A link class's own latency is not fitted apart from
  it: the data cannot tell the two apart.

**Identified or kept.** A parameter whose change moves no predicted time (a link class the measured
ranks' traffic never crosses: a single-node log says nothing about the network) is *not
identified* and kept as it was; so is the later of two parameters the data cannot tell apart
(their columns of the Jacobian nearly parallel: e.g. call and step latency when every size runs the
same number of steps). Fewer points than identified parameters is an error.

**Method.** Least squares on the relative error: minimise ``sum_i (t_i(x) / m_i - 1)^2`` over the
sizes i of every log, ``t_i`` the simulated time (the engine, as ``parplan collective`` predicts)
and ``m_i`` the measured one. Relative, so that a 16 us and a 16 ms size weigh the same. Solved
by Levenberg-Marquardt (numpy only): a forward-difference Jacobian from re-simulating with each
parameter nudged (efficiencies by 10%: under ``nccl`` the tuner quantises link rates to NCCL's
search speeds, so a small nudge can move nothing), the damped normal equations on columns
scaled to unit norm, steps clipped to the bounds (efficiency in (0, 1]; latencies >= 0).
Efficiencies enter as their inverse (time is linear in 1/efficiency where bandwidth dominates, as
it is in the latencies where they dominate), so the model is close to linear in the unknowns and
a few iterations converge.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from parplan.api.calibrate_logs import MeasuredLog
from parplan.api.collective import collective_sweep, default_algorithm, sweep_sizes
from parplan.collectives.specs import parse_algorithm
from parplan.config.cluster import ClusterSpec
from parplan.errors import ConfigError, Issue
from parplan.topology.build import build_network
from parplan.topology.network import Network
from parplan.topology.placement import place

ELEMENT_BYTES = 4
"""nccl-tests' default data type is float."""

LINK_KEYS = ("link", "intra", "nic", "pcie", "uplink", "spine")
"""The link templates of cluster generators, by key."""

Status = Literal["fitted", "at bound", "not identified"]


@dataclass(frozen=True)
class Parameter:
    """One unknown: its key, its value before, its bounds, in the units the solver uses."""

    key: str
    start: float
    lower: float
    upper: float

    @property
    def is_efficiency(self) -> bool:
        """An efficiency (solved as its inverse) rather than a latency in seconds."""
        return self.key.startswith("efficiency.")

    def to_x(self, value: float) -> float:
        """The solver's variable for a value (1/efficiency; seconds)."""
        return 1.0 / value if self.is_efficiency else value

    def from_x(self, x: float) -> float:
        """A value from the solver's variable, rounded as the calibrated file writes it."""
        if self.is_efficiency:
            return round(min(1.0, 1.0 / x), 4)
        return round(max(0.0, x), 9)  # 1 ns: a file writes '7.215 us'

    @property
    def x_bounds(self) -> tuple[float, float]:
        """Bounds of the solver's variable."""
        a, b = self.to_x(self.lower), self.to_x(self.upper)
        return (min(a, b), max(a, b))

    def nudge(self, x: float) -> float:
        """The forward-difference step for this variable."""
        return 0.1 * x if self.is_efficiency else max(1e-7, 0.01 * x)


@dataclass(frozen=True)
class ParameterResult:
    """A parameter after the fit: before and after, and whether it was fitted."""

    key: str
    before: float
    after: float
    status: Status
    note: str = ""


@dataclass(frozen=True)
class FitResult:
    """The fitted values, each parameter's outcome, predictions before and after, the cost."""

    values: dict[str, float]
    parameters: tuple[ParameterResult, ...]
    before_s: tuple[tuple[float, ...], ...]
    after_s: tuple[tuple[float, ...], ...]
    iterations: int
    simulations: int


# -- parameters in a cluster file ---------------------------------------------------------------------


def _link_templates(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Every link mapping of a cluster file's data: generator templates, host links, explicit links."""
    found: list[dict[str, Any]] = []
    generator = data.get("generator")
    if isinstance(generator, dict):
        found += [generator[k] for k in LINK_KEYS if isinstance(generator.get(k), dict)]
        hosts = generator.get("host_links")
        if isinstance(hosts, dict):
            found += [v for v in hosts.values() if isinstance(v, dict)]
    links = data.get("links")
    if isinstance(links, list):
        found += [v for v in links if isinstance(v, dict)]
    return found


def _link_class(link: dict[str, Any]) -> str | None:
    value = link.get("class", link.get("link_class"))
    return value if isinstance(value, str) else None


def parameters_of(data: dict[str, Any], spec: ClusterSpec, network: Network) -> list[Parameter]:
    """The parameters of a cluster: an efficiency per link class present, then the latencies."""
    from parplan.config.cluster import LINK_EFFICIENCY

    out: list[Parameter] = []
    for cls in sorted({c for link in _link_templates(data) if (c := _link_class(link))}):
        current = [link.get("efficiency") for link in _link_templates(data) if _link_class(link) == cls]
        given = [float(e) for e in current if isinstance(e, (int, float))]
        start = given[0] if given else LINK_EFFICIENCY[cls]
        out.append(Parameter(f"efficiency.{cls}", start, 0.02, 1.0))
    costs = network.transport
    out.append(Parameter("call_latency", costs.call_latency_s, 0.0, 1.0))
    out.append(Parameter("step_latency", costs.send_overhead_s + costs.recv_overhead_s, 0.0, 1.0))
    return out


def seconds_text(value_s: float) -> str:
    """Seconds as a cluster file writes them, in microseconds to 1 ns (``7.215 us``).

    >>> seconds_text(7.215e-6), seconds_text(0.0)
    ('7.215 us', '0 us')
    """
    return f"{round(value_s * 1e6, 3):g} us"


def apply_values(data: dict[str, Any], values: dict[str, float], transport_kind: str) -> dict[str, Any]:
    """A copy of a cluster file's data with ``values`` (by parameter key) written in."""
    out = copy.deepcopy(data)
    for link in _link_templates(out):
        cls = _link_class(link)
        if cls is not None and f"efficiency.{cls}" in values:
            link["efficiency"] = values[f"efficiency.{cls}"]
    transport = dict(out.get("transport") or {"kind": transport_kind})
    if "call_latency" in values:
        transport["call_latency"] = seconds_text(values["call_latency"])
    if "step_latency" in values:
        half = seconds_text(values["step_latency"] / 2)
        transport.update(send_overhead=half, recv_overhead=half)
    out["transport"] = transport
    return out


# -- predicting ------------------------------------------------------------------------------------------


def predict(network: Network, log: MeasuredLog) -> tuple[float, ...]:
    """Simulated seconds of each size of ``log`` on ``network``, as ``parplan collective`` runs it."""
    placement = place(network, log.devices, count=None if log.devices else log.ranks)
    spec = log.algorithm or parse_algorithm(default_algorithm(log.collective))
    pairs = [sweep_sizes(size_bytes=float(s), element_bytes=ELEMENT_BYTES)[0] for s in log.sizes_bytes]
    sweep = collective_sweep(
        network,
        placement.devices,
        [spec],
        pairs,
        element_bytes=ELEMENT_BYTES,
        groups=[list(g) for g in placement.groups],
        collective=log.collective,
    )
    by_size = {row.size_bytes: row.time_s for row in sweep.rows}
    return tuple(by_size[count * ELEMENT_BYTES] for _, count in pairs)


Model = Callable[[dict[str, float]], tuple[tuple[float, ...], ...]]


def cluster_model(data: dict[str, Any], transport_kind: str, logs: Sequence[MeasuredLog]) -> Model:
    """Predictions of every log for given parameter values (a new cluster built each time)."""

    def run(values: dict[str, float]) -> tuple[tuple[float, ...], ...]:
        spec = ClusterSpec.model_validate(apply_values(data, values, transport_kind))
        network = build_network(spec)
        return tuple(predict(network, log) for log in logs)

    return run


# -- the solver ------------------------------------------------------------------------------------------


def _residuals(times: tuple[tuple[float, ...], ...], measured: np.ndarray) -> np.ndarray:
    flat = np.array([t for log in times for t in log], dtype=float)
    result: np.ndarray = flat / measured - 1.0
    return result


def _jacobian(
    model: Model, params: Sequence[Parameter], x: np.ndarray, r: np.ndarray, measured: np.ndarray
) -> np.ndarray:
    columns = []
    for j, p in enumerate(params):
        h = p.nudge(float(x[j]))
        hi = p.x_bounds[1]
        if x[j] + h > hi:
            h = -h
        moved = x.copy()
        moved[j] += h
        columns.append((_residuals(model(_values(params, moved, exact=True)), measured) - r) / h)
    return np.column_stack(columns) if columns else np.zeros((len(r), 0))


def _values(params: Sequence[Parameter], x: np.ndarray, *, exact: bool = False) -> dict[str, float]:
    if exact:
        return {
            p.key: (1.0 / float(v) if p.is_efficiency else float(v)) for p, v in zip(params, x, strict=True)
        }
    return {p.key: p.from_x(float(v)) for p, v in zip(params, x, strict=True)}


def _identified(params: list[Parameter], jac: np.ndarray) -> tuple[list[int], dict[int, str]]:
    """Indices of the identified parameters and, for the others, why not."""
    why: dict[int, str] = {}
    # A parameter counts as seen when a plausible change moves some point visibly: a 1% change
    # of an efficiency by 0.05% (under nccl the tuner's quantised speeds hide small ones), 1 us of
    # latency by 0.2% (a log of only large sizes says nothing about latencies).
    scale = np.array([abs(p.to_x(p.start)) * 0.01 / 5e-4 if p.is_efficiency else 1e-6 / 2e-3 for p in params])
    effect = np.abs(jac).max(axis=0) * scale if jac.size else np.zeros(len(params))
    keep = [j for j in range(len(params)) if effect[j] >= 1.0]
    for j in range(len(params)):
        if j not in keep:
            what = params[j].key.split(".", 1)[-1]
            why[j] = (
                f"no measured time depends on it ({what} links not crossed, or never the bottleneck: "
                "under nccl, NCCL's per-channel bandwidth may bound every size)"
                if params[j].is_efficiency
                else "no measured size is short enough for it to show (1 us moves no time by 0.2%)"
            )
    while len(keep) > 1:
        cols = jac[:, keep] / np.linalg.norm(jac[:, keep], axis=0)
        sv = np.linalg.svd(cols, compute_uv=False)
        if sv[-1] / sv[0] > 1e-3:
            break
        drop = keep[-1]  # the latencies come last: the step latency goes first
        overlap = np.abs(cols.T @ cols[:, -1])[:-1]
        partner = params[keep[int(np.argmax(overlap))]].key
        why[drop] = f"the data cannot tell it apart from {partner}"
        keep.remove(drop)
    return keep, why


def fit(
    model: Model, params: list[Parameter], measured_s: Sequence[float], *, max_iterations: int = 10
) -> FitResult:
    """Fit ``params`` so ``model`` matches ``measured_s`` (every log's points, flattened) in
    relative least squares (see the module docstring). Raises ConfigError with too few points."""
    measured = np.array(measured_s, dtype=float)
    x = np.array([p.to_x(p.start) for p in params])
    start_times = model(_values(params, x, exact=True))
    r = _residuals(start_times, measured)
    sims = 1
    jac = _jacobian(model, params, x, r, measured)
    sims += len(params)
    keep, why = _identified(params, jac)
    if len(measured) < len(keep):
        names = ", ".join(params[j].key for j in keep)
        raise ConfigError(
            Issue(
                "",
                "",
                f"too few points to fit: {len(measured)} size{'s' if len(measured) != 1 else ''} for "
                f"{len(keep)} parameters ({names}); measure more sizes",
            )
        )
    free = [params[j] for j in keep]
    xf = x[keep].copy()
    fixed = {params[j].key: params[j].start for j in range(len(params)) if j not in keep}
    cost = float(r @ r)
    damping, iterations = 1e-3, 0
    jf = jac[:, keep]
    for iterations in range(1, max_iterations + 1):  # noqa: B007 (reported)
        if not free:
            break
        norms = np.linalg.norm(jf, axis=0)
        norms[norms == 0] = 1.0
        a = jf / norms
        step, accepted = None, False
        for _ in range(8):
            lhs = a.T @ a + damping * np.diag(np.diag(a.T @ a) + 1e-12)
            step = np.linalg.solve(lhs, -a.T @ r) / norms
            trial = np.clip(xf + step, [p.x_bounds[0] for p in free], [p.x_bounds[1] for p in free])
            trial_r = _residuals(model({**fixed, **_values(free, trial, exact=True)}), measured)
            sims += 1
            if float(trial_r @ trial_r) < cost:
                improvement = cost - float(trial_r @ trial_r)
                xf, r, cost, accepted = trial, trial_r, float(trial_r @ trial_r), True
                damping = max(damping / 3, 1e-9)
                break
            damping *= 4
        if not accepted or improvement <= 1e-3 * (cost + improvement):
            break
        jf = _jacobian(lambda v: model({**fixed, **v}), free, xf, r, measured)
        sims += len(free)
    values = _values(free, xf)  # parameters not identified are not written: the file keeps them
    after = model(values)
    sims += 1
    results = []
    for j, p in enumerate(params):
        if j in why:
            results.append(ParameterResult(p.key, p.start, p.start, "not identified", why[j]))
            continue
        at_bound = any(math.isclose(values[p.key], b, abs_tol=1e-12) for b in (p.lower, p.upper))
        results.append(ParameterResult(p.key, p.start, values[p.key], "at bound" if at_bound else "fitted"))
    return FitResult(values, tuple(results), start_times, after, iterations, sims)
