"""A cluster seen as a uniform group: the inputs of the closed forms (:mod:`parplan.engine.analytic`)
for a set of placed devices, and where they came from.

A real cluster is reduced to a uniform group by its *bottleneck path*: alpha is the largest path
latency and beta the inverse of the smallest path bandwidth among the pairs of placed devices (all
pairs up to 64 ranks, ring neighbours and rank 0's pairs at power-of-two distances beyond), intra-
and inter-group separately for algorithms that tell groups apart; a rank's concurrent messages
share its port unless every pair of ranks has a link of its own. :class:`UniformParameters` records
which path set the figures, so the report can say so. ``parplan collective --analytic``
(:mod:`parplan.api.collective`) and the fit of the closed forms (:mod:`parplan.api.analytic_fit`)
both read it from here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from parplan.collectives.algorithm import AlgorithmSpecBase
from parplan.engine.analytic import collective_time
from parplan.topology.network import Network

_ALL_PAIRS_UP_TO = 64


@dataclass(frozen=True)
class UniformParameters:
    """A cluster seen as a uniform group: the closed forms' inputs and where they came from."""

    alpha_s: float
    beta_s_per_byte: float
    gamma_s_per_byte: float
    shared_port: bool
    bottleneck: tuple[str, str]
    intra_alpha_s: float | None = None
    intra_beta_s_per_byte: float | None = None
    intra_bottleneck: tuple[str, str] | None = None


def _pairs(devices: Sequence[str]) -> list[tuple[str, str]]:
    """Every ordered pair up to 64 ranks; beyond, ring neighbours and rank 0 with the ranks at
    power-of-two distances either way (the partners of the trees and halving-doubling), so a
    p-rank ring topology routes O(p + log p) paths instead of the 3p (rank 0's to everyone, up to
    p/2 hops each) that made ``--analytic`` slower than the simulation at p = 4096."""
    p = len(devices)
    if p <= _ALL_PAIRS_UP_TO:
        return [(a, b) for a in devices for b in devices if a != b]
    pairs = {(devices[i], devices[(i + 1) % p]) for i in range(p)}
    far = {d for k in range(p.bit_length()) for d in (1 << k, p - (1 << k), p // 2) if 0 < d < p}
    pairs |= {(devices[0], devices[d]) for d in far} | {(devices[d], devices[0]) for d in far}
    return sorted(pairs)


def _bottleneck(
    network: Network, pairs: Sequence[tuple[str, str]]
) -> tuple[float, float, tuple[str, str], bool]:
    """Largest latency, smallest bandwidth, the path that has them, and whether every pair is one hop."""
    worst_lat = -1.0
    worst_bw = math.inf
    where = pairs[0]
    direct = True
    for a, b in pairs:
        channels, latency = network.route(a, b)
        bw = float(network.channel_bandwidth_Bps[channels].min())
        direct = direct and len(channels) == 1
        if bw < worst_bw or (bw == worst_bw and latency > worst_lat):
            where = (a, b)
        worst_bw = min(worst_bw, bw)
        worst_lat = max(worst_lat, latency)
    return worst_lat, worst_bw, where, direct


def uniform_parameters(
    network: Network,
    devices: Sequence[str],
    *,
    groups: Sequence[Sequence[int]] | None = None,
    gamma_s_per_byte: float | None = None,
) -> UniformParameters:
    """The uniform group that stands for ``devices`` on ``network`` in the closed forms.

    With ``groups`` of more than one rank, alpha/beta come from the pairs of group leaders and
    the intra figures from pairs within groups (for algorithms that tell groups apart).
    """
    if len(devices) < 2:
        return UniformParameters(0.0, 0.0, 0.0, True, (devices[0], devices[0]))
    if gamma_s_per_byte is None:
        gammas = []
        for d in devices:
            mem = network.device(d).memory_bandwidth_Bps
            gammas.append(3.0 / float(mem) if mem else 0.0)
        gamma = max(gammas)
    else:
        gamma = gamma_s_per_byte
    lat, bw, where, direct = _bottleneck(network, _pairs(devices))
    params = UniformParameters(lat, 1.0 / bw, gamma, not direct, where)
    if groups is not None and any(len(g) > 1 for g in groups) and len(groups) > 1:
        leaders = [devices[g[0]] for g in groups]
        inner = [pair for g in groups for pair in _pairs([devices[r] for r in g])]
        llat, lbw, lwhere, _ = _bottleneck(network, _pairs(leaders))
        ilat, ibw, iwhere, _ = _bottleneck(network, inner)
        params = UniformParameters(llat, 1.0 / lbw, gamma, not direct, lwhere, ilat, 1.0 / ibw, iwhere)
    return params


def closed_form_time(
    spec: AlgorithmSpecBase,
    p: int,
    size_bytes: float,
    params: UniformParameters,
    groups: Sequence[Sequence[int]] | None,
    collective: str = "all_reduce",
) -> float:
    """The closed form of ``spec``'s ``collective`` on ``p`` ranks of the uniform group ``params``."""
    return collective_time(
        collective,
        spec,
        p,
        size_bytes,
        alpha_s=params.alpha_s,
        beta_s_per_byte=params.beta_s_per_byte,
        gamma_s_per_byte=params.gamma_s_per_byte,
        groups=groups,
        shared_port=params.shared_port,
        intra_alpha_s=params.intra_alpha_s,
        intra_beta_s_per_byte=params.intra_beta_s_per_byte,
    )
