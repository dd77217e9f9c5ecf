"""Wave quantization of a kernel whose thread blocks (CTAs) do unequal work: FlashAttention-2 under a
causal mask, where a block's work grows (forward) or shrinks (backward) with its tile index.

A GEMM's tiles are equal, so its last wave is simply partly empty
(:func:`parplan.plan.compute.matmul_efficiency`). FlashAttention-2's are not. flash-attn 2.5.6
launches its forward on a grid ``(num_m_block, b, h)`` with the query tile ``m_block = blockIdx.x``
(``flash_fwd_launch_template.h``, ``compute_attn`` in ``flash_fwd_kernel.h``); under a causal mask
tile ``m`` multiplies keys up to the end of its own rows, so its work grows as ``m + 1``. The
backward's main kernel runs on ``(num_n_block, b, h)`` with the key tile ``n_block = blockIdx.x``
(``run_flash_bwd_seqk_parallel``, ``compute_dq_dk_dv_seqk_parallel``), meeting the queries from its
own first row on, so its work shrinks as ``S - n B``. The GPU dispatches blocks in launch order
(``blockIdx.x`` fastest) to SMs as they free up, so for every head the forward's heaviest tiles come
last, and the step ends when the last SM finishes: the kernel takes ``makespan / (work / SMs)``
of the time its work alone would (:func:`causal_tile_waves`, list scheduling in launch order,
kept per tile pattern and device so that the schedule's repeating cycle answers any number of
groups: :class:`_Launch`).

Each SM is taken to run one block at a time at its full rate. The backward (8 warps and about
144 KiB of shared memory a block at head dimension 128) fits one block per SM on A100 and H100, so
that holds for it; the forward's 4-warp, 64 KiB blocks fit two per SM, and a block left alone on an
SM at the end cannot run faster than the whole SM, so for the forward the figure is a lower bound
on the tail.

>>> causal_tile_waves(2, 4, 4, descending=False)  # work 1..4 twice on 4 SMs: 7 units, not 5
1.4
>>> causal_tile_waves(2, 4, 4, descending=True)  # 4..1 twice: the light tiles fill the gaps
1.0
>>> causal_tile_waves(64, 64, 108, descending=False) > causal_tile_waves(64, 64, 108, descending=True) > 1.0
True
"""

from __future__ import annotations

import heapq
from functools import lru_cache


@lru_cache(maxsize=1024)
def causal_tile_waves(groups: int, tiles: int, sms: int, *, descending: bool) -> float:
    """Time of ``groups`` x ``tiles`` causal tiles on ``sms`` SMs over their work spread evenly
    (module docstring): tile ``t`` of each group does ``t + 1`` units, or ``tiles - t`` when
    ``descending`` (the backward), dispatched group by group in tile order to the SM free first.
    1 when the tiles fit in one wave (as for a GEMM, the roofline's size curve covers a launch too
    small to fill the device) or there are no SMs."""
    if sms <= 0 or groups * tiles <= sms:
        return 1.0
    end = _launch(tiles, sms, descending).makespan(groups)
    ideal = groups * tiles * (tiles + 1) / 2.0 / sms
    return max(1.0, end / ideal)


class _Launch:
    """The list schedule of one tile pattern (``tiles`` per group, ascending or descending work)
    on ``sms`` SMs, group after group, kept to answer any number of groups.

    The SMs' free times after a group, less the earliest, are a state: the next group's schedule
    depends on nothing else (which of two equally free SMs takes a tile changes no finish time),
    and it stays within one tile's work of the earliest, so the states repeat. Once the state
    after group ``g`` is the one after ``first``, every ``g - first`` groups from ``first`` on
    repeat the same schedule shifted by the same time, and the makespan of any number of groups
    is a makespan already found plus whole shifts. Work is in integer units, so the sums are
    exact and equal to scheduling every tile (a test holds the two equal): about a hundred
    groups are scheduled per pattern where a search asks for up to a thousand."""

    def __init__(self, tiles: int, sms: int, descending: bool) -> None:
        self.order = tuple(range(tiles, 0, -1)) if descending else tuple(range(1, tiles + 1))
        self.free = [0] * sms  # a heap of the SMs' free times
        self.ends = [0]  # makespan after g groups (the latest free time: free times only grow)
        self.lows = [0]  # earliest free time after g groups
        self.seen: dict[tuple[int, ...], int] = {(0,) * sms: 0}
        self.cycle: tuple[int, int] | None = None  # (first group of the cycle, groups per cycle)

    def makespan(self, groups: int) -> int:
        """The time the last of ``groups`` x ``tiles`` tiles finishes, in work units."""
        while self.cycle is None and len(self.ends) <= groups:
            self._schedule_group()
        if self.cycle is None or groups < len(self.ends):
            return self.ends[groups]
        first, period = self.cycle
        cycles, rest = divmod(groups - first, period)
        shift = self.lows[first + period] - self.lows[first]
        return self.ends[first + rest] + cycles * shift

    def _schedule_group(self) -> None:
        """One more group's tiles, in launch order, each to the SM free first."""
        free = self.free
        for work in self.order:
            heapq.heapreplace(free, free[0] + work)
        low = free[0]
        self.ends.append(max(free))
        self.lows.append(low)
        state = tuple(sorted([f - low for f in free]))
        group = len(self.ends) - 1
        first = self.seen.setdefault(state, group)
        if first != group:
            self.cycle = (first, group - first)


@lru_cache(maxsize=64)
def _launch(tiles: int, sms: int, descending: bool) -> _Launch:
    """The kept schedule of one tile pattern on one device (:class:`_Launch`)."""
    return _Launch(tiles, sms, descending)
