"""Search speed: enumerate and evaluate in closed form the whole search space of the Megatron-Turing
NLG 530B sample on 5,128 A100 (issue 17's target: >= 100,000 plans/s on one core, the full space
in < 30 s), beside Calculon's figure for the same model and cluster.

    python benchmarks/search_speed.py
    python benchmarks/search_speed.py --scenario sample_configs/scenarios/gpt3-175b-1024xa100.yaml
    python benchmarks/search_speed.py --warm-runs 5   # the least CPU of 5 warm runs (a loaded machine)

Prints the candidates enumerated, pruned (by reason) and evaluated, the enumeration and evaluation
times (plans/s: evaluated over the evaluation's CPU seconds, one process on one core; the
evaluation's per-network set-up, node symmetry and routing tables, is timed first and printed
apart, the cold figure counting it as before and the next one without it), the same
evaluation run again in the process, twice over: with every memo of the network warm (the
collective clock's routes, NCCL systems, group figures and call times, and the search's per-block,
per-chunk and per-stage figures it keeps per cluster, model and search settings: as in a search
evaluated in slices or a sweep over batch sizes), and with the clock's memos alone warm (the
search's own built anew: as in a sweep over models on one cluster); the least CPU of
``--warm-runs`` runs each. The cold run is cold: nothing was evaluated before it in the process,
and the clock's and the search's memos live with the network, so a second network would start
cold too (NCCL's graph search keeps its process-wide cache per system). Then the whole search's
wall time (loading the scenario, building the context, enumerating, evaluating) and the process's
peak memory.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "sample_configs" / "scenarios" / "mt-nlg-530b-5128xa100.yaml"
CALCULON = "Calculon: 8,112 executions in 61 s (133 plans/s) on this machine"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=SCENARIO)
    parser.add_argument("--warm-runs", type=int, default=1, help="warm runs; the least CPU is shown")
    args = parser.parse_args()

    from parplan.api.evaluate import build_context
    from parplan.api.search.memo import forget
    from parplan.api.search.space import enumerate_space
    from parplan.api.search.vector import evaluate_candidates, network_setup
    from parplan.config.loader import load_scenario
    from parplan.config.search import SearchSpec

    wall0 = time.perf_counter()
    scenario = load_scenario(args.scenario)
    ctx = build_context(scenario)
    search = scenario.search or SearchSpec()
    t0, c0 = time.perf_counter(), time.process_time()
    table, size = enumerate_space(ctx, search)
    t1, c1 = time.perf_counter(), time.process_time()
    network_setup(ctx)  # what evaluate_candidates would build on first use: timed apart
    ts, cs = time.perf_counter(), time.process_time()
    evaluation = evaluate_candidates(ctx, search, table)
    t2, c2 = time.perf_counter(), time.process_time()
    wall = t2 - wall0
    warm = float("inf")
    for _ in range(max(1, args.warm_runs)):
        c3 = time.process_time()
        evaluate_candidates(ctx, search, table)  # again: the clock's per-cluster caches are warm
        warm = min(warm, time.process_time() - c3)
    clock_warm = float("inf")
    for _ in range(max(1, args.warm_runs)):
        forget(ctx.network)  # the search's builders anew; the clock's memos stay
        c3 = time.process_time()
        evaluate_candidates(ctx, search, table)
        clock_warm = min(clock_warm, time.process_time() - c3)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"scenario            {scenario.name}")
    print(f"enumerated          {size.enumerated:,}")
    for reason, count in sorted(size.pruned.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  pruned {count:>12,}  {reason}")
    print(f"evaluated           {size.remaining:,} ({int(evaluation.fits.sum()):,} fit in memory)")
    print(f"enumeration         {t1 - t0:.3f} s wall, {c1 - c0:.3f} s CPU")
    print(f"evaluation          {t2 - t1:.3f} s wall, {c2 - c1:.3f} s CPU (cold: set-up included)")
    setup = f"{ts - t1:.3f} s wall, {cs - c1:.3f} s CPU"
    print(f"  set-up            {setup} (per network: node symmetry, routing tables)")
    print(f"plans/s             {size.remaining / max(c2 - c1, 1e-9):,.0f} (evaluated / evaluation CPU s)")
    print(
        f"  after set-up      {size.remaining / max(c2 - cs, 1e-9):,.0f} (evaluated / CPU s past the set-up)"
    )
    print(f"again, warm caches  {warm:.3f} s CPU, {size.remaining / max(warm, 1e-9):,.0f} plans/s")
    print(
        f"  clock's alone     {clock_warm:.3f} s CPU, {size.remaining / max(clock_warm, 1e-9):,.0f} plans/s"
        " (the search's builders anew)"
    )
    print(f"full search         {wall:.2f} s wall (load, context, enumerate, evaluate)")
    print(f"peak memory         {peak_mib:.0f} MiB")
    print(f"reference           {CALCULON}")
    best = int(evaluation.step_time_s[evaluation.fits].argmin()) if evaluation.fits.any() else None
    if best is not None:
        row = int(evaluation.fits.nonzero()[0][best])
        print(
            f"fastest that fits   {table.label(row)}: {evaluation.step_time_s[row]:.3f} s/step, "
            f"MFU {evaluation.mfu[row]:.1%}"
        )


if __name__ == "__main__":
    main()
