"""The checks every registered collective algorithm must pass, written once.

:func:`check_parts` asks an algorithm every question the interface defines; :func:`check_data_plane`
runs its schedules on integer arrays (exact results, byte counts equal to its traffic volumes);
:func:`check_timing` holds its closed form against the event engine on a uniform switch and both
against the bandwidth bound of its collective. ``tests/collectives/test_every_algorithm.py``
parametrizes them over the registry; the toy algorithm's test runs them on the toy.
"""

from __future__ import annotations

import math
from typing import Any, get_args

import numpy as np
import pytest

from parplan.collectives.algorithm import (
    Algorithm,
    AlgorithmSpecBase,
    Groups,
    UniformCost,
    bandwidth_bound_bytes,
)
from parplan.collectives.registry import get, parse
from parplan.collectives.schedule import COLLECTIVES
from parplan.engine.simulate import simulate
from parplan.plan.collective import collective_taskgraph
from parplan.topology.network import Network
from tests.collectives.cases import run_and_check
from tests.engine.nets import switch_network

LINK_LATENCY_S = 1e-6
BANDWIDTH_BPS = 10e9
GAMMA = 2e-11
ELEMENT_BYTES = 4


def check_parts(algorithm: Algorithm[Any]) -> None:
    """Every part of the interface is there and consistent with the registry."""
    name, collective = algorithm.name, algorithm.collective
    assert collective in COLLECTIVES and isinstance(name, str) and name
    assert get(name, collective) is algorithm
    assert issubclass(algorithm.spec_type, AlgorithmSpecBase)
    assert get_args(algorithm.spec_type.model_fields["name"].annotation) == (name,)
    default = algorithm.default_spec()  # every parameter has a default
    assert isinstance(default, algorithm.spec_type) and default.name == name
    key = algorithm.short_parameter
    assert key is None or key in algorithm.spec_type.model_fields
    assert algorithm.column_label and algorithm.usage.startswith(name)
    for p in (1, 2, 5, 8):
        for spec in algorithm.variants(p):
            assert isinstance(spec, algorithm.spec_type)
            assert algorithm.spec_type.model_validate(spec.to_data()) == spec  # round-trips as data
            parsed = parse(algorithm.label(spec), collective)  # the label is a short form
            assert parsed.name == name
            if key is not None:
                assert getattr(parsed, key) == getattr(spec, key)
            assert isinstance(algorithm.uses_groups(spec), bool)


def _groups_for(p: int) -> list[list[int]]:
    """An uneven partition of the ranks, each group out of order."""
    cut = max(1, p // 3)
    return [list(range(cut))[::-1], list(range(cut, p))] if p > 1 else [[0]]


def check_data_plane(algorithm: Algorithm[Any], seed: int = 0) -> None:
    """Exact results on integer arrays (the data plane also proves the dependencies), and every
    rank's bytes equal to the algorithm's traffic volumes, with and without groups."""
    rng = np.random.default_rng(seed)
    for p in (1, 2, 3, 5, 8):
        for n in (0, max(p - 1, 1), 3 * p + 1):
            for spec in algorithm.variants(p):
                group_cases: list[Groups | None] = [None]
                if algorithm.uses_groups(spec):
                    group_cases.append(_groups_for(p))
                for groups in group_cases:
                    schedule = algorithm.build(spec, p, n, groups)
                    assert schedule.collective == algorithm.collective and schedule.num_ranks == p
                    schedule.validate()
                    arrays = [rng.integers(-(2**40), 2**40, size=n, dtype=np.int64) for _ in range(p)]
                    result = run_and_check(schedule, arrays)
                    sent, received = algorithm.traffic(spec, p, n, groups)
                    np.testing.assert_array_equal(result.bytes_sent, sent * 8, err_msg=f"{spec} p={p} n={n}")
                    np.testing.assert_array_equal(result.bytes_received, received * 8)


def engine_and_closed_form(
    algorithm: Algorithm[Any], spec: AlgorithmSpecBase, p: int, gamma: float, groups: Groups | None = None
) -> tuple[float, float, float]:
    """(engine seconds, closed-form seconds, bytes) on a uniform switch of ``p`` hosts."""
    elements = math.lcm(p, 64, 2 * 3 * 5 * 7) * 3  # whole chunks and segments for every algorithm
    net = switch_network(p, BANDWIDTH_BPS, LINK_LATENCY_S)
    if algorithm.switch_capabilities:  # the star's switch plays the schedule's switch ranks
        net.graph.nodes["sw0"]["reduces"] = tuple(algorithm.switch_capabilities)
        net = Network(net.graph, name=net.name)
    schedule = algorithm.build(spec, p, elements, groups)
    graph = collective_taskgraph(schedule, net.devices, ELEMENT_BYTES, network=net)
    engine = simulate(graph, net, gamma_s_per_byte=gamma).makespan_s
    cost = UniformCost(2 * LINK_LATENCY_S, 1 / BANDWIDTH_BPS, gamma, shared_port=True)
    size_bytes = elements * ELEMENT_BYTES
    return engine, algorithm.time_s(spec, p, size_bytes, cost, groups), size_bytes


def check_timing(algorithm: Algorithm[Any]) -> None:
    """Closed form equals the engine on a uniform switch (every variant without reductions, the
    default with them, equal groups where the algorithm uses groups), never below the bandwidth
    bound (with a reducing switch in the loop: ``n`` each way per rank, the switch doing the
    merges); nothing to move takes no time."""
    for p in (2, 5, 8):
        Case = tuple[AlgorithmSpecBase, float, Groups | None]
        cases: list[Case] = [(algorithm.default_spec(), GAMMA, None)]
        cases += [(spec, 0.0, None) for spec in algorithm.variants(p)]
        if p % 2 == 0:
            halves = [list(range(p // 2)), list(range(p // 2, p))]
            cases += [(spec, 0.0, halves) for spec in algorithm.variants(p) if algorithm.uses_groups(spec)]
        for spec, gamma, groups in cases:
            engine, closed, size_bytes = engine_and_closed_form(algorithm, spec, p, gamma, groups)
            assert engine == pytest.approx(closed, rel=1e-9), (spec, p, gamma, groups)
            bound_bytes = bandwidth_bound_bytes(algorithm.collective, p, size_bytes)
            if algorithm.switch_capabilities:
                bound_bytes = size_bytes
            bound = bound_bytes / BANDWIDTH_BPS
            assert engine >= bound * (1 - 1e-9) and closed >= bound * (1 - 1e-9)
    cost = UniformCost(1e-6, 1e-9)
    spec = algorithm.default_spec()
    assert algorithm.time_s(spec, 1, 1e6, cost) == 0.0 and algorithm.time_s(spec, 4, 0, cost) == 0.0
