"""Evaluate plans: build the scenario's context, expand a plan, simulate it, read the timeline.

:func:`build_context` turns a scenario into the :class:`~parplan.plan.base.PlanContext` every plan is
expanded against; :func:`evaluate_plan` expands one plan (after optional command-line
:func:`apply_overrides`), simulates its task graph with :func:`parplan.engine.simulate.simulate`
and condenses the timeline into a :class:`PlanResult`; :func:`evaluate_scenario` does every plan.

How the step time is split (all on one *critical device*, so the three parts add up to the step):

- ``step_time_s``: the simulated makespan of one unit (step, round or generation).
- **Critical device**: the device whose compute stream is busy longest (the most loaded one: the
  straggler of a data-parallel step, the heaviest stage of a pipeline); ties go to the device whose
  last compute task ends latest, then to the earlier device.
- ``compute_s``: that device's compute-stream busy time.
- ``exposed_comm_s``: the part of the rest of the step that communication holds the device up.
  Each idle gap of its stream (before a compute task, and after its last one until the step ends)
  is explained by walking back from what ends the gap (the compute task; for the last gap, the task
  that ends the step) through the dependency that finished last, then that task's, and so on: the
  chain of work the device was waiting for. Time on that chain spent in transfers is exposed
  communication; time spent in other devices' compute is idle. A transfer lasts from its issue (so
  path latency counts) to its end (including the receiver's reduction).
- ``idle_s``: ``step_time_s - compute_s - exposed_comm_s``: waiting for other devices' compute (the
  pipeline bubble, stragglers, a server waiting for clients).
- ``hidden_comm_s``: time during the device's compute when some transfer of the step is in flight,
  i.e. communication the plan overlaps with that device's work.
- ``bubble_fraction`` (pipelines and 2-D plans): over the devices that run pipeline stages,
  ``1 - mean(forward + backward busy time) / span``, ``span`` being from the first forward's start
  to the last backward's end; ``(s - 1) / (m + s - 1)`` for uniform stages and free communication.
  When activation transfers dominate, waiting for them counts here too (the bottleneck line then
  names the link).

Throughput is ``samples_per_step / step_time_s`` (``tokens_per_s`` multiplies by the sequence length
when the training settings or the model generator give one). Collectives are reported per group
(all buckets of one all-reduce group together): total bytes, the time any of their transfers is in
flight, and the nccl-tests ``algbw = bytes / time`` and ``busbw = algbw x 2(p - 1)/p`` over that
time. ``run_time_s`` is the unit time times ``training.steps`` for step plans, or the expander's
``graph.meta["run_time_s"]`` (federated rounds, PBT generations simulated one by one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from pydantic import ValidationError

from parplan.config.algorithms import algorithm_label
from parplan.config.units import format_bytes, human_bytes
from parplan.errors import ConfigError, Issue, PlanError
from parplan.plan.base import MemoryBreakdown, PlanContext, PlanWork
from parplan.plan.knobs import KNOBS
from parplan.plan.memory import infeasible_message
from parplan.taskgraph import COMPUTE, TRANSFER, TaskGraph

if TYPE_CHECKING:
    from parplan.config.scenario import PlanSpec, ScenarioSpec
    from parplan.engine.result import SimResult

FloatArray = npt.NDArray[np.float64]

DEFAULT_BUCKET_BYTES = 25 * 2**20
"""PyTorch DDP's bucket size, the spec default; descriptions only mention other sizes."""

_ROUNDING_REL = 1e-9
"""Idle time below this fraction of the step is rounding in ``step - compute - exposed``."""

OVERRIDE_KNOBS = KNOBS
"""Knobs :func:`apply_overrides` understands (the table in :mod:`parplan.plan.knobs`)."""


# -- results ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CollectiveSummary:
    """The all-reduces of one group (e.g. all gradient buckets of a data-parallel step)."""

    label: str
    algorithm: str
    num_ranks: int
    count: int
    size_bytes: float
    time_s: float

    @property
    def algbw_Bps(self) -> float:
        """nccl-tests algorithm bandwidth: bytes / time."""
        return self.size_bytes / self.time_s if self.time_s > 0 else 0.0

    @property
    def busbw_Bps(self) -> float:
        """nccl-tests bus bandwidth: algbw x 2(p - 1)/p."""
        p = self.num_ranks
        return self.algbw_Bps * 2.0 * (p - 1) / p if p > 1 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly fields."""
        return {
            "label": self.label,
            "algorithm": self.algorithm,
            "num_ranks": self.num_ranks,
            "count": self.count,
            "size_bytes": self.size_bytes,
            "time_s": self.time_s,
            "algbw_Bps": self.algbw_Bps,
            "busbw_Bps": self.busbw_Bps,
        }


@dataclass(frozen=True)
class PlanResult:
    """What one plan costs per unit, and why (see the module docstring for how each figure is read)."""

    name: str
    strategy_kind: str
    description: str
    unit: str
    step_time_s: float
    compute_s: float
    exposed_comm_s: float
    hidden_comm_s: float
    idle_s: float
    bubble_fraction: float | None
    critical_device: str
    samples_per_step: float
    throughput_samples_per_s: float
    tokens_per_s: float | None
    units_per_run: int
    run_time_s: float
    memory: tuple[MemoryBreakdown, ...]
    peak_memory_bytes: float
    peak_memory_device: str
    fits: bool
    infeasible_reason: str | None
    busiest_link: str | None
    busiest_link_utilisation: float
    busiest_link_bytes: float
    collectives: tuple[CollectiveSummary, ...]
    bottleneck: str
    num_devices: int
    quality: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    work: PlanWork | None = field(default=None, repr=False, compare=False)
    sim: SimResult | None = field(default=None, repr=False, compare=False)

    @property
    def graph(self) -> TaskGraph | None:
        """The simulated task graph (for traces)."""
        return None if self.work is None else self.work.graph

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON/CSV reports (the timeline and task graph are left out)."""
        return {
            "name": self.name,
            "strategy": self.strategy_kind,
            "description": self.description,
            "unit": self.unit,
            "step_time_s": self.step_time_s,
            "compute_s": self.compute_s,
            "exposed_comm_s": self.exposed_comm_s,
            "hidden_comm_s": self.hidden_comm_s,
            "idle_s": self.idle_s,
            "bubble_fraction": self.bubble_fraction,
            "critical_device": self.critical_device,
            "samples_per_step": self.samples_per_step,
            "throughput_samples_per_s": self.throughput_samples_per_s,
            "tokens_per_s": self.tokens_per_s,
            "units_per_run": self.units_per_run,
            "run_time_s": self.run_time_s,
            "peak_memory_bytes": self.peak_memory_bytes,
            "peak_memory_device": self.peak_memory_device,
            "fits": self.fits,
            "infeasible_reason": self.infeasible_reason,
            "memory": [
                {
                    "device": m.device,
                    "capacity_bytes": m.capacity_bytes,
                    "total_bytes": m.total_bytes,
                    "params_bytes": m.params_bytes,
                    "grads_bytes": m.grads_bytes,
                    "optimizer_bytes": m.optimizer_bytes,
                    "activations_bytes": m.activations_bytes,
                    "buffers_bytes": m.buffers_bytes,
                    "fits": m.fits,
                    "shortfall_bytes": m.shortfall_bytes,
                }
                for m in self.memory
            ],
            "busiest_link": self.busiest_link,
            "busiest_link_utilisation": self.busiest_link_utilisation,
            "busiest_link_bytes": self.busiest_link_bytes,
            "collectives": [c.to_dict() for c in self.collectives],
            "bottleneck": self.bottleneck,
            "num_devices": self.num_devices,
            "quality": _jsonable(self.quality),
            "notes": list(self.notes),
        }


# -- entry points -------------------------------------------------------------------------------
def build_context(scenario: ScenarioSpec) -> PlanContext:
    """The network, model graph and training settings every plan of ``scenario`` is expanded against."""
    from parplan.model.graph import build_model
    from parplan.topology.build import build_network

    return PlanContext(
        network=build_network(scenario.cluster),
        model=build_model(scenario.model),
        model_spec=scenario.model,
        training=scenario.training,
    )


def evaluate_plan(ctx: PlanContext, plan: PlanSpec, *, overrides: dict[str, Any] | None = None) -> PlanResult:
    """Expand ``plan`` (with ``overrides`` applied), simulate one unit and read off its figures.

    A plan that does not fit in memory is still timed; its result has ``fits=False`` and says why.
    Raises :class:`PlanError` (or a subclass) when the plan cannot be expanded at all.
    """
    from parplan.engine.simulate import simulate
    from parplan.plan.strategies import expand

    strategy = apply_overrides(plan.strategy, overrides) if overrides else plan.strategy
    work = expand(ctx, strategy)
    sim = simulate(work.graph, ctx.network)
    return summarize(ctx, plan.name, strategy, work, sim)


def evaluate_scenario(scenario: ScenarioSpec, *, overrides: dict[str, Any] | None = None) -> list[PlanResult]:
    """Every plan of ``scenario``, in file order (``overrides`` apply to each plan they fit)."""
    ctx = build_context(scenario)
    return [evaluate_plan(ctx, plan, overrides=overrides) for plan in scenario.plans]


def apply_overrides(strategy: Any, overrides: dict[str, Any]) -> Any:
    """A copy of ``strategy`` with command-line knobs applied and re-validated.

    Knobs (:data:`OVERRIDE_KNOBS`): ``algorithm`` ("ring", "tree:4", ...), ``num_replicas``,
    ``bucket_size`` ("25MiB"), ``overlap``, ``batch_split``, ``reduce`` for data-parallel plans;
    ``microbatches`` and ``schedule`` for model-parallel plans and the replica of 2-D plans (setting
    ``microbatches`` turns the pipeline protocol on); ``num_clients``, ``rounds``, ``local_steps``
    (federated); ``population_size``, ``generations`` (population-based). A knob that does not apply
    to the strategy's kind is skipped; an unknown knob is a :class:`PlanError`, and a bad value a
    :class:`ConfigError` naming the knob.
    """
    unknown = sorted(set(overrides) - set(OVERRIDE_KNOBS))
    if unknown:
        raise PlanError(f"unknown override {', '.join(unknown)}; valid: {', '.join(OVERRIDE_KNOBS)}")
    data: dict[str, Any] = strategy.model_dump(by_alias=True, exclude_none=True)
    kind = strategy.kind
    changed = False
    for knob, value in overrides.items():
        if kind not in OVERRIDE_KNOBS[knob]:
            continue
        if knob in {"microbatches", "schedule"}:
            target = data
            if kind == "data_parallel":
                if "replica" not in data:
                    continue
                target = data["replica"]
            comm = target.setdefault("communication", {})
            comm[knob] = value
            if knob == "microbatches":
                comm["protocol"] = "pipeline"
        elif knob in {"algorithm", "bucket_size", "overlap", "reduce"}:
            data.setdefault("aggregation", {})[knob] = value
        else:
            data[knob] = value
        changed = True
    if not changed:
        return strategy
    try:
        return type(strategy).model_validate(data)
    except ValidationError as exc:
        issues = [
            Issue(path="overrides", field=".".join(str(x) for x in e["loc"]), message=str(e["msg"]))
            for e in exc.errors()
        ]
        raise ConfigError(issues) from None


def describe_strategy(strategy: Any) -> str:
    """A short description for tables: ``data_parallel ×8 ring``, ``model_parallel 4 stages, 8 mb 1f1b``.

    Data-parallel descriptions add the bucket size when it is not the default 25 MiB, and
    ``no overlap`` / ``by speed`` when set.
    """
    kind = strategy.kind
    if kind == "local":
        return f"local on {strategy.device}" if strategy.device else "local"
    if kind == "model_parallel":
        return f"model_parallel {_pipeline_text(strategy)}"
    if kind == "data_parallel":
        agg = strategy.aggregation
        text = f"data_parallel ×{strategy.num_replicas} {algorithm_label(agg.algorithm)}"
        if strategy.replica is not None:
            text += f" of {_pipeline_text(strategy.replica)}"
        if strategy.num_replicas > 1:
            if agg.bucket_size_bytes != DEFAULT_BUCKET_BYTES:
                text += f", {format_bytes(agg.bucket_size_bytes)} buckets"
            if not agg.overlap:
                text += ", no overlap"
        if strategy.batch_split == "by_speed":
            text += ", by speed"
        return text
    if kind == "federated":
        sel = strategy.client_selection
        chosen = "all" if sel.kind == "all" else f"{sel.kind} {sel.k}"
        return f"federated {strategy.num_clients} clients, {chosen}, {strategy.rounds} round(s)"
    if kind == "population_based":
        return (
            f"population_based {strategy.population_size} members, {strategy.generations} generation(s), "
            f"{strategy.exploit.kind}/{strategy.explore.kind}"
        )
    if kind == "custom":
        return f"custom {strategy.coordinator}"
    return str(kind)


def _pipeline_text(strategy: Any) -> str:
    count = len(dict.fromkeys(p.worker for p in strategy.partitions))
    stages = f"{count} stage" + ("s" if count != 1 else "")
    comm = strategy.communication
    if comm.protocol == "none":
        return f"{stages}, no micro-batches"
    return f"{stages}, {comm.microbatches} mb {comm.schedule}"


# -- reading the timeline -----------------------------------------------------------------------
def summarize(ctx: PlanContext, name: str, strategy: Any, work: PlanWork, sim: SimResult) -> PlanResult:
    """Condense a simulated :class:`PlanWork` into a :class:`PlanResult`."""
    g = work.graph
    step = float(sim.makespan_s)
    split = time_split(g, sim)
    bubble = bubble_fraction(g, sim) if "microbatches" in g.meta else None
    samples = float(work.samples_per_unit)
    throughput = samples / step if step > 0 else 0.0
    seq = ctx.training.sequence_length or ctx.model.sequence_length
    tokens = throughput * seq if seq else None
    units = ctx.training.steps if work.unit == "step" else work.units_per_run
    run_time = float(g.meta["run_time_s"]) if "run_time_s" in g.meta else step * units  # type: ignore[arg-type]
    memory = work.memory
    peak = max(memory, key=lambda m: m.total_bytes) if memory else None
    reason = infeasible_message(memory)
    channel = sim.busiest_channel()
    collectives = summarize_collectives(work, g, sim)
    result = PlanResult(
        name=name,
        strategy_kind=str(strategy.kind),
        description=describe_strategy(strategy),
        unit=work.unit,
        step_time_s=step,
        compute_s=split.compute_s,
        exposed_comm_s=split.exposed_comm_s,
        hidden_comm_s=split.hidden_comm_s,
        idle_s=split.idle_s,
        bubble_fraction=bubble,
        critical_device=split.device,
        samples_per_step=samples,
        throughput_samples_per_s=throughput,
        tokens_per_s=tokens,
        units_per_run=units,
        run_time_s=run_time,
        memory=memory,
        peak_memory_bytes=peak.total_bytes if peak else 0.0,
        peak_memory_device=peak.device if peak else "",
        fits=reason is None,
        infeasible_reason=reason,
        busiest_link=channel.name if channel else None,
        busiest_link_utilisation=channel.utilisation if channel else 0.0,
        busiest_link_bytes=channel.bytes if channel else 0.0,
        collectives=collectives,
        bottleneck="",
        num_devices=len(work.devices),
        quality=dict(work.quality),
        notes=work.notes,
        work=work,
        sim=sim,
    )
    return _with_bottleneck(result)


@dataclass(frozen=True)
class TimeSplit:
    """The critical device and how its step divides into compute, exposed communication and idle."""

    device: str
    compute_s: float
    exposed_comm_s: float
    idle_s: float
    hidden_comm_s: float


def time_split(g: TaskGraph, sim: SimResult) -> TimeSplit:
    """Split the step on the critical device (rules in the module docstring)."""
    step = float(sim.makespan_s)
    start, end = sim.start_s, sim.end_s
    is_compute = g.kind == COMPUTE
    is_transfer = (g.kind == TRANSFER) & (end > start)
    transfer_iv = _union(start[is_transfer], end[is_transfer])
    if not is_compute.any():
        exposed = _measure(_clip(transfer_iv, 0.0, step))
        return TimeSplit(
            device=g.devices[0] if g.devices else "",
            compute_s=0.0,
            exposed_comm_s=exposed,
            idle_s=max(0.0, step - exposed),
            hidden_comm_s=0.0,
        )
    busy = np.zeros(len(g.devices))
    last_end = np.full(len(g.devices), -np.inf)
    cdev = g.device[is_compute]
    np.add.at(busy, cdev, end[is_compute] - start[is_compute])
    np.maximum.at(last_end, cdev, end[is_compute])
    has = np.zeros(len(g.devices), dtype=bool)
    has[cdev] = True
    candidates = np.flatnonzero(has)
    top = busy[candidates].max()
    near = candidates[busy[candidates] >= top * (1 - 1e-9) - 1e-15]
    dev = int(near[np.argmax(last_end[near])])
    tasks = np.flatnonzero(is_compute & (g.device == dev))
    tasks = tasks[np.lexsort((tasks, start[tasks]))]
    compute_iv = np.stack([start[tasks], end[tasks]], axis=1)
    compute = float(np.sum(end[tasks] - start[tasks]))
    exposed = 0.0
    cursor = 0.0
    for t in tasks:
        if float(start[t]) > cursor:
            exposed += _critical_comm(g, sim, int(t), cursor, float(start[t]))
        cursor = max(cursor, float(end[t]))
    if step > cursor:
        sink = int(np.flatnonzero(end >= step)[0])
        exposed += _critical_comm(g, sim, sink, cursor, step, include_self=True)
    hidden = _overlap(transfer_iv, compute_iv)
    idle = step - compute - exposed
    if idle < _ROUNDING_REL * step:  # what is left is float rounding of the sums, not idle time
        idle = 0.0
    return TimeSplit(
        device=g.devices[dev], compute_s=compute, exposed_comm_s=exposed, idle_s=idle, hidden_comm_s=hidden
    )


def _critical_comm(
    g: TaskGraph, sim: SimResult, task: int, lo: float, hi: float, *, include_self: bool = False
) -> float:
    """Seconds of communication on the chain of tasks that held ``task`` up, within ``[lo, hi]``.

    From ``task`` walk back through the dependency that finished last (the one it waited for), then
    that task's, and so on, until the chain reaches ``lo``. Along the chain, transfer intervals are
    communication; compute intervals and waits for a busy stream are other devices' work (idle for
    the device being explained). ``include_self`` counts ``task``'s own interval too (for the sink of
    the step, which ends the window).
    """
    start, end, kind = sim.start_s, sim.end_s, g.kind
    offsets, indices = g.dep_offsets, g.dep_indices
    comm = 0.0
    if include_self and kind[task] == TRANSFER:
        comm += max(0.0, min(float(end[task]), hi) - max(float(start[task]), lo))
    x = task
    t_cur = float(start[x])
    while t_cur > lo:
        deps = indices[offsets[x] : offsets[x + 1]]
        if len(deps) == 0:
            break
        ends = end[deps]
        best = int(deps[int(np.argmax(ends))])
        if float(end[best]) <= lo:
            break
        if kind[best] == TRANSFER:
            comm += max(0.0, min(float(end[best]), hi, t_cur) - max(float(start[best]), lo))
        x = best
        t_cur = min(t_cur, float(start[x]))
    return comm


def bubble_fraction(g: TaskGraph, sim: SimResult) -> float | None:
    """Idle share of the pipeline span on the devices running forward/backward (module docstring)."""
    cats = [i for i, c in enumerate(g.categories) if c in ("forward", "backward")]
    mask = (g.kind == COMPUTE) & np.isin(g.category, cats)
    if not mask.any():
        return None
    start, end = sim.start_s[mask], sim.end_s[mask]
    span = float(end.max() - start.min())
    if span <= 0:
        return 0.0
    devs = g.device[mask]
    busy = np.bincount(devs, weights=end - start)
    used = np.unique(devs)
    return float(max(0.0, 1.0 - busy[used].mean() / span))


def summarize_collectives(work: PlanWork, g: TaskGraph, sim: SimResult) -> tuple[CollectiveSummary, ...]:
    """All-reduces grouped by label prefix (``"allreduce n0.d3 bucket4"`` -> ``"allreduce n0.d3"``)."""
    groups: dict[str, list[Any]] = {}
    for info in work.collectives:
        groups.setdefault(info.label.rsplit(" bucket", 1)[0], []).append(info)
    out = []
    for label, infos in groups.items():
        idx = np.concatenate([np.arange(i.first_task, i.last_task) for i in infos])
        tr = idx[g.kind[idx] == TRANSFER]
        starts, ends = sim.start_s[tr], sim.end_s[tr]
        out.append(
            CollectiveSummary(
                label=label,
                algorithm=infos[0].algorithm,
                num_ranks=infos[0].num_ranks,
                count=len(infos),
                size_bytes=float(sum(i.size_bytes for i in infos)),
                time_s=_measure(_union(starts, ends)),
            )
        )
    return tuple(out)


def _with_bottleneck(r: PlanResult) -> PlanResult:
    from dataclasses import replace

    return replace(r, bottleneck=bottleneck_text(r))


def bottleneck_text(r: PlanResult) -> str:
    """One line saying what bounds the step: memory, compute on a device, a link, or the bubble."""
    if not r.fits:
        worst = max((m for m in r.memory if not m.fits), key=lambda m: m.shortfall_bytes)

        def _gib(size_bytes: float) -> str:
            return human_bytes(size_bytes, unit="GiB", precision="short")

        return (
            f"memory on {worst.device}: needs {_gib(worst.total_bytes)} of {_gib(worst.capacity_bytes)}, "
            f"short by {_gib(worst.shortfall_bytes)}"
        )
    step = r.step_time_s
    if step <= 0:
        return "nothing to do"
    parts = {"compute": r.compute_s, "comm": r.exposed_comm_s, "idle": r.idle_s}
    kind = max(parts, key=lambda k: parts[k])
    share = parts[kind] / step
    if kind == "compute":
        return f"compute on {r.critical_device} ({share:.0%} of the {r.unit})"
    if kind == "comm":
        if r.busiest_link:
            return (
                f"communication: link {r.busiest_link} ({r.busiest_link_utilisation:.0%} busy), "
                f"{share:.0%} of the {r.unit} exposed on {r.critical_device}"
            )
        return f"communication latency ({share:.0%} of the {r.unit} exposed on {r.critical_device})"
    if r.bubble_fraction is not None:
        return (
            f"the pipeline bubble ({r.bubble_fraction:.0%} of the pipeline idle; "
            f"{share:.0%} of the {r.unit} on {r.critical_device})"
        )
    return f"waiting for other devices ({share:.0%} of the {r.unit} idle on {r.critical_device})"


# -- interval helpers ---------------------------------------------------------------------------
def _union(starts: FloatArray, ends: FloatArray) -> FloatArray:
    """Disjoint sorted intervals covering ``[starts[i], ends[i])``, as an (k, 2) array."""
    if len(starts) == 0:
        return np.zeros((0, 2))
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    running = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > running[:-1]
    idx = np.flatnonzero(new)
    merged_end = np.maximum.reduceat(e, idx)
    return np.stack([s[idx], merged_end], axis=1)


def _clip(iv: FloatArray, lo: float, hi: float) -> FloatArray:
    if len(iv) == 0:
        return iv
    out = np.stack([np.maximum(iv[:, 0], lo), np.minimum(iv[:, 1], hi)], axis=1)
    return out[out[:, 1] > out[:, 0]]


def _measure(iv: FloatArray) -> float:
    return float(np.sum(iv[:, 1] - iv[:, 0])) if len(iv) else 0.0


def _overlap(a: FloatArray, b: FloatArray) -> float:
    """Total length of the intersection of two sets of disjoint sorted intervals."""
    if len(a) == 0 or len(b) == 0:
        return 0.0
    total = 0.0
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i, 0], b[j, 0])
        hi = min(a[i, 1], b[j, 1])
        if hi > lo:
            total += hi - lo
        if a[i, 1] < b[j, 1]:
            i += 1
        else:
            j += 1
    return float(total)


def _jsonable(value: Any) -> Any:
    """Numpy scalars and arrays, tuples and nested containers turned into plain JSON types."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value
