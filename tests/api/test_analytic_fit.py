"""``--analytic`` never silently disagrees with the engine: on every generator topology the closed
form either equals the simulation or the sweep says by how much it differs and why; on the DGX
sample the multi-channel ring is priced from its busiest link and agrees within the tolerance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from parplan.api.analytic_fit import TOLERANCE
from parplan.api.collective import collective_sweep, expand_algorithms, run_collective
from parplan.collectives.registry import get, schedules
from parplan.config.cluster import ClusterSpec
from parplan.report.collective import collective_document
from parplan.topology.build import build_network
from parplan.topology.placement import place

ROOT = Path(__file__).resolve().parents[2]
DGX = ROOT / "sample_configs/clusters/dgx-a100-2nodes.yaml"
DEVICE: dict[str, Any] = {"peak_flops": "100 TFLOP/s", "memory": "16 GiB"}
LINK: dict[str, Any] = {"bandwidth": "10 GB/s", "latency": "1 us"}

GENERATORS: dict[str, dict[str, Any]] = {
    "switch": {"kind": "switch", "hosts": 6, "device": DEVICE, "link": LINK},
    "ring": {"kind": "ring", "hosts": 5, "device": DEVICE, "link": LINK},
    "torus2d": {"kind": "torus2d", "x": 2, "y": 3, "device": DEVICE, "link": LINK},
    "fat_tree": {"kind": "fat_tree", "k": 4, "hosts": 8, "device": DEVICE, "link": LINK},
    "hierarchical": {
        "kind": "hierarchical",
        "nodes": 2,
        "devices_per_node": 4,
        "device": DEVICE,
        "intra": LINK,
        "nic": LINK,
        "nics_per_node": 4,
    },
    "rails": {
        "kind": "hierarchical",
        "nodes": 2,
        "devices_per_node": 2,
        "device": DEVICE,
        "intra": LINK,
        "nic": LINK,
        "nics_per_device": 2,
        "fabric": "rails",
    },
}


@pytest.mark.parametrize("generator", list(GENERATORS))
def test_analytic_agrees_with_the_engine_or_says_why(generator: str) -> None:
    net = build_network(ClusterSpec.model_validate({"generator": GENERATORS[generator]}))
    placement = place(net)
    groups = [list(g) for g in placement.groups]
    specs = expand_algorithms("all")
    sizes = [(4.0 * 983_040, 983_040)]  # divisible by every rank count here
    kwargs: dict[str, Any] = {"groups": groups, "gamma_s_per_byte": 0.0}
    closed = collective_sweep(net, placement.devices, specs, sizes, analytic=True, **kwargs)
    simulated = collective_sweep(net, placement.devices, specs, sizes, **kwargs)
    checked = {c.algorithm: c for c in closed.checks}
    for a, s in zip(closed.rows, simulated.rows, strict=True):
        check = checked.get(a.algorithm)
        if check is None:  # uniform for this algorithm: the closed form is exact
            assert a.time_s == pytest.approx(s.time_s, rel=1e-9), (generator, a.algorithm)
            continue
        assert check.simulated_s == pytest.approx(s.time_s, rel=1e-12)
        if abs(s.time_s / a.time_s - 1) > TOLERANCE:
            assert not check.agrees
            assert any(w.startswith(f"{a.algorithm}: analytic assumes") for w in closed.warnings())
            assert "because" in check.warning() and check.reason


def test_switch_is_uniform_for_every_algorithm() -> None:
    # Every algorithm whose closed form is exact needs no check on a switch; one that declares its
    # closed form an estimate (nccl_tree across nodes) is checked against the engine, and agrees
    # within the tolerance here, so it warns of nothing.
    net = build_network(ClusterSpec.model_validate({"generator": GENERATORS["switch"]}))
    specs = expand_algorithms("all")
    sweep = collective_sweep(net, net.devices, specs, [(1e6, 250_000)], analytic=True)
    estimates = {
        label for spec, label in zip(specs, sweep.algorithms, strict=True)
        if get(spec.name).closed_form_estimate(spec, len(net.devices), None)
    }  # fmt: skip
    assert {c.algorithm for c in sweep.checks} == estimates
    assert sweep.warnings() == []
    assert len(schedules()) == len(sweep.algorithms)  # every algorithm but auto, which picks among them


def test_dgx_ring_priced_from_its_busiest_link_agrees_and_ranks_first() -> None:
    closed = run_collective(DGX, algorithm="all", size_bytes=2**30, analytic=True)
    simulated = run_collective(DGX, algorithm="all", size_bytes=2**30)
    # Both modes rank the same algorithm first (NCCL's tree since it joined the registry; the
    # ring before it), and among the flat algorithms the ring first, as the simulation does.
    assert [r.algorithm for r in closed.rows if r.fastest] == [
        r.algorithm for r in simulated.rows if r.fastest
    ]
    flat = [r for r in closed.rows if r.algorithm != "nccl_tree"]
    assert min(flat, key=lambda r: r.time_s).algorithm == "ring"
    ring = next(c for c in closed.checks if c.algorithm == "ring")
    assert ring.agrees and ring.difference is not None and abs(ring.difference) <= TOLERANCE
    assert "busiest link" in ring.assumes and "200 GB/s" in ring.assumes  # 8 NICs x 25 GB/s
    hier = next(c for c in closed.checks if c.algorithm == "hierarchical")
    assert hier.agrees  # the two-level closed form already has both levels
    # every algorithm that disagrees says so, by how much and why, in the table and the JSON
    doc = collective_document(closed)
    for check in doc["analytic_checks"]:
        sim = next(r.time_s for r in simulated.rows if r.algorithm == check["algorithm"])
        assert check["simulated_s"] == pytest.approx(sim, rel=1e-12)
        if abs(sim / check["analytic_s"] - 1) > TOLERANCE:
            assert check["warning"] and "the simulation differs by" in check["warning"]
        else:
            assert check["warning"] is None
    warned = {c["algorithm"] for c in doc["analytic_checks"] if c["warning"]}
    assert warned >= {"tree:2", "double_binary_tree"}


LARGE: dict[str, dict[str, Any]] = {
    "switch": {"kind": "switch", "hosts": 64, "device": DEVICE, "link": LINK},
    "ring": {"kind": "ring", "hosts": 64, "device": DEVICE, "link": LINK},
    "torus2d": {"kind": "torus2d", "x": 8, "y": 8, "device": DEVICE, "link": LINK},
    "fat_tree": {"kind": "fat_tree", "k": 8, "hosts": 64, "device": DEVICE, "link": LINK},
    "hierarchical": GENERATORS["hierarchical"] | {"nodes": 8, "devices_per_node": 8, "nics_per_node": 8},
}
"""Every cluster generator at 64 ranks, uniform links: where a ring algorithm's path latency from
rank 0 (up to 32 hops on the ring topology) used to stand for every step's."""

SMALL_BYTES = 4 * 1024
LARGE_BYTES = 4 * 1 << 20


@pytest.mark.parametrize("generator", list(LARGE))
def test_ring_tree_hd_and_auto_agree_or_say_by_how_much(generator: str) -> None:
    # The latency end agrees for every algorithm on every generator (the fit spreads the
    # schedule's latency critical path over the closed form's rounds); the bandwidth end agrees
    # for the ring (and auto, which picks it) on the single-level fabrics, and otherwise the
    # sweep says by how much and why (8 rings sharing each node's switch links: about +23%).
    net = build_network(ClusterSpec.model_validate({"generator": LARGE[generator]}))
    placement = place(net)
    groups = [list(g) for g in placement.groups]
    specs = expand_algorithms("ring,tree,halving_doubling,auto")
    sizes = [(SMALL_BYTES, SMALL_BYTES // 4), (LARGE_BYTES, LARGE_BYTES // 4)]
    kwargs: dict[str, Any] = {"groups": groups, "gamma_s_per_byte": 0.0}
    closed = collective_sweep(net, placement.devices, specs, sizes, analytic=True, **kwargs)
    simulated = collective_sweep(net, placement.devices, specs, sizes, **kwargs)
    checked = {(c.algorithm, c.size_bytes): c for c in closed.checks}
    for a, s in zip(closed.rows, simulated.rows, strict=True):
        off = abs(s.time_s / a.time_s - 1)
        flat_ring = a.algorithm in ("ring", "auto") and generator != "hierarchical"
        if flat_ring or a.size_bytes == SMALL_BYTES:
            assert off <= TOLERANCE, (generator, a.algorithm, a.size_bytes, off)
        check = checked.get((a.algorithm, a.size_bytes))
        if off > TOLERANCE:
            assert check is not None and not check.agrees, (generator, a.algorithm)
            assert check.simulated_s == pytest.approx(s.time_s, rel=1e-12)
            assert "the simulation differs by" in check.warning() and check.reason


def test_latency_critical_path_is_the_engine_at_zero_bytes() -> None:
    from parplan.api.analytic_fit import latency_critical_path_s
    from parplan.collectives.algorithm import schedule_pair_traffic
    from parplan.collectives.registry import build_schedule

    net = build_network(ClusterSpec.model_validate({"generator": LARGE["ring"]}))
    for algorithm in ("ring", "tree", "halving_doubling", "double_binary_tree"):
        schedule = build_schedule(algorithm, 64, 64)
        pairs = schedule_pair_traffic(schedule)
        keys = pairs.src * 64 + pairs.dst
        latency = {
            (s, d): net.route(net.devices[s], net.devices[d])[1]
            for s, d in zip(pairs.src.tolist(), pairs.dst.tolist(), strict=True)
        }
        critical = latency_critical_path_s(schedule, keys, np.array(list(latency.values())))
        longest = [0.0] * schedule.num_steps  # the same longest path, one step at a time
        for k in range(schedule.num_steps):
            ready = max((longest[int(d)] for d in schedule.deps(k)), default=0.0)
            longest[k] = ready + latency[int(schedule.src[k]), int(schedule.dst[k])]
        assert critical == pytest.approx(max(longest), rel=1e-12), algorithm
