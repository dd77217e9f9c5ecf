"""A schedule's ready and done edges are found once per schedule object (plan/collective.py keeps
them): lowering the same schedule again, as every bucket of a size does, gives what a fresh
lowering gives."""

from __future__ import annotations

import numpy as np
import pytest

import parplan.plan.collective as lowering
from parplan.collectives.registry import build_schedule
from parplan.collectives.schedule import Schedule
from parplan.plan.collective import lower_schedule
from parplan.taskgraph import TaskGraph, TaskGraphBuilder

ALGORITHMS = ["ring", "centralized", "tree:3", "halving_doubling", "double_binary_tree", "hierarchical:2"]
DEVICES = [f"h{i}" for i in range(6)]


def _two_buckets(schedule: Schedule) -> TaskGraph:
    """Two buckets of ``schedule`` one after another per rank, after a compute task each."""
    b = TaskGraphBuilder(DEVICES)
    ready = [[b.compute_flops(d, 1e9)] for d in DEVICES]
    first = lower_schedule(b, schedule, DEVICES, element_bytes=4.0, rank_deps=ready, label="b0")
    lower_schedule(
        b, schedule, DEVICES, element_bytes=4.0, rank_deps=[[t] for t in first.rank_done], label="b1"
    )
    return b.build()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_schedule_lowered_again_gives_a_fresh_lowering(algorithm: str) -> None:
    schedule = build_schedule(algorithm, len(DEVICES), 600)
    kept = _two_buckets(schedule)  # the second bucket reads the edges the first found
    assert schedule in lowering._EDGES
    lowering._EDGES.clear()
    fresh = _two_buckets(build_schedule(algorithm, len(DEVICES), 600))
    for name in ("kind", "device", "dst", "size_bytes", "reduce", "label", "dep_offsets", "dep_indices"):
        np.testing.assert_array_equal(getattr(kept, name), getattr(fresh, name), err_msg=name)
    assert kept.labels == fresh.labels
