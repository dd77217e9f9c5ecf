"""The Schedule: an algorithm's transfers as a DAG of steps, stored as numpy arrays.

A step moves the elements ``[offset, offset + length)`` of rank ``src``'s copy of the tensor to rank
``dst``, which either adds them into its own copy (``reduce``) or overwrites its copy with them.
A step may start once every step in its dependency list has completed. Steps are stored in a
topological order (every dependency has a smaller index), so running them in index order is a valid
execution. Arrays, not objects, because a ring all-reduce at p = 4096 has 33 million steps.

The dependency lists are stored CSR-style: the deps of step ``i`` are
``dep_indices[dep_offsets[i]:dep_offsets[i + 1]]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, eq=False)
class Schedule:
    """The steps of one collective on ``num_ranks`` ranks and a tensor of ``num_elements`` elements.

    ``collective`` says what it computes: ``all_reduce``, ``reduce_scatter``, ``all_gather``,
    ``reduce`` (result at ``root``) or ``broadcast`` (from ``root``).
    ``phase`` labels each step with a small integer (e.g. 0 = reduce-scatter, 1 = all-gather) whose
    names are in ``phase_names``; reports and traces use it.
    """

    algorithm: str
    collective: str
    num_ranks: int
    num_elements: int
    src: IntArray
    dst: IntArray
    offset: IntArray
    length: IntArray
    reduce: BoolArray
    dep_offsets: IntArray
    dep_indices: IntArray
    phase: IntArray
    phase_names: tuple[str, ...] = ("all",)
    root: int | None = None
    meta: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.src)
        for name in ("dst", "offset", "length", "reduce", "phase"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"schedule array {name!r} has {len(getattr(self, name))} entries, want {n}")
        if len(self.dep_offsets) != n + 1:
            raise ValueError("dep_offsets must have one entry per step plus one")

    @property
    def num_steps(self) -> int:
        """How many transfers the schedule makes."""
        return len(self.src)

    def deps(self, step: int) -> IntArray:
        """The steps that must complete before ``step`` starts."""
        return self.dep_indices[self.dep_offsets[step] : self.dep_offsets[step + 1]]
