"""Compact task-graph columns: int32 ids, constant (zero-memory) columns for unused ones, and a
clear error where an id column would overflow."""

from __future__ import annotations

import numpy as np
import pytest

from parplan.errors import SimulationError
from parplan.taskgraph import TRANSFER, TaskGraphBuilder, constant


def _transfer_block(b: TaskGraphBuilder, n: int) -> None:
    a, c = b.device_id("a"), b.device_id("b")
    b.add_block(
        {
            "kind": np.full(n, TRANSFER, dtype=np.int8),
            "device": np.full(n, a),
            "dst": np.full(n, c),
            "size_bytes": np.ones(n),
        },
        np.concatenate([[0], np.arange(n)]),  # a chain: task i waits for task i - 1
        np.arange(n - 1),
    )


def test_transfer_only_block_graph_has_constant_compute_columns() -> None:
    b = TaskGraphBuilder()
    _transfer_block(b, 1000)
    g = b.build()
    for name in ("seconds", "flops", "priority", "protocol", "overhead_s", "max_rate_Bps"):
        column = getattr(g, name)
        assert column.strides == (0,), name  # takes no memory
        assert len(column) == 1000
    assert g.seconds.tolist() == [0.0] * 1000
    assert np.all(g.max_rate_Bps == np.inf) and np.all(g.protocol == -1)
    assert g.device.dtype == np.int32 and g.dst.dtype == np.int32
    assert g.category.dtype == np.int32 and g.label.dtype == np.int32


def test_mixed_graph_materialises_used_columns() -> None:
    b = TaskGraphBuilder()
    _transfer_block(b, 3)
    b.compute("a", 2.0, [2], priority=5)
    g = b.build()
    assert g.seconds.tolist() == [0.0, 0.0, 0.0, 2.0]
    assert g.priority.tolist() == [0, 0, 0, 5]
    assert g.flops.strides != (0,)


def test_constant_is_read_only_and_reads_like_a_column() -> None:
    c = constant(5, 1.5, np.float64)
    assert c[[0, 4]].tolist() == [1.5, 1.5] and c.sum() == 7.5
    with pytest.raises(ValueError):
        c[0] = 2.0


def test_block_ids_beyond_int32_are_refused() -> None:
    b = TaskGraphBuilder(["a", "b"])
    with pytest.raises(SimulationError, match="beyond int32"):
        b.add_block({"label": np.array([2**31])}, np.zeros(2, dtype=np.int64), np.zeros(0, dtype=np.int64))


def test_engine_successor_lists_are_int32_and_release_int64_ids() -> None:
    from parplan.engine.tasks import Dependencies, TaskView

    b = TaskGraphBuilder()
    _transfer_block(b, 50)
    deps = Dependencies(TaskView.of(b.build()))
    assert deps.succ_idx.dtype == np.int32 and deps.succ_off.dtype == np.int32
    assert deps.remaining.dtype == np.int8  # in-degree at most 1
    assert deps.roots().tolist() == [0]
    released = deps.finish(np.arange(0, 1))
    assert released.tolist() == [1] and released.dtype == np.int64


def test_wide_fan_in_counts_in_a_wider_integer() -> None:
    from parplan.engine.tasks import Dependencies, TaskView

    b = TaskGraphBuilder()
    firsts = [b.marker() for _ in range(300)]
    join = b.marker(firsts)
    deps = Dependencies(TaskView.of(b.build()))
    assert deps.remaining.dtype == np.int16
    assert deps.finish(np.arange(299)).tolist() == []
    assert deps.finish(np.array([299])).tolist() == [join]


def test_wire_bytes_read_per_batch_equal_the_whole_column() -> None:
    from parplan.engine.arrays import TaskColumn

    rng = np.random.default_rng(3)
    size = rng.uniform(0, 1e9, 1000)
    codes = rng.integers(0, 3, 1000).astype(np.int8)
    per_code = np.array([0.5, 0.9375, 1.0])
    column = TaskColumn(size, codes, per_code)
    tasks = rng.permutation(1000)[:300]
    assert column.take(tasks).tolist() == (size / per_code[codes])[tasks].tolist()
    assert TaskColumn(size).take(tasks).tolist() == size[tasks].tolist()


def test_constants_of_equal_looking_values_keep_their_bits() -> None:
    # Constants share one read-only element per value and dtype: -0.0 and 0.0, nan, 1 and True apart.
    zero, negative = constant(3, 0.0, np.float64), constant(3, -0.0, np.float64)
    assert not np.signbit(zero).any() and np.signbit(negative).all()
    assert np.isnan(constant(2, float("nan"), np.float64)).all()
    assert constant(2, 1, np.int64).dtype == np.int64 and constant(2, True, np.bool_).dtype == np.bool_
    for c in (zero, negative, constant(0, 7, np.int32)):
        assert c.strides == (0,) and not c.flags.writeable
