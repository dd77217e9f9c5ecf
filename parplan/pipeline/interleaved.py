"""Interleaved 1F1B (Narayanan et al., 2021): each stage holds ``v`` model chunks; units name one.

Stage ``i`` of ``p`` holds chunks ``c x p + i`` (``c = 0 .. v-1``) of the model's ``v x p``, so a
micro-batch crosses every stage ``v`` times and the pipeline fills and drains ``v`` times faster:
the bubble falls from ``(p-1)/m`` to ``(p-1)/(v m)`` of the ideal step, at the price of ``v``
times the point-to-point messages and more activations held on the early stages.

The order is Megatron-LM's (``forward_backward_pipelining_with_interleaving``):

- *The unit table.* Micro-batches go in groups of ``p``; within a group, chunk 0 of each of its
  micro-batches, then chunk 1, ... With ``v > 1``, ``m`` must be a multiple of ``p``
  (:func:`check_shape`). The ``k``-th forward runs table entry ``k``; the ``k``-th backward
  runs entry ``k`` with the chunk mirrored (``v - 1 - c``: the backward pass goes through the
  chunks in reverse).
- *Warm-up.* ``w = 2 (p - i - 1) + (v - 1) p`` forwards (all ``m v`` if that many or more),
  then forward ``w + j`` and backward ``j`` alternately, then the remaining backwards. With one
  chunk (``v = 1``) this is plain 1F1B (``w = p - i - 1``), whose order it then equals.
- *In flight.* ``min(m v, w + 1)`` chunk activations at the peak (one chunk is ``1 / v`` of the
  stage's layers): stage 0 of ``p = 4, v = 2`` holds 11 chunks, 5.5 micro-batches' worth against
  1F1B's 4.
- *The rule.* Forward ``k`` waits for backward ``k - w - 1`` on the same stage (always of an earlier
  micro-batch), which holds the order's memory bound whatever the timing.

>>> s = Stage(index=1, num_stages=2, microbatches=4, virtual_stages=2)
>>> " ".join(f"{d}{j}.{c}" for d, j, c in Interleaved1F1B().worker_order(s))
'F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0'
"""

from __future__ import annotations

from parplan.errors import PlanError
from parplan.pipeline.base import PipelineSchedule, Stage, Unit


def unit_table(microbatches: int, virtual_stages: int, group: int) -> tuple[tuple[int, int], ...]:
    """``(micro-batch, chunk)`` of the ``k``-th forward, for every ``k``: groups of ``group``
    micro-batches, chunk-major inside a group (Megatron's schedule table).

    >>> unit_table(3, 2, 2)
    ((0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1))
    """
    table: list[tuple[int, int]] = []
    for first in range(0, microbatches, group):
        members = range(first, min(first + group, microbatches))
        table.extend((j, c) for c in range(virtual_stages) for j in members)
    return tuple(table)


def warmup_units(stage: Stage) -> int:
    """Megatron's warm-up forwards: ``2 (p - i - 1) + (v - 1) p`` with chunks, ``p - i - 1``
    without, at most every unit (``m v``)."""
    p, i, v = stage.num_stages, stage.index, stage.virtual_stages
    w = p - i - 1 if v == 1 else 2 * (p - i - 1) + (v - 1) * p
    return min(w, stage.microbatches * v)


def _forward(stage: Stage, k: int) -> Unit:
    j, c = unit_table(stage.microbatches, stage.virtual_stages, stage.num_stages)[k]
    return Unit("F", j, c)


def check_shape(stage: Stage) -> None:
    """A :class:`PlanError` unless the shape runs: with ``v > 1`` chunks, ``m`` must be a multiple
    of ``p`` (Megatron-LM's requirement; with a last group of fewer than ``p`` micro-batches, its
    order deadlocks against the chunks' data dependencies, e.g. ``p = 5, v = 2, m = 7``)."""
    p, v, m = stage.num_stages, stage.virtual_stages, stage.microbatches
    if v < 1 or m < 1:
        raise PlanError(f"interleaved 1F1B needs >= 1 chunk and micro-batch, got {v} and {m}")
    if v > 1 and m % p:
        raise PlanError(
            f"interleaved 1F1B with {v} chunks per stage needs micro-batches a multiple of the "
            f"{p} pipeline stages, got {m}"
        )


class Interleaved1F1B(PipelineSchedule):
    """1F1B over ``v`` model chunks per stage, in Megatron-LM's order (Narayanan et al., 2021)."""

    name = "interleaved_1f1b"
    interleaved = True

    def worker_order(self, stage: Stage) -> tuple[Unit, ...]:
        """``w`` warm-up forwards, then forward ``w + j`` and backward ``j`` alternately, then the
        last backwards; the ``k``-th forward and backward as :func:`unit_table` says."""
        check_shape(stage)
        v = stage.virtual_stages
        table = unit_table(stage.microbatches, v, stage.num_stages)
        forwards = [Unit("F", j, c) for j, c in table]
        backwards = [Unit("B", j, v - 1 - c) for j, c in table]
        total, w = len(table), warmup_units(stage)
        order = forwards[:w]
        for j in range(total - w):
            order += [forwards[w + j], backwards[j]]
        order += backwards[total - w :] if w < total else backwards
        return tuple(order)

    def inflight_microbatches(self, stage: Stage) -> int:
        """``min(m v, w + 1)`` chunk activations."""
        return min(stage.microbatches * stage.virtual_stages, warmup_units(stage) + 1)

    def waits_for(self, unit: Unit, stage: Stage) -> tuple[Unit, ...]:
        """Forward ``k`` waits for backward ``k - w - 1`` on the same stage (for ``k > w``)."""
        if unit.direction != "F":
            return ()
        v = stage.virtual_stages
        table = unit_table(stage.microbatches, v, stage.num_stages)
        k = table.index((unit.microbatch, unit.chunk))
        back = k - warmup_units(stage) - 1
        if back < 0:
            return ()
        j, c = table[back]
        return (Unit("B", j, v - 1 - c),)

    def build_order(
        self, microbatches: int, virtual_stages: int = 1, num_stages: int = 1
    ) -> tuple[Unit, ...]:
        """Forwards in table order; each backward (in table order) as soon as every forward of
        its micro-batch is built. Every stage's rule waits for a backward built earlier: stage
        ``i`` waits ``w_i + 1 >= (v - 1) p + 1`` forwards, and backward ``k`` needs only
        forwards up to ``k + (v - 1) p``."""
        v = virtual_stages
        table = unit_table(microbatches, v, num_stages)
        order: list[Unit] = []
        done: dict[int, int] = {}
        back = 0
        for j, c in table:
            order.append(Unit("F", j, c))
            done[j] = done.get(j, 0) + 1
            while back < len(table) and done.get(table[back][0], 0) == v:
                bj, bc = table[back]
                order.append(Unit("B", bj, v - 1 - bc))
                back += 1
        return tuple(order)
