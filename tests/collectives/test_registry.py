"""The registry: names match the config's, a default, parameters pass through, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from parplan.collectives.registry import ALGORITHMS, DEFAULT_ALGORITHM, build_schedule
from parplan.config.algorithms import AlgorithmSpec, TreeAlgorithm, parse_algorithm
from parplan.config.issues import union_tags
from parplan.errors import CollectiveError

ALGORITHM_NAMES = tuple(ALGORITHMS)


def test_names_match_the_config() -> None:
    assert union_tags(AlgorithmSpec) == ("name", list(ALGORITHM_NAMES))
    assert DEFAULT_ALGORITHM in ALGORITHMS and DEFAULT_ALGORITHM == "auto"


@pytest.mark.parametrize("name", ALGORITHM_NAMES)
def test_every_name_builds_from_string_mapping_and_spec(name: str) -> None:
    a = build_schedule(name, 5, 11)
    b = build_schedule({"name": name}, 5, 11)
    c = build_schedule(parse_algorithm(name), 5, 11)
    for s in (a, b, c):
        assert s.algorithm == name and s.num_ranks == 5 and s.num_elements == 11
    assert (a.src == c.src).all() and (a.dep_indices == b.dep_indices).all()


def test_parameters_reach_the_builder() -> None:
    assert build_schedule(TreeAlgorithm(name="tree", arity=4, segments=3), 9, 30).meta["segments"] == 3
    assert build_schedule("tree:4", 9, 30).meta["arity"] == 4
    assert build_schedule("centralized:3", 9, 30).root == 3
    assert build_schedule("hierarchical:4", 9, 30).meta["leaders"] == (0, 4, 8)
    assert build_schedule("ring:3", 9, 30).meta["channels"] == 3
    nodes = [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    assert build_schedule("ring", 9, 30, groups=nodes).meta["channels"] == 4  # auto: one per device
    assert build_schedule("ring", 9, 30).meta["channels"] == 1  # auto without nodes
    second_ring = np.asarray(build_schedule("ring:2", 9, 30, groups=nodes).meta["rings"])[1]
    assert second_ring.tolist() == [1, 2, 3, 0, 4, 7, 6, 5, 8]  # every other node backwards


def test_unknown_name_lists_the_valid_ones() -> None:
    for bad in ("bogus", "bogus:3", {"name": "bogus"}):
        with pytest.raises(CollectiveError) as info:
            build_schedule(bad, 4, 4)
        assert "bogus" in str(info.value)
        for name in ALGORITHM_NAMES:
            assert name in str(info.value)


@pytest.mark.parametrize(
    ("spec", "groups", "message"),
    [
        ("tree:1", None, "greater than or equal to 2"),
        ("halving_doubling:3", None, "takes no parameter"),
        ("ring:0", None, "greater than or equal to 1"),
        ("ring", [[0, 1], [2]], r"missing \[3\]"),
        ("centralized:9", None, "root 9 is not a rank"),
        ("hierarchical", [[0, 1], [1, 2, 3]], "rank 1 is in more than one group"),
        ("hierarchical", [[0, 1], [3]], r"missing \[2\]"),
        ("hierarchical", [[0, 1, 2, 7]], "outside 0..3"),
        ("hierarchical", [[0, 1, 2, 3], []], "group 1 is empty"),
    ],
)
def test_bad_parameters(spec: str, groups: list[list[int]] | None, message: str) -> None:
    with pytest.raises(CollectiveError, match=message):
        build_schedule(spec, 4, 8, groups=groups)


def test_bad_sizes() -> None:
    with pytest.raises(CollectiveError, match="at least one rank"):
        build_schedule("ring", 0, 8)
    with pytest.raises(CollectiveError, match="num_elements must be >= 0"):
        build_schedule("ring", 4, -1)
