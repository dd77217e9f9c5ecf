"""``auto``: NCCL's tuner picks per size on the system the cluster file describes; forcing works as
NCCL_ALGO / NCCL_PROTO do; labels say what ran."""

from __future__ import annotations

from pathlib import Path

import pytest

from parplan.api.collective import run_collective
from parplan.collectives.auto import FORCED_ONLY, SCHEDULES, AutoAlgorithm, choose
from parplan.collectives.nccl_search import NcclSystem, nvlink_bandwidth_GBps
from parplan.collectives.nccl_tuner import select
from parplan.collectives.registry import ALGORITHMS, parse
from parplan.config.loader import load_cluster
from parplan.errors import CollectiveError
from parplan.topology.build import build_network
from parplan.topology.nccl_system import nccl_system

VALIDATION = Path(__file__).resolve().parents[2] / "validation" / "clusters"
H100X8 = NcclSystem("hopper", 1, 8, nvlink_bandwidth_GBps("hopper", 18), nvswitch=True, nvls=True)


def auto(**kw: object) -> AutoAlgorithm:
    spec = parse({"name": "auto", **kw})
    assert isinstance(spec, AutoAlgorithm)
    return spec


@pytest.mark.parametrize("size", [8, 2**16, 2**20, 2**28])
def test_auto_follows_the_tuner_among_what_has_a_schedule(size: int) -> None:
    choice = choose(auto(), H100X8, size, ALGORITHMS)
    assert choice.nccl is not None
    missing = [
        a for a, names in SCHEDULES.items() if a in FORCED_ONLY or not any(n in ALGORITHMS for n in names)
    ]
    want = select(H100X8, "all_reduce", size, algorithms="^" + ",".join(missing))
    assert (choice.nccl.algorithm, choice.protocol) == (want.algorithm, want.protocol)
    assert choice.label.startswith(f"auto={want.algorithm}/{want.protocol}/{want.channels}ch")


def test_forcing_restricts_like_nccl_algo_and_proto() -> None:
    choice = choose(auto(algorithm="tree", protocol="ll128"), H100X8, 2**24, ALGORITHMS)
    assert choice.nccl is not None and (choice.nccl.algorithm, choice.protocol) == ("tree", "ll128")
    assert "seg" in choice.label  # a pipelined tree says its segments
    forced = choose(auto(algorithm="nvls"), H100X8, 2**28, ALGORITHMS)
    assert forced.label.startswith("auto=nvls")


def test_forced_nvls_tree_runs_its_schedule_unforced_auto_leaves_it() -> None:
    two_nodes = NcclSystem(
        "hopper",
        2,
        8,
        nvlink_bandwidth_GBps("hopper", 18),
        nvswitch=True,
        nvls=True,
        nics_per_node=8,
        nic_bandwidth_GBps=50.0,
    )
    forced = choose(auto(algorithm="nvls_tree"), two_nodes, 2**26, ALGORITHMS)
    assert forced.spec.name == "nvls_tree" and forced.label.startswith("auto=nvls_tree/simple/")
    for size in (2**22, 2**26, 2**30):
        assert choose(auto(), two_nodes, size, ALGORITHMS).spec.name != "nvls_tree"


def test_without_a_gpu_architecture_auto_is_the_ring() -> None:
    choice = choose(auto(), None, 2**20, ALGORITHMS)
    assert choice.spec.name == "ring" and choice.label == "auto=ring/simple"


def test_bad_restrictions_are_spec_errors() -> None:
    with pytest.raises(CollectiveError, match="unknown NCCL algorithm 'butterfly'"):
        auto(algorithm="butterfly")
    with pytest.raises(CollectiveError, match="unknown NCCL protocol 'fast'"):
        auto(protocol="fast")


def test_system_from_a_cluster_file() -> None:
    net = build_network(load_cluster(VALIDATION / "abci-a100.yaml"))
    system = nccl_system(net, net.devices[:16])
    assert system is not None
    assert (system.arch, system.n_nodes, system.ranks_per_node) == ("ampere", 2, 8)
    assert system.intra_bandwidth_GBps == pytest.approx(240.0)  # 12 NVLinks at NCCL's 20 GB/s
    assert (system.nics_per_node, system.nic_bandwidth_GBps, system.nvswitch) == (4, 25.0, True)
    assert nccl_system(net, net.devices[:1]) is None


def test_collective_default_is_auto_and_rows_say_what_ran() -> None:
    sweep = run_collective(VALIDATION / "hgx-h100-8gpu.yaml", ranks=4, size_bytes=2**20)
    (row,) = sweep.rows
    assert row.algorithm == "auto" and row.chosen is not None and row.chosen.startswith("auto=ring/")
    forced = run_collective(
        VALIDATION / "hgx-h100-8gpu.yaml", algorithm="ring", ranks=4, size_bytes=2**20, protocol="ll"
    )
    assert forced.rows[0].chosen == "ring/ll"
    assert forced.rows[0].time_s != row.time_s
