"""GPipe: every forward, then every backward, on each stage.

Each stage holds all ``m`` micro-batches' activations at its peak. The order is enforced by a
barrier: every backward on a stage waits for every forward on it.

>>> [f"{d}{j}" for d, j, _ in GPipe().worker_order(Stage(index=0, num_stages=2, microbatches=3))]
['F0', 'F1', 'F2', 'B0', 'B1', 'B2']
"""

from __future__ import annotations

from parplan.pipeline.base import PipelineSchedule, Stage, Unit, forwards_then_backwards


class GPipe(PipelineSchedule):
    """All forwards (micro-batch order), then all backwards (Huang et al., 2019)."""

    name = "gpipe"
    backward_waits_for_forwards = True

    def worker_order(self, stage: Stage) -> tuple[Unit, ...]:
        """``F0 .. F(m-1), B0 .. B(m-1)`` on every stage."""
        return forwards_then_backwards(stage.microbatches)

    def inflight_microbatches(self, stage: Stage) -> int:
        """All ``m`` micro-batches."""
        return stage.microbatches
