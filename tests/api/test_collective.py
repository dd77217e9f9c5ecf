"""The library behind ``parplan collective``: sizes, algorithms, the sweep, what it returns to trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from parplan.api.collective import (
    collective_sweep,
    expand_algorithms,
    run_collective,
    sweep_sizes,
)
from parplan.api.uniform import uniform_parameters
from parplan.collectives.registry import ALGORITHMS
from parplan.collectives.specs import algorithm_label
from parplan.errors import CollectiveError, ParplanError
from parplan.report.collective import collective_document, describe_parameters, short_label
from tests.engine.nets import switch_network

ROOT = Path(__file__).resolve().parents[2]
SWITCH = ROOT / "sample_configs" / "clusters" / "switch-4hosts.yaml"


def test_sizes() -> None:
    assert sweep_sizes(size_bytes=10, element_bytes=4) == [(8.0, 2)]
    assert sweep_sizes(min_bytes=1, max_bytes=8, element_bytes=4) == [(4.0, 1), (8.0, 2)]
    with pytest.raises(ParplanError, match="not both"):
        sweep_sizes(size_bytes=8, min_bytes=8)
    with pytest.raises(ParplanError, match="step factor"):
        sweep_sizes(min_bytes=8, max_bytes=64, step_factor=1.0)


def test_expand_algorithms() -> None:
    # 'all' leaves out auto and the in-network schedules (they need a switch the cluster declares).
    every = [n for n, a in ALGORITHMS.items() if n != "auto" and not a.switch_capabilities]
    assert [s.name for s in expand_algorithms("all")] == every
    assert [s.name for s in expand_algorithms("auto")] == ["auto"]
    assert [algorithm_label(s) for s in expand_algorithms(" tree:3 ,, ring:2")] == ["tree:3", "ring:2"]
    with pytest.raises(CollectiveError, match=r"valid: centralized, .*, all"):
        expand_algorithms("butterfly")
    with pytest.raises(CollectiveError, match="no algorithm given"):
        expand_algorithms(" , ")


def test_sweep_returns_what_to_trace_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    sweep = run_collective(
        SWITCH, algorithm="ring,tree:2", min_bytes=8, max_bytes=64, step_factor=8, trace=True
    )
    assert list(tmp_path.iterdir()) == []
    assert [t.algorithm for t in sweep.traces] == ["ring", "tree:2"]
    largest = [r for r in sweep.rows if r.size_bytes == 64]
    for item, row in zip(sweep.traces, largest, strict=True):
        assert item.result.makespan_s == row.time_s and item.graph.num_tasks > 0
    assert run_collective(SWITCH, size_bytes=64).traces == ()


def test_analytic_sweep_has_its_parameters() -> None:
    net = switch_network(4, 10e9, 1e-6)
    sweep = collective_sweep(net, net.devices, expand_algorithms("ring"), [(4e6, 10**6)], analytic=True)
    assert sweep.parameters is not None and sweep.parameters.shared_port
    assert sweep.parameters.alpha_s == pytest.approx(2e-6)
    assert "from the bottleneck path" in describe_parameters(sweep.parameters)
    assert collective_document(sweep)["analytic_parameters"]["beta_s_per_byte"] == pytest.approx(1e-10)
    with pytest.raises(ParplanError, match="simulated mode"):
        collective_sweep(net, net.devices, expand_algorithms("ring"), [(8.0, 2)], analytic=True, trace=True)


def test_groups_give_intra_figures() -> None:
    net = switch_network(4, 10e9, 1e-6)
    params = uniform_parameters(net, net.devices, groups=[[0, 1], [2, 3]], gamma_s_per_byte=0.0)
    assert params.intra_bottleneck is not None and params.intra_alpha_s is not None
    assert "within groups" in describe_parameters(params)


def test_short_labels_come_from_the_algorithms() -> None:
    assert [short_label(n) for n in ("halving_doubling", "centralized:0", "tree:2", "toy")] == [
        "hd",
        "central:0",
        "tree:2",
        "toy",
    ]
