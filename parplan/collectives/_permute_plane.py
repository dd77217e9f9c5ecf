"""The data plane of a permutation (an ``all_to_all``): run its steps on numpy arrays and prove it.

A reduction's data plane (:mod:`parplan.collectives.dataplane`) tracks which ranks' contributions
each element holds, at the same offset on every rank. An all-to-all moves elements to other
offsets (a step copies into a slot of the receiver's buffer, ``Schedule.dst_offset``) through
several buffers per rank (``Schedule.address_elements``; region 0 the send buffer, region 1 the
output, the rest scratch), so here every element carries its *provenance*: the rank and offset of
the input element it holds (``-1``: nothing yet). The checks are those of the reduction's data
plane, per element:

- a step may only send elements its sender holds, and must depend on every step whose write made
  up what it sends (``data``); with ``exact_deps`` every dependency must be ``data``, ``anti`` (a
  step that read or wrote elements this one overwrites) or ``order`` (shares a rank), never
  ``spurious``;
- with ``race_check``, every overwrite comes after, in the dependency order, each earlier read and
  write of those elements, so any execution order the dependencies allow gives the same result;
- at the end, rank ``j``'s slot ``r`` of its output holds rank ``r``'s block ``j``, element for
  element (rank ``j``'s own block ``j`` is copied locally before the first step).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from parplan.collectives.schedule import Schedule, all_to_all_block
from parplan.errors import CollectiveError

DEP_DATA, DEP_ANTI, DEP_ORDER, DEP_SPURIOUS = range(4)  # as dataplane.DEP_KINDS


def run_permutation(
    schedule: Schedule, inputs: list[np.ndarray], *, exact_deps: bool, race_check: bool
) -> tuple[list[np.ndarray], npt.NDArray[np.int8]]:
    """Run an all-to-all ``schedule`` on one array of ``num_elements`` per rank with every check
    of the module docstring; returns each rank's output buffer (``num_elements`` elements: the
    slots, then the input's leftover tail) and the kind of every dependency."""
    run = _Permutation(schedule, inputs, exact_deps=exact_deps)
    for j in range(schedule.num_steps):
        deps = run.dep_all[run.dep_off[j] : run.dep_off[j + 1]]
        run.check_dependencies(j, deps)
        if race_check:
            run.check_races(j, deps)
        run.apply(j)
    run.check_final()
    n = schedule.num_elements
    return [buffer[n : 2 * n].copy() for buffer in run.space], run.kinds


def reference_permutation(inputs: npt.NDArray[np.generic]) -> list[np.ndarray]:
    """What each rank's slots must hold, from the ``(p, n)`` inputs: rank ``j``'s slot ``r`` is rank
    ``r``'s block ``j``."""
    p, n = inputs.shape
    block = all_to_all_block(n, p)
    blocks = inputs[:, : p * block].reshape(p, p, block)  # [sender, receiver, element]
    return [blocks[:, j, :].reshape(-1).copy() for j in range(p)]


class _Permutation:
    """One run: every rank's address space, each element's provenance, last writer and readers."""

    def __init__(self, schedule: Schedule, inputs: list[np.ndarray], *, exact_deps: bool) -> None:
        p, n = schedule.num_ranks, schedule.num_elements
        self.schedule, self.exact_deps, self.name = schedule, exact_deps, schedule.algorithm
        size = max(schedule.address_elements, 2 * n)
        block = all_to_all_block(n, p)
        self.space: list[np.ndarray] = []
        self.origin: list[npt.NDArray[np.int64]] = []
        for r, values in enumerate(inputs):
            buffer = np.zeros(size, dtype=values.dtype)
            origin = np.full(size, -1, dtype=np.int64)
            buffer[:n] = values
            origin[:n] = r * n + np.arange(n)
            buffer[n : 2 * n] = values  # the output starts as a copy: its leftover tail stays so
            own = slice(r * block, (r + 1) * block)
            origin[n + r * block : n + (r + 1) * block] = origin[own]  # the local copy of block r
            self.space.append(buffer)
            self.origin.append(origin)
        self.writer = [np.full(size, -1, dtype=np.int64) for _ in range(p)]
        self.readers: list[dict[int, list[int]]] = [{} for _ in range(p)]
        self.ancestors: list[int] = []
        src_at, dst_at = schedule.offset.tolist(), schedule.dst_offset.tolist()
        self.steps = list(
            zip(
                schedule.src.tolist(),
                schedule.dst.tolist(),
                src_at,
                dst_at,
                schedule.length.tolist(),
                strict=True,
            )
        )
        self.dep_off = schedule.dep_offsets.tolist()
        self.dep_all = schedule.dep_indices.tolist()
        self.kinds = np.empty(len(self.dep_all), dtype=np.int8)

    def _kind(self, j: int, x: int, live: set[int]) -> int:
        s, d, _, b, length = self.steps[j]
        xs, xd, xa, xb, xl = self.steps[x]
        if x in live:
            return DEP_DATA
        if (xs == d and xa < b + length and b < xa + xl) or (xd == d and xb < b + length and b < xb + xl):
            return DEP_ANTI
        if xs in (s, d) or xd in (s, d):
            return DEP_ORDER
        if self.exact_deps:
            raise CollectiveError(
                f"{self.name}: step {j} depends on step {x}, which neither wrote data it sends, nor "
                f"used data it writes, nor shares a rank with it (spurious dependency)"
            )
        return DEP_SPURIOUS

    def check_dependencies(self, j: int, deps: list[int]) -> None:
        """Every live writer of the sent elements is a dependency; records each one's kind."""
        s, d, a, _, length = self.steps[j]
        writers = self.writer[s][a : a + length]
        live = {int(w) for w in np.unique(writers) if w >= 0}
        if self.exact_deps and len(set(deps)) != len(deps):
            raise CollectiveError(f"{self.name}: step {j} lists a dependency twice: {deps}")
        kinds = [self._kind(j, x, live) for x in deps]
        if deps:
            self.kinds[self.dep_off[j] : self.dep_off[j + 1]] = kinds
        lost = sorted(live - set(deps))
        if lost:
            raise CollectiveError(
                f"{self.name}: step {j} (rank {s} -> {d}) sends elements [{a}, {a + length}) written by "
                f"step(s) {lost} but does not depend on them (missing dependency)"
            )

    def check_races(self, j: int, deps: list[int]) -> None:
        """No overwrite races an earlier read or write of the same elements."""
        anc = 0
        for x in deps:
            anc |= self.ancestors[x] | (1 << x)
        self.ancestors.append(anc)
        s, d, a, b, length = self.steps[j]
        for e in range(a, a + length):
            self.readers[s].setdefault(e, []).append(j)
        for e in range(b, b + length):
            earlier = [*self.readers[d].get(e, []), int(self.writer[d][e])]
            for x in earlier:
                if x >= 0 and x != j and not (anc >> x) & 1:
                    raise CollectiveError(
                        f"{self.name}: race: step {j} writes element {e} of rank {d} that step {x} "
                        f"also uses, and neither depends on the other"
                    )
            self.readers[d][e] = []

    def apply(self, j: int) -> None:
        """Copy the elements of step ``j``, rejecting elements its sender does not hold."""
        s, d, a, b, length = self.steps[j]
        held = self.origin[s][a : a + length]
        if (held < 0).any():
            e = a + int(np.argmax(held < 0))
            raise CollectiveError(
                f"{self.name}: step {j} sends element {e} that rank {s} has not received yet"
            )
        self.space[d][b : b + length] = self.space[s][a : a + length]
        self.origin[d][b : b + length] = held
        self.writer[d][b : b + length] = j

    def check_final(self) -> None:
        """Rank ``j``'s slot ``r`` holds rank ``r``'s block ``j``, element for element."""
        p, n = self.schedule.num_ranks, self.schedule.num_elements
        block = all_to_all_block(n, p)
        for j in range(p):
            for r in range(p):
                got = self.origin[j][n + r * block : n + (r + 1) * block]
                want = r * n + j * block + np.arange(block)
                if not np.array_equal(got, want):
                    t = int(np.argmax(got != want))
                    source = int(got[t])
                    held = "nothing" if source < 0 else f"rank {source // n}'s element {source % n}"
                    raise CollectiveError(
                        f"{self.name}: rank {j} ends with slot {r} element {t} holding {held}, not rank "
                        f"{r}'s block {j} as an all_to_all defines"
                    )
