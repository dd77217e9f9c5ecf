"""``--analytic`` never silently disagrees with the engine: on every generator topology the closed
form either equals the simulation or the sweep says by how much it differs and why; on the DGX
sample the multi-channel ring is priced from its busiest link and agrees within the tolerance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
