"""How fast one 3-D sharded plan of GPT-3 175B on 1024 A100 is evaluated in closed form.

Builds a 128-node DGX A100 cluster (8 GPUs per node on NVSwitch, 8 x 200 Gbit/s HDR per node) and
GPT-3 175B (96 layers, hidden 12288, 96 heads, 2048 tokens), then times the analytic evaluation of
TP 8 x PP 8 x DP 16, interleaved over 2 virtual stages... when the interleaved schedule is
registered (plain 1F1B otherwise), global batch 1536, micro-batch 1, selective recomputation and
sequence parallelism (Narayanan et al. 2021; Korthikanti et al. 2022). Prints the best of
``--repeat`` evaluations (target: <= 10 ms; routes and group figures cached on the cluster, as in a
sweep) and the first one (which builds them), with the plan's step time and MFU.

Then the same plan simulated event by event (:func:`parplan.plan.sharded.tasks.build_tasks`: one
representative GPU per TP group, p2p and data-parallel traffic on the links; target <= 30 s and
<= 2 GiB), with its step time beside the closed form's and the process's peak memory.

    python benchmarks/sharded_plan.py [--repeat 20] [--no-event]
"""

from __future__ import annotations

import argparse
import time

from parplan.config.cluster import ClusterSpec
from parplan.config.model import ModelSpec
from parplan.config.scenario import TrainingSpec
from parplan.config.strategy import ShardedStrategy
from parplan.model.graph import build_model
from parplan.pipeline import registry as pipeline_registry
from parplan.plan.base import PlanContext
from parplan.topology.build import build_network

CLUSTER = {
    "name": "dgx-a100-x128",
    "generator": {
        "kind": "hierarchical",
        "nodes": 128,
        "devices_per_node": 8,
        "device": {
            "peak_flops": "312 TFLOP/s",
            "memory": "80 GiB",
            "efficiency": 0.5,
            "memory_bandwidth": "2039 GB/s",
        },
        "intra": {"bandwidth": "300 GB/s", "latency": "0.7 us"},
        "nics_per_node": 8,
        "nic": {"bandwidth": "200 Gbit/s", "latency": "1.5 us"},
    },
}
MODEL = {
    "name": "gpt3-175b",
    "generator": {
        "kind": "transformer",
        "layers": 96,
        "hidden": 12288,
        "heads": 96,
        "seq_len": 2048,
        "vocab": 51200,
    },
}


def context() -> PlanContext:
    """The 1024-GPU cluster, GPT-3 175B and a 1536-sequence batch."""
    spec = ModelSpec.model_validate(MODEL)
    return PlanContext(
        network=build_network(ClusterSpec.model_validate(CLUSTER)),
        model=build_model(spec),
        model_spec=spec,
        training=TrainingSpec(global_batch_size=1536),
    )


def strategy() -> ShardedStrategy:
    """TP 8 x PP 8 x DP 16 (interleaved when the schedule is registered)."""
    interleaved = "interleaved_1f1b" in pipeline_registry.schedule_names()
    return ShardedStrategy.model_validate(
        {
            "kind": "sharded",
            "tp": 8,
            "pp": 8,
            "dp": 16,
            "sequence_parallel": True,
            "recompute": "selective",
            "virtual_stages": 2 if interleaved else 1,
            "schedule": "interleaved_1f1b" if interleaved else "1f1b",
            "zero": 1,
        }
    )


def print_event(ctx: PlanContext, plan: ShardedStrategy) -> None:
    """Build and simulate the plan's task graph; print tasks, times, the step and peak memory."""
    import dataclasses
    import resource

    from parplan.api.sharded_analytic import evaluate_layout
    from parplan.engine.simulate import simulate
    from parplan.plan.sharded.costs import layout_plan
    from parplan.plan.sharded.tasks import build_tasks

    ctx = dataclasses.replace(ctx, simulator=lambda g, n: simulate(g, n).makespan_s)
    t0 = time.perf_counter()
    layout = layout_plan(ctx, plan)
    graph = build_tasks(ctx, layout)
    t1 = time.perf_counter()
    sim = simulate(graph, ctx.network)
    t2 = time.perf_counter()
    closed = evaluate_layout(ctx, layout).step_time_s
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(
        f"event simulation: {t2 - t0:.2f} s (build {t1 - t0:.2f} s: {graph.num_tasks:,} tasks on "
        f"{len(graph.devices)} representative GPUs; simulate {t2 - t1:.2f} s); target <= 30 s, <= 2 GiB; "
        f"process peak {peak_mib:.0f} MiB"
    )
    diff = sim.makespan_s / closed - 1
    print(f"event step {sim.makespan_s:.2f} s vs closed form {closed:.2f} s ({diff:+.1%})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20, help="evaluations to time (the best is shown)")
    parser.add_argument("--no-event", action="store_true", help="skip the event-by-event simulation")
    args = parser.parse_args()
    from parplan.api.sharded_analytic import evaluate_sharded

    ctx = context()
    plan = strategy()
    t0 = time.perf_counter()
    evaluate_sharded(ctx, plan)  # the first pays for imports, routing tables and group figures
    first = time.perf_counter() - t0
    best = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        estimate = evaluate_sharded(ctx, plan)
        best = min(best, time.perf_counter() - t0)
    m = estimate.layout.microbatches
    print(f"GPT-3 175B on {estimate.num_devices} A100, tp 8 x pp 8 x dp 16, v={plan.virtual_stages}, m={m}")
    print(
        f"analytic evaluation: {best * 1e3:.2f} ms (best of {args.repeat}; target <= 10 ms); "
        f"first on a fresh cluster {first * 1e3:.0f} ms"
    )
    print(
        f"step {estimate.step_time_s:.2f} s, MFU {estimate.mfu:.1%}, "
        f"{estimate.model_tflops_per_gpu:.0f} model TFLOP/s per GPU; {estimate.bound}"
    )
    if not args.no_event:
        print_event(ctx, plan)


if __name__ == "__main__":
    main()
