"""Placement: which device each rank of a collective runs on, and how the ranks group.

Rank ``r`` runs on ``placement.devices[r]``. Groups partition the ranks (every rank in exactly one
group) and are what hierarchical algorithms reduce within: the ranks on one node, the replicas of one
pipeline stage, or fixed-size blocks.

>>> groups_of_size(5, 2)
[[0, 1], [2, 3], [4]]
>>> groups_by_stage(num_replicas=2, num_stages=3)
[[0, 3], [1, 4], [2, 5]]
>>> groups_by_key(["a", "b", "a", "c"])
[[0, 2], [1], [3]]
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from parplan.collectives.groups import check_groups
from parplan.errors import TopologyError
from parplan.topology.network import Network


@dataclass(frozen=True)
class Placement:
    """Ranks on devices (``devices[rank]``) and a partition of the ranks into ``groups``."""

    devices: tuple[str, ...]
    groups: tuple[tuple[int, ...], ...]
    _rank: dict[str, int] = field(init=False, repr=False, compare=False)
    _group: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.devices:
            raise TopologyError("a placement needs at least one device")
        _check_distinct(self.devices)
        check_groups(self.groups, len(self.devices), error=TopologyError)
        group = [0] * len(self.devices)
        for i, g in enumerate(self.groups):
            for r in g:
                group[r] = i
        object.__setattr__(self, "_rank", {d: r for r, d in enumerate(self.devices)})
        object.__setattr__(self, "_group", tuple(group))

    @property
    def size(self) -> int:
        """Number of ranks."""
        return len(self.devices)

    @property
    def leaders(self) -> tuple[int, ...]:
        """The first rank of each group, in group order (the ranks that talk across groups)."""
        return tuple(g[0] for g in self.groups)

    def device_of(self, rank: int) -> str:
        """The device rank ``rank`` runs on."""
        if not 0 <= rank < len(self.devices):
            raise TopologyError(f"rank {rank} out of range 0..{len(self.devices) - 1}")
        return self.devices[rank]

    def rank_of(self, device: str) -> int:
        """The rank that runs on ``device``."""
        try:
            return self._rank[device]
        except KeyError:
            raise TopologyError(f"device {device!r} has no rank in this placement") from None

    def group_of(self, rank: int) -> int:
        """Index of the group holding ``rank``."""
        if not 0 <= rank < len(self.devices):
            raise TopologyError(f"rank {rank} out of range 0..{len(self.devices) - 1}")
        return self._group[rank]

    def with_groups(self, groups: Sequence[Sequence[int]]) -> Placement:
        """The same ranks with other groups."""
        return Placement(self.devices, tuple(tuple(g) for g in groups))


def place(
    network: Network,
    devices: Sequence[str] | None = None,
    *,
    count: int | None = None,
    groups: Sequence[Sequence[int]] | None = None,
) -> Placement:
    """Map ranks to devices of ``network``.

    ``devices`` lists the device of each rank (default: the network's devices in order); ``count``
    keeps the first ``count`` of them. ``groups`` defaults to the ranks grouped by node
    (:func:`groups_by_node`). Unknown or repeated devices raise :class:`TopologyError`.
    """
    chosen = list(network.devices if devices is None else devices)
    if count is not None:
        if count < 1:
            raise TopologyError(f"a placement needs at least one rank, asked for {count}")
        if count > len(chosen):
            raise TopologyError(f"asked for {count} ranks but only {len(chosen)} devices are available")
        chosen = chosen[:count]
    for d in chosen:
        network.device_index(d)  # raises for an unknown device
    _check_distinct(chosen)
    grouping = groups_by_node(network, chosen) if groups is None else groups
    return Placement(tuple(chosen), tuple(tuple(g) for g in grouping))


def groups_by_node(network: Network, devices: Sequence[str]) -> list[list[int]]:
    """Ranks grouped by their device's ``group`` (node), groups ordered by first rank.

    A device without a group forms a group of its own, as in :meth:`Network.groups`.
    """
    keys: list[Hashable] = []
    for d in devices:
        info = network.device(d)
        keys.append(("group", info.group) if info.group else ("device", d))
    return groups_by_key(keys)


def groups_by_key(keys: Sequence[Hashable]) -> list[list[int]]:
    """Rank ``r`` goes to the group of ``keys[r]``; groups ordered by their first rank."""
    out: dict[Hashable, list[int]] = {}
    for rank, key in enumerate(keys):
        out.setdefault(key, []).append(rank)
    return list(out.values())


def groups_of_size(p: int, k: int) -> list[list[int]]:
    """Consecutive blocks of ``k`` ranks out of ``p`` (the last block is shorter when ``k`` does not
    divide ``p``)."""
    if p < 1:
        raise TopologyError(f"need at least one rank, got {p}")
    if k < 1:
        raise TopologyError(f"group size must be >= 1, got {k}")
    return [list(range(start, min(start + k, p))) for start in range(0, p, k)]


def groups_by_stage(num_replicas: int, num_stages: int) -> list[list[int]]:
    """For a 2-D plan laid out replica-major (rank = replica x num_stages + stage), the ranks holding
    each pipeline stage: ``groups[s]`` are the replicas of stage ``s`` that all-reduce together.

    The replicas themselves are ``groups_of_size(num_replicas * num_stages, num_stages)``.
    """
    if num_replicas < 1 or num_stages < 1:
        raise TopologyError(f"need >= 1 replica and stage, got {num_replicas} and {num_stages}")
    return [[r * num_stages + s for r in range(num_replicas)] for s in range(num_stages)]


def _check_distinct(devices: Sequence[str]) -> None:
    seen: set[str] = set()
    for d in devices:
        if d in seen:
            raise TopologyError(f"device {d!r} is placed twice; each rank needs its own device")
        seen.add(d)
