"""Placement of ranks on devices and the rank groups hierarchical collectives use."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.errors import TopologyError
from parplan.topology.network import Network
from parplan.topology.placement import (
    Placement,
    check_groups,
    groups_by_key,
    groups_by_node,
    groups_by_stage,
    groups_of_size,
    place,
)
from tests.topology.helpers import DEVICE, LINK, network


def two_nodes() -> Network:
    return network(
        generator={
            "kind": "hierarchical",
            "nodes": 2,
            "devices_per_node": 4,
            "device": DEVICE,
            "intra": LINK,
            "nics_per_node": 4,
            "nic": LINK,
        }
    )


def test_default_placement_is_every_device_in_order_grouped_by_node() -> None:
    net = two_nodes()
    pl = place(net)
    assert pl.devices == net.devices
    assert pl.groups == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert pl.size == 8
    assert pl.leaders == (0, 4)
    assert pl.device_of(5) == "n1.d1"
    assert pl.rank_of("n1.d1") == 5
    assert pl.group_of(5) == 1


def test_explicit_devices_count_and_groups() -> None:
    net = two_nodes()
    pl = place(net, ["n1.d0", "n0.d0", "n1.d1", "n0.d1"])
    assert pl.groups == ((0, 2), (1, 3))  # by node, ordered by first rank
    assert place(net, count=3).devices == ("n0.d0", "n0.d1", "n0.d2")
    pl2 = place(net, count=4, groups=groups_of_size(4, 2))
    assert pl2.groups == ((0, 1), (2, 3))
    assert pl2.with_groups([[0, 1, 2, 3]]).groups == ((0, 1, 2, 3),)


def test_ungrouped_devices_form_their_own_groups() -> None:
    net = network(generator={"kind": "switch", "hosts": 3, "device": DEVICE, "link": LINK})
    assert groups_by_node(net, net.devices) == [[0], [1], [2]]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"devices": ["n0.d0", "ghost"]}, "unknown device 'ghost'"),
        ({"devices": ["n0.d0", "n0.d0"]}, "device 'n0.d0' is placed twice"),
        ({"devices": ["n0.sw"]}, "unknown device 'n0.sw'"),
        ({"count": 9}, "asked for 9 ranks but only 8 devices"),
        ({"count": 0}, "at least one rank"),
        ({"count": 2, "groups": [[0], [0, 1]]}, "rank 0 is in more than one group"),
        ({"count": 2, "groups": [[0]]}, r"ranks \[1\] are in no group"),
        ({"count": 2, "groups": [[0, 2]]}, "out of range"),
        ({"count": 2, "groups": [[0, 1], []]}, "group 1 is empty"),
    ],
)
def test_placement_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        place(two_nodes(), **kwargs)  # type: ignore[arg-type]


def test_placement_object_checks_itself() -> None:
    with pytest.raises(TopologyError, match="at least one device"):
        Placement((), ())
    pl = Placement(("a", "b"), ((0, 1),))
    with pytest.raises(TopologyError, match="out of range"):
        pl.device_of(2)
    with pytest.raises(TopologyError, match="has no rank"):
        pl.rank_of("c")
    assert pl == Placement(("a", "b"), ((0, 1),))
    assert hash(pl) == hash(Placement(("a", "b"), ((0, 1),)))


def test_group_helpers() -> None:
    assert groups_of_size(5, 2) == [[0, 1], [2, 3], [4]]
    assert groups_of_size(1, 8) == [[0]]
    assert groups_by_stage(3, 2) == [[0, 2, 4], [1, 3, 5]]
    assert groups_by_key(["x", "y", "x"]) == [[0, 2], [1]]
    with pytest.raises(TopologyError):
        groups_of_size(4, 0)
    with pytest.raises(TopologyError):
        groups_by_stage(0, 2)


@settings(max_examples=60, deadline=None)
@given(p=st.integers(1, 200), k=st.integers(1, 50))
def test_groups_of_size_partition_the_ranks(p: int, k: int) -> None:
    groups = groups_of_size(p, k)
    check_groups(groups, p)
    assert [r for g in groups for r in g] == list(range(p))
    assert all(len(g) == k for g in groups[:-1]) and 1 <= len(groups[-1]) <= k


@settings(max_examples=40, deadline=None)
@given(replicas=st.integers(1, 12), stages=st.integers(1, 12))
def test_stage_groups_pair_with_replica_groups(replicas: int, stages: int) -> None:
    p = replicas * stages
    by_stage = groups_by_stage(replicas, stages)
    by_replica = groups_of_size(p, stages)
    check_groups(by_stage, p)
    for s, group in enumerate(by_stage):
        # exactly one rank of each replica holds stage s, and it is that replica's s-th rank
        assert group == [replica[s] for replica in by_replica]
