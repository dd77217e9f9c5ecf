"""How fast, and in how much memory, the engine simulates a 1 GiB ring all-reduce with every
transfer's time; how fast the closed forms are.

    python benchmarks/engine_scale.py                          # p = 256, 1024 on switch and ring
    python benchmarks/engine_scale.py --ranks 1024 4096 --topologies switch ring leaf_spine fat_tree
    python benchmarks/engine_scale.py --transports ideal       # one transport only
    python benchmarks/engine_scale.py --against ../parplan-main --repeat 3   # before/after, one session
    python benchmarks/engine_scale.py --full                   # no symmetry: every transfer simulated
    python benchmarks/engine_scale.py --case switch 1024 ideal             # one case, JSON (internal)

Issue 15's setting: one 1 GiB ring all-reduce (float32), 50 GB/s and 500 ns per link, every
transfer simulated with link sharing on, under the ``ideal`` transport (pure alpha-beta) and again
under ``nccl`` (the default transport of a GPU cluster since issue 13: per-message overheads, the
Simple protocol's per-step latency, its per-call base latency). Topologies: ``switch`` (p hosts on
one switch) and ``ring`` (p hosts on a ring) from the cluster generators, ``leaf_spine`` (leaves
of 32 hosts, each linked to 16 spines, built here as a graph) and ``fat_tree`` (the generator's
three-level k-ary fat tree, the smallest even k with k^3/4 >= p).

Symmetry (:mod:`parplan.engine.symmetry`). A ring all-reduce with equal chunks on a uniform fabric
is invariant under a rank shift g (1 on the switch and the ring; 32, a leaf, on the leaf-spine; a
pod's edge switch on the fat tree): the shift maps every transfer onto one with identical times,
and every channel onto one with identical load. The case builds only the representative steps
(senders 0 .. g-1, :mod:`parplan.collectives.orbits`), routes every translate of their routes,
checks that the shift maps the network's channels onto channels alike (never assumed), and runs
the representatives on channel orbits, each flow weighted by how many of its orbit cross each
channel: the max-min allocation of every transfer with link sharing on, exactly the full run's
(tests/engine/test_symmetry.py). The ``mode`` column says which ran (``orbit g=1``; ``full`` when
the instance is not symmetric, with ``--full``, or from a checkout without symmetry).

Each case runs in its own subprocess: its ``end to end`` time is that process's wall time from start
to exit (interpreter start-up and imports included) and its peak is the process's own ``ru_maxrss``;
``cpu`` is its user + system CPU time (the measure to trust on a shared machine, and the one the
ratio columns use). Cases run alternately with the reference so a loaded machine slows both alike;
with ``--repeat N`` each figure is the median of N runs. The ratio columns divide each case's CPU
time and peak by its reference's: the same case run from another checkout (``--against DIR``: its
``parplan`` package is imported instead of this one's, e.g. main for a before/after), or else the
session's reference case (``switch`` at p = 256 under ``ideal``), which makes figures from different
machines or loads comparable. Issue 15's targets on the 2-core development machine: p = 1024 on the
switch and the ring <= 0.4 s end to end and <= 64 MiB; p = 4096 <= 3 s and <= 512 MiB; p = 16384
runs at all in <= 60 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SIZE_BYTES = 2**30
ELEMENT_BYTES = 4
LINK = {"bandwidth": "50 GB/s", "latency": "500 ns"}
DEVICE = {"peak_flops": "312 TFLOP/s", "memory": "80 GiB", "memory_bandwidth": "2 TB/s"}
REFERENCE = ("switch", 256, "ideal")
"""The session's reference case when no other checkout is given."""


def _cluster(topology: str, p: int, transport: str) -> Any:
    from parplan.config.cluster import ClusterSpec

    generator: dict[str, Any] = {"kind": topology, "hosts": p, "device": DEVICE, "link": LINK}
    if topology == "fat_tree":
        k = 2
        while k**3 // 4 < p:
            k += 2
        generator["k"] = k
    return ClusterSpec.model_validate(
        {"name": f"{topology}-{p}", "generator": generator, "transport": {"kind": transport}}
    )


def _leaf_spine(p: int, transport: str, hosts_per_leaf: int = 32, spines: int = 16) -> Any:
    """A two-level fat tree as a Network: 50 GB/s, 500 ns links; leaves and spines are switches."""
    import networkx as nx

    from parplan.config.cluster import TransportSpec
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
            g.add_edge(u, v, bandwidth_Bps=50e9, latency_s=500e-9, channel=channel)
            channel += 1
    costs = TransportSpec.model_validate({"kind": transport}).resolved()
    return Network(g, name=f"leaf_spine-{p}", transport=costs)


def _symmetric(network: Any, devices: Any, p: int, call_s: float) -> dict[str, Any] | None:
    """The case on the quotient of the first rank shift the network respects (None: no shift, or
    a checkout without symmetry): figures as :func:`run_case`'s, ``graph`` including the check."""
    try:
        from parplan.api.symmetric import full_simulation_forced
        from parplan.collectives.orbits import orbit_schedules, shift_image
        from parplan.collectives.ring import RingAlgorithm
        from parplan.engine.symmetry import find_quotient
    except ImportError:
        return None
    from parplan.engine.simulate import simulate
    from parplan.plan.collective import collective_taskgraph

    if full_simulation_forced():
        return None
    t1 = time.perf_counter()
    spec = RingAlgorithm(name="ring", channels=1)
    for schedule in orbit_schedules(spec, p, SIZE_BYTES // ELEMENT_BYTES):
        t2 = time.perf_counter()
        graph = collective_taskgraph(schedule, devices, ELEMENT_BYTES, call_overhead_s=call_s)
        shift = schedule.meta["orbit"]["shift"]
        quotient = find_quotient(graph, network, shift_image(p, shift))
        if quotient is None:
            continue
        t3 = time.perf_counter()
        result = simulate(graph, network, quotient=quotient)
        t4 = time.perf_counter()
        return {
            "mode": f"orbit g={shift}",
            "transfers": schedule.meta["orbit"]["steps"],
            "schedule_s": t2 - t1,
            "taskgraph_s": t3 - t2,
            "simulate_s": t4 - t3,
            "events": result.num_events,
            "makespan_s": result.makespan_s,
        }
    return None


def run_case(topology: str, p: int, transport: str) -> dict[str, Any]:
    """Build and simulate one case in this process (on its quotient when it is symmetric);
    returns its figures."""
    from parplan.plan.collective_run import call_overhead_s
    from parplan.topology.build import build_network

    t0 = time.perf_counter()
    if topology == "leaf_spine":
        network = _leaf_spine(p, transport)
    else:
        network = build_network(_cluster(topology, p, transport))
    devices = network.devices[:p]
    t1 = time.perf_counter()
    call_s = call_overhead_s(network.transport, "ring", None)
    figures = _symmetric(network, devices, p, call_s)
    if figures is not None:
        figures["network_s"] = t1 - t0
        figures["peak_MiB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return figures
    from parplan.collectives.registry import build_schedule
    from parplan.engine.simulate import simulate
    from parplan.plan.collective import collective_taskgraph

    t1 = time.perf_counter()
    schedule = build_schedule("ring", p, SIZE_BYTES // ELEMENT_BYTES)
    t2 = time.perf_counter()
    graph = collective_taskgraph(schedule, devices, ELEMENT_BYTES, call_overhead_s=call_s)
    transfers = int(schedule.num_steps)
    del schedule  # the graph keeps the arrays it shares; offsets, lengths and phases go
    t3 = time.perf_counter()
    result = simulate(graph, network)
    t4 = time.perf_counter()
    return {
        "mode": "full",
        "transfers": transfers,
        "network_s": t1 - t0,
        "schedule_s": t2 - t1,
        "taskgraph_s": t3 - t2,
        "simulate_s": t4 - t3,
        "events": result.num_events,
        "peak_MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "makespan_s": result.makespan_s,
    }


def _run(case: tuple[str, int, str], src: Path | None, full: bool = False) -> dict[str, Any] | str:
    """One case in a fresh interpreter (importing parplan from ``src`` when given; every transfer
    simulated when ``full``); its figures with the process's end-to-end wall and CPU time, or the
    last line of its error."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src) + os.pathsep + env.get("PYTHONPATH", "")
    if full:
        env["PARPLAN_FULL_SIMULATION"] = "1"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--case", case[0], str(case[1]), case[2]],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd=src or Path(__file__).resolve().parent.parent,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or ["failed"])[-1]
    figures: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    figures["end_to_end_s"] = wall
    figures["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return figures


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        k: runs[0][k] if isinstance(runs[0][k], str) else statistics.median(r[k] for r in runs)
        for k in runs[0]
    }


def _measure(
    case: tuple[str, int, str], src: Path | None, repeat: int, full: bool = False
) -> dict[str, Any] | str:
    runs = []
    for _ in range(repeat):
        r = _run(case, src, full)
        if isinstance(r, str):
            return r
        runs.append(r)
    return _median(runs)


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


def _row(case: tuple[str, int, str], r: dict[str, Any], ref: dict[str, Any] | str | None) -> str:
    topology, p, transport = case
    ratio = "      -       -"
    if isinstance(ref, dict):
        ratio = f"{r['cpu_s'] / ref['cpu_s']:>7.2f} {r['peak_MiB'] / ref['peak_MiB']:>7.2f}"
    return (
        f"{topology:10} {p:>5} {transport:9} {r.get('mode', 'full'):>10} {r['transfers']:>10} "
        f"{r['network_s']:>7.2f} {r['schedule_s']:>8.2f} {r['taskgraph_s']:>6.2f} {r['simulate_s']:>8.2f} "
        f"{r['end_to_end_s']:>10.2f} {r['cpu_s']:>6.2f} {r['peak_MiB']:>9.0f} {ratio} "
        f"{r['makespan_s'] * 1e3:>12.9f}ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, nargs="*", default=[256, 1024])
    parser.add_argument("--topologies", nargs="*", default=["switch", "ring"])
    parser.add_argument("--transports", nargs="*", default=["ideal", "nccl"])
    parser.add_argument(
        "--against", type=Path, help="another checkout to run each case from, as the reference"
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per case; figures are medians")
    parser.add_argument("--no-closed-forms", action="store_true", help="skip the closed-form rates")
    parser.add_argument(
        "--full", action="store_true", help="simulate every transfer (no symmetry), this checkout's cases"
    )
    parser.add_argument("--case", nargs=3, metavar=("TOPOLOGY", "P", "TRANSPORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case[0], int(args.case[1]), args.case[2])))
        return
    against = args.against.resolve() if args.against else None
    session_ref = None if against else _measure(REFERENCE, None, args.repeat, args.full)
    what = f"the same case from {against}" if against else "the reference case {} p={} {}".format(*REFERENCE)
    print(
        "1 GiB ring all-reduce, every transfer's time, link sharing on (wall seconds; end to end ="
        f" the whole process, cpu its CPU seconds; x ref: cpu and peak over {what}; medians of"
        f" {args.repeat})"
    )
    print(
        f"{'topology':10} {'p':>5} {'transport':9} {'mode':>10} {'transfers':>10} {'network':>7} "
        f"{'schedule':>8} {'graph':>6} {'simulate':>8} {'end to end':>10} {'cpu':>6} {'peak MiB':>9} "
        f"{'x ref t':>7} {'x ref m':>7} {'sim time':>14}"
    )
    if isinstance(session_ref, dict):
        print(_row(REFERENCE, session_ref, session_ref))
    for topology in args.topologies:
        for p in args.ranks:
            for transport in args.transports:
                case = (topology, p, transport)
                ref = _measure(case, against, args.repeat) if against else session_ref
                r = _measure(case, None, args.repeat, args.full)
                if isinstance(r, str):
                    print(f"{topology:10} {p:>5} {transport:9} failed: {r}")
                    continue
                print(_row(case, r, ref))
                if isinstance(ref, str):
                    print(f"{'':10} reference failed: {ref}")
    if not args.no_closed_forms:
        print("\nclosed forms, evaluations per second:")
        for name, rate in analytic_rate().items():
            print(f"  {name:28} {rate:>12,.0f}")


if __name__ == "__main__":
    main()
