"""NCCL's tree all-reduce: exact on arrays over random node shapes, its traffic, the bytes it sends
across the network on two nodes against the ring's, and its closed form against the engine."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.collectives.nccl_tree import auto_segments, nccl_tree_all_reduce
from parplan.collectives.registry import build_schedule, get, parse
from parplan.collectives.ring import ring_all_reduce
from parplan.collectives.schedule import Schedule
from parplan.errors import CollectiveError
from tests.collectives.cases import random_groups, run_and_check
from tests.collectives.invariants import engine_and_closed_form

ALGORITHM = get("nccl_tree")


@settings(max_examples=40, deadline=None)
@given(
    p=st.integers(1, 12),
    n=st.integers(0, 60),
    channels=st.integers(1, 3),
    segments=st.one_of(st.none(), st.integers(1, 3)),
    data=st.data(),
)
def test_exact_sums_and_traffic_over_node_shapes(
    p: int, n: int, channels: int, segments: int | None, data: st.DataObject
) -> None:
    groups = data.draw(random_groups(p))
    spec = parse({"name": "nccl_tree", "channels": channels, "segments": segments})
    schedule = ALGORITHM.build(spec, p, n, groups)
    rng = np.random.default_rng(p * 1000 + n)
    arrays = [rng.integers(-(2**40), 2**40, size=n, dtype=np.int64) for _ in range(p)]
    result = run_and_check(schedule, arrays)
    sent, received = ALGORITHM.traffic(spec, p, n, groups)
    np.testing.assert_array_equal(result.bytes_sent, sent * 8)
    np.testing.assert_array_equal(result.bytes_received, received * 8)


def _bytes_leaving_each_node(schedule: Schedule, node_of: np.ndarray, nodes: int) -> np.ndarray:
    across = node_of[schedule.src] != node_of[schedule.dst]
    return np.bincount(node_of[schedule.src][across], weights=schedule.length[across], minlength=nodes)


@pytest.mark.parametrize("per_node", [2, 4, 8])
def test_two_nodes_send_n_across_where_the_ring_sends_twice_that(per_node: int) -> None:
    p, n = 2 * per_node, 4096 * per_node
    nodes = [list(range(per_node)), list(range(per_node, p))]
    node_of = np.repeat(np.arange(2), per_node)
    tree = nccl_tree_all_reduce(p, n, groups=nodes, channels=per_node)
    ring = ring_all_reduce(p, n, channels=None, groups=nodes)
    tree_bytes = _bytes_leaving_each_node(tree, node_of, 2)
    ring_bytes = _bytes_leaving_each_node(ring, node_of, 2)
    np.testing.assert_array_equal(tree_bytes, [n, n])
    np.testing.assert_allclose(ring_bytes, [2 * (p - 1) / p * n] * 2)
    # every channel leaves a node through a different rank (a different NIC on a DGX-like node)
    heads = tree.meta["heads"]
    assert len(heads) == per_node and len({h[0] for h in heads}) == per_node


def test_layout_chunks_and_errors() -> None:
    s = nccl_tree_all_reduce(6, 12, groups=[[0, 1, 2], [3, 4, 5]], channels=2, segments=2)
    assert s.meta["trees"] == 2 and s.meta["segments"] == 2 and s.meta["heads"] == ((0, 3), (1, 4))
    assert nccl_tree_all_reduce(4, 10).meta["trees"] == 1  # one node: a chain per channel
    assert auto_segments(2 * 32768 + 1, None) == 4 and auto_segments(10**9, None) == 16
    assert build_schedule("nccl_tree:4", 8, 64).meta["channels"] == 4
    assert build_schedule({"name": "nccl_tree", "group_size": 2}, 8, 64).meta["groups"][1] == (2, 3)
    with pytest.raises(CollectiveError, match="channels"):
        nccl_tree_all_reduce(4, 8, channels=0)


@pytest.mark.parametrize(("p", "per_node"), [(4, 2), (8, 4), (8, 2), (12, 4), (12, 3), (16, 8)])
@pytest.mark.parametrize("spec", ["nccl_tree", "nccl_tree:2", {"name": "nccl_tree", "segments": 4}], ids=str)
def test_closed_form_on_several_nodes_is_within_its_stated_margin(
    p: int, per_node: int, spec: object
) -> None:
    nodes = [list(range(i, i + per_node)) for i in range(0, p, per_node)]
    for gamma in (0.0, 2e-11):
        engine, closed, _ = engine_and_closed_form(ALGORITHM, parse(spec), p, gamma, nodes)  # type: ignore[arg-type]
        assert -0.10 <= closed / engine - 1 <= 0.40, (spec, p, per_node, gamma)
