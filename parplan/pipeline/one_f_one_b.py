"""1F1B (PipeDream-flush): warm-up forwards, then one backward and one forward alternately.

Stage ``i`` of ``s`` runs ``k = min(m, s - i)`` warm-up forwards, then alternates one backward and
one forward, then runs the remaining backwards. Forward ``j + k`` waits for backward ``j`` on the
same stage, so at most ``k`` micro-batches are in flight: that bounds its activation memory.

>>> [f"{d}{j}" for d, j, _ in OneFOneB().worker_order(Stage(index=1, num_stages=3, microbatches=4))]
['F0', 'F1', 'B0', 'F2', 'B1', 'F3', 'B2', 'B3']
"""

from __future__ import annotations

from parplan.pipeline.base import PipelineSchedule, Stage, Unit


def warmup_microbatches(stage: Stage) -> int:
    """``k = min(m, s - i)``: forwards before the first backward, and the most in flight."""
    return max(1, min(stage.microbatches, stage.num_stages - stage.index))


class OneFOneB(PipelineSchedule):
    """One forward, one backward after a warm-up (Narayanan et al., 2021, PipeDream-flush)."""

    name = "1f1b"

    def worker_order(self, stage: Stage) -> tuple[Unit, ...]:
        """``k`` warm-up forwards, then ``B j`` and ``F j + k`` alternately, then the last backwards."""
        m, k = stage.microbatches, warmup_microbatches(stage)
        order = [Unit("F", j) for j in range(k)]
        for j in range(m):
            order.append(Unit("B", j))
            if j + k < m:
                order.append(Unit("F", j + k))
        return tuple(order)

    def inflight_microbatches(self, stage: Stage) -> int:
        """``min(m, s - i)`` micro-batches."""
        return warmup_microbatches(stage)

    def waits_for(self, unit: Unit, stage: Stage) -> tuple[Unit, ...]:
        """Forward ``j`` waits for backward ``j - k`` on the same stage (for ``j >= k``)."""
        k = warmup_microbatches(stage)
        if unit.direction == "F" and unit.microbatch >= k:
            return (Unit("B", unit.microbatch - k),)
        return ()
