"""All-reduce algorithm specs: a tagged union on ``name`` with short forms.

Files may write a mapping (``{name: tree, arity: 4}``) or a short form: ``"ring"``, ``"ring:8"``
(8 channels), ``"tree:4"``, ``"centralized:0"``, ``"halving_doubling"``, ``"double_binary_tree"``,
``"hierarchical"``, ``"hierarchical:8"`` (groups of 8 ranks). :func:`parse_algorithm` reads either.

>>> parse_algorithm("tree:4")
TreeAlgorithm(name='tree', arity=4, segments=1)
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, TypeAdapter, WithJsonSchema

from parplan.spec import Spec


class CentralizedAlgorithm(Spec):
    """Every rank sends to ``root``, which reduces and sends the result back."""

    name: Literal["centralized"]
    root: int = Field(default=0, ge=0)


class TreeAlgorithm(Spec):
    """Reduce up a k-ary tree and broadcast back down, optionally pipelined in ``segments``."""

    name: Literal["tree"]
    arity: int = Field(default=2, ge=2)
    segments: int = Field(default=1, ge=1)


class RingAlgorithm(Spec):
    """Reduce-scatter then all-gather around a ring, p slices, on ``channels`` rings at once.

    Each channel (NCCL's word) is a ring over every rank carrying its own part of the tensor; the
    rings go through each node's devices consecutively, each entering and leaving the node through
    a different device, so several channels use several NICs per node. ``None`` (the default)
    picks one ring per device of the largest node (NCCL on a DGX runs about that many), or one
    ring without nodes to follow. Short form ``"ring:8"`` for 8 channels.
    """

    name: Literal["ring"]
    channels: int | None = Field(default=None, ge=1)


class HalvingDoublingAlgorithm(Spec):
    """Recursive halving reduce-scatter then recursive doubling all-gather (Rabenseifner)."""

    name: Literal["halving_doubling"]


class DoubleBinaryTreeAlgorithm(Spec):
    """Two complementary binary trees, each carrying half the tensor (NCCL's tree algorithm),
    optionally pipelined in ``segments`` per tree (NCCL pipelines in chunks)."""

    name: Literal["double_binary_tree"]
    segments: int = Field(default=1, ge=1)


class HierarchicalAlgorithm(Spec):
    """Reduce within each group, ring among group leaders, broadcast within groups.

    Groups come from the cluster (devices sharing a node) unless ``group_size`` is given.
    """

    name: Literal["hierarchical"]
    group_size: int | None = Field(default=None, ge=1)


ALGORITHM_NAMES: tuple[str, ...] = (
    "centralized",
    "tree",
    "ring",
    "halving_doubling",
    "double_binary_tree",
    "hierarchical",
)
_SHORT_PARAMETER = {"centralized": "root", "tree": "arity", "ring": "channels", "hierarchical": "group_size"}


def _expand_short_form(value: Any) -> Any:
    """Turn ``"tree:4"`` into ``{"name": "tree", "arity": 4}``; leave mappings alone."""
    if not isinstance(value, str):
        return value
    name, _, arg = value.strip().partition(":")
    if name not in ALGORITHM_NAMES:
        raise ValueError(f"unknown algorithm {name!r}; valid: {', '.join(ALGORITHM_NAMES)}")
    if not arg:
        return {"name": name}
    key = _SHORT_PARAMETER.get(name)
    if key is None:
        raise ValueError(f"algorithm {name!r} takes no parameter, got {value!r}")
    try:
        number = int(arg)
    except ValueError:
        raise ValueError(f"{value!r}: the {key} after ':' must be an integer") from None
    return {"name": name, key: number}


_ALGORITHM_UNION = Annotated[
    CentralizedAlgorithm
    | TreeAlgorithm
    | RingAlgorithm
    | HalvingDoublingAlgorithm
    | DoubleBinaryTreeAlgorithm
    | HierarchicalAlgorithm,
    Field(discriminator="name"),
]
_SHORT_FORM = Annotated[
    str,
    WithJsonSchema(
        {
            "type": "string",
            "pattern": rf"^({'|'.join(ALGORITHM_NAMES)})(:[0-9]+)?$",
            "examples": ["ring", "tree:4", "centralized:0", "hierarchical:8"],
        }
    ),
]

AlgorithmSpec = Annotated[
    _ALGORITHM_UNION,
    BeforeValidator(_expand_short_form, json_schema_input_type=_SHORT_FORM | _ALGORITHM_UNION),
]
"""Any all-reduce algorithm spec; accepts the short string forms."""

_ADAPTER: TypeAdapter[Any] = TypeAdapter(AlgorithmSpec)


def parse_algorithm(value: str | dict[str, Any]) -> Any:
    """Validate an algorithm from a short form or a mapping (raises pydantic ``ValidationError``)."""
    return _ADAPTER.validate_python(value)


def algorithm_label(spec: Any) -> str:
    """The short form of an algorithm spec, for tables: ``tree:4``, ``ring``, ``centralized:0``."""
    key = _SHORT_PARAMETER.get(spec.name)
    value = getattr(spec, key) if key else None
    return f"{spec.name}:{value}" if value is not None else str(spec.name)
