"""Whole-plan evaluation speed: ``compare-strategies --sweep`` on the dp-algorithms sample, 72
variants (6 all-reduce algorithms x 4 replica counts x 3 bucket sizes), each event-simulated.

    python benchmarks/plans_per_second.py              # 3 runs, the best
    python benchmarks/plans_per_second.py --runs 5 --profile

Prints the plans evaluated per second (the variants evaluated, duplicates excluded, over the wall
time of :func:`~parplan.api.compare.compare_scenario` in one process, loading and ranking
included) and a SHA-256 of the ``--json`` document it yields: a change that speeds evaluation up
must leave the hash as it was. Issue 15's target: >= 200 plans/s.
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
from parplan.report.json_report import compare_document, dumps, scenario_info

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
    spec = comparison.scenario
    return dumps(
        compare_document(
            scenario_info(spec.name, spec.description, comparison.scenario_file),
            comparison.variants,
            comparison.ranked,
            comparison.failed,
            sweeps=comparison.sweeps,
            baseline=comparison.baseline,
            duplicates=comparison.duplicates,
            baseline_rule=comparison.baseline_rule,
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one more run")
    args = parser.parse_args()
    os.chdir(ROOT)
    _compare()  # warm: imports, caches of the first run are not what is measured
    best = float("inf")
    digest = ""
    evaluated = 0
    for _ in range(args.runs):
        start = time.perf_counter()
        comparison = _compare()
        best = min(best, time.perf_counter() - start)
        evaluated = len(comparison.variants)
        text = _document(comparison)
        digest = hashlib.sha256(text.encode()).hexdigest()
    print(f"{evaluated} plans in {best:.3f} s (best of {args.runs}): {evaluated / best:.1f} plans/s")
    print(f"sha256 of the JSON document: {digest}")
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(_compare)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
