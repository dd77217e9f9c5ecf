"""How fast the engine simulates a 1 GiB ring all-reduce in full, and how fast the closed forms are.

    python benchmarks/engine_scale.py                 # every case: p = 64, 256, 1024, 4096
    python benchmarks/engine_scale.py --ranks 64 256  # some of them
    python benchmarks/engine_scale.py --case fat_tree 1024   # one case, JSON line (used internally)

Each case runs in its own subprocess so that the peak memory (``ru_maxrss``) is that case's
alone. Topologies: ``switch`` (p hosts on one switch, from the cluster generator), ``leaf_spine``
(a two-level fat tree: leaves of 32 hosts, every leaf linked to each of 16 spines, built here as a
graph) and ``fat_tree`` (the generator's three-level k-ary fat tree, the smallest even k with
k^3/4 >= p). Every transfer of the ring is simulated with link sharing on: 2(p-1) rounds of p
flows, 33.5 million transfers at p = 4096. Printed per case: wall time of each phase (network,
schedule, task graph, simulation), the total, the peak resident memory, the simulated time and,
on the switch, the closed form's. Targets on the 2-core development machine: p = 1024 under 2 s,
p = 4096 under 30 s, and the closed forms over 100,000 evaluations per second.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from typing import Any

SIZE_BYTES = 2**30
ELEMENT_BYTES = 4
LINK = {"bandwidth": "25 GB/s", "latency": "1 us"}
DEVICE = {"peak_flops": "312 TFLOP/s", "memory": "80 GiB", "memory_bandwidth": "2 TB/s"}


def _cluster(topology: str, p: int) -> Any:
    from parplan.config.cluster import ClusterSpec

    if topology == "switch":
        generator: dict[str, Any] = {"kind": "switch", "hosts": p, "device": DEVICE, "link": LINK}
    else:
        k = 2
        while k**3 // 4 < p:
            k += 2
        generator = {"kind": "fat_tree", "k": k, "hosts": p, "device": DEVICE, "link": LINK}
    return ClusterSpec.model_validate({"name": f"{topology}-{p}", "generator": generator})


def _leaf_spine(p: int, hosts_per_leaf: int = 32, spines: int = 16) -> Any:
    """A two-level fat tree as a Network: 25 GB/s, 1 us links; leaves and spines are switches."""
    import networkx as nx

    from parplan.topology.network import Network

    g = nx.DiGraph()
    for i in range(p):
        g.add_node(
            f"h{i}",
            kind="device",
            peak_flop_per_s=312e12,
            efficiency=0.5,
            memory_bytes=80 * 2**30,
            memory_bandwidth_Bps=2e12,
        )
    leaves = -(-p // hosts_per_leaf)
    links = [(f"h{i}", f"leaf{i // hosts_per_leaf}") for i in range(p)]
    links += [(f"leaf{a}", f"spine{b}") for a in range(leaves) for b in range(spines)]
    for name in [f"leaf{a}" for a in range(leaves)] + [f"spine{b}" for b in range(spines)]:
        g.add_node(name, kind="switch")
    channel = 0
    for a, b in links:
        for u, v in ((a, b), (b, a)):
            g.add_edge(u, v, bandwidth_Bps=25e9, latency_s=1e-6, channel=channel)
            channel += 1
    return Network(g, name=f"leaf_spine-{p}")


def run_case(topology: str, p: int) -> dict[str, Any]:
    """Build and simulate one case in this process; returns its figures."""
    from parplan.collectives.registry import build_schedule
    from parplan.engine.analytic import allreduce_time
    from parplan.engine.simulate import simulate
    from parplan.plan.collective import collective_taskgraph
    from parplan.topology.build import build_network

    t0 = time.perf_counter()
    network = _leaf_spine(p) if topology == "leaf_spine" else build_network(_cluster(topology, p))
    devices = network.devices[:p]
    t1 = time.perf_counter()
    schedule = build_schedule("ring", p, SIZE_BYTES // ELEMENT_BYTES)
    t2 = time.perf_counter()
    graph = collective_taskgraph(schedule, devices, ELEMENT_BYTES)
    t3 = time.perf_counter()
    result = simulate(graph, network)
    t4 = time.perf_counter()
    closed = allreduce_time(
        "ring", p, SIZE_BYTES, alpha_s=2e-6, beta_s_per_byte=1 / 25e9, gamma_s_per_byte=3 / 2e12
    )
    return {
        "topology": topology,
        "ranks": p,
        "transfers": int(schedule.num_steps),
        "network_s": t1 - t0,
        "schedule_s": t2 - t1,
        "taskgraph_s": t3 - t2,
        "simulate_s": t4 - t3,
        "total_s": t4 - t0,
        "events": result.num_events,
        "peak_rss_MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "makespan_s": result.makespan_s,
        "closed_form_switch_s": closed,
    }


def analytic_rate(seconds: float = 0.5) -> dict[str, float]:
    """Closed-form evaluations per second, per algorithm (varying sizes, as a sweep does)."""
    from parplan.engine.analytic import allreduce_time

    out = {}
    for algorithm, p in (
        ("ring", 1024),
        ("halving_doubling", 1000),
        ("centralized", 1024),
        ("tree:2", 1024),
        ("tree:4", 4096),
        ("double_binary_tree", 1024),
        ("hierarchical:8", 1024),
    ):
        n = 0
        size = 1.0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(1000):
                allreduce_time(
                    algorithm, p, size, alpha_s=2e-6, beta_s_per_byte=4e-11, gamma_s_per_byte=1.5e-12
                )
                size = size * 1.01 + 1.0
            n += 1000
        out[f"{algorithm} p={p}"] = n / (time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, nargs="*", default=[64, 256, 1024, 4096])
    parser.add_argument("--topologies", nargs="*", default=["switch", "leaf_spine", "fat_tree"])
    parser.add_argument("--case", nargs=2, metavar=("TOPOLOGY", "P"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case[0], int(args.case[1]))))
        return
    header = (
        f"{'topology':9} {'p':>5} {'transfers':>10} {'network':>8} {'schedule':>8} {'graph':>6} "
        f"{'simulate':>8} {'total':>7} {'events':>7} {'peak MiB':>9} {'sim time':>10} {'closed form':>11}"
    )
    print(f"1 GiB ring all-reduce, every transfer simulated, link sharing on (wall seconds)\n{header}")
    for topology in args.topologies:
        for p in args.ranks:
            proc = subprocess.run(
                [sys.executable, __file__, "--case", topology, str(p)],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                print(f"{topology:9} {p:>5} failed: {proc.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            closed = r["closed_form_switch_s"] if topology == "switch" else math.nan
            print(
                f"{topology:9} {p:>5} {r['transfers']:>10} {r['network_s']:>8.2f} {r['schedule_s']:>8.2f} "
                f"{r['taskgraph_s']:>6.2f} {r['simulate_s']:>8.2f} {r['total_s']:>7.2f} {r['events']:>7} "
                f"{r['peak_rss_MiB']:>9.0f} {r['makespan_s'] * 1e3:>8.3f}ms "
                + (f"{closed * 1e3:>9.3f}ms" if math.isfinite(closed) else f"{'-':>11}")
            )
    print("\nclosed forms, evaluations per second:")
    for name, rate in analytic_rate().items():
        print(f"  {name:28} {rate:>12,.0f}")


if __name__ == "__main__":
    main()
