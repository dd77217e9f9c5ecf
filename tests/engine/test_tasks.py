"""The engine's view of a task graph: what it rejects, and readiness against a plain recount."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.engine.tasks import Dependencies, TaskView
from parplan.errors import SimulationError
from parplan.taskgraph import TaskGraph, TaskGraphBuilder


def _graph() -> TaskGraph:
    b = TaskGraphBuilder()
    c = b.compute_flops("a", 1e9)
    t = b.transfer("a", "b", 1e6, [c])
    b.marker([t])
    return b.build()


def _with(graph: TaskGraph, **columns: object) -> TaskGraph:
    return TaskGraph(**{**graph.__dict__, **columns})


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"flops": np.zeros(2)}, "column 'flops' has 2 entries"),
        ({"dep_offsets": np.array([0, 0, 1, 1])}, "offsets do not match"),
        ({"dep_indices": np.array([0, 3])}, "outside the graph"),
        ({"kind": np.array([0, 1, 7], dtype=np.int8)}, "unknown task kind"),
        ({"device": np.array([5, 0, -1])}, "no valid device"),
        ({"dst": np.array([-1, 9, -1])}, "no valid destination"),
        ({"size_bytes": np.array([0.0, -1.0, 0.0])}, "negative or non-finite size"),
        ({"size_bytes": np.array([0.0, np.inf, 0.0])}, "negative or non-finite size"),
        ({"seconds": np.array([np.inf, 0.0, 0.0])}, "negative or infinite duration"),
        ({"flops": np.array([-1.0, 0.0, 0.0])}, "negative FLOPs"),
    ],
)
def test_malformed_graphs_are_rejected(columns: dict[str, object], message: str) -> None:
    with pytest.raises(SimulationError, match=message):
        TaskView.of(_with(_graph(), **columns))


def test_markers_need_no_device_and_other_kinds_ignore_unused_columns() -> None:
    view = TaskView.of(_graph())  # the marker's device and the compute task's dst are -1
    assert view.num_tasks == 3 and view.devices == ("a", "b")
    assert not view.priority_mode
    b = TaskGraphBuilder()
    b.compute("a", 1.0, priority=1)
    b.compute("a", 1.0, priority=2)
    assert TaskView.of(b.build()).priority_mode


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(1, 40))
def test_finishing_batches_releases_exactly_the_tasks_whose_deps_are_all_done(
    data: st.DataObject, n: int
) -> None:
    b = TaskGraphBuilder()
    deps: list[list[int]] = []
    for t in range(n):
        mine = data.draw(st.lists(st.integers(0, t - 1), max_size=4)) if t else []  # duplicates allowed
        deps.append(mine)
        b.marker(mine)
    dependencies = Dependencies(TaskView.of(b.build()))
    done: set[int] = set()
    released = set(dependencies.roots().tolist())
    assert released == {t for t in range(n) if not deps[t]}
    frontier = sorted(released)
    while frontier:
        size = data.draw(st.integers(1, max(1, len(frontier))))  # small (scalar) and large batches
        batch, frontier = frontier[:size], frontier[size:]
        done.update(batch)
        ready = dependencies.finish(np.array(batch, dtype=np.int64)).tolist()
        assert ready == sorted(ready)
        expected = {t for t in range(n) if t not in released and set(deps[t]) <= done}
        assert set(ready) == expected
        released.update(ready)
        frontier += ready
    assert dependencies.num_done == n and len(released) == n
    assert dependencies.stuck(5) == []


@settings(max_examples=40, deadline=None)
@given(data=st.data(), n=st.integers(1, 60))
def test_successor_lists_are_those_of_a_plain_count_whether_or_not_a_task_has_several(
    data: st.DataObject, n: int
) -> None:
    # Graphs where no task is the dependency of two others (a collective's chains, built without a
    # sort) and graphs where some are (the general path) give the same CSR as counting by hand.
    b = TaskGraphBuilder()
    unique = data.draw(st.booleans())
    taken: set[int] = set()
    successors: list[list[int]] = [[] for _ in range(n)]
    for t in range(n):
        pool = [d for d in range(t) if not (unique and d in taken)]
        mine = sorted(set(data.draw(st.lists(st.sampled_from(pool), max_size=3)))) if pool else []
        taken.update(mine)
        for d in mine:
            successors[d].append(t)
        b.marker(mine)
    deps = Dependencies(TaskView.of(b.build()))
    offsets = np.cumsum([0] + [len(s) for s in successors])
    assert deps.succ_off.tolist() == offsets.tolist()
    assert deps.succ_idx.tolist() == [t for s in successors for t in s]
