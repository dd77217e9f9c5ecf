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
of the time its work alone would (:func:`causal_tile_waves`, list scheduling in launch order).

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
    order = range(tiles, 0, -1) if descending else range(1, tiles + 1)
    free = [0] * sms
    end = 0
    for _ in range(groups):
        for work in order:
            finish = free[0] + work
            heapq.heapreplace(free, finish)
            end = max(end, finish)
    ideal = groups * tiles * (tiles + 1) / 2.0 / sms
    return max(1.0, end / ideal)
