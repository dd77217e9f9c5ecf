"""All-reduce algorithm specs as files write them: a tagged union on ``name`` with short forms,
built from the registry (:mod:`parplan.collectives.registry`).

Files may write a mapping (``{name: tree, arity: 4}``) or a short form: ``"ring"``, ``"ring:8"``
(8 channels), ``"tree:4"``, ``"centralized:0"``, ``"halving_doubling"``, ``"double_binary_tree"``,
``"hierarchical"``, ``"hierarchical:8"`` (groups of 8 ranks); each algorithm says which parameter
its short form sets. :func:`parse_algorithm` reads either.

:data:`AlgorithmSpec` is the field type config files use. Its type (the union of every algorithm's
spec, which JSON schemas and file:line messages follow) is taken from the registry when this module
is imported; values are validated against the registry as it is at validation time, so an algorithm
registered later (a test's, a plugin's) is accepted in files too, and written back by its own spec.

>>> parse_algorithm("tree:4")
TreeAlgorithm(name='tree', arity=4, segments=1)
>>> algorithm_label(parse_algorithm({"name": "hierarchical", "group_size": 8}))
'hierarchical:8'
"""

from __future__ import annotations

import functools
import operator
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import (
    Field,
    SerializeAsAny,
    TypeAdapter,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    WrapValidator,
)

from parplan.collectives.algorithm import AlgorithmSpecBase
from parplan.collectives.auto import AutoAlgorithm
from parplan.collectives.centralized import CentralizedAlgorithm
from parplan.collectives.double_binary_tree import DoubleBinaryTreeAlgorithm
from parplan.collectives.halving_doubling import HalvingDoublingAlgorithm
from parplan.collectives.hierarchical import HierarchicalAlgorithm
from parplan.collectives.registry import ALGORITHMS, get, validate_spec
from parplan.collectives.ring import RingAlgorithm
from parplan.collectives.tree import TreeAlgorithm

__all__ = [
    "AlgorithmSpec",
    "AutoAlgorithm",
    "CentralizedAlgorithm",
    "DoubleBinaryTreeAlgorithm",
    "HalvingDoublingAlgorithm",
    "HierarchicalAlgorithm",
    "RingAlgorithm",
    "TreeAlgorithm",
    "algorithm_label",
    "parse_algorithm",
]


def _validate(value: Any, handler: ValidatorFunctionWrapHandler) -> AlgorithmSpecBase:
    """Validate against the registry as it is now (see the module docstring)."""
    return validate_spec(value)


_NAMES = tuple(ALGORITHMS)
_ALGORITHM_UNION: Any = Annotated[
    functools.reduce(operator.or_, (a.spec_type for a in ALGORITHMS.values())),
    Field(discriminator="name"),
]
_SHORT_FORM: Any = Annotated[
    str,
    WithJsonSchema(
        {
            "type": "string",
            "pattern": rf"^({'|'.join(_NAMES)})(:[0-9]+)?$",
            "examples": ["ring", "tree:4", "centralized:0", "hierarchical:8"],
        }
    ),
]

if TYPE_CHECKING:
    AlgorithmSpec = AlgorithmSpecBase
else:
    AlgorithmSpec = Annotated[
        SerializeAsAny[_ALGORITHM_UNION],
        WrapValidator(_validate, json_schema_input_type=_SHORT_FORM | _ALGORITHM_UNION),
    ]
    """Any all-reduce algorithm spec; accepts the short string forms."""

_ADAPTER: TypeAdapter[Any] = TypeAdapter(AlgorithmSpec)


def parse_algorithm(value: str | dict[str, Any] | AlgorithmSpecBase) -> AlgorithmSpecBase:
    """Validate an algorithm from a short form or a mapping (raises pydantic ``ValidationError``)."""
    spec: AlgorithmSpecBase = _ADAPTER.validate_python(value)
    return spec


def algorithm_label(spec: AlgorithmSpecBase) -> str:
    """The short form of an algorithm spec, for tables: ``tree:4``, ``ring``, ``centralized:0``."""
    return get(spec.name).label(spec)
