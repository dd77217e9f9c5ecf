"""Closed forms: the time of a collective on a uniform group, in plain Python math, and the bounds
no algorithm beats.

The model is the engine's (see :mod:`parplan.engine.simulate`) on a uniform group: every message
costs ``alpha`` (the path latency, a pure delay before its bytes move) plus ``bytes x beta`` at its
fair share of bandwidth, and a reduction costs ``gamma x bytes`` on the receiver's serial reduction
stream. On a switch each host has one full-duplex link to the switch, so a message crosses two links
(``alpha`` = twice the link latency) but ``beta`` applies once: store-and-forward is not modelled.
``shared_port=True`` (a switch) means a rank's concurrent receives share its one incoming link and
its concurrent sends its one outgoing link; ``shared_port=False`` (a fully connected cluster) gives
every pair of ranks its own link.

Each algorithm's module owns its closed form (:meth:`~parplan.collectives.algorithm.Algorithm.closed_form_s`)
and says where it is exact; :func:`allreduce_time` and :func:`collective_time` look the algorithm up
in the registry. With ``p`` ranks and ``n`` bytes: ring ``2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p
n gamma``; halving-doubling ``2 log2(p) alpha + 2(p-1)/p n beta + (p-1)/p n gamma`` for p a power of
two; centralized through one port ``2 alpha + 2(p-1) n beta + (p-1) n gamma``; trees evaluated on
their shapes (:mod:`parplan.collectives._tree_cost`). Tensor sizes are taken as continuous (``n /
p`` per chunk, ``n / S`` per segment); schedules cut whole elements.

Lower bounds (:func:`lower_bound_s`): ``ceil(log2 p) alpha`` and ``2(p-1)/p n beta``. The bandwidth
bound holds for every algorithm here. The latency bound assumes a rank handles one message per
round; in this model latency is a pure delay, so algorithms that fan many concurrent messages into
one rank (centralized, trees with ``2 x depth < ceil(log2 p)``) pay it once per fan and beat it on
tiny tensors; every algorithm pays at least ``2 alpha``.

>>> round(allreduce_time("ring", 4, 1e9, alpha_s=1e-6, beta_s_per_byte=1e-10) * 1e3, 6)
150.006
>>> bus_bandwidth(1e9, 0.15, 4) / 1e9
10.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from parplan.collectives.algorithm import Algorithm, AlgorithmLike, AlgorithmSpecBase, UniformCost
from parplan.collectives.registry import resolve, version
from parplan.engine.result import algorithm_bandwidth, bus_bandwidth

__all__ = [
    "algorithm_bandwidth",
    "allreduce_time",
    "bandwidth_lower_bound_s",
    "bus_bandwidth",
    "collective_time",
    "latency_lower_bound_s",
    "lower_bound_s",
]


# -- bounds ------------------------------------------------------------------------------------


def latency_lower_bound_s(num_ranks: int, alpha_s: float) -> float:
    """``ceil(log2 p) x alpha``: rounds needed when a rank handles one message per round."""
    return math.ceil(math.log2(num_ranks)) * alpha_s if num_ranks > 1 else 0.0


def bandwidth_lower_bound_s(num_ranks: int, size_bytes: float, beta_s_per_byte: float) -> float:
    """``2(p-1)/p x n x beta``: every rank must send and receive that much through its port."""
    return 2.0 * (num_ranks - 1) / num_ranks * size_bytes * beta_s_per_byte if num_ranks > 1 else 0.0


def lower_bound_s(num_ranks: int, size_bytes: float, *, alpha_s: float, beta_s_per_byte: float) -> float:
    """The larger of the latency and bandwidth lower bounds of DESIGN.md."""
    return max(
        latency_lower_bound_s(num_ranks, alpha_s),
        bandwidth_lower_bound_s(num_ranks, size_bytes, beta_s_per_byte),
    )


# -- the closed forms --------------------------------------------------------------------------

_Resolved = tuple[Algorithm[Any], AlgorithmSpecBase]


@lru_cache(maxsize=256)
def _resolve_text(text: str, collective: str, registry_version: int) -> _Resolved:
    return resolve(text, collective)


def _resolve(algorithm: AlgorithmLike, collective: str) -> _Resolved:
    if isinstance(algorithm, str):  # short forms recur in sweeps: parse each once
        return _resolve_text(algorithm, collective, version())
    return resolve(algorithm, collective)


def collective_time(
    collective: str,
    algorithm: AlgorithmLike,
    num_ranks: int,
    size_bytes: float,
    *,
    alpha_s: float,
    beta_s_per_byte: float,
    gamma_s_per_byte: float = 0.0,
    groups: Sequence[Sequence[int]] | None = None,
    shared_port: bool = True,
    intra_alpha_s: float | None = None,
    intra_beta_s_per_byte: float | None = None,
) -> float:
    """Seconds ``collective`` takes with ``algorithm`` (a spec or short form registered for that
    collective) on ``num_ranks`` ranks of a uniform group, for ``size_bytes`` bytes.

    ``groups`` (lists of ranks) are the groups of algorithms that use them (``hierarchical``
    without a ``group_size``; default: one group). ``intra_alpha_s`` / ``intra_beta_s_per_byte``
    are the within-group figures of such algorithms (default: the same as ``alpha_s`` /
    ``beta_s_per_byte``, which then are the figures between groups). Raises
    :class:`~parplan.errors.CollectiveError` for an unknown algorithm or bad parameters.
    """
    found, spec = _resolve(algorithm, collective)
    cost = UniformCost(
        alpha_s=alpha_s,
        beta_s_per_byte=beta_s_per_byte,
        gamma_s_per_byte=gamma_s_per_byte,
        shared_port=shared_port,
        intra_alpha_s=intra_alpha_s,
        intra_beta_s_per_byte=intra_beta_s_per_byte,
    )
    return found.time_s(spec, num_ranks, size_bytes, cost, groups)


def allreduce_time(
    algorithm: AlgorithmLike,
    num_ranks: int,
    size_bytes: float,
    *,
    alpha_s: float,
    beta_s_per_byte: float,
    gamma_s_per_byte: float = 0.0,
    groups: Sequence[Sequence[int]] | None = None,
    shared_port: bool = True,
    intra_alpha_s: float | None = None,
    intra_beta_s_per_byte: float | None = None,
) -> float:
    """Seconds an all-reduce of ``size_bytes`` takes on ``num_ranks`` ranks of a uniform group.

    ``algorithm`` is a short form (``"ring"``, ``"tree:4"``, ``"hierarchical:8"``) or a spec from
    :mod:`parplan.collectives.specs`; the rest as :func:`collective_time`.
    """
    return collective_time(
        "all_reduce",
        algorithm,
        num_ranks,
        size_bytes,
        alpha_s=alpha_s,
        beta_s_per_byte=beta_s_per_byte,
        gamma_s_per_byte=gamma_s_per_byte,
        groups=groups,
        shared_port=shared_port,
        intra_alpha_s=intra_alpha_s,
        intra_beta_s_per_byte=intra_beta_s_per_byte,
    )
