"""Runtime: the real numeric pieces of data-parallel training (batch splitting, update merging,
a threaded gradient synchronizer) used to prove the simulator's schedules right."""

from parplan.runtime.batching import speed_shares, split_batch, split_by_speed
from parplan.runtime.synchronizer import GradientSynchronizer
from parplan.runtime.updates import WorkerUpdate, merge_worker_updates

__all__ = [
    "GradientSynchronizer",
    "WorkerUpdate",
    "merge_worker_updates",
    "speed_shares",
    "split_batch",
    "split_by_speed",
]
