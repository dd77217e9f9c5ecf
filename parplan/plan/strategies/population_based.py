"""The ``population_based`` strategy: PBT generations of train, evaluate, exploit and explore.

Placement: member ``m`` runs on ``devices[m mod D]`` (``strategy.devices`` or every device of the
cluster). With more members than devices they queue: member ``m`` is in wave ``m // D`` and a
device trains its members one after another, earlier waves first (compute priority = wave).

One generation, as a task graph:

1. every member trains ``steps_per_generation`` steps; each step is a forward, backward and
   optimizer step of the whole model on its own batch of ``training.global_batch_size`` samples
   (members are independent trainings, each with the scenario's batch; the steps of one member are
   merged into one forward, one backward and one optimizer task, which run back to back anyway);
2. then evaluates: a forward pass over an evaluation batch of ``global_batch_size`` samples;
3. a zero-time barrier ranks the population (scores are a few bytes; their messages are not timed);
4. exploit: each copy ``dst <- src`` decided by the real PBT run (:mod:`parplan.plan.pbtsim`, same
   population, generations, steps, exploit and explore, seeded by the scenario's and the strategy's
   seeds) moves the source member's weights and optimizer state (``param_bytes + optimizer_bytes``)
   from its device to the destination's over the network; a copy between members of one device
   moves nothing (it is a local checkpoint load). Explore changes hyperparameters only and costs
   nothing. The last generation exploits nothing.

Time semantics: every generation (up to :data:`~parplan.plan.repeated.MAX_SIMULATED_UNITS`) gets its
own graph with that generation's copies and is simulated; ``PlanWork.graph`` is the generation with
the upper-median time (unit ``generation``, ``samples_per_unit`` = population x steps x batch, the
training samples of a generation; evaluation samples are not counted), ``units_per_run`` is
``generations`` and the graph's ``meta["run_time_s"]`` is the sum of the simulated generations (the
run time the evaluator reports). ``quality`` holds every generation's time and the PBT run's best score, best
hyperparameters per generation and the known optimum.

Memory per device: the weights and optimizer state of every member placed on it (they stay
resident between their turns), plus the gradients and activations of the one member training at a
time.
"""

from __future__ import annotations

from parplan.config.strategy import PopulationBasedStrategy
from parplan.config.units import human_seconds
from parplan.errors import PlanError
from parplan.plan import pbtsim
from parplan.plan.base import MemoryBreakdown, PlanContext, PlanWork
from parplan.plan.compute import forward_seconds, step_compute
from parplan.plan.memory import saved_activation_bytes
from parplan.plan.repeated import MAX_SIMULATED_UNITS, representative_graph, time_units
from parplan.taskgraph import TaskGraph, TaskGraphBuilder


def member_devices(ctx: PlanContext, strategy: PopulationBasedStrategy) -> tuple[str, ...]:
    """The device of every member (round-robin over the plan's devices)."""
    pool = list(strategy.devices) if strategy.devices is not None else list(ctx.network.devices)
    if not pool:
        raise PlanError("population_based: no devices to train on")
    if len(set(pool)) < len(pool):
        raise PlanError(f"population_based: devices listed twice in {pool}")
    for d in pool:
        ctx.network.device_index(d)
    return tuple(pool[m % len(pool)] for m in range(strategy.population_size))


def copy_bytes(ctx: PlanContext) -> float:
    """What one exploit copy moves: the weights and the optimizer state."""
    return ctx.model.param_bytes + ctx.model.optimizer_bytes


def generation_graph(
    ctx: PlanContext,
    strategy: PopulationBasedStrategy,
    devices: tuple[str, ...],
    copies: tuple[tuple[int, int], ...],
    generation: int,
) -> TaskGraph:
    """The task graph of one generation: train and evaluate every member, then make ``copies``."""
    width = len(dict.fromkeys(devices))
    batch = float(ctx.training.global_batch_size)
    steps = strategy.steps_per_generation
    nodes = ctx.model.order
    b = TaskGraphBuilder(list(dict.fromkeys(devices)))
    evals = []
    for m, dev in enumerate(devices):
        wave = m // width
        t = step_compute(ctx, dev, nodes, batch, step=generation)
        eval_s = forward_seconds(ctx, dev, nodes, batch, step=generation)
        fwd = b.compute(
            dev, steps * t.forward_s, category="forward", label=f"member {m} forward", priority=wave
        )
        bwd = b.compute(
            dev, steps * t.backward_s, [fwd], category="backward", label=f"member {m} backward", priority=wave
        )
        opt = b.compute(
            dev,
            steps * t.optimizer_s,
            [bwd],
            category="optimizer",
            label=f"member {m} optimizer",
            priority=wave,
        )
        evals.append(
            b.compute(dev, eval_s, [opt], category="evaluate", label=f"member {m} evaluate", priority=wave)
        )
    rank = b.marker(evals, label=f"generation {generation} ranked")
    size = copy_bytes(ctx)
    ends = [rank]
    for dst, src in copies:
        if devices[src] != devices[dst]:
            ends.append(
                b.transfer(
                    devices[src],
                    devices[dst],
                    size,
                    [rank],
                    category="exploit",
                    label=f"copy member {src} -> {dst}",
                )
            )
    b.marker(ends, label=f"generation {generation} done")
    return b.build(
        meta={"strategy": "population_based", "generation": generation, "copies": [list(c) for c in copies]}
    )


def _memory(ctx: PlanContext, devices: tuple[str, ...]) -> tuple[MemoryBreakdown, ...]:
    spec = ctx.model_spec
    params = ctx.model.total_params
    batch = float(ctx.training.global_batch_size)
    counts: dict[str, int] = {}
    for d in devices:
        counts[d] = counts.get(d, 0) + 1
    return tuple(
        MemoryBreakdown(
            device=d,
            capacity_bytes=ctx.network.device(d).memory_bytes,
            params_bytes=n * params * spec.bytes_per_param,
            grads_bytes=params * spec.bytes_per_grad,
            optimizer_bytes=n * params * spec.optimizer_bytes_per_param,
            activations_bytes=saved_activation_bytes(ctx.model, ctx.model.order, batch),
        )
        for d, n in counts.items()
    )


def expand(ctx: PlanContext, strategy: PopulationBasedStrategy) -> PlanWork:
    """Every generation timed with the real PBT run's copies; the typical generation's graph."""
    devices = member_devices(ctx, strategy)
    simulated = min(strategy.generations, MAX_SIMULATED_UNITS)
    run = pbtsim.run_pbt(
        strategy.population_size,
        simulated,
        strategy.steps_per_generation,
        exploit=strategy.exploit,
        explore=strategy.explore,
        seed=(ctx.seed, strategy.seed),
    )
    graphs = [
        generation_graph(ctx, strategy, devices, run.copies_per_generation[g], g) for g in range(simulated)
    ]
    times = time_units(graphs, ctx, strategy.generations)
    rep = times.representative
    distinct = tuple(dict.fromkeys(devices))
    waves = strategy.waves(len(distinct))
    copies = run.copies_per_generation
    remote = [sum(1 for dst, src in c if devices[dst] != devices[src]) for c in copies]
    notes = [
        f"generation {rep} shown (upper-median time of {simulated} simulated generations); "
        f"mean generation {human_seconds(times.mean_s)}, {strategy.generations} generations in"
        f" {human_seconds(times.total_s)}",
    ]
    if waves > 1:
        notes.append(
            f"{strategy.population_size} members on {len(distinct)} devices: they queue in {waves} waves"
        )
    if strategy.generations > simulated:
        notes.append(
            f"only the first {simulated} of {strategy.generations} generations are simulated and run; "
            "the total time extrapolates their mean"
        )
    quality: dict[str, object] = dict(pbtsim.summary(run))
    quality.update(
        {
            "generation_times_s": list(times.times_s),
            "mean_generation_time_s": times.mean_s,
            "total_time_s": times.total_s,
            "generations": strategy.generations,
            "simulated_generations": simulated,
            "shown_generation": rep,
            "member_devices": list(devices),
            "waves": waves,
            "copy_bytes": copy_bytes(ctx),
            "network_copies_per_generation": remote,
        }
    )
    return PlanWork(
        graph=representative_graph(graphs, times),
        devices=distinct,
        unit="generation",
        samples_per_unit=float(
            strategy.population_size * strategy.steps_per_generation * ctx.training.global_batch_size
        ),
        memory=_memory(ctx, devices),
        units_per_run=strategy.generations,
        quality=quality,
        notes=tuple(notes),
    )
