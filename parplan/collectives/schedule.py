"""The Schedule: an algorithm's transfers as a DAG of steps, stored as numpy arrays.

A step moves the elements ``[offset, offset + length)`` of rank ``src``'s copy of the tensor to rank
``dst``, which either adds them into its own copy (``reduce``) or overwrites its copy with them.
A step may start once every step in its dependency list has completed. Steps are stored in a
topological order (every dependency has a smaller index), so running them in index order is a valid
execution. Arrays, not objects, because a ring all-reduce at p = 4096 has 33 million steps.

The dependency lists are stored CSR-style: the deps of step ``i`` are
``dep_indices[dep_offsets[i]:dep_offsets[i + 1]]``.

Dtypes: element counts (``offset``, ``length``) are int64; step indices and dependency offsets
(``dep_offsets``, ``dep_indices``) and rank ids (``src``, ``dst``) are int32 and ``phase`` is int8,
which keeps a ring all-reduce at p = 4096 (33.5 M steps) near 1.1 GB instead of 1.9 GB. The
constructor converts any integer arrays it is given to these dtypes (a ``ValueError`` where step
indices would not fit int32).

Switch ranks (in-network reduction: NVLS on an NVSwitch, CollNet/SHARP on an InfiniBand switch):
a schedule may put reducing switches in the loop as extra ranks ``num_ranks .. num_ranks + S - 1``,
one per entry of :attr:`Schedule.switches`. A switch rank starts with zeros and no contribution of
its own, may be reduced into and may send what it holds, and has no output to check; the data plane
proves schedules with switch ranks like any other (:mod:`parplan.collectives.dataplane`). Each
:class:`SwitchRank` names the capability it needs (``nvls`` / ``sharp``) and the ranks it serves,
which is all lowering needs to find the switch of the cluster that plays it
(:func:`parplan.plan.collective.lower_schedule`). Schedules without switches have ``switches=()``
and are exactly what they were.

Data layout conventions of the collectives: a ``reduce_scatter`` leaves rank ``r`` with chunk ``r``
of :func:`chunk_bounds` ``(num_elements, num_ranks)`` fully reduced; an ``all_gather`` starts with
rank ``r`` holding only that chunk; ``reduce`` and ``broadcast`` use the whole tensor at ``root``.

An ``all_to_all`` is a permutation, not a reduction: rank ``r``'s ``n`` elements are ``p`` blocks of
:func:`all_to_all_block` ``(n, p)`` elements (``n // p``: like nccl-tests' alltoall, the count is
rounded down to a multiple of the ranks and the ``n mod p`` elements left over are not moved); block
``j`` goes to rank ``j``, which ends with block ``r`` of every rank ``r`` in slot ``r``, in rank
order. A step then copies into a *slot of the receiver's output*: its ``offset`` addresses the
sender's buffers and ``meta["dst_offset"]`` (one entry per step, :attr:`Schedule.dst_offset`) the
receiver's. Each rank has ``meta["regions"]`` buffers of ``n`` elements laid end to end
(:attr:`Schedule.address_elements`): region 0 is the send buffer (read only), region 1 the receive
buffer (the output), further regions are scratch for data passing through (Bruck). A rank's own
block ``r`` is copied into its slot ``r`` locally, which moves nothing over the network, so no step
does it (the data plane puts it there before the first step).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
StepArray = npt.NDArray[np.int32] | npt.NDArray[np.int64]
"""Step indices: int32 as a schedule stores them; builders may hand over int64."""
RankArray = npt.NDArray[np.int32]
PhaseArray = npt.NDArray[np.int8]
BoolArray = npt.NDArray[np.bool_]

COLLECTIVES: tuple[str, ...] = (
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "reduce",
    "broadcast",
    "all_to_all",
)
"""The collectives a schedule may compute."""

STEP_DTYPES: dict[str, type] = {
    "src": np.int32,
    "dst": np.int32,
    "offset": np.int64,
    "length": np.int64,
    "reduce": np.bool_,
    "dep_offsets": np.int32,
    "dep_indices": np.int32,
    "phase": np.int8,
}


_STEP_MAX = int(np.iinfo(np.int32).max)
"""Step indices and dependency offsets are int32: 2^31 steps would need far more memory than any
machine this runs on (about 25 bytes each)."""

SWITCH_CAPABILITIES: tuple[str, ...] = ("nvls", "sharp")
"""What a switch rank may need of its switch: NVLink SHARP (an NVSwitch that reduces, inside a
node) or InfiniBand SHARP (a network switch that reduces, across nodes)."""


@dataclass(frozen=True)
class SwitchRank:
    """A reducing switch in a schedule's loop: its ``capability`` (one of
    :data:`SWITCH_CAPABILITIES`) and the ``serves`` ranks that send to it or receive from it (the
    GPUs of one node for NVLS; one NIC-owning rank per node for SHARP)."""

    capability: str
    serves: tuple[int, ...]


def chunk_bounds(num_elements: int, num_chunks: int) -> IntArray:
    """Offsets of ``num_chunks`` contiguous chunks of near-equal size (``num_chunks + 1`` entries).

    The first ``num_elements % num_chunks`` chunks hold one element more than the others, so sizes
    differ by at most one and chunks may be empty when there are fewer elements than chunks.

    >>> chunk_bounds(10, 4).tolist()
    [0, 3, 6, 8, 10]
    """
    if num_chunks < 1:
        raise ValueError(f"num_chunks must be >= 1, got {num_chunks}")
    base, extra = divmod(num_elements, num_chunks)
    sizes = np.full(num_chunks, base, dtype=np.int64)
    sizes[:extra] += 1
    bounds = np.zeros(num_chunks + 1, dtype=np.int64)
    np.cumsum(sizes, out=bounds[1:])
    return bounds


def all_to_all_block(num_elements: int, num_ranks: int) -> int:
    """Elements of each block of an all-to-all of ``num_elements`` per rank on ``num_ranks`` ranks:
    ``n // p`` (the ``n mod p`` elements left over stay where they are).

    >>> all_to_all_block(10, 4), all_to_all_block(3, 4)
    (2, 0)
    """
    return num_elements // max(num_ranks, 1)


@dataclass(frozen=True, eq=False)
class Schedule:
    """The steps of one collective on ``num_ranks`` ranks and a tensor of ``num_elements`` elements.

    ``collective`` says what it computes: ``all_reduce``, ``reduce_scatter``, ``all_gather``,
    ``reduce`` (result at ``root``) or ``broadcast`` (from ``root``).
    ``phase`` labels each step with a small integer (e.g. 0 = reduce-scatter, 1 = all-gather) whose
    names are in ``phase_names``; reports and traces use it. ``switches`` are the switch ranks
    ``num_ranks ..`` (see the module docstring); steps may name them as ``src`` or ``dst``.
    """

    algorithm: str
    collective: str
    num_ranks: int
    num_elements: int
    src: RankArray
    dst: RankArray
    offset: IntArray
    length: IntArray
    reduce: BoolArray
    dep_offsets: StepArray
    dep_indices: StepArray
    phase: PhaseArray
    phase_names: tuple[str, ...] = ("all",)
    root: int | None = None
    meta: dict[str, object] = field(default_factory=dict)
    switches: tuple[SwitchRank, ...] = ()

    def __post_init__(self) -> None:
        for name in ("dep_offsets", "dep_indices"):
            values = np.asarray(getattr(self, name))
            wide = len(values) and values.dtype != np.int32
            if wide and max(-int(values.min()), int(values.max())) > _STEP_MAX:
                raise ValueError(f"schedule {name} beyond int32: a schedule holds at most {_STEP_MAX} steps")
        for name, dtype in STEP_DTYPES.items():
            object.__setattr__(self, name, np.ascontiguousarray(getattr(self, name), dtype=dtype))
        n = len(self.src)
        for name in ("dst", "offset", "length", "reduce", "phase"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"schedule array {name!r} has {len(getattr(self, name))} entries, want {n}")
        if len(self.dep_offsets) != n + 1:
            raise ValueError("dep_offsets must have one entry per step plus one")

    @property
    def num_endpoints(self) -> int:
        """Ranks plus switch ranks: every id a step may name."""
        return self.num_ranks + len(self.switches)

    @property
    def address_elements(self) -> int:
        """Elements a step may address on a rank: ``num_elements`` times ``meta["regions"]`` (1
        unless the schedule keeps several buffers per rank, as an all-to-all does)."""
        regions = self.meta.get("regions", 1)
        return self.num_elements * (regions if isinstance(regions, int) and regions > 0 else 1)

    @property
    def dst_offset(self) -> IntArray:
        """Where each step's elements land on the receiver: ``meta["dst_offset"]`` where the
        schedule has it (an all-to-all), else the step's own ``offset``."""
        moved = self.meta.get("dst_offset")
        return self.offset if moved is None else np.asarray(moved, dtype=np.int64)

    @property
    def num_steps(self) -> int:
        """How many transfers the schedule makes."""
        return len(self.src)

    def deps(self, step: int) -> StepArray:
        """The steps that must complete before ``step`` starts."""
        return self.dep_indices[self.dep_offsets[step] : self.dep_offsets[step + 1]]

    @property
    def dep_counts(self) -> IntArray:
        """How many dependencies each step has."""
        return np.diff(self.dep_offsets).astype(np.int64)

    @property
    def nbytes(self) -> int:
        """Memory held by the step arrays, in bytes."""
        return sum(int(getattr(self, name).nbytes) for name in STEP_DTYPES)

    def validate(self) -> None:
        """Check the structure (vectorised): ranks and ranges in bounds, no self-sends, every
        dependency an earlier step. Raises ``ValueError`` naming the first offending step."""
        n = self.num_steps
        p, size = self.num_endpoints, self.address_elements
        if self.collective not in COLLECTIVES:
            raise ValueError(f"unknown collective {self.collective!r}; valid: {', '.join(COLLECTIVES)}")
        for i, switch in enumerate(self.switches):
            if switch.capability not in SWITCH_CAPABILITIES:
                raise ValueError(f"switch rank {self.num_ranks + i}: unknown capability {switch.capability}")
            if not switch.serves or any(not 0 <= r < self.num_ranks for r in switch.serves):
                raise ValueError(f"switch rank {self.num_ranks + i} serves no ranks or ranks out of range")
        if len(self.dst_offset) != n:
            raise ValueError(f"meta['dst_offset'] has {len(self.dst_offset)} entries, want {n}")
        checks: list[tuple[str, BoolArray]] = [
            ("src out of range", (self.src < 0) | (self.src >= p)),
            ("dst out of range", (self.dst < 0) | (self.dst >= p)),
            ("sends to itself", self.src == self.dst),
            ("negative range", (self.offset < 0) | (self.length < 0)),
            ("range past the tensor", self.offset + self.length > size),
            ("destination past the tensor", (self.dst_offset < 0) | (self.dst_offset + self.length > size)),
            ("unknown phase", (self.phase < 0) | (self.phase >= len(self.phase_names))),
        ]
        for what, bad in checks:
            if bad.any():
                raise ValueError(f"step {int(np.argmax(bad))}: {what}")
        counts = self.dep_counts
        if self.dep_offsets[0] != 0 or (counts < 0).any() or self.dep_offsets[-1] != len(self.dep_indices):
            raise ValueError("dep_offsets must start at 0, never decrease and end at len(dep_indices)")
        step_of = np.repeat(np.arange(n, dtype=np.int64), counts)
        bad = (self.dep_indices < 0) | (self.dep_indices >= step_of)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(
                f"step {int(step_of[i])} depends on step {int(self.dep_indices[i])}, which is not earlier"
            )
