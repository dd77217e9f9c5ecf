"""Recursive halving-doubling all-reduce (Rabenseifner), with the standard fold-in for any p.

Let ``p'`` be the largest power of two <= p and ``e = p - p'``. The tensor is cut into ``p'``
chunks.

1. Fold (only when p is not a power of two): for ``i < e``, rank ``2i + 1`` sends its whole tensor
   to rank ``2i`` and sits out. The ``p'`` participants are ranks ``0, 2, .., 2e - 2`` and
   ``2e .. p - 1``, numbered ``0 .. p'-1``.
2. Reduce-scatter by recursive halving, distance ``p'/2, p'/4, .., 1``: participant ``i`` holds a
   block of chunks, sends the half its partner ``i XOR d`` keeps and adds in the half it keeps.
   Participant ``i`` ends with chunk ``i`` fully reduced.
3. All-gather by recursive doubling, distance ``1, 2, .., p'/2``: each sends the block it holds to
   ``i XOR d``, which stores it; blocks double until everyone has the whole tensor.
4. Unfold: rank ``2i`` sends the result to rank ``2i + 1``.

Dependencies are the data dependencies plus the program order of a real implementation.
Data: a send depends on every step whose write still makes up the data it carries (the fold into
the sender, the earlier halving steps into it, and in the all-gather the doubling steps that
delivered parts of its block), found with :class:`~._build.WriteLog`. Program order: MPICH's and
Open MPI's implementations run one blocking ``MPI_Sendrecv`` per round per rank, so a rank posts
round ``k`` only once its round ``k - 1`` send and receive are both done, and a send moves only
once its receiver has posted the matching receive. Each step therefore also waits for the
previous round's steps of both ranks it involves (the fold counts as the round before the first
halving round, the last doubling round as the one before the unfold). Without them a participant
that no rank folded into would run ahead into its next rounds and compete for a port with its
partner's fold; with them every round starts once both partners finished the last one, the
textbook timing of the closed form below. (When the tensor has fewer elements than ``p'`` some
steps are empty and dropped, and the order they carried with them.)

Closed form: ``2 log2(p') alpha + 2(p'-1)/p' n beta + (p'-1)/p' n gamma``, plus ``2 alpha + 2 n
beta + n gamma`` for the fold-in and fold-out when ``p != p'``; exact for any p. Traffic:
``2 (p'-1)/p' n`` per participant for ``p'`` dividing ``n``, plus ``n`` each way between a folded
rank and its partner.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from parplan.collectives._build import StepBuffer, WriteLog, check_sizes
from parplan.collectives.algorithm import Algorithm, AlgorithmSpecBase, Groups, Traffic, UniformCost
from parplan.collectives.schedule import Schedule, chunk_bounds

HD_PHASES = ("fold", "reduce_scatter", "all_gather", "unfold")


def halving_doubling_all_reduce(num_ranks: int, num_elements: int) -> Schedule:
    """Recursive halving reduce-scatter then recursive doubling all-gather.

    >>> s = halving_doubling_all_reduce(8, 64)
    >>> s.num_steps  # 3 halving and 3 doubling rounds of 8 sends
    48
    """
    check_sizes(num_ranks, num_elements)
    p, n = num_ranks, num_elements
    pp = 1 << (p.bit_length() - 1)
    extra = p - pp
    actual = [2 * i for i in range(extra)] + list(range(2 * extra, p))
    bounds = chunk_bounds(n, pp).tolist()
    buf = StepBuffer()
    log = WriteLog(p)
    latest: list[list[int]] = [[] for _ in range(p)]  # each rank's steps of its latest round
    pending: list[tuple[int, int, int, int, int, bool]] = []

    def send(src: int, dst: int, lo: int, hi: int, reduce: bool, phase: int) -> None:
        data = log.live(src, lo, hi)
        order = [x for x in dict.fromkeys(latest[src] + latest[dst]) if x not in data]
        step = buf.add(src, dst, lo, hi - lo, reduce, phase, data + order)
        pending.append((src, dst, step, lo, hi, reduce))

    def end_round() -> None:
        """Sends of one round are concurrent: record their writes (and the round each rank was
        last in) only after the round."""
        touched: dict[int, list[int]] = {}
        for src, dst, step, lo, hi, reduce in pending:
            log.write(dst, step, lo, hi, reduce)
            touched.setdefault(src, []).append(step)
            touched.setdefault(dst, []).append(step)
        for rank, steps in touched.items():
            latest[rank] = steps
        pending.clear()

    for i in range(extra):
        send(2 * i + 1, 2 * i, 0, n, True, 0)
    end_round()
    distance = pp // 2
    while distance >= 1:
        for i in range(pp):
            lo = (i // (2 * distance)) * 2 * distance
            give = lo if i & distance else lo + distance
            send(actual[i], actual[i ^ distance], bounds[give], bounds[give + distance], True, 1)
        end_round()
        distance //= 2
    distance = 1
    while distance < pp:
        for i in range(pp):
            lo = (i // distance) * distance
            send(actual[i], actual[i ^ distance], bounds[lo], bounds[lo + distance], False, 2)
        end_round()
        distance *= 2
    for i in range(extra):
        send(2 * i, 2 * i + 1, 0, n, False, 3)
    end_round()
    return buf.build(
        algorithm="halving_doubling",
        collective="all_reduce",
        num_ranks=p,
        num_elements=n,
        phase_names=HD_PHASES,
        meta={"participants": pp, "folded": extra},
    )


def halving_doubling_traffic(num_ranks: int, num_elements: int) -> Traffic:
    """Per-rank (sent, received) elements, from the definition (see the module docstring)."""
    p, n = num_ranks, num_elements
    pp = 1 << (p.bit_length() - 1)
    extra = p - pp
    c = np.diff(chunk_bounds(n, pp))
    prefix = np.concatenate([[0], np.cumsum(c)])
    part_sent = np.zeros(pp, dtype=np.int64)
    part_recv = np.zeros(pp, dtype=np.int64)
    for i in range(pp):
        kept = 0
        block = pp // 2
        while block >= 1:  # the block of `block` chunks around i that i keeps at each halving
            lo = (i // block) * block
            kept += int(prefix[lo + block] - prefix[lo])
            block //= 2
        # Halving sends what it gives away (n - own chunk); doubling sends what it kept.
        part_sent[i] = (n - c[i]) + kept
        part_recv[i] = kept + (n - c[i])
    sent = np.zeros(p, dtype=np.int64)
    received = np.zeros(p, dtype=np.int64)
    actual = [2 * i for i in range(extra)] + list(range(2 * extra, p))
    sent[actual] = part_sent
    received[actual] = part_recv
    for i in range(extra):
        sent[2 * i + 1] += n
        received[2 * i + 1] += n
        sent[2 * i] += n
        received[2 * i] += n
    return sent, received


class HalvingDoublingAlgorithm(AlgorithmSpecBase):
    """Recursive halving reduce-scatter then recursive doubling all-gather (Rabenseifner)."""

    name: Literal["halving_doubling"]


class HalvingDoublingAllReduce(Algorithm[HalvingDoublingAlgorithm]):
    """Rabenseifner's all-reduce (see the module docstring)."""

    name = "halving_doubling"
    spec_type = HalvingDoublingAlgorithm
    abbreviation = "hd"

    def build(
        self, spec: HalvingDoublingAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        return halving_doubling_all_reduce(num_ranks, num_elements)

    def closed_form_s(
        self,
        spec: HalvingDoublingAlgorithm,
        num_ranks: int,
        size_bytes: float,
        cost: UniformCost,
        groups: Groups | None,
    ) -> float:
        p, n = num_ranks, size_bytes
        a, b, g = cost.alpha_s, cost.beta_s_per_byte, cost.gamma_s_per_byte
        pp = 1 << (p.bit_length() - 1)
        t = 2.0 * (pp.bit_length() - 1) * a + (pp - 1) / pp * n * (2.0 * b + g)
        if pp != p:
            t += 2.0 * a + n * (2.0 * b + g)
        return t

    def traffic(
        self, spec: HalvingDoublingAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        return halving_doubling_traffic(num_ranks, num_elements)


ALL_REDUCE = HalvingDoublingAllReduce()
