"""What every strategy expander receives and returns.

An expander turns one strategy into :class:`PlanWork`: a task graph for one step (or round, or
generation) plus what the evaluator needs to turn the simulated timeline into figures: which tasks
are the step's compute, how many samples a step processes, the memory each device holds, and any
quality figures computed alongside (federated loss per round, PBT best score per generation).
Expanders are registered by strategy ``kind`` in :mod:`parplan.plan.strategies`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from parplan.config.model import ModelSpec
    from parplan.config.scenario import TrainingSpec
    from parplan.model.graph import ModelGraph
    from parplan.taskgraph import TaskGraph
    from parplan.topology.network import Network


Simulator = Callable[["TaskGraph", "Network"], float]
"""Seconds a task graph takes on a network. Plans whose units differ (federated rounds, PBT
generations) time each unit with it; the engine is passed in by :mod:`parplan.api`, since plan sits
below the engine and may not import it."""


@dataclass(frozen=True)
class PlanContext:
    """The fixed inputs of a scenario that every plan is expanded against (and the simulator)."""

    network: Network
    model: ModelGraph
    model_spec: ModelSpec
    training: TrainingSpec
    simulator: Simulator | None = None

    @property
    def seed(self) -> int:
        """Seed for every random choice a plan makes (selection, jitter, PBT)."""
        return self.training.seed

    @property
    def sequence_length(self) -> int | None:
        """Tokens per sample: the scenario's ``training.sequence_length``, else the model's (None:
        the model has no sequence, e.g. an MLP)."""
        return self.training.sequence_length or self.model.sequence_length


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes one device holds at its peak during a step, by kind."""

    device: str
    capacity_bytes: float
    params_bytes: float = 0.0
    grads_bytes: float = 0.0
    optimizer_bytes: float = 0.0
    activations_bytes: float = 0.0
    buffers_bytes: float = 0.0

    @property
    def total_bytes(self) -> float:
        """Everything held at the peak."""
        states = self.params_bytes + self.grads_bytes + self.optimizer_bytes
        return states + self.activations_bytes + self.buffers_bytes

    @property
    def fits(self) -> bool:
        """Whether the peak fits in the device's memory."""
        return self.total_bytes <= self.capacity_bytes

    @property
    def shortfall_bytes(self) -> float:
        """How much more memory the device would need (0 when it fits)."""
        return max(0.0, self.total_bytes - self.capacity_bytes)


@dataclass(frozen=True)
class PlanWork:
    """One strategy expanded: the task graph of one step and how to read its timeline.

    ``unit`` names what one simulated graph is ("step", "round" or "generation");
    ``samples_per_unit`` is how many training samples it processes (for throughput);
    ``collectives`` lists (label, size_bytes, num_ranks, task ids) of the all-reduces in the graph
    so algbw/busbw can be reported; ``quality`` holds per-round or per-generation figures.
    """

    graph: TaskGraph
    devices: tuple[str, ...]
    unit: str
    samples_per_unit: float
    memory: tuple[MemoryBreakdown, ...]
    collectives: tuple[CollectiveInfo, ...] = ()
    units_per_run: int = 1
    quality: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class CollectiveInfo:
    """An all-reduce inside a plan: what it moved, among how many ranks, and which tasks it is."""

    label: str
    algorithm: str
    size_bytes: float
    num_ranks: int
    first_task: int
    last_task: int  # exclusive


class Expander(Protocol):
    """Turns a strategy of one kind into the work of one step."""

    def __call__(self, ctx: PlanContext, strategy: Any) -> PlanWork: ...
