"""Traffic volumes: elements each rank sends and receives, per algorithm, through the registry.

Each algorithm's module derives its volumes from the algorithm's definition, not from its
schedule (:meth:`~parplan.collectives.algorithm.Algorithm.traffic`), so tests can hold the data
plane's byte counts against them. Headline figures, for ``p`` ranks and ``n`` elements:

- ring: ``2 (p-1)/p n`` per rank in each direction when ``p`` divides ``n`` (with uneven chunks,
  rank r sends ``2n - c_r - c_{r+1}`` and receives ``2n - c_{r-1} - c_r``, c = chunk sizes); with
  ``C`` channels the same per ring on its part ``n_c`` of the tensor, summed over the rings, so
  ``2 (p-1)/p n`` again up to chunk rounding;
- centralized: ``(p-1) n`` into the root and ``(p-1) n`` out of it, ``n`` each way elsewhere;
- tree / double binary tree / hierarchical: ``n`` (or a half) up and down per tree edge;
- halving-doubling: ``2 (p'-1)/p' n`` per participant for ``p'`` a power of two dividing ``n``,
  plus ``n`` each way between a folded rank and its partner.

Every all-reduce algorithm here moves ``2 (p-1) n`` elements in total, the lower bound (each
element needs ``p - 1`` merges and ``p - 1`` further deliveries), which :func:`allreduce_total_lower_bound`
states.

>>> [int(x) for x in expected_traffic("centralized", 3, 10)[0]]
[20, 10, 10]
"""

from __future__ import annotations

from parplan.collectives.algorithm import AlgorithmLike, Groups, Traffic
from parplan.collectives.registry import algorithms, resolve
from parplan.collectives.ring import ring_traffic

__all__ = ["Traffic", "allreduce_total_lower_bound", "collective_traffic", "expected_traffic", "ring_traffic"]


def allreduce_total_lower_bound(num_ranks: int, num_elements: int) -> int:
    """Fewest elements any all-reduce must move in total: ``2 (p - 1) n``."""
    return 2 * (num_ranks - 1) * num_elements


def expected_traffic(
    algorithm: AlgorithmLike, num_ranks: int, num_elements: int, *, groups: Groups | None = None
) -> Traffic:
    """Per-rank (sent, received) element counts of an all-reduce algorithm (spec or short form)."""
    found, spec = resolve(algorithm)
    return found.traffic(spec, num_ranks, num_elements, groups)


def collective_traffic(
    collective: str, num_ranks: int, num_elements: int, algorithm: AlgorithmLike | None = None
) -> Traffic:
    """Per-rank (sent, received) elements of ``algorithm`` (a spec, mapping or short form; default:
    the first algorithm registered for ``collective``, with its defaults) computing ``collective``."""
    if algorithm is None:
        algorithm = next(iter(algorithms(collective)))
    found, spec = resolve(algorithm, collective)
    return found.traffic(spec, num_ranks, num_elements)
