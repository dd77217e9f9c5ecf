"""The registry of all-reduce algorithms: names to schedule builders, a default, one entry point.

>>> build_schedule("tree:4", 16, 1000).meta["arity"]
4
>>> sorted(ALGORITHMS) == sorted(ALGORITHM_NAMES)
True

Adding an algorithm is adding a module with a builder ``(num_ranks, num_elements, **params)`` and
a line here (and its spec in :mod:`parplan.config.algorithms`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError

from parplan.collectives.centralized import centralized_all_reduce
from parplan.collectives.double_binary_tree import double_binary_tree_all_reduce
from parplan.collectives.halving_doubling import halving_doubling_all_reduce
from parplan.collectives.hierarchical import hierarchical_all_reduce
from parplan.collectives.ring import ring_all_gather, ring_all_reduce, ring_reduce_scatter
from parplan.collectives.schedule import Schedule
from parplan.collectives.tree import tree_all_reduce, tree_broadcast, tree_reduce
from parplan.config.algorithms import ALGORITHM_NAMES, parse_algorithm
from parplan.errors import CollectiveError

Builder = Callable[..., Schedule]

ALGORITHMS: dict[str, Builder] = {
    "centralized": centralized_all_reduce,
    "tree": tree_all_reduce,
    "ring": ring_all_reduce,
    "halving_doubling": halving_doubling_all_reduce,
    "double_binary_tree": double_binary_tree_all_reduce,
    "hierarchical": hierarchical_all_reduce,
}
"""All-reduce builders by name; each takes ``(num_ranks, num_elements, **spec parameters)``."""

DEFAULT_ALGORITHM = "ring"

COLLECTIVE_BUILDERS: dict[str, Builder] = {
    "reduce_scatter": ring_reduce_scatter,
    "all_gather": ring_all_gather,
    "reduce": tree_reduce,
    "broadcast": tree_broadcast,
}
"""The standalone collectives (sharded and pipelined plans need them), by collective name."""

if set(ALGORITHMS) != set(ALGORITHM_NAMES):  # pragma: no cover - a developer error, caught by tests
    raise ImportError(f"registry {sorted(ALGORITHMS)} does not match config names {sorted(ALGORITHM_NAMES)}")


def _unknown(name: str) -> CollectiveError:
    return CollectiveError(f"unknown collective algorithm {name!r}; valid: {', '.join(ALGORITHMS)}")


def build_schedule(
    algorithm: Any,
    num_ranks: int,
    num_elements: int,
    *,
    groups: Sequence[Sequence[int]] | None = None,
) -> Schedule:
    """The all-reduce schedule of ``algorithm`` (a spec from :mod:`parplan.config.algorithms`, or a
    short form such as ``"ring"`` or ``"tree:4"``) for ``num_ranks`` ranks and ``num_elements``.

    ``groups`` (lists of ranks, e.g. one per node) is used by ``hierarchical`` when its spec gives
    no ``group_size``, and by ``ring`` to lay its channels' rings out node by node (and, with
    ``channels`` unset, to pick one ring per device of the largest node); other algorithms ignore
    it. Raises :class:`CollectiveError` for an unknown algorithm (listing the valid ones) or
    impossible parameters.
    """
    if isinstance(algorithm, str | dict):
        raw = algorithm if isinstance(algorithm, str) else algorithm.get("name")
        name = raw.partition(":")[0].strip() if isinstance(raw, str) else raw
        if name not in ALGORITHMS:
            raise _unknown(str(name))
        try:
            algorithm = parse_algorithm(algorithm)
        except ValidationError as exc:
            raise CollectiveError(f"invalid algorithm {algorithm!r}: {exc.errors()[0]['msg']}") from None
    name = getattr(algorithm, "name", None)
    if name not in ALGORITHMS:
        raise _unknown(str(name))
    params: dict[str, Any] = algorithm.model_dump(exclude={"name"}, by_alias=False)
    if name in ("hierarchical", "ring"):
        params["groups"] = groups
    return ALGORITHMS[name](num_ranks, num_elements, **params)
