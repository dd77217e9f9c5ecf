"""What a pipeline schedule is: the interface every schedule module implements.

A pipeline runs ``m`` micro-batches through ``s`` stages (workers). A *unit* is one micro-batch's
forward (``"F"``) or backward (``"B"``) pass over everything one stage runs, or, when a stage holds
``v`` model chunks (:attr:`Stage.virtual_stages`, interleaved schedules), over one of its chunks
(:attr:`Unit.chunk`; always 0 with one chunk per stage). A schedule answers, for one stage, every
question the plan builder and the memory model ask:

- :meth:`PipelineSchedule.worker_order`: the order of units on the stage's compute stream (the plan
  builder turns positions in it into task priorities, so ready tasks run in this order);
- :meth:`PipelineSchedule.inflight_microbatches`: the most units whose forward has run and
  whose backward has not (the activations the stage holds at its peak, in micro-batches of one
  chunk); it must equal :func:`peak_inflight` of the order, which is also the default;
- the ordering rules that make the order hold whatever the timing: :meth:`PipelineSchedule.waits_for`
  (units on the same stage a unit must wait for, e.g. 1F1B's "forward ``j`` waits for backward
  ``j - warmup``") and :attr:`PipelineSchedule.backward_waits_for_forwards` (GPipe's barrier: every
  backward on a stage waits for every forward on it);
- :meth:`PipelineSchedule.build_order`: the order the plan builder appends micro-batches' work, in
  which every unit a rule names is built before the unit that waits for it.

Rules may only make a unit wait for units of earlier (or the same) micro-batches' backwards or for a
barrier over forwards, so they cannot deadlock against the data dependencies on any model DAG.
(Interleaved 1F1B's forwards wait for backwards of strictly earlier micro-batches only.)

A new schedule is one more module subclassing :class:`PipelineSchedule` and one line in
:mod:`parplan.pipeline.registry`.

>>> peak_inflight([Unit("F", 0), Unit("F", 1), Unit("B", 0), Unit("B", 1)])
2
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar, Literal, NamedTuple

from parplan.errors import PlanError

Direction = Literal["F", "B"]


class Unit(NamedTuple):
    """One micro-batch's forward (``"F"``) or backward (``"B"``) pass over a stage's work, or over
    its model chunk ``chunk`` when the stage holds several (interleaved schedules)."""

    direction: Direction
    microbatch: int
    chunk: int = 0

    def __repr__(self) -> str:
        """``Unit(direction='F', microbatch=3)``, naming the chunk only when it is not 0."""
        chunk = f", chunk={self.chunk}" if self.chunk else ""
        return f"Unit(direction={self.direction!r}, microbatch={self.microbatch}{chunk})"


@dataclass(frozen=True)
class Stage:
    """Where one stage sits: its index (0 runs the model's first nodes), of ``num_stages``, with
    ``microbatches`` micro-batches per step and ``virtual_stages`` model chunks (chunk ``c`` of
    stage ``i`` is the model's chunk ``c x num_stages + i``, Megatron's interleaving). Everything a
    schedule needs to order its stream."""

    index: int
    num_stages: int
    microbatches: int
    virtual_stages: int = 1


def forwards_then_backwards(microbatches: int) -> tuple[Unit, ...]:
    """Every forward in micro-batch order, then every backward in micro-batch order."""
    return tuple(Unit("F", j) for j in range(microbatches)) + tuple(Unit("B", j) for j in range(microbatches))


def peak_inflight(order: Iterable[Unit]) -> int:
    """The most units (micro-batches of one chunk) whose forward has come and whose backward has
    not, along ``order``."""
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

    interleaved: ClassVar[bool] = False
    """Whether the schedule runs several model chunks per stage (``Stage.virtual_stages > 1``);
    the others order one chunk per stage and a plan must not give them more."""

    backward_waits_for_forwards: ClassVar[bool] = False
    """Whether every backward on a stage waits for every forward on that stage (a barrier)."""

    @abstractmethod
    def worker_order(self, stage: Stage) -> tuple[Unit, ...]:
        """The units of ``stage`` in the order its compute stream runs them; each (direction,
        micro-batch, chunk) exactly once, each backward after its forward. Schedules without
        chunks see ``virtual_stages == 1`` and name chunk 0."""

    def inflight_microbatches(self, stage: Stage) -> int:
        """Units whose activations ``stage`` holds at its peak (the peak of its order); with
        ``v`` chunks a unit holds one chunk's activations, ``1 / v`` of the stage's."""
        return peak_inflight(self.worker_order(stage))

    def waits_for(self, unit: Unit, stage: Stage) -> tuple[Unit, ...]:
        """Units of the same stage that must finish before ``unit`` starts (none by default)."""
        return ()

    def build_order(
        self, microbatches: int, virtual_stages: int = 1, num_stages: int = 1
    ) -> tuple[Unit, ...]:
        """The order the plan builder appends units' work (of all ``num_stages`` stages at once;
        with ``virtual_stages`` chunks per stage, a unit names a chunk).

        Every unit a rule waits for comes before the unit waiting; with the barrier, every forward
        comes before the first backward. Default: all forwards then all backwards with the barrier,
        else micro-batch by micro-batch (forward, then backward). Schedules with chunks override it.
        """
        if virtual_stages != 1:
            raise PlanError(
                f"pipeline schedule {self.name!r} has one model chunk per stage, not {virtual_stages}"
            )
        if self.backward_waits_for_forwards:
            return forwards_then_backwards(microbatches)
        return tuple(Unit(d, j) for j in range(microbatches) for d in ("F", "B"))
