"""The registry of collective algorithms: one line per algorithm module, a default, one entry point.

Algorithms are registered per collective (``all_reduce``, ``reduce_scatter``, ``all_gather``,
``reduce``, ``broadcast``, ``all_to_all``); a name is unique within its collective. Everything else asks the
registry: the config union of :mod:`parplan.collectives.specs`, the short forms, the closed forms
of :mod:`parplan.engine.analytic`, the volumes, the data-parallel expander and ``parplan
collective``. Adding an algorithm is a module with an :class:`~parplan.collectives.algorithm.Algorithm`
and a ``register(...)`` line below; tests (and later plugins) may :func:`register` their own and
:func:`unregister` them again.

>>> build_schedule("tree:4", 16, 1000).meta["arity"]
4
>>> list(ALGORITHMS)  # doctest: +NORMALIZE_WHITESPACE
['centralized', 'tree', 'ring', 'halving_doubling', 'double_binary_tree', 'hierarchical',
 'nccl_tree', 'nvls', 'nvls_tree', 'collnet_direct', 'collnet_chain', 'auto']
>>> get("tree").label(parse("tree:4"))
'tree:4'
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field, TypeAdapter

from parplan.collectives import (
    all_to_all,
    all_to_all_bruck,
    all_to_all_hierarchical,
    auto,
    auto_collectives,
    centralized,
    collnet,
    double_binary_tree,
    halving_doubling,
    hierarchical,
    nccl_tree,
    nvls,
    nvls_tree,
    ring,
    ring_halves,
    ring_rooted,
    tree,
    tree_broadcast,
    tree_reduce,
)
from parplan.collectives.algorithm import Algorithm, AlgorithmLike, AlgorithmSpecBase, Groups
from parplan.collectives.schedule import COLLECTIVES, Schedule
from parplan.errors import CollectiveError

_REGISTRY: dict[str, dict[str, Algorithm[Any]]] = {c: {} for c in COLLECTIVES}
ALGORITHMS: dict[str, Algorithm[Any]] = _REGISTRY["all_reduce"]
"""The all-reduce algorithms by name, in registration order (a live view of the registry)."""

DEFAULT_ALGORITHM = "auto"
"""The all-reduce algorithm plans use unless they name one: ``auto``, NCCL's pick per size (on a
cluster without a GPU architecture that is the ring with NCCL's Simple protocol)."""

SELECTORS = frozenset({"auto"})
"""Entries that choose among the others per call (``auto``) rather than being a schedule: ``all``
in ``parplan collective`` and the candidates of ``parplan validate`` leave them out."""


def schedules(collective: str = "all_reduce", *, in_network: bool = False) -> list[str]:
    """Names of the registered algorithms that are schedules of their own (not :data:`SELECTORS`);
    those that need a reducing switch (NVLS, CollNet) only with ``in_network``, since only clusters
    that declare one can run them."""
    table = algorithms(collective)
    return [
        name
        for name, found in table.items()
        if name not in SELECTORS and (in_network or not found.switch_capabilities)
    ]


_version = 0  # bumped by every (un)registration, so cached spec adapters are rebuilt
_ADAPTERS: dict[str, tuple[int, TypeAdapter[Any]]] = {}


def register(algorithm: Algorithm[Any], *, replace: bool = False) -> Algorithm[Any]:
    """Add ``algorithm`` under its collective and name; returns it. A name already taken is an
    error unless ``replace``."""
    global _version
    table = _REGISTRY[algorithm.collective]
    if algorithm.name in table and not replace:
        raise CollectiveError(f"{algorithm.collective} algorithm {algorithm.name!r} is already registered")
    table[algorithm.name] = algorithm
    _version += 1
    return algorithm


def unregister(name: str, collective: str = "all_reduce") -> None:
    """Remove an algorithm (what a test registered); unknown names are an error."""
    global _version
    get(name, collective)
    del _REGISTRY[collective][name]
    _version += 1


def version() -> int:
    """A number that changes whenever an algorithm is registered or unregistered (for caches)."""
    return _version


def algorithms(collective: str = "all_reduce") -> Mapping[str, Algorithm[Any]]:
    """The algorithms of ``collective`` by name, in registration order."""
    if collective not in _REGISTRY:
        raise CollectiveError(f"unknown collective {collective!r}; valid: {', '.join(COLLECTIVES)}")
    return _REGISTRY[collective]


def get(name: object, collective: str = "all_reduce") -> Algorithm[Any]:
    """The algorithm called ``name``; an unknown name raises a :class:`CollectiveError` that lists
    the valid ones."""
    table = algorithms(collective)
    if not isinstance(name, str) or name not in table:
        what = "collective" if collective == "all_reduce" else collective
        raise CollectiveError(f"unknown {what} algorithm {name!r}; valid: {', '.join(table)}")
    return table[name]


# -- specs ---------------------------------------------------------------------------------------


def expand_short_form(value: Any, collective: str = "all_reduce") -> Any:
    """Turn ``"tree:4"`` into ``{"name": "tree", "arity": 4}`` (the parameter the algorithm's short
    form sets); leave anything but a string alone. Raises ``ValueError`` (pydantic reports it with
    the file's line)."""
    if not isinstance(value, str):
        return value
    table = algorithms(collective)
    name, _, arg = value.strip().partition(":")
    if name not in table:
        raise ValueError(f"unknown algorithm {name!r}; valid: {', '.join(table)}")
    if not arg:
        return {"name": name}
    key = table[name].short_parameter
    if key is None:
        raise ValueError(f"algorithm {name!r} takes no parameter, got {value!r}")
    try:
        number = int(arg)
    except ValueError:
        raise ValueError(f"{value!r}: the {key} after ':' must be an integer") from None
    return {"name": name, key: number}


def spec_union(collective: str = "all_reduce") -> Any:
    """The specs of every registered algorithm of ``collective`` as one type, tagged by ``name``."""
    types = tuple(dict.fromkeys(a.spec_type for a in algorithms(collective).values()))
    if not types:
        raise CollectiveError(f"no {collective} algorithm is registered")
    if len(types) == 1:
        return types[0]
    return Annotated[functools.reduce(operator.or_, types), Field(discriminator="name")]


def _adapter(collective: str) -> TypeAdapter[Any]:
    cached = _ADAPTERS.get(collective)
    if cached is None or cached[0] != _version:
        cached = (_version, TypeAdapter(spec_union(collective)))
        _ADAPTERS[collective] = cached
    return cached[1]


def validate_spec(value: Any, collective: str = "all_reduce") -> AlgorithmSpecBase:
    """A spec of a registered algorithm from a short form, a mapping or a spec, validated against
    the registry as it is now. Raises pydantic's ``ValidationError`` (a ``ValueError``), with
    locations under the algorithm's tag as in any tagged union, or ``ValueError`` for a bad short
    form."""
    spec: AlgorithmSpecBase = _adapter(collective).validate_python(expand_short_form(value, collective))
    return spec


def resolve(
    algorithm: AlgorithmLike, collective: str = "all_reduce"
) -> tuple[Algorithm[Any], AlgorithmSpecBase]:
    """The algorithm and its spec from a spec, a mapping or a short form; a
    :class:`CollectiveError` for an unknown name (listing the valid ones) or invalid parameters."""
    if isinstance(algorithm, str | Mapping):
        raw = algorithm if isinstance(algorithm, str) else algorithm.get("name")
        name = raw.partition(":")[0].strip() if isinstance(raw, str) else raw
        found = get(name, collective)
        try:
            spec = validate_spec(algorithm if isinstance(algorithm, str) else dict(algorithm), collective)
        except ValueError as exc:
            errors = getattr(exc, "errors", None)
            message = errors()[0]["msg"] if callable(errors) else str(exc)
            raise CollectiveError(f"invalid algorithm {algorithm!r}: {message}") from None
        return found, spec
    found = get(getattr(algorithm, "name", None), collective)
    if not isinstance(algorithm, found.spec_type):
        raise CollectiveError(f"{algorithm!r} is not a spec of the {collective} algorithm {found.name!r}")
    return found, algorithm


def parse(value: AlgorithmLike, collective: str = "all_reduce") -> AlgorithmSpecBase:
    """The spec of ``value`` (see :func:`resolve`)."""
    return resolve(value, collective)[1]


def build_schedule(
    algorithm: AlgorithmLike,
    num_ranks: int,
    num_elements: int,
    *,
    groups: Groups | None = None,
    collective: str = "all_reduce",
) -> Schedule:
    """The schedule of ``algorithm`` (a spec, a mapping, or a short form such as ``"ring"`` or
    ``"tree:4"``) for ``num_ranks`` ranks and ``num_elements``.

    ``groups`` (lists of ranks, e.g. one per node) reach the algorithms that use them (see
    :meth:`~parplan.collectives.algorithm.Algorithm.uses_groups`): ``hierarchical`` without a
    ``group_size``, and ``ring`` to lay its channels' rings out node by node. Raises
    :class:`CollectiveError` for an unknown algorithm (listing the valid ones) or impossible
    parameters.
    """
    found, spec = resolve(algorithm, collective)
    return found.build(spec, num_ranks, num_elements, groups)


register(centralized.ALL_REDUCE)
register(tree.ALL_REDUCE)
register(ring.ALL_REDUCE)
register(halving_doubling.ALL_REDUCE)
register(double_binary_tree.ALL_REDUCE)
register(hierarchical.ALL_REDUCE)
register(nccl_tree.ALL_REDUCE)
register(nvls.ALL_REDUCE)
register(nvls_tree.ALL_REDUCE)
register(collnet.ALL_REDUCE_DIRECT)
register(collnet.ALL_REDUCE_CHAIN)
register(auto.ALL_REDUCE)
register(ring_halves.REDUCE_SCATTER)
register(ring_halves.ALL_GATHER)
register(nvls.REDUCE_SCATTER)
register(nvls.ALL_GATHER)
register(tree_reduce.REDUCE)
register(tree_broadcast.BROADCAST)
register(ring_rooted.REDUCE)
register(ring_rooted.BROADCAST)
register(auto_collectives.REDUCE_SCATTER)
register(auto_collectives.ALL_GATHER)
register(auto_collectives.REDUCE)
register(auto_collectives.BROADCAST)
register(all_to_all.PAIRWISE)
register(all_to_all.RING)
register(all_to_all_bruck.BRUCK)
register(all_to_all_hierarchical.HIERARCHICAL)
register(auto_collectives.ALL_TO_ALL)
