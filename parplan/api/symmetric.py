"""A collective simulated once per orbit when it and the cluster are symmetric, exactly; the
orchestration of :mod:`parplan.collectives.orbits` (the representative steps) and
:mod:`parplan.engine.symmetry` (the network check and the quotient run).

:func:`simulate_symmetric` tries the algorithm's orbit schedules, smallest shift first: each is
lowered like the full schedule (same protocol, per-call cost and rate ceiling) onto every placed
device and checked on the network; the first the network respects is simulated. None means no
orbit form (an algorithm without one, unequal chunks, a cluster that breaks the symmetry): the
caller simulates in full. Setting the environment variable ``PARPLAN_FULL_SIMULATION=1`` turns
the quotient off everywhere (tests compare the two).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import cast

from parplan.collectives.algorithm import AlgorithmSpecBase
from parplan.collectives.orbits import orbit_schedules, shift_image
from parplan.engine.result import SimResult
from parplan.engine.simulate import simulate
from parplan.engine.symmetry import find_quotient
from parplan.plan.collective import collective_taskgraph
from parplan.topology.network import Network

FULL_SIMULATION_ENV = "PARPLAN_FULL_SIMULATION"
"""Set to anything but "" or "0" to simulate every transfer (no quotient)."""


def full_simulation_forced() -> bool:
    """Whether the environment asks for full simulations only."""
    return os.environ.get(FULL_SIMULATION_ENV, "") not in ("", "0")


def simulate_symmetric(
    network: Network,
    devices: Sequence[str],
    spec: AlgorithmSpecBase,
    num_elements: int,
    element_bytes: float,
    *,
    groups: Sequence[Sequence[int]] | None = None,
    collective: str = "all_reduce",
    protocol: str | None = None,
    call_overhead_s: float = 0.0,
    max_rate_Bps: float = float("inf"),
    gamma_s_per_byte: float | None = None,
    link_sharing: bool = True,
) -> SimResult | None:
    """The full run's result of ``collective``'s algorithm ``spec`` on ``devices`` (rank r on
    ``devices[r]``), simulated on the quotient of the first orbit schedule the network respects;
    None when there is none (or :func:`full_simulation_forced`). The result has per-task times
    for the representative steps only; its ``meta["symmetry"]`` says which shift ran
    (``shift``, ``orbit_size``, ``representatives``, ``channel_orbits``, ``transfers``)."""
    if full_simulation_forced():
        return None
    p = len(devices)
    for schedule in orbit_schedules(spec, p, num_elements, groups, collective):
        graph = collective_taskgraph(
            schedule,
            devices,
            element_bytes,
            protocol=protocol,
            call_overhead_s=call_overhead_s,
            max_rate_Bps=max_rate_Bps,
            network=network,
        )
        shift = int(cast(dict[str, int], schedule.meta["orbit"])["shift"])
        quotient = find_quotient(graph, network, shift_image(p, shift))
        if quotient is None:
            continue
        result = simulate(
            graph, network, gamma_s_per_byte=gamma_s_per_byte, link_sharing=link_sharing, quotient=quotient
        )
        symmetry = cast(dict[str, int], result.meta["symmetry"])
        return replace(result, meta={**result.meta, "symmetry": {"shift": shift, **symmetry}})
    return None
