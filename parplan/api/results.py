"""What evaluating a plan gives: :class:`PlanResult`, its all-reduce summaries, and the one rule that
says what bounds a plan.

These are the types the commands hand to :mod:`parplan.report` (which sits above this layer and
imports them). How each figure is read off the timeline is documented in
:mod:`parplan.api.timeline`.

What bounds a plan (:func:`bound_of`) is decided once, here, and written two ways: the full line of
``simulate`` (:func:`bottleneck_text`, stored in :attr:`PlanResult.bottleneck`) and the few words of
the comparison table (:func:`parplan.report.tables.short_bound`). The rule: a plan that does not fit
in memory is bound by memory (the device short by most); otherwise by the largest of compute,
exposed communication and idle time on the critical device: communication names the busiest link
when there is one (else it is latency), idle time is the pipeline bubble in a pipeline (else
waiting for other devices).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from parplan.config.units import human_bytes
from parplan.plan.base import MemoryBreakdown, PlanWork

if TYPE_CHECKING:
    from parplan.engine.result import SimResult
    from parplan.taskgraph import TaskGraph


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
    """What one plan costs per unit, and why (:mod:`parplan.api.timeline` says how each figure is read)."""

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
            "memory": [_memory_dict(m) for m in self.memory],
            "busiest_link": self.busiest_link,
            "busiest_link_utilisation": self.busiest_link_utilisation,
            "busiest_link_bytes": self.busiest_link_bytes,
            "collectives": [c.to_dict() for c in self.collectives],
            "bottleneck": self.bottleneck,
            "num_devices": self.num_devices,
            "quality": _jsonable(self.quality),
            "notes": list(self.notes),
        }


def _memory_dict(m: MemoryBreakdown) -> dict[str, Any]:
    return {
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


# -- what bounds a plan -------------------------------------------------------------------------
BoundKind = Literal["memory", "compute", "link", "latency", "bubble", "waiting"]


@dataclass(frozen=True)
class Bound:
    """What bounds a plan's unit (the rule in the module docstring).

    ``share`` is the fraction of the unit time the bounding part takes on the critical device (0
    for memory, and when the unit takes no time); ``worst`` is, for memory, the device short by
    most (None if the result lists no device short of memory) and ``short_devices`` how many are.
    """

    kind: BoundKind
    share: float = 0.0
    worst: MemoryBreakdown | None = None
    short_devices: int = 0


def bound_of(r: PlanResult) -> Bound:
    """What bounds ``r`` (memory first; otherwise the largest part of its unit)."""
    if not r.fits:
        short = [m for m in r.memory if not m.fits]
        worst = max(short, key=lambda m: m.shortfall_bytes, default=None)
        return Bound("memory", worst=worst, short_devices=len(short))
    parts = {"compute": r.compute_s, "comm": r.exposed_comm_s, "idle": r.idle_s}
    part = max(parts, key=lambda k: parts[k])
    share = parts[part] / r.step_time_s if r.step_time_s > 0 else 0.0
    kind: BoundKind
    if part == "compute":
        kind = "compute"
    elif part == "comm":
        kind = "link" if r.busiest_link else "latency"
    else:
        kind = "bubble" if r.bubble_fraction is not None else "waiting"
    return Bound(kind, share)


def bottleneck_text(r: PlanResult) -> str:
    """One line saying what bounds the step: memory, compute on a device, a link, or the bubble."""
    bound = bound_of(r)
    if bound.kind == "memory":
        worst = bound.worst
        if worst is None:
            return r.infeasible_reason or "does not fit"
        return (
            f"memory on {worst.device}: needs {_gib(worst.total_bytes)} of {_gib(worst.capacity_bytes)}, "
            f"short by {_gib(worst.shortfall_bytes)}"
        )
    if r.step_time_s <= 0:
        return "nothing to do"
    share, unit, dev = bound.share, r.unit, r.critical_device
    if bound.kind == "compute":
        return f"compute on {dev} ({share:.0%} of the {unit})"
    if bound.kind == "link":
        return (
            f"communication: link {r.busiest_link} ({r.busiest_link_utilisation:.0%} busy), "
            f"{share:.0%} of the {unit} exposed on {dev}"
        )
    if bound.kind == "latency":
        return f"communication latency ({share:.0%} of the {unit} exposed on {dev})"
    if bound.kind == "bubble":
        return (
            f"the pipeline bubble ({r.bubble_fraction:.0%} of the pipeline idle; "
            f"{share:.0%} of the {unit} on {dev})"
        )
    return f"waiting for other devices ({share:.0%} of the {unit} idle on {dev})"


def _gib(size_bytes: float) -> str:
    return human_bytes(size_bytes, unit="GiB", precision="short")
