"""Bruck's all-to-all: ``ceil(log2 p)`` rounds of about ``n/2`` each, the latency-optimal one for
small messages (one peer per round instead of ``p-1``).

An item is rank ``o``'s block for rank ``o + d`` (``d`` its distance, ``1 .. p-1``). In round ``k``
every rank sends the items it holds whose distance has bit ``k`` set to the rank ``2^k`` ahead, so
after the rounds every item has travelled its distance. Between rounds an item waits where it
landed: its sender's send buffer until it first moves, then slot ``d`` of a scratch region of the
round that brought it (region ``2 + k``: no slot is written twice, so nothing waits for buffer
reuse), and the last hop puts it in slot ``o`` of the receiver's output. Real implementations pack
each round's items into one message with local copies; here each contiguous run of them is a step
of its own, all starting together, which on the ideal transport costs what one message does.
Round ``k`` waits for the rank's longest send and receive of round ``k-1`` (the last to finish, the
rest share the port with them), so rounds run one after another:

    sum over rounds k of (a + m_k n/p b),   m_k = #{d in 1..p-1 with bit k set}

which is ``log2(p) (a + n/2 b)`` for ``p`` a power of two.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from parplan.collectives._build import check_sizes
from parplan.collectives.algorithm import Algorithm, AlgorithmSpecBase, Groups, Traffic, UniformCost
from parplan.collectives.all_to_all import all_to_all_schedule
from parplan.collectives.schedule import Schedule, all_to_all_block


def round_items(num_ranks: int) -> list[int]:
    """``m_k`` per round: how many distances ``1 .. p-1`` have bit ``k`` set (blocks each rank
    sends in round ``k``).

    >>> round_items(8), round_items(5)
    ([4, 4, 4], [2, 2, 1])
    """
    rounds = max(num_ranks - 1, 0).bit_length()
    return [sum(1 for d in range(1, num_ranks) if d >> k & 1) for k in range(rounds)]


class BruckSpec(AlgorithmSpecBase):
    """Bruck's log-round all-to-all."""

    name: Literal["bruck"]


class _Builder:
    """Builds the rounds: item locations, runs of contiguous items and their dependencies."""

    def __init__(self, num_ranks: int, num_elements: int) -> None:
        self.p, self.n = num_ranks, num_elements
        self.block = all_to_all_block(num_elements, num_ranks)
        self.columns: dict[str, list[int]] = {k: [] for k in ("src", "dst", "offset", "dst_offset", "length")}
        self.deps: list[list[int]] = []
        self.writer: dict[tuple[int, int], int] = {}  # (rank, distance) -> step that brought it
        self.longest_send: dict[int, int] = {}
        self.longest_recv: dict[int, int] = {}

    def source(self, rank: int, distance: int, k: int) -> int:
        """Where ``rank`` holds the item of ``distance`` at round ``k``."""
        moved = distance & ((1 << k) - 1)
        if not moved:
            return (rank + distance) % self.p * self.block
        return (2 + moved.bit_length() - 1) * self.n + distance * self.block

    def target(self, rank: int, distance: int, k: int) -> int:
        """Where the rank ``2^k`` ahead puts the item of ``distance`` it gets from ``rank``."""
        if distance.bit_length() - 1 == k:  # the last hop: slot origin of the output
            origin = (rank - (distance & ((1 << k) - 1))) % self.p
            return self.n + origin * self.block
        return (2 + k) * self.n + distance * self.block

    def round(self, k: int) -> None:
        """Round ``k``: every rank's items with bit ``k`` set, run by run, to the rank ``2^k`` ahead."""
        sends: dict[int, int] = {}
        recvs: dict[int, int] = {}
        arrivals: list[tuple[int, int, int]] = []  # (rank, distance, step): after the round
        for rank in range(self.p):
            peer = (rank + (1 << k)) % self.p
            order = [self.longest_send.get(rank), self.longest_recv.get(rank)]
            runs: list[tuple[int, int, list[int]]] = []  # (source, target, distances)
            for d in (d for d in range(1, self.p) if d >> k & 1):
                a, b = self.source(rank, d, k), self.target(rank, d, k)
                if runs and (a, b) == (
                    runs[-1][0] + len(runs[-1][2]) * self.block,
                    runs[-1][1] + len(runs[-1][2]) * self.block,
                ):
                    runs[-1][2].append(d)
                else:
                    runs.append((a, b, [d]))
            for a, b, items in runs:
                length = len(items) * self.block
                data = {self.writer[(rank, d)] for d in items if (rank, d) in self.writer}
                step = len(self.deps)
                self.deps.append(sorted(data | {x for x in order if x is not None}))
                for key, value in zip(self.columns, (rank, peer, a, b, length), strict=True):
                    self.columns[key].append(value)
                arrivals += [(peer, d, step) for d in items]
                if rank not in sends or length >= self.columns["length"][sends[rank]]:
                    sends[rank] = step
                if peer not in recvs or length >= self.columns["length"][recvs[peer]]:
                    recvs[peer] = step
        self.writer.update({(rank, d): step for rank, d, step in arrivals})
        self.longest_send, self.longest_recv = sends, recvs

    def build(self, name: str) -> Schedule:
        rounds = len(round_items(self.p))
        if self.block:
            for k in range(rounds):
                self.round(k)
        columns = {k: np.asarray(v, dtype=np.int64) for k, v in self.columns.items()}
        counts = np.asarray([len(d) for d in self.deps], dtype=np.int64)
        flat = np.asarray([x for d in self.deps for x in d], dtype=np.int64)
        return all_to_all_schedule(name, self.p, self.n, columns, counts, flat, regions=2 + rounds)


class Bruck(Algorithm[BruckSpec]):
    """``bruck``: ``sum_k (a + m_k n/p b)``, ``log2(p)(a + n/2 b)`` for ``p`` a power of two."""

    name = "bruck"
    collective = "all_to_all"
    spec_type = BruckSpec

    def build(
        self, spec: BruckSpec, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        check_sizes(num_ranks, num_elements)
        return _Builder(num_ranks, num_elements).build(self.name)

    def closed_form_s(
        self, spec: BruckSpec, num_ranks: int, size_bytes: float, cost: UniformCost, groups: Groups | None
    ) -> float:
        block_bytes = size_bytes / num_ranks
        return sum(cost.alpha_s + m * block_bytes * cost.beta_s_per_byte for m in round_items(num_ranks))

    def traffic(
        self, spec: BruckSpec, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        moved = sum(round_items(num_ranks)) * all_to_all_block(num_elements, num_ranks)
        full = np.full(num_ranks, moved, dtype=np.int64)
        return full, full.copy()


BRUCK = Bruck()
