"""Closed forms against the event engine, the lower bounds, and the scaling laws of each algorithm."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.collectives.double_binary_tree import double_binary_tree_all_reduce
from parplan.collectives.registry import ALGORITHMS, build_schedule
from parplan.collectives.tree_broadcast import tree_broadcast, tree_broadcast_time
from parplan.collectives.tree_reduce import tree_reduce, tree_reduce_time
from parplan.config.algorithms import (
    DoubleBinaryTreeAlgorithm,
    HierarchicalAlgorithm,
    RingAlgorithm,
    TreeAlgorithm,
    parse_algorithm,
)
from parplan.engine.analytic import (
    allreduce_time,
    bandwidth_lower_bound_s,
    bus_bandwidth,
    latency_lower_bound_s,
    lower_bound_s,
)
from parplan.engine.simulate import simulate
from parplan.errors import CollectiveError
from parplan.plan.collective import collective_taskgraph
from parplan.topology.network import Network
from tests.engine.nets import full_mesh_network, switch_network

LINK_LATENCY_S = 1e-6
BANDWIDTH_BPS = 10e9
GAMMA = 2e-11
ELEMENT_BYTES = 4
FAST_P = (2, 3, 4, 5, 7, 8, 16, 31, 64)

# Variants of every registered algorithm: (spec, extra keyword for the closed form).
VARIANTS: list[Any] = [
    "ring",
    RingAlgorithm(name="ring", channels=3),
    "centralized",
    "centralized:1",
    "tree",
    "tree:3",
    "tree:4",
    TreeAlgorithm(name="tree", arity=2, segments=3),
    TreeAlgorithm(name="tree", arity=3, segments=5),
    "halving_doubling",
    "double_binary_tree",
    "hierarchical",
    "hierarchical:group",
    "nccl_tree",
    "nvls",  # the star's switch reduces (marked so below); no switch on a mesh
    "nvls_tree",  # one node: NVLS
    "collnet_direct",  # likewise, flat: one rank per node
    "collnet_chain",
    "auto",  # without a GPU architecture: the ring
]


def _label(v: Any) -> str:
    if isinstance(v, str):
        return v
    return f"ring:{v.channels}ch" if v.name == "ring" else f"tree:{v.arity}x{v.segments}seg"


def test_variants_cover_the_registry() -> None:
    names = {(v if isinstance(v, str) else v.name).split(":")[0] for v in VARIANTS}
    assert names == set(ALGORITHMS)


def _network(kind: str, p: int) -> tuple[Network, float]:
    """The network and its alpha (a switch path is two links, a mesh path one)."""
    if kind == "switch":
        return switch_network(p, BANDWIDTH_BPS, LINK_LATENCY_S), 2 * LINK_LATENCY_S
    return full_mesh_network(p, BANDWIDTH_BPS, LINK_LATENCY_S), LINK_LATENCY_S


def _spec(variant: Any, p: int) -> Any:
    if variant == "hierarchical:group":
        # The largest proper divisor as the group size: equal groups, several leaders when p allows.
        size = max(d for d in range(1, p) if p % d == 0) if p > 1 else 1
        return HierarchicalAlgorithm(name="hierarchical", group_size=size)
    if variant == "centralized:1":
        return parse_algorithm("centralized:1")
    return variant


def _engine_and_analytic(variant: Any, p: int, kind: str, gamma: float) -> tuple[float, float]:
    spec = _spec(variant, p)
    elements = math.lcm(p, 64, 2 * 3 * 5 * 7) * 3  # whole chunks for every algorithm
    net, alpha = _network(kind, p)
    schedule = build_schedule(spec, p, elements)
    if schedule.switches:
        net.graph.nodes["sw0"]["reduces"] = tuple({s.capability for s in schedule.switches})
        net = Network(net.graph, name=net.name)
    graph = collective_taskgraph(schedule, net.devices, ELEMENT_BYTES, network=net)
    engine = simulate(graph, net, gamma_s_per_byte=gamma).makespan_s
    analytic = allreduce_time(
        spec,
        p,
        elements * ELEMENT_BYTES,
        alpha_s=alpha,
        beta_s_per_byte=1 / BANDWIDTH_BPS,
        gamma_s_per_byte=gamma,
        shared_port=kind == "switch",
    )
    return engine, analytic


def _cases() -> list[Any]:
    cases = []
    for variant in VARIANTS:
        for p in FAST_P:
            for kind in ("switch", "mesh"):
                if kind == "mesh" and variant in ("nvls", "nvls_tree", "collnet_direct", "collnet_chain"):
                    continue
                cases.append(pytest.param(variant, p, kind, id=f"{_label(variant)}-p{p}-{kind}"))
    return cases


def _gamma(variant: Any) -> float:
    """Multi-channel rings are exact only without reductions (see parplan.engine.analytic)."""
    return 0.0 if isinstance(variant, RingAlgorithm) else GAMMA


@pytest.mark.parametrize(("variant", "p", "kind"), _cases())
def test_engine_agrees_with_closed_form(variant: Any, p: int, kind: str) -> None:
    engine, analytic = _engine_and_analytic(variant, p, kind, _gamma(variant))
    assert engine == pytest.approx(analytic, rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS, ids=_label)
def test_engine_agrees_with_closed_form_every_p(variant: Any) -> None:
    for p in range(2, 65):
        engine, analytic = _engine_and_analytic(variant, p, "switch", _gamma(variant))
        assert engine == pytest.approx(analytic, rel=1e-9), p


@pytest.mark.parametrize("p", [3, 8, 13])
def test_multichannel_ring_reductions_are_bounded_by_the_closed_form(p: int) -> None:
    engine, analytic = _engine_and_analytic(RingAlgorithm(name="ring", channels=4), p, "switch", GAMMA * 10)
    assert engine <= analytic * (1 + 1e-9)


def _standalone(collective: str, p: int, arity: int | None, segments: int, kind: str) -> tuple[float, float]:
    """(engine, closed form) seconds of a standalone tree reduce or broadcast from a root != 0."""
    elements = 2 * 3 * 5 * 7 * 8
    net, alpha = _network(kind, p)
    build = tree_reduce if collective == "reduce" else tree_broadcast
    schedule = build(p, elements, root=p // 2, arity=arity, segments=segments)
    graph = collective_taskgraph(schedule, net.devices, ELEMENT_BYTES)
    engine = simulate(graph, net, gamma_s_per_byte=GAMMA).makespan_s
    common: dict[str, Any] = {
        "alpha_s": alpha,
        "beta_s_per_byte": 1 / BANDWIDTH_BPS,
        "arity": arity,
        "segments": segments,
        "shared_port": kind == "switch",
    }
    size = elements * ELEMENT_BYTES
    if collective == "reduce":
        return engine, tree_reduce_time(p, size, gamma_s_per_byte=GAMMA, **common)
    return engine, tree_broadcast_time(p, size, **common)


@pytest.mark.parametrize("kind", ["switch", "mesh"])
@pytest.mark.parametrize("collective", ["reduce", "broadcast"])
@pytest.mark.parametrize("arity", [None, 2, 3], ids=["binomial", "2-ary", "3-ary"])
@pytest.mark.parametrize("segments", [1, 2, 7])
def test_standalone_tree_collectives_agree_with_closed_form(
    kind: str, collective: str, arity: int | None, segments: int
) -> None:
    for p in (2, 5, 12, 17):
        engine, analytic = _standalone(collective, p, arity, segments, kind)
        assert engine == pytest.approx(analytic, rel=1e-9), p


@pytest.mark.parametrize("kind", ["switch", "mesh"])
@pytest.mark.parametrize("k", [2, 3])
def test_pipelined_tree_is_depth_plus_segments_minus_one_stages(kind: str, k: int) -> None:
    # A perfect k-ary tree of height 2: a flow shop of 2 stages per phase, so S segments of m
    # bytes take (2 + S - 1) of its stage, up and down.
    p = 1 + k + k * k
    net, alpha = _network(kind, p)
    elements = 2 * 3 * 5 * 7 * 8
    shared = kind == "switch"
    for segments in (1, 2, 5, 8):
        m = elements * ELEMENT_BYTES / segments
        x, r = m / BANDWIDTH_BPS, m * GAMMA
        up = alpha + (k * x if shared else x) + k * r
        down = alpha + (k * x if shared else x)
        spec = TreeAlgorithm(name="tree", arity=k, segments=segments)
        graph = collective_taskgraph(build_schedule(spec, p, elements), net.devices, ELEMENT_BYTES)
        engine = simulate(graph, net, gamma_s_per_byte=GAMMA).makespan_s
        assert engine == pytest.approx((2 + segments - 1) * (up + down), rel=1e-9)
        closed = allreduce_time(
            spec,
            p,
            elements * ELEMENT_BYTES,
            alpha_s=alpha,
            beta_s_per_byte=1 / BANDWIDTH_BPS,
            gamma_s_per_byte=GAMMA,
            shared_port=shared,
        )
        assert closed == pytest.approx((2 + segments - 1) * (up + down), rel=1e-12)


@pytest.mark.parametrize("p", [3, 6, 8, 13, 32])
def test_segmented_double_binary_tree_closed_form_is_optimistic(p: int) -> None:
    # With segments the two trees' pipelines share ports, which the closed form ignores.
    elements = 2 * 3 * 5 * 7 * 8
    net, alpha = _network("switch", p)
    for segments in (2, 4):
        schedule = double_binary_tree_all_reduce(p, elements, segments=segments)
        graph = collective_taskgraph(schedule, net.devices, ELEMENT_BYTES)
        engine = simulate(graph, net, gamma_s_per_byte=GAMMA).makespan_s
        spec = DoubleBinaryTreeAlgorithm(name="double_binary_tree", segments=segments)
        analytic = allreduce_time(
            spec,
            p,
            elements * ELEMENT_BYTES,
            alpha_s=alpha,
            beta_s_per_byte=1 / BANDWIDTH_BPS,
            gamma_s_per_byte=GAMMA,
        )
        assert analytic * (1 - 1e-9) <= engine <= analytic * 1.2


def test_design_closed_forms() -> None:
    a, b, g, n, p = 3e-6, 1e-10, 1e-11, 1e8, 16
    assert allreduce_time("ring", p, n, alpha_s=a, beta_s_per_byte=b, gamma_s_per_byte=g) == pytest.approx(
        2 * (p - 1) * a + 2 * (p - 1) / p * n * b + (p - 1) / p * n * g
    )
    assert allreduce_time(
        "halving_doubling", p, n, alpha_s=a, beta_s_per_byte=b, gamma_s_per_byte=g
    ) == pytest.approx(2 * 4 * a + 2 * (p - 1) / p * n * b + (p - 1) / p * n * g)
    assert allreduce_time(
        "centralized", p, n, alpha_s=a, beta_s_per_byte=b, gamma_s_per_byte=g
    ) == pytest.approx(2 * a + 2 * (p - 1) * n * b + (p - 1) * n * g)
    # A perfect binary heap tree of 15 ranks: 3 levels, two children per node through one port.
    assert allreduce_time("tree", 15, n, alpha_s=a, beta_s_per_byte=b, gamma_s_per_byte=g) == pytest.approx(
        3 * (a + 2 * n * b + 2 * n * g) + 3 * (a + 2 * n * b)
    )
    assert allreduce_time("ring", 1, n, alpha_s=a, beta_s_per_byte=b) == 0.0


def test_unknown_algorithm_lists_the_valid_ones() -> None:
    with pytest.raises(CollectiveError, match="ring"):
        allreduce_time("butterfly", 4, 1e6, alpha_s=1e-6, beta_s_per_byte=1e-9)
    with pytest.raises(CollectiveError):
        allreduce_time("halving_doubling:3", 4, 1e6, alpha_s=1e-6, beta_s_per_byte=1e-9)


def test_centralized_grows_linearly_with_p_through_the_centre() -> None:
    times = [_engine_and_analytic("centralized", p, "switch", GAMMA)[0] for p in (4, 8, 16, 32)]
    n_bytes = [math.lcm(p, 64, 210) * 3 * ELEMENT_BYTES for p in (4, 8, 16, 32)]
    # Per extra rank: its tensor in and the result out through the root's link, plus one reduction.
    for t, p, n in zip(times, (4, 8, 16, 32), n_bytes, strict=True):
        assert t == pytest.approx(
            2 * 2 * LINK_LATENCY_S + (p - 1) * n * (2 / BANDWIDTH_BPS + GAMMA), rel=1e-9
        )


def test_ring_bandwidth_term_is_flat_in_p() -> None:
    size = 2**26 * 3 * 5 * 7
    busbw = []
    for p in (2, 4, 8, 16, 32, 64):
        net = switch_network(p, BANDWIDTH_BPS, 0.0)
        graph = collective_taskgraph(build_schedule("ring", p, size // 4), net.devices, 4)
        result = simulate(graph, net, gamma_s_per_byte=0.0)
        busbw.append(bus_bandwidth(size, result.makespan_s, p))
        assert result.busbw_Bps == pytest.approx(busbw[-1])
    assert busbw == pytest.approx([BANDWIDTH_BPS] * len(busbw), rel=1e-6)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_tree_latency_grows_with_log_k_p(k: int) -> None:
    # Perfect k-ary trees of height h: the latency term is 2 h alpha (up and down), i.e. ~2 log_k p.
    for h in (1, 2, 3):
        p = (k ** (h + 1) - 1) // (k - 1)
        if p > 64:
            continue
        net = switch_network(p, 1e18, LINK_LATENCY_S)
        graph = collective_taskgraph(build_schedule(f"tree:{k}", p, p), net.devices, 1)
        t = simulate(graph, net, gamma_s_per_byte=0.0).makespan_s
        assert t == pytest.approx(2 * h * 2 * LINK_LATENCY_S, rel=1e-9)
        assert t == pytest.approx(2 * 2 * LINK_LATENCY_S * (math.log(p * (k - 1) + 1, k) - 1), rel=1e-9)


_ALG = st.sampled_from(
    [
        "ring",
        "centralized",
        "tree",
        "tree:3",
        "tree:5",
        "halving_doubling",
        "double_binary_tree",
        "hierarchical",
        "hierarchical:2",
        "hierarchical:5",
    ]
)


def _fan_in(algorithm: str) -> bool:
    """Algorithms that pay alpha once for many concurrent messages into one rank."""
    return algorithm == "centralized" or (algorithm.startswith("tree:") and int(algorithm[5:]) > 2)


def _check_bounds(algorithm: str, p: int, size: float, alpha: float, beta: float, t: float) -> None:
    assert t >= bandwidth_lower_bound_s(p, size, beta) * (1 - 1e-9)
    if _fan_in(algorithm):
        assert t >= 2 * alpha * (1 - 1e-9)
    else:
        assert t >= lower_bound_s(p, size, alpha_s=alpha, beta_s_per_byte=beta) * (1 - 1e-9)


@settings(max_examples=300, deadline=None)
@given(
    algorithm=_ALG,
    p=st.integers(2, 512),
    # Whole-byte-scale sizes: at subnormal sizes (1e-311 B) float rounding alone crosses the bound.
    size=st.one_of(st.just(0.0), st.floats(1.0, 1e10)),
    alpha=st.floats(0.0, 1e-3),
    beta=st.floats(1e-13, 1e-6),
    gamma=st.floats(0.0, 1e-9),
    shared=st.booleans(),
)
def test_closed_forms_never_beat_the_lower_bounds(
    algorithm: str, p: int, size: float, alpha: float, beta: float, gamma: float, shared: bool
) -> None:
    t = allreduce_time(
        algorithm, p, size, alpha_s=alpha, beta_s_per_byte=beta, gamma_s_per_byte=gamma, shared_port=shared
    )
    if size > 0:
        _check_bounds(algorithm, p, size, alpha, beta, t)
    else:
        assert t == 0.0


@settings(max_examples=25, deadline=None)
@given(
    algorithm=_ALG,
    p=st.integers(2, 16),
    elements=st.integers(1, 5000),
    latency=st.floats(0.0, 1e-5),
    mesh=st.booleans(),
)
def test_engine_never_beats_the_lower_bounds(
    algorithm: str, p: int, elements: int, latency: float, mesh: bool
) -> None:
    net = (full_mesh_network if mesh else switch_network)(p, BANDWIDTH_BPS, latency)
    alpha = latency * (1 if mesh else 2)
    graph = collective_taskgraph(build_schedule(algorithm, p, elements), net.devices, ELEMENT_BYTES)
    t = simulate(graph, net, gamma_s_per_byte=GAMMA).makespan_s
    _check_bounds(algorithm, p, elements * ELEMENT_BYTES, alpha, 1 / BANDWIDTH_BPS, t)


def test_lower_bound_pieces() -> None:
    assert latency_lower_bound_s(5, 1.0) == 3.0
    assert latency_lower_bound_s(1, 1.0) == 0.0
    assert bandwidth_lower_bound_s(4, 8.0, 1.0) == 12.0
    assert lower_bound_s(4, 8.0, alpha_s=100.0, beta_s_per_byte=1.0) == 200.0
    assert bus_bandwidth(1e9, 1.0, 1) == 0.0
