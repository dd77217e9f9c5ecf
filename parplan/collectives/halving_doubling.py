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

Dependencies are exact: a send depends on every step whose write still makes up the data it
carries (the fold into the sender, the earlier halving steps into it, and in the all-gather the
doubling steps that delivered parts of its block), found with :class:`~._build.WriteLog`.
"""

from __future__ import annotations

from parplan.collectives._build import StepBuffer, WriteLog, check_sizes
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

    def send(src: int, dst: int, lo: int, hi: int, reduce: bool, phase: int) -> None:
        step = buf.add(src, dst, lo, hi - lo, reduce, phase, log.live(src, lo, hi))
        pending.append((dst, step, lo, hi, reduce))

    pending: list[tuple[int, int, int, int, bool]] = []

    def deliver() -> None:
        """Sends of one round are concurrent: record their writes only after the round."""
        for item in pending:
            log.write(item[0], *item[1:])
        pending.clear()

    for i in range(extra):
        send(2 * i + 1, 2 * i, 0, n, True, 0)
    deliver()
    distance = pp // 2
    while distance >= 1:
        for i in range(pp):
            lo = (i // (2 * distance)) * 2 * distance
            give = lo if i & distance else lo + distance
            send(actual[i], actual[i ^ distance], bounds[give], bounds[give + distance], True, 1)
        deliver()
        distance //= 2
    distance = 1
    while distance < pp:
        for i in range(pp):
            lo = (i // distance) * distance
            send(actual[i], actual[i ^ distance], bounds[lo], bounds[lo + distance], False, 2)
        deliver()
        distance *= 2
    for i in range(extra):
        send(2 * i, 2 * i + 1, 0, n, False, 3)
    deliver()
    return buf.build(
        algorithm="halving_doubling",
        collective="all_reduce",
        num_ranks=p,
        num_elements=n,
        phase_names=HD_PHASES,
        meta={"participants": pp, "folded": extra},
    )
