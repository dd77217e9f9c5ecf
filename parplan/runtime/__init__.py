"""Runtime: the real numeric pieces of data-parallel training (batch splitting, update merging,
a threaded gradient synchronizer) used to prove the simulator's schedules right."""
