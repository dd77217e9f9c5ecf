"""The ``federated`` strategy: rounds of FedAvg between a server and its clients, timed and run.

Who is where:

- The server is ``strategy.server`` or the cluster's first device. Client ``i`` runs on
  ``strategy.clients[i]``, or by default on the cluster's devices after the server, in order; when
  there are fewer such devices than ``num_clients``, client ``i`` takes device ``i mod D`` and
  clients on one device train one after another (the plan's notes say so). Without ``clients``,
  the cluster needs a device besides the server.
- Client ``i`` holds ``samples_per_client[i]`` samples, or by default the global batch split
  evenly (round-robin: sizes differ by at most one).

One round, as a task graph (see :mod:`parplan.plan.fedsim` for the numerics it mirrors):

1. the server sends the model (``param_bytes``) to each selected client, over that client's route;
   the downloads share the server's link;
2. each selected client runs ``local_steps`` steps on its device, each a forward, backward and
   optimizer step over a minibatch of ``min(training.global_batch_size, shard)`` samples (the
   scenario's batch is the batch of one local step; a client holding fewer samples uses its whole
   shard, which is the case for the default shards). A client's ``local_steps`` steps are merged
   into one forward, one backward and one optimizer task (they run back to back on its device
   anyway), at the device's speed, with the round's straggler jitter;
3. each client sends its update (``param_bytes``) back over its own route;
4. the server folds each update into the running average as it arrives: one pass over the model
   per update, memory bound (read the update, read and write the sum: ``3 x param_bytes`` at the
   server's memory bandwidth), so aggregation costs ``params x selected``; ``fedavg`` and ``mean``
   cost the same, they differ in the weights.

The round ends with the last aggregation, so a round is as slow as its slowest selected client and
its link. Selection (``all``, ``random`` seeded by the selection's ``seed`` per round, ``round_robin``,
``fastest``) comes from :func:`parplan.plan.fedsim.selection_schedule`; ``fastest`` ranks clients by
an estimated round trip without contention: the client's compute plus, each way, the route's latency
and ``param_bytes`` over its narrowest link.

Time semantics: every round (up to :data:`~parplan.plan.repeated.MAX_SIMULATED_UNITS`) gets its own
graph and is simulated; ``PlanWork.graph`` is the round with the upper-median time (unit ``round``,
``samples_per_unit`` = that round's samples: local batch x ``local_steps`` summed over its clients) and
``units_per_run`` is ``rounds``; the graph's ``meta["run_time_s"]`` is the sum of the simulated rounds
(the run time the evaluator reports). ``quality`` holds every round's time, their mean and the total,
the clients selected per round and, from FedAvg run on a seeded synthetic problem with the same
shards, selection, local batch and aggregation (seeded by the scenario's and the strategy's seeds),
the global loss and accuracy per round.
"""

from __future__ import annotations

from dataclasses import dataclass

from parplan.config.strategy import FederatedStrategy
from parplan.config.units import human_seconds
from parplan.errors import PlanError
from parplan.plan import fedsim
from parplan.plan.base import MemoryBreakdown, PlanContext, PlanWork
from parplan.plan.compute import memory_bandwidth_Bps, step_compute
from parplan.plan.memory import combine, saved_activation_bytes
from parplan.plan.repeated import MAX_SIMULATED_UNITS, representative_graph, time_units
from parplan.taskgraph import TaskGraph, TaskGraphBuilder


@dataclass(frozen=True)
class FederatedLayout:
    """Where a federated plan's server and clients run, and what data each client holds."""

    server: str
    client_devices: tuple[str, ...]  # per client
    samples: tuple[int, ...]  # per client: its local data set
    batch: tuple[int, ...]  # per client: samples of one local step
    shared_devices: bool


def layout(ctx: PlanContext, strategy: FederatedStrategy) -> FederatedLayout:
    """Place the server and the clients and size the clients' shards (see the module docstring)."""
    net = ctx.network
    server = strategy.server or net.devices[0]
    net.device_index(server)
    n = strategy.num_clients
    if strategy.clients is not None:
        pool = list(strategy.clients)
        for d in pool:
            net.device_index(d)
    else:
        pool = [d for d in net.devices if d != server]
        if not pool:
            raise PlanError(f"federated: the cluster has no device besides the server {server!r} for clients")
    devices = tuple(pool[i % len(pool)] for i in range(n))
    step_batch = ctx.training.global_batch_size
    if strategy.samples_per_client is not None:
        samples = tuple(int(s) for s in strategy.samples_per_client)
    else:
        samples = tuple(step_batch // n + (1 if i < step_batch % n else 0) for i in range(n))
    batch = tuple(min(step_batch, s) for s in samples)
    return FederatedLayout(server, devices, samples, batch, len(set(devices)) < n)


def _client_seconds(
    ctx: PlanContext, device: str, samples: int, local_steps: int, step: int
) -> tuple[float, ...]:
    """Forward, backward and optimizer seconds of a client's local steps in one round."""
    t = step_compute(ctx, device, None, float(samples), step=step)
    return (local_steps * t.forward_s, local_steps * t.backward_s, local_steps * t.optimizer_s)


def _bottleneck_seconds(ctx: PlanContext, src: str, dst: str, size_bytes: float) -> float:
    """Latency plus ``size_bytes`` over the narrowest link of the route, no contention."""
    channels, latency_s = ctx.network.route(src, dst)
    if len(channels) == 0:
        return 0.0
    return latency_s + size_bytes / float(ctx.network.channel_bandwidth_Bps[channels].min())


def estimated_round_trip_s(
    ctx: PlanContext, strategy: FederatedStrategy, where: FederatedLayout
) -> list[float]:
    """Per client: compute of its local steps plus model download and upload, without contention."""
    size = ctx.model.param_bytes
    out = []
    for dev, samples in zip(where.client_devices, where.batch, strict=True):
        compute_s = sum(_client_seconds(ctx, dev, samples, strategy.local_steps, 0))
        out.append(
            compute_s
            + _bottleneck_seconds(ctx, where.server, dev, size)
            + _bottleneck_seconds(ctx, dev, where.server, size)
        )
    return out


def aggregation_seconds(ctx: PlanContext, server: str) -> float:
    """Seconds for the server to fold one update into the average (memory bound, 3 x param_bytes)."""
    return 3.0 * ctx.model.param_bytes / memory_bandwidth_Bps(ctx.network.device(server))


def round_graph(
    ctx: PlanContext,
    strategy: FederatedStrategy,
    where: FederatedLayout,
    selected: tuple[int, ...],
    round_index: int,
) -> TaskGraph:
    """The task graph of one round with the given selected clients."""
    size = ctx.model.param_bytes
    server = where.server
    b = TaskGraphBuilder([server])
    agg_s = aggregation_seconds(ctx, server)
    done = []
    for position, c in enumerate(selected):
        dev = where.client_devices[c]
        fwd_s, bwd_s, opt_s = _client_seconds(ctx, dev, where.batch[c], strategy.local_steps, round_index)
        down = b.transfer(server, dev, size, category="download", label=f"model to client {c}")
        fwd = b.compute(
            dev, fwd_s, [down], category="forward", label=f"client {c} forward", priority=position
        )
        bwd = b.compute(
            dev, bwd_s, [fwd], category="backward", label=f"client {c} backward", priority=position
        )
        opt = b.compute(
            dev, opt_s, [bwd], category="optimizer", label=f"client {c} optimizer", priority=position
        )
        up = b.transfer(dev, server, size, [opt], category="upload", label=f"update from client {c}")
        done.append(b.compute(server, agg_s, [up], category="aggregate", label=f"aggregate client {c}"))
    b.marker(done, label=f"round {round_index} done")
    return b.build(
        meta={"strategy": "federated", "round": round_index, "selected": list(selected), "server": server}
    )


def _memory(ctx: PlanContext, where: FederatedLayout) -> tuple[MemoryBreakdown, ...]:
    """Server: the global model and one aggregation buffer. A client device: the model, its gradients
    and optimizer state, and the activations of its largest local batch (clients on one device take
    turns)."""
    spec = ctx.model_spec
    params = ctx.model.total_params
    nodes = ctx.model.order
    out = [
        MemoryBreakdown(
            device=where.server,
            capacity_bytes=ctx.network.device(where.server).memory_bytes,
            params_bytes=params * spec.bytes_per_param,
            buffers_bytes=params * spec.bytes_per_param,
        )
    ]
    largest: dict[str, int] = {}
    for dev, samples in zip(where.client_devices, where.batch, strict=True):
        largest[dev] = max(largest.get(dev, 0), samples)
    for dev, samples in largest.items():
        out.append(
            MemoryBreakdown(
                device=dev,
                capacity_bytes=ctx.network.device(dev).memory_bytes,
                params_bytes=params * spec.bytes_per_param,
                grads_bytes=params * spec.bytes_per_grad,
                optimizer_bytes=params * spec.optimizer_bytes_per_param,
                activations_bytes=saved_activation_bytes(ctx.model, nodes, samples),
            )
        )
    return combine(out)


MAX_TRAINED_LOCAL_STEPS = 200
"""Local steps per client per round the FedAvg numerics train at most: the loss curve converges long
before, and a file asking for 10^18 must not hang the planner (the times still count them all)."""


def expand(ctx: PlanContext, strategy: FederatedStrategy) -> PlanWork:
    """Every round of ``strategy`` timed; the typical round's graph; FedAvg's loss per round."""
    where = layout(ctx, strategy)
    n = strategy.num_clients
    simulated = min(strategy.rounds, MAX_SIMULATED_UNITS)
    trips = estimated_round_trip_s(ctx, strategy, where)
    schedule = fedsim.selection_schedule(strategy.client_selection, n, simulated, round_trip_s=trips)
    graphs = [round_graph(ctx, strategy, where, sel, r) for r, sel in enumerate(schedule)]
    times = time_units(graphs, ctx, strategy.rounds)
    rep = times.representative
    problem = fedsim.make_problem(where.samples, seed=(ctx.seed, strategy.seed))
    trained_steps = min(strategy.local_steps, MAX_TRAINED_LOCAL_STEPS)
    run = fedsim.run_fedavg(
        problem,
        schedule,
        local_steps=trained_steps,
        aggregation=strategy.aggregation,
        batch_size=ctx.training.global_batch_size,
        seed=strategy.seed,
    )
    samples_per_round = [sum(where.batch[c] for c in sel) * strategy.local_steps for sel in schedule]
    notes = [
        f"round {rep} shown (upper-median time of {simulated} simulated rounds); "
        f"mean round {human_seconds(times.mean_s)},"
        f" {strategy.rounds} rounds in {human_seconds(times.total_s)}"
    ]
    if where.shared_devices:
        per_dev: dict[str, list[int]] = {}
        for c, d in enumerate(where.client_devices):
            per_dev.setdefault(d, []).append(c)
        shared = ", ".join(
            f"{d}: clients {', '.join(map(str, cs))}" for d, cs in per_dev.items() if len(cs) > 1
        )
        notes.append(f"{n} clients on {len(per_dev)} devices; clients sharing a device take turns ({shared})")
    if strategy.rounds > simulated:
        notes.append(
            f"only the first {simulated} of {strategy.rounds} rounds are simulated and trained; "
            "the total time extrapolates their mean"
        )
    if trained_steps < strategy.local_steps:
        notes.append(
            f"FedAvg numerics train {trained_steps} of {strategy.local_steps} local steps per client per"
            " round (the loss curve only; the round times count every step)"
        )
    if problem.simulated_samples < sum(where.samples):
        notes.append(
            f"FedAvg numerics use {problem.simulated_samples} of {sum(where.samples)} samples "
            "(shards scaled down in proportion; aggregation weights keep the declared sizes)"
        )
    quality = {
        "loss_per_round": list(run.loss_per_round),
        "initial_loss": run.initial_loss,
        "accuracy_per_round": list(run.accuracy_per_round),
        "accuracy": run.final_accuracy,
        "selected_per_round": [list(s) for s in run.selected_per_round],
        "round_times_s": list(times.times_s),
        "mean_round_time_s": times.mean_s,
        "total_time_s": times.total_s,
        "rounds": strategy.rounds,
        "simulated_rounds": simulated,
        "shown_round": rep,
        "server": where.server,
        "client_devices": list(where.client_devices),
        "samples_per_client": list(where.samples),
        "local_batch_per_client": list(where.batch),
        "estimated_round_trip_s": trips,
        "aggregation": strategy.aggregation,
        "selection": strategy.client_selection.kind,
        "problem": "logistic regression, non-IID synthetic shards (FedProx Synthetic(0.5, 0.5), 2 classes)",
    }
    return PlanWork(
        graph=representative_graph(graphs, times),
        devices=tuple(dict.fromkeys([where.server, *where.client_devices])),
        unit="round",
        samples_per_unit=float(samples_per_round[rep]),
        memory=_memory(ctx, where),
        units_per_run=strategy.rounds,
        quality=quality,
        notes=tuple(notes),
    )
