"""How far the data plane proves each algorithm, and what a large ring schedule costs to build.

Prints, per registry algorithm, the largest rank count p (doubling from 64) whose all-reduce the
data plane runs and fully checks (exact dependencies, contributions, exact integer result)
within a time budget, with its tensor size, step count and seconds; then the time and peak
memory to build a ring schedule at p = 1024 and p = 4096.

    python benchmarks/dataplane_scale.py [--budget-s 20] [--elements-per-rank 4]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from parplan.collectives.dataplane import reference_outputs, run_schedule
from parplan.collectives.registry import ALGORITHMS, build_schedule
from parplan.collectives.ring import ring_all_reduce

SPECS = {"tree": "tree:2", "centralized": "centralized:0", "hierarchical": "hierarchical:8"}


def check_once(name: str, p: int, n: int) -> tuple[int, float, float, bool]:
    """Build and run one all-reduce; returns (steps, build seconds, run seconds, race checked)."""
    t0 = time.perf_counter()
    schedule = build_schedule(SPECS.get(name, name), p, n)
    t1 = time.perf_counter()
    rng = np.random.default_rng(p)
    arrays = [rng.integers(-(2**31), 2**31, size=n) for _ in range(p)]
    result = run_schedule(schedule, arrays)
    t2 = time.perf_counter()
    want = reference_outputs(schedule, arrays)[0]
    if want is None or not all(np.array_equal(a, want) for a in result.arrays):
        raise SystemExit(f"{name} at p={p}: wrong result")
    return schedule.num_steps, t1 - t0, t2 - t1, result.race_checked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=20.0, help="stop growing p past this run time")
    parser.add_argument("--elements-per-rank", type=int, default=4, help="n = this x p + 3 (uneven)")
    parser.add_argument("--max-ranks", type=int, default=4096)
    args = parser.parse_args()

    print("data plane: largest p checked per algorithm (n = k*p + 3, int64 elements)")
    print(f"{'algorithm':<20}{'p':>6}{'n':>8}{'steps':>11}{'build s':>9}{'run s':>9}  race-checked")
    for name in ALGORITHMS:
        p, last = 64, None
        while p <= args.max_ranks:
            n = args.elements_per_rank * p + 3
            steps, build_s, run_s, raced = check_once(name, p, n)
            last = (p, n, steps, build_s, run_s, raced)
            if run_s > args.budget_s / 4:  # the next doubling would take ~4x (or more)
                break
            p *= 2
        assert last is not None
        p, n, steps, build_s, run_s, raced = last
        print(f"{name:<20}{p:>6}{n:>8}{steps:>11}{build_s:>9.2f}{run_s:>9.2f}  {'yes' if raced else 'no'}")

    print("\nring schedule build (n = 10^8 elements)")
    print(f"{'p':>6}{'steps':>12}{'build s':>9}{'arrays GB':>11}{'peak GB':>9}")
    for p in (1024, 4096):
        tracemalloc.start()
        t0 = time.perf_counter()
        schedule = ring_all_reduce(p, 10**8)
        build_s = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        size_gb = schedule.nbytes / 1e9
        print(f"{p:>6}{schedule.num_steps:>12}{build_s:>9.2f}{size_gb:>11.3f}{peak / 1e9:>9.3f}")
        del schedule


if __name__ == "__main__":
    main()
