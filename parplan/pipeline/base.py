"""What a pipeline schedule is: the interface every schedule module implements.

A pipeline runs ``m`` micro-batches through ``s`` stages (workers). A *unit* is one micro-batch's
forward (``"F"``) or backward (``"B"``) pass over everything one stage runs. A schedule answers,
for one stage, every question the plan builder and the memory model ask:

- :meth:`PipelineSchedule.worker_order`: the order of units on the stage's compute stream (the plan
  builder turns positions in it into task priorities, so ready tasks run in this order);
- :meth:`PipelineSchedule.inflight_microbatches`: the most micro-batches whose forward has run and
  whose backward has not (the activations the stage holds at its peak); it must equal
  :func:`peak_inflight` of the order, which is also the default;
- the ordering rules that make the order hold whatever the timing: :meth:`PipelineSchedule.waits_for`
  (units on the same stage a unit must wait for, e.g. 1F1B's "forward ``j`` waits for backward
  ``j - warmup``") and :attr:`PipelineSchedule.backward_waits_for_forwards` (GPipe's barrier: every
  backward on a stage waits for every forward on it);
- :meth:`PipelineSchedule.build_order`: the order the plan builder appends micro-batches' work, in
  which every unit a rule names is built before the unit that waits for it.

Rules may only make a unit wait for units of earlier (or the same) micro-batches' backwards or for a
barrier over forwards, so they cannot deadlock against the data dependencies on any model DAG.

A new schedule (e.g. interleaved 1F1B, whose units would also name a model chunk) is one more module
subclassing :class:`PipelineSchedule` and one line in :mod:`parplan.pipeline.registry`.

>>> peak_inflight([Unit("F", 0), Unit("F", 1), Unit("B", 0), Unit("B", 1)])
2
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar, Literal, NamedTuple

Direction = Literal["F", "B"]


class Unit(NamedTuple):
    """One micro-batch's forward (``"F"``) or backward (``"B"``) pass over a stage's work."""

    direction: Direction
    microbatch: int


@dataclass(frozen=True)
class Stage:
    """Where one stage sits: its index (0 runs the model's first nodes), of ``num_stages``, with
    ``microbatches`` micro-batches per step. Everything a schedule needs to order its stream."""

    index: int
    num_stages: int
    microbatches: int


def forwards_then_backwards(microbatches: int) -> tuple[Unit, ...]:
    """Every forward in micro-batch order, then every backward in micro-batch order."""
    return tuple(Unit("F", j) for j in range(microbatches)) + tuple(Unit("B", j) for j in range(microbatches))


def peak_inflight(order: Iterable[Unit]) -> int:
    """The most micro-batches whose forward has come and whose backward has not, along ``order``."""
    held = peak = 0
    for unit in order:
        held += 1 if unit.direction == "F" else -1
        peak = max(peak, held)
    return peak


class PipelineSchedule(ABC):
    """A pipeline schedule: the order of units on each stage, the memory it implies, its rules.

    Subclasses set :attr:`name` (the name files use) and implement :meth:`worker_order`; they
    override :meth:`inflight_microbatches` with a closed form, :meth:`waits_for` and
    :attr:`backward_waits_for_forwards` with their ordering rules, and :meth:`build_order` when
    micro-batch-major building would build a waited-for unit too late.
    """

    name: ClassVar[str]
    """The name strategy files use (``communication.schedule``)."""

    backward_waits_for_forwards: ClassVar[bool] = False
    """Whether every backward on a stage waits for every forward on that stage (a barrier)."""

    @abstractmethod
    def worker_order(self, stage: Stage) -> tuple[Unit, ...]:
        """The units of ``stage`` in the order its compute stream runs them; each (direction,
        micro-batch) exactly once, each backward after its forward."""

    def inflight_microbatches(self, stage: Stage) -> int:
        """Micro-batches whose activations ``stage`` holds at its peak (the peak of its order)."""
        return peak_inflight(self.worker_order(stage))

    def waits_for(self, unit: Unit, stage: Stage) -> tuple[Unit, ...]:
        """Units of the same stage that must finish before ``unit`` starts (none by default)."""
        return ()

    def build_order(self, microbatches: int) -> tuple[Unit, ...]:
        """The order the plan builder appends units' work (of all stages at once).

        Every unit a rule waits for comes before the unit waiting; with the barrier, every forward
        comes before the first backward. Default: all forwards then all backwards with the barrier,
        else micro-batch by micro-batch (forward, then backward).
        """
        if self.backward_waits_for_forwards:
            return forwards_then_backwards(microbatches)
        return tuple(Unit(d, j) for j in range(microbatches) for d in ("F", "B"))
