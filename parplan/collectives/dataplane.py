"""The data plane: run a Schedule on real numpy arrays, one per rank, and prove it right.

:func:`run_schedule` executes the steps in index order (a topological order) on copies of the
inputs and checks, step by step, that the schedule is sound *as a DAG*, not only as a sequence:

- **Exact dependencies.** For every element a step sends, the steps whose writes make up the
  sender's current value (the last overwrite of it and every reduction into it since) must all be
  in the step's dependency list: a missing one is an error. So the engine, which only sees the
  dependencies, cannot start a send before its data exists. With ``exact_deps=True`` (the
  default) every listed dependency must also be legitimate, one of (:data:`DEP_KINDS`):

  - ``data``: such a writer of data the step sends;
  - ``anti``: a step that read or wrote elements this step overwrites or adds into (buffer reuse
    needs it; two reductions into the same elements commute and need none);
  - ``order``: program order, an earlier step that shares a rank with this one (its sender or
    receiver sends or receives in both). A real rank runs its sends and receives in the order of
    its program, e.g. one blocking sendrecv per round in halving-doubling, or a pipelined tree's
    segment ``s + 1`` after segment ``s`` on the same link; such dependencies serialise only the
    rank's own operations.

  Anything else, a dependency between steps that share no rank, is spurious: it would make a
  rank wait on traffic between other ranks, a false serialisation the engine would time.
  :attr:`RunResult.dep_kinds` says which kind each dependency is (the first that applies, in the
  order above).
- **Contributions.** Each (rank, element) carries a bitmask of the ranks whose input it contains.
  A step may not send an element its sender holds nothing of (e.g. an all-gather chunk not yet
  received), a reduction may not add a contribution the receiver already has (double counting),
  and at the end every output element must hold exactly the contributions the collective defines
  (all ``p`` for an all-reduce, exactly once each).
- **No races** (schedules of at most ``race_check_limit`` steps): every write to an element must
  come after, in the dependency order, each earlier read of it and its last overwrite (two
  reductions into the same element commute and may run concurrently). With this, every execution
  order the dependencies allow computes the same result as the index order checked here.

Any violation raises :class:`~parplan.errors.CollectiveError` naming the step. Elements are
tracked in *atoms*, the maximal ranges no step boundary cuts, so the bookkeeping costs per step,
not per element.

An ``all_to_all`` is a permutation, not a reduction: its steps copy into a slot of the receiver's
buffer, so :mod:`parplan.collectives._permute_plane` runs it with the same checks, per element.

Switch ranks (ids ``num_ranks ..``, :class:`~parplan.collectives.schedule.SwitchRank`) take part like
ranks, but start with zeros and no contribution (they only send what was reduced into them), have
no output and get no array from the caller. Bytes moved are counted per endpoint (sent, received,
reduced into: the ranks, then the switch ranks), per step and per phase.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from parplan.collectives._permute_plane import reference_permutation, run_permutation
from parplan.collectives._races import check_races as _check_races
from parplan.collectives.schedule import IntArray, Schedule, all_to_all_block, chunk_bounds
from parplan.errors import CollectiveError

Op = Literal["sum", "mean"]
REDUCING = ("all_reduce", "reduce_scatter", "reduce")

DEP_KINDS: tuple[str, ...] = ("data", "anti", "order", "spurious")
"""Kinds of dependency, by code in :attr:`RunResult.dep_kinds` (see the module docstring);
``spurious`` occurs only with ``exact_deps=False``."""
DEP_DATA, DEP_ANTI, DEP_ORDER, DEP_SPURIOUS = range(4)


@dataclass(frozen=True, eq=False)
class RunResult:
    """What a run produced: the final array of every rank and the bytes it moved.

    ``arrays`` holds the ranks' arrays only; the byte counts cover every endpoint, the switch
    ranks after the ranks (``len(bytes_sent) == schedule.num_endpoints``).
    ``bytes_sent[r]`` / ``bytes_received[r]`` count rank ``r``'s outgoing / incoming step payloads;
    ``bytes_reduced[r]`` the part of ``bytes_received[r]`` it added into its copy (gamma work).
    ``race_checked`` says whether the schedule was small enough for the race check.
    ``dep_kinds[i]`` is the kind (an index into :data:`DEP_KINDS`) of the dependency
    ``schedule.dep_indices[i]``.
    """

    arrays: list[np.ndarray]
    element_size_bytes: int
    bytes_sent: IntArray
    bytes_received: IntArray
    bytes_reduced: IntArray
    step_bytes: IntArray
    phase_bytes: dict[str, int]
    race_checked: bool
    dep_kinds: npt.NDArray[np.int8]


def output_region(schedule: Schedule, rank: int) -> tuple[int, int] | None:
    """The element range ``[lo, hi)`` of ``rank``'s final array the collective defines, or None.

    All-reduce, all-gather and broadcast define every rank's whole tensor, reduce only the root's,
    reduce-scatter rank ``r``'s chunk ``r`` of ``chunk_bounds(n, p)``, all-to-all its ``p`` slots.
    """
    n, p = schedule.num_elements, schedule.num_ranks
    if schedule.collective == "all_to_all":
        return 0, p * all_to_all_block(n, p)
    if schedule.collective == "reduce":
        return (0, n) if rank == schedule.root else None
    if schedule.collective == "reduce_scatter":
        bounds = chunk_bounds(n, p)
        return int(bounds[rank]), int(bounds[rank + 1])
    return 0, n


def reference_outputs(
    schedule: Schedule, arrays: Sequence[np.ndarray], *, op: Op = "sum"
) -> list[np.ndarray | None]:
    """What each rank's :func:`output_region` must hold, computed directly from the inputs.

    Integer sums are taken in the inputs' dtype (wrapping like the data plane's additions, so the
    comparison stays exact); means divide by ``p`` in float64 for integers.
    """
    p, n = schedule.num_ranks, schedule.num_elements
    stack = np.stack([np.asarray(a) for a in arrays]) if p else np.zeros((0, n))
    if schedule.collective == "all_to_all":
        return list(reference_permutation(stack))
    if schedule.collective in REDUCING:
        total = np.add.reduce(stack, axis=0, dtype=stack.dtype)
        if op == "mean":
            total = total / p if np.issubdtype(stack.dtype, np.integer) else total / stack.dtype.type(p)
        full = total
    elif schedule.collective == "all_gather":
        bounds = chunk_bounds(n, p)
        full = np.concatenate([stack[r, bounds[r] : bounds[r + 1]] for r in range(p)])
    else:
        full = stack[schedule.root if schedule.root is not None else 0]
    out: list[np.ndarray | None] = []
    for r in range(p):
        region = output_region(schedule, r)
        out.append(None if region is None else full[region[0] : region[1]].copy())
    return out


def _bit(rank: int, words: int) -> npt.NDArray[np.uint64]:
    row = np.zeros(words, dtype=np.uint64)
    row[rank // 64] = np.uint64(1) << np.uint64(rank % 64)
    return row


def _ranks_in(mask_row: npt.NDArray[np.uint64]) -> list[int]:
    out: list[int] = []
    for w, word in enumerate(mask_row.tolist()):
        out.extend(w * 64 + b for b in range(64) if (int(word) >> b) & 1)
    return out


def run_schedule(
    schedule: Schedule,
    arrays: Sequence[np.ndarray],
    *,
    op: Op = "sum",
    element_size_bytes: int | None = None,
    exact_deps: bool = True,
    race_check_limit: int = 20_000,
) -> RunResult:
    """Run ``schedule`` on one 1-D array per rank (inputs are not modified) and check it.

    ``op="mean"`` divides the reduced outputs by ``p`` (integers become float64); it only applies
    to reducing collectives. ``element_size_bytes`` defaults to the arrays' item size.
    For ``all_gather`` rank ``r``'s input matters only in its chunk ``r``; for ``broadcast``
    only the root's input matters.
    """
    p, n = schedule.num_ranks, schedule.num_elements
    if op not in ("sum", "mean"):
        raise CollectiveError(f"op must be 'sum' or 'mean', got {op!r}")
    if op == "mean" and schedule.collective not in REDUCING:
        raise CollectiveError(f"op='mean' applies to reducing collectives, not {schedule.collective}")
    if len(arrays) != p:
        raise CollectiveError(f"{schedule.algorithm} has {p} ranks but {len(arrays)} arrays were given")
    data = [np.array(a, copy=True) for a in arrays]
    dtypes = {a.dtype for a in data}
    if len(dtypes) > 1:
        raise CollectiveError(f"all ranks' arrays must share one dtype, got {sorted(map(str, dtypes))}")
    for r, a in enumerate(data):
        if a.ndim != 1 or len(a) != n:
            raise CollectiveError(f"rank {r}'s array has shape {a.shape}, want ({n},)")
        if not np.issubdtype(a.dtype, np.number):
            raise CollectiveError(f"rank {r}'s array has non-numeric dtype {a.dtype}")
    itemsize = data[0].dtype.itemsize if data else 8
    data += [np.zeros(n, dtype=data[0].dtype if data else np.float64) for _ in schedule.switches]
    element_size = itemsize if element_size_bytes is None else int(element_size_bytes)
    try:
        schedule.validate()
    except ValueError as exc:
        raise CollectiveError(f"{schedule.algorithm}: malformed schedule: {exc}") from None
    if schedule.collective in ("reduce", "broadcast") and schedule.root is None:
        raise CollectiveError(f"a {schedule.collective} schedule needs a root")

    race_check = schedule.num_steps <= race_check_limit
    if schedule.collective == "all_to_all":
        data[:p], dep_kinds = run_permutation(
            schedule, data[:p], exact_deps=exact_deps, race_check=race_check
        )
    else:
        dep_kinds = _execute(schedule, data, exact_deps=exact_deps, race_check=race_check)

    if op == "mean":
        for r in range(p):
            region = output_region(schedule, r)
            if np.issubdtype(data[r].dtype, np.integer):
                data[r] = data[r].astype(np.float64)
            if region is not None:
                data[r][region[0] : region[1]] /= data[r].dtype.type(p)

    step_bytes: IntArray = schedule.length * element_size
    weights = step_bytes.astype(np.float64)
    ends = schedule.num_endpoints
    sent = np.bincount(schedule.src, weights=weights, minlength=ends).astype(np.int64)
    received = np.bincount(schedule.dst, weights=weights, minlength=ends).astype(np.int64)
    reduced = np.bincount(schedule.dst, weights=weights * schedule.reduce, minlength=ends).astype(np.int64)
    per_phase = np.bincount(schedule.phase, weights=weights, minlength=len(schedule.phase_names))
    return RunResult(
        arrays=data[:p],
        element_size_bytes=element_size,
        bytes_sent=sent,
        bytes_received=received,
        bytes_reduced=reduced,
        step_bytes=step_bytes,
        phase_bytes={name: int(per_phase[i]) for i, name in enumerate(schedule.phase_names)},
        race_checked=schedule.num_steps <= race_check_limit,
        dep_kinds=dep_kinds,
    )


def _execute(
    schedule: Schedule, data: list[np.ndarray], *, exact_deps: bool, race_check: bool
) -> npt.NDArray[np.int8]:
    """Run the steps in index order with every check of the module docstring; returns the kind
    of every dependency (aligned with ``schedule.dep_indices``)."""
    run = _Execution(schedule, data, exact_deps=exact_deps)
    for j in range(schedule.num_steps):
        deps = run.dep_all[run.dep_off[j] : run.dep_off[j + 1]]
        run.check_dependencies(j, deps)
        if race_check:
            run.check_races(j, deps)
        run.apply(j)
    _check_final(schedule, run.mask, run.breaks)
    return run.kinds


class _Execution:
    """The state of one run: the data, each (rank, atom)'s contributions, last overwrite and
    reductions since, and the schedule's columns as Python lists (fast to index per step)."""

    def __init__(self, schedule: Schedule, data: list[np.ndarray], *, exact_deps: bool) -> None:
        p, n = schedule.num_ranks, schedule.num_elements
        everyone = schedule.num_endpoints  # switch ranks start with no contribution
        self.schedule, self.data, self.exact_deps = schedule, data, exact_deps
        self.name = schedule.algorithm
        offset, ends = schedule.offset, schedule.offset + schedule.length
        # Chunk bounds matter only where the output or input layout is per-rank chunks.
        layout = chunk_bounds(n, p) if schedule.collective in ("reduce_scatter", "all_gather") else [0]
        self.breaks = np.unique(np.concatenate([[0, n], layout, offset, ends]))
        self.atom_lo = np.searchsorted(self.breaks, offset)
        self.atom_hi = np.searchsorted(self.breaks, ends)
        self.atoms = atoms = len(self.breaks) - 1
        words = (p + 63) // 64
        self.mask = np.zeros((everyone, max(atoms, 0), words), dtype=np.uint64)
        if schedule.collective in REDUCING:
            for r in range(p):
                self.mask[r, :] = _bit(r, words)
        elif schedule.collective == "all_gather":
            bounds = np.searchsorted(self.breaks, chunk_bounds(n, p))
            for r in range(p):
                self.mask[r, bounds[r] : bounds[r + 1]] = _bit(r, words)
        else:
            self.mask[schedule.root or 0, :] = _bit(schedule.root or 0, words)
        self.last_overwrite = np.full((everyone, atoms), -1, dtype=np.int64)
        self.reductions = np.zeros((everyone, atoms), dtype=np.int64)
        self.src_l, self.dst_l = schedule.src.tolist(), schedule.dst.tolist()
        self.off_l, self.end_l = offset.tolist(), ends.tolist()
        self.alo_l, self.ahi_l = self.atom_lo.tolist(), self.atom_hi.tolist()
        self.red_l = schedule.reduce.tolist()
        self.where = list(zip(self.src_l, self.dst_l, self.alo_l, self.ahi_l, strict=True))
        self.dep_off = schedule.dep_offsets.tolist()
        self.dep_all = schedule.dep_indices.tolist()
        self.kinds = np.empty(len(self.dep_all), dtype=np.int8)
        self.ancestors: list[int] = []
        self.readers: dict[int, list[int]] = {}
        self.reducers: dict[int, list[int]] = {}

    def _kind(self, j: int, x: int, got: IntArray) -> int:
        """The kind of step ``j``'s dependency ``x``; a data dependency also counts, in ``got``, the
        atoms it is a live writer of."""
        s, d, lo, hi = self.where[j]
        xlo, xhi = max(self.alo_l[x], lo), min(self.ahi_l[x], hi)
        is_live = x >= self.last_overwrite[s, xlo:xhi] if self.dst_l[x] == s and xlo < xhi else None
        if is_live is not None and is_live.any():
            got[xlo - lo : xhi - lo] += is_live
            return DEP_DATA
        commuting = self.red_l[x] and self.red_l[j]  # two reductions into the same elements
        if xlo < xhi and (self.src_l[x] == d or (self.dst_l[x] == d and not commuting)):
            return DEP_ANTI
        if self.src_l[x] in (s, d) or self.dst_l[x] in (s, d):
            return DEP_ORDER
        if self.exact_deps:
            raise CollectiveError(
                f"{self.name}: step {j} depends on step {x}, which neither wrote data it sends, nor "
                f"used data it writes, nor shares a rank with it (spurious dependency)"
            )
        return DEP_SPURIOUS

    def check_dependencies(self, j: int, deps: list[int]) -> None:
        """Exact dependencies: every live writer of the sent data is a dependency (and, when
        exact, every dependency is one); records the kind of each."""
        s, d, lo, hi = self.where[j]
        live = (self.last_overwrite[s, lo:hi] >= 0).astype(np.int64) + self.reductions[s, lo:hi]
        got = np.zeros(hi - lo, dtype=np.int64)
        if self.exact_deps and len(set(deps)) != len(deps):
            raise CollectiveError(f"{self.name}: step {j} lists a dependency twice: {deps}")
        kind_of = {x: self._kind(j, x, got) for x in set(deps)}
        if deps:
            self.kinds[self.dep_off[j] : self.dep_off[j + 1]] = [kind_of[x] for x in deps]
        missing = got < live
        if missing.any():
            atom = lo + int(np.argmax(missing))
            overwrite = self.last_overwrite[s, atom]
            writer = _live_writers(self.schedule, self.atom_lo, self.atom_hi, j, s, atom, overwrite)
            lost = [w for w in writer if w not in deps]
            raise CollectiveError(
                f"{self.name}: step {j} (rank {s} -> {d}) sends elements [{int(self.breaks[atom])}, "
                f"{int(self.breaks[atom + 1])}) written by step(s) {lost} but does not depend on them "
                f"(missing dependency)"
            )

    def check_races(self, j: int, deps: list[int]) -> None:
        """No write to an element may race an earlier read or overwrite of it."""
        anc = 0
        for x in deps:
            anc |= self.ancestors[x] | (1 << x)
        self.ancestors.append(anc)
        s, d, lo, hi = self.where[j]
        reduce = bool(self.red_l[j])
        state = (self.atoms, self.last_overwrite, self.readers, self.reducers)
        _check_races(self.name, j, s, d, lo, hi, reduce, anc, *state)

    def apply(self, j: int) -> None:
        """Move the data and the contributions of step ``j``, rejecting data its sender does not
        hold and contributions its receiver already has."""
        s, d, lo, hi = self.where[j]
        name, breaks, mask = self.name, self.breaks, self.mask
        sent_mask = mask[s, lo:hi]
        if lo < hi and not sent_mask.any(axis=1).all():
            atom = lo + int(np.argmin(sent_mask.any(axis=1)))
            raise CollectiveError(
                f"{name}: step {j} sends elements [{int(breaks[atom])}, {int(breaks[atom + 1])}) "
                f"that rank {s} has not received yet"
            )
        a, b = self.off_l[j], self.end_l[j]
        if self.red_l[j]:
            recv_mask = mask[d, lo:hi]
            twice = recv_mask & sent_mask
            if twice.any():
                atom = int(np.nonzero(twice.any(axis=1))[0][0])
                ranks = _ranks_in(twice[atom])
                raise CollectiveError(
                    f"{name}: step {j} adds rank(s) {ranks[:5]}'s contribution to elements "
                    f"[{int(breaks[lo + atom])}, {int(breaks[lo + atom + 1])}) of rank {d} a second time"
                )
            recv_mask |= sent_mask
            self.data[d][a:b] += self.data[s][a:b]
            self.reductions[d, lo:hi] += 1
        else:
            mask[d, lo:hi] = sent_mask
            self.data[d][a:b] = self.data[s][a:b]
            self.last_overwrite[d, lo:hi] = j
            self.reductions[d, lo:hi] = 0


def _live_writers(
    schedule: Schedule, atom_lo: IntArray, atom_hi: IntArray, step: int, rank: int, atom: int, overwrite: int
) -> list[int]:
    """Steps before ``step`` whose writes into ``rank``'s ``atom`` make up its current value."""
    earlier = np.arange(step)
    hit = (schedule.dst[:step] == rank) & (atom_lo[:step] <= atom) & (atom_hi[:step] > atom)
    hit &= earlier >= overwrite
    return [int(x) for x in earlier[hit]]


def _check_final(schedule: Schedule, mask: npt.NDArray[np.uint64], breaks: IntArray) -> None:
    """Every output element holds exactly the contributions the collective defines."""
    p, n = schedule.num_ranks, schedule.num_elements
    words = mask.shape[2]
    full = np.zeros(words, dtype=np.uint64)
    for r in range(p):
        full |= _bit(r, words)
    owner_chunks = np.searchsorted(breaks, chunk_bounds(n, p))
    for r in range(p):
        region = output_region(schedule, r)
        if region is None:
            continue
        if schedule.collective == "all_gather":
            want = np.zeros_like(mask[r])
            for c in range(p):
                want[owner_chunks[c] : owner_chunks[c + 1]] = _bit(c, words)
            lo_atom = 0
        elif schedule.collective == "broadcast":
            want = np.broadcast_to(_bit(schedule.root or 0, words), mask[r].shape)
            lo_atom = 0
        else:
            lo_atom, hi_atom = (int(x) for x in np.searchsorted(breaks, region))
            want = np.broadcast_to(full, (hi_atom - lo_atom, words))
        have = mask[r, lo_atom : lo_atom + len(want)]
        bad = (have != want).any(axis=1)
        if bad.any():
            atom = lo_atom + int(np.argmax(bad))
            held = _ranks_in(have[atom - lo_atom])
            raise CollectiveError(
                f"{schedule.algorithm}: rank {r} ends with elements [{int(breaks[atom])}, "
                f"{int(breaks[atom + 1])}) holding the contributions of {len(held)} rank(s) "
                f"{held[:8]}{'...' if len(held) > 8 else ''}, not what a {schedule.collective} defines"
            )
