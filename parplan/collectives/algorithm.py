"""The interface every collective algorithm implements, and the figures its closed form takes.

An algorithm is one object, defined in its own module (``ring.ALL_REDUCE``, ``tree.ALL_REDUCE``,
``tree.REDUCE`` ...) and listed in :mod:`parplan.collectives.registry`, that answers every
question parplan asks about it, so no other module branches on algorithm names:

- which collective it computes (:attr:`Algorithm.collective`: ``all_reduce``, ``reduce_scatter``,
  ``all_gather``, ``reduce``, ``broadcast`` or ``all_to_all``) and its :attr:`~Algorithm.name` (unique per
  collective);
- its spec (:attr:`~Algorithm.spec_type`, a :class:`AlgorithmSpecBase` tagged by ``name``), the
  parameter its short form sets (``tree:4`` sets ``arity``), its label and table abbreviation;
- whether it takes rank groups (the ranks of each node), its schedule, its closed-form time on a
  uniform group, and the elements each rank sends and receives (its traffic volumes).

Adding an algorithm is a module with a subclass of :class:`Algorithm` and one ``register(...)``
line in the registry; the config union, the short forms, the analytic engine, the volumes, the
data-parallel expander and ``parplan collective`` pick it up from there.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from parplan.collectives.schedule import COLLECTIVES, IntArray, Schedule
from parplan.errors import CollectiveError
from parplan.spec import Spec

Traffic = tuple[IntArray, IntArray]
"""Per-rank (sent, received) element counts of a collective."""

Groups = Sequence[Sequence[int]]
"""Lists of ranks that partition ``0 .. p-1``, e.g. the ranks of each node."""


@dataclass(frozen=True)
class PairTraffic:
    """The elements a schedule moves between each ordered pair of ranks that exchange any
    (pairs sorted by ``src * p + dst``), how many steps it has and on how many channels: what
    the analytic mode needs to route an algorithm's traffic without holding its schedule."""

    src: IntArray
    dst: IntArray
    elements: IntArray
    steps: int
    channels: int = 1


def schedule_pair_traffic(schedule: Schedule) -> PairTraffic:
    """:class:`PairTraffic` aggregated from a built schedule (steps of no elements moved count
    as steps, and their pairs as pairs, as the schedule has them; switch ranks keep their ids
    ``num_ranks ..``)."""
    p = schedule.num_endpoints
    pair_id = schedule.src.astype(np.int64) * p + schedule.dst.astype(np.int64)
    pairs, inverse = np.unique(pair_id, return_inverse=True)
    elements = np.bincount(inverse, weights=schedule.length, minlength=len(pairs)).astype(np.int64)
    meta_channels = schedule.meta.get("channels", 1)
    channels = meta_channels if isinstance(meta_channels, int) and meta_channels > 0 else 1
    return PairTraffic(pairs // p, pairs % p, elements, schedule.num_steps, channels)


SPEC_MAX_SEGMENTS = 1024
"""Most pipeline segments a spec may ask for (per tree or channel): NCCL's chunks make a few hundred
at most, and each segment is a copy of the schedule's steps, so 10^4 would build for minutes."""
SPEC_MAX_CHANNELS = 64
"""Most channels a spec may ask for: NCCL's MAXCHANNELS."""


class AlgorithmSpecBase(Spec):
    """The base of every algorithm's spec: a frozen spec tagged by ``name`` (each algorithm's
    subclass narrows it to ``Literal["its name"]`` and adds its parameters with defaults)."""

    name: str


SpecT = TypeVar("SpecT", bound=AlgorithmSpecBase)

AlgorithmLike = str | Mapping[str, Any] | AlgorithmSpecBase
"""An algorithm as callers name it: a short form (``"tree:4"``), a mapping or a spec."""


@dataclass(frozen=True)
class UniformCost:
    """A uniform group as the closed forms see it (the engine's model, see
    :mod:`parplan.engine.analytic`): every message costs ``alpha_s`` plus its bytes times
    ``beta_s_per_byte`` at its fair share of bandwidth; a reduction costs ``gamma_s_per_byte`` per
    byte on the receiver. ``shared_port``: a rank's concurrent messages share one port (a switch)
    rather than a link per pair. ``intra_*``: the figures within groups where an algorithm tells
    groups apart (``None``: the same as between groups)."""

    alpha_s: float
    beta_s_per_byte: float
    gamma_s_per_byte: float = 0.0
    shared_port: bool = True
    intra_alpha_s: float | None = None
    intra_beta_s_per_byte: float | None = None


BANDWIDTH_FACTORS: dict[str, float] = {
    "all_reduce": 2.0,
    "reduce_scatter": 1.0,
    "all_gather": 1.0,
    "all_to_all": 1.0,
}
"""Bytes each rank must move, in units of ``(p-1)/p n``, per collective with such a bound (rooted
collectives: the root moves ``n``, see :func:`bandwidth_bound_bytes`)."""


def bandwidth_bound_bytes(collective: str, num_ranks: int, size_bytes: float) -> float:
    """Fewest bytes some rank must send or receive through its port: ``2(p-1)/p n`` for an
    all-reduce, ``(p-1)/p n`` for a reduce-scatter, all-gather or all-to-all, ``n`` at the root of a reduce
    or broadcast (none on one rank).

    >>> bandwidth_bound_bytes("all_reduce", 4, 100.0), bandwidth_bound_bytes("reduce", 4, 100.0)
    (150.0, 100.0)
    """
    if num_ranks <= 1:
        return 0.0
    factor = BANDWIDTH_FACTORS.get(collective)
    if factor is None:
        return float(size_bytes)
    return factor * (num_ranks - 1) / num_ranks * size_bytes


class Algorithm(ABC, Generic[SpecT]):
    """One collective algorithm: everything parplan needs to know about it, behind one object.

    Subclasses set the class attributes and implement :meth:`build`, :meth:`closed_form_s` and
    :meth:`traffic`; the defaults of the rest suit an algorithm without groups.
    """

    name: ClassVar[str]
    """The name files and the command line use (``tree``), unique within its collective."""
    collective: ClassVar[str] = "all_reduce"
    """What the schedules compute: one of :data:`~parplan.collectives.schedule.COLLECTIVES`."""
    spec_type: type[SpecT]
    """The pydantic spec: ``name: Literal[...]`` and the parameters, each with a default."""
    short_parameter: ClassVar[str | None] = None
    """The parameter the short form ``name:N`` sets (``tree:4`` is ``arity=4``), if any."""
    abbreviation: ClassVar[str | None] = None
    """A shorter name for table columns (``hd`` for ``halving_doubling``), if the name is long."""
    switch_capabilities: ClassVar[frozenset[str]] = frozenset()
    """What its schedules need of the cluster's switches (``nvls``, ``sharp``: a switch rank that
    reduces); only clusters declaring it can run them, so ``all`` leaves such algorithms out."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if getattr(cls, "collective", None) not in COLLECTIVES:  # a developer error
            raise TypeError(f"{cls.__name__}.collective must be one of {', '.join(COLLECTIVES)}")

    # -- spec ------------------------------------------------------------------------------------

    def default_spec(self) -> SpecT:
        """The spec with every parameter at its default."""
        return self.spec_type.model_validate({"name": self.name})

    def label(self, spec: SpecT) -> str:
        """The short form of ``spec`` for tables and plan names: ``tree:4``, ``ring``."""
        key = self.short_parameter
        value = getattr(spec, key) if key else None
        return f"{self.name}:{value}" if value is not None else self.name

    @property
    def column_label(self) -> str:
        """The name in table columns: the abbreviation if there is one."""
        return self.abbreviation or self.name

    @property
    def usage(self) -> str:
        """How the short form is written, for help texts: ``tree[:ARITY]``, ``ring[:CHANNELS]``."""
        key = self.short_parameter
        return f"{self.name}[:{key.upper()}]" if key else self.name

    def variants(self, num_ranks: int) -> tuple[SpecT, ...]:
        """Specs that exercise the parameters on ``num_ranks`` ranks, for checks parametrized over
        the registry; the closed form of each must equal the event engine on a uniform group
        without reductions (gamma = 0). The default spec alone unless a subclass adds more."""
        return (self.default_spec(),)

    # -- behaviour -------------------------------------------------------------------------------

    def uses_groups(self, spec: SpecT) -> bool:
        """Whether :meth:`build` uses rank groups (the ranks of each node) when they are given;
        plans compute the groups only for algorithms that use them."""
        return False

    @abstractmethod
    def build(self, spec: SpecT, num_ranks: int, num_elements: int, groups: Groups | None = None) -> Schedule:
        """The schedule on ``num_ranks`` ranks and ``num_elements`` elements (raises
        :class:`CollectiveError` for impossible parameters)."""

    def time_s(
        self,
        spec: SpecT,
        num_ranks: int,
        size_bytes: float,
        cost: UniformCost,
        groups: Groups | None = None,
    ) -> float:
        """Seconds on ``num_ranks`` ranks of a uniform group for ``size_bytes`` bytes: 0 on one
        rank or nothing to move, else :meth:`closed_form_s`."""
        if num_ranks < 1:
            raise CollectiveError(f"a collective needs at least one rank, got {num_ranks}")
        if num_ranks == 1 or size_bytes <= 0:
            return 0.0
        return self.closed_form_s(spec, num_ranks, float(size_bytes), cost, groups)

    @abstractmethod
    def closed_form_s(
        self, spec: SpecT, num_ranks: int, size_bytes: float, cost: UniformCost, groups: Groups | None
    ) -> float:
        """The closed form for ``num_ranks >= 2`` and ``size_bytes > 0`` (see :meth:`time_s`)."""

    def closed_form_estimate(self, spec: SpecT, num_ranks: int, groups: Groups | None = None) -> str:
        """Why the closed form is only an estimate of the engine on a uniform group with these
        ``groups`` ("" when it is exact, the default). The analytic mode checks an estimate
        against the engine and says so where they differ."""
        return ""

    def pair_traffic(
        self, spec: SpecT, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> PairTraffic:
        """The elements moved between each pair of ranks, as :func:`schedule_pair_traffic` of
        :meth:`build`; algorithms whose schedules are large and regular (the ring: p^2 steps)
        override it with the same figures computed without building the schedule."""
        return schedule_pair_traffic(self.build(spec, num_ranks, num_elements, groups))

    @abstractmethod
    def traffic(
        self, spec: SpecT, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        """Per-rank (sent, received) elements, derived from the definition rather than from the
        schedule, so tests can hold the schedule's byte counts against it."""


def zero_traffic(num_ranks: int) -> Traffic:
    """No rank sends or receives anything."""
    return np.zeros(num_ranks, dtype=np.int64), np.zeros(num_ranks, dtype=np.int64)
