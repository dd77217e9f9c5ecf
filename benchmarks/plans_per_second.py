"""Whole-plan evaluation speed: ``compare-strategies --sweep`` on the dp-algorithms sample, 72
variants (6 all-reduce algorithms x 4 replica counts x 3 bucket sizes), each event-simulated.

    python benchmarks/plans_per_second.py              # 3 runs, the best
    python benchmarks/plans_per_second.py --runs 5 --profile
    python benchmarks/plans_per_second.py --slowest 6    # also the variants that take the longest

Prints the plans evaluated per second (the variants evaluated, duplicates excluded, over the wall
and the CPU time of :func:`~parplan.api.compare.compare_scenario` in one process, loading and
ranking included) and a SHA-256 of the ``--json`` document it yields: a change that speeds evaluation up
must leave the hash as it was. Issue 15's target: >= 200 plans/s. ``--slowest N`` times each
variant's evaluation (expand + simulate + summary) on its own, with the engine's event count, and
prints the N slowest with their share of the total.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import os
import pstats
import time
from pathlib import Path

from parplan.api.compare import Comparison, compare_scenario
from parplan.report.json_report import comparison_document, dumps

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "sample_configs" / "scenarios" / "dp-algorithms.yaml"
SWEEPS = (
    "algorithm=ring,tree:2,tree:4,centralized,halving_doubling,double_binary_tree",
    "num_replicas=2,4,8,16",
    "bucket_size=25MiB,100MiB,400MiB",
)


def _compare() -> Comparison:
    return compare_scenario(SCENARIO.relative_to(ROOT), sweeps=SWEEPS)


def _document(comparison: Comparison) -> str:
    """The ``--json`` text ``compare-strategies`` writes for ``comparison``."""
    return dumps(comparison_document(comparison))


def _slowest(shown: int) -> None:
    """Each variant evaluated on its own (CPU seconds), the slowest first."""
    from parplan.api.evaluate import build_context, evaluate_plan
    from parplan.api.knobs import parse_sweep
    from parplan.api.variants import dedupe_variants, expand_variants, merge_sweeps, sweeps_from_scenario
    from parplan.config.loader import load_scenario

    spec = load_scenario(SCENARIO)
    sweeps = merge_sweeps(sweeps_from_scenario(spec), [parse_sweep(s) for s in SWEEPS])
    variants, _ = dedupe_variants(expand_variants(list(spec.plans), sweeps))
    ctx = build_context(spec)
    timed = []
    for variant in variants:
        start = time.process_time()
        result = evaluate_plan(ctx, variant.plan, overrides=variant.overrides or None)
        events = result.sim.num_events if result.sim is not None else 0
        timed.append((time.process_time() - start, events, variant.name))
    total = sum(t for t, _, _ in timed)
    print(f"{len(timed)} variants, {total:.2f} CPU s in all; the slowest:")
    for seconds, events, name in sorted(timed, reverse=True)[:shown]:
        print(f"  {seconds:7.3f} s {seconds / total:6.1%} {events:>8} events  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one more run")
    parser.add_argument("--slowest", type=int, default=0, metavar="N", help="time each variant; show N")
    args = parser.parse_args()
    os.chdir(ROOT)
    _compare()  # warm: imports, caches of the first run are not what is measured
    best_wall = best_cpu = float("inf")
    digest = ""
    evaluated = 0
    for _ in range(args.runs):
        wall, cpu = time.perf_counter(), time.process_time()
        comparison = _compare()
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
        evaluated = len(comparison.variants)
        digest = hashlib.sha256(_document(comparison).encode()).hexdigest()
    print(f"{evaluated} plans, best of {args.runs}:")
    print(f"  {best_wall:.3f} s wall: {evaluated / best_wall:.1f} plans/s")
    print(f"  {best_cpu:.3f} s CPU: {evaluated / best_cpu:.1f} plans/s (quote this on a loaded machine)")
    print(f"sha256 of the JSON document: {digest}")
    if args.slowest:
        _slowest(args.slowest)
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(_compare)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
