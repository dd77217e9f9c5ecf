"""The built-in ``parameter_server`` coordinator: a sharded parameter server with S servers.

Config (the ``config`` mapping of a ``custom`` strategy with ``coordinator: parameter_server``):

- ``servers``: how many server devices (int, default 1; the cluster's first devices), or a list
  of device names;
- ``workers``: how many workers (int; the first devices after the servers) or a list of device
  names; default every device that is not a server;
- ``sync``: ``true`` (default) for synchronous training, ``false`` for asynchronous.

:meth:`ParameterServerCoordinator.validate` checks all of it for ``validate-config`` (the shape on
its own, the device names and counts against a scenario's cluster), and the coordinator runs the
same checks when called.

The parameters are split evenly into S shards (flat, like BytePS' equal-size partitions), shard
``s`` living on server ``s``. The global batch is split evenly over the workers (sizes differ by at
most one). One step:

1. each worker runs forward and backward of the whole model on its part of the batch;
2. it pushes each gradient shard (``params / S x bytes_per_grad``) to that shard's server; a push
   reduces into the server's accumulator (``reduce``: the engine charges the server gamma per
   byte);
3. synchronous: once every worker's push of shard ``s`` has arrived, server ``s`` runs the
   optimizer step on its shard (memory bound, :func:`~parplan.plan.compute.optimizer_seconds`);
   asynchronous: server ``s`` applies each worker's push on its own as it arrives (one optimizer
   step of the shard per push, no accumulation);
4. each worker pulls every updated shard back (``params / S x bytes_per_param``).

All pushes into a server share its link, so more servers mean less contention on each server's
link and a faster step until the workers' own links are the bottleneck.

Memory: a worker holds the full weights and gradients and the activations of its part of the batch,
but no optimizer state (it lives on the servers); a server holds its shard's weights, optimizer
state and gradient accumulator. A device that is both adds the two.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from parplan.errors import PluginError
from parplan.plan.base import MemoryBreakdown, PlanContext, PlanWork
from parplan.plan.compute import optimizer_seconds, step_compute
from parplan.plan.coordinators import ConfigProblem
from parplan.plan.memory import combine, saved_activation_bytes
from parplan.taskgraph import TaskGraphBuilder

if TYPE_CHECKING:
    from parplan.config.scenario import TrainingSpec
    from parplan.model.graph import ModelGraph
    from parplan.topology.network import Network

NAME = "parameter_server"
CONFIG_KEYS = ("servers", "workers", "sync")


def _devices(
    value: Any, what: str, network: Network | None, default: list[str], pool: str
) -> tuple[list[str], list[ConfigProblem]]:
    """Devices from an int (count, taken from ``default`` in order) or a list of names, and the
    problems with ``value``; names and counts are held against the cluster only when there is one."""
    loc: tuple[str | int, ...] = (what,)
    if isinstance(value, bool) or not isinstance(value, int | list | tuple):
        return [], [ConfigProblem(loc, f"{what} must be a count or a list of device names, got {value!r}")]
    if isinstance(value, int):
        if value < 1:
            return [], [ConfigProblem(loc, f"{what} must be >= 1, got {value}")]
        if network is not None and value > len(default):
            return [], [ConfigProblem(loc, f"{value} {what} asked, {pool} has only {len(default)} devices")]
        return default[:value], []
    names = [str(v) for v in value]
    if not names:
        return [], [ConfigProblem(loc, f"{what} is an empty list")]
    problems = []
    if network is not None:
        known = set(network.devices)
        problems += [
            ConfigProblem((what, i), f"{what} names {d!r}, which is not a device of the cluster")
            for i, d in enumerate(names)
            if d not in known
        ]
    first: dict[str, int] = {}
    for i, d in enumerate(names):
        if d in first:
            problems.append(ConfigProblem((what, i), f"{what} lists {d!r} twice (also at [{first[d]}])"))
        first.setdefault(d, i)
    return names, problems


def read_config(
    config: Mapping[str, Any], network: Network | None
) -> tuple[list[str], list[str], bool, list[ConfigProblem]]:
    """Servers, workers and sync mode from ``config``, and every problem with it.

    Without a network only the config's shape is checked (the device lists then stay empty).
    """
    problems = [
        ConfigProblem((key,), f"unknown config key {key!r}; valid: {', '.join(CONFIG_KEYS)}")
        for key in config
        if key not in CONFIG_KEYS
    ]
    sync = config.get("sync", True)
    if not isinstance(sync, bool):
        problems.append(ConfigProblem(("sync",), f"sync must be true or false, got {sync!r}"))
    all_devices = list(network.devices) if network is not None else []
    servers, found = _devices(config.get("servers", 1), "servers", network, all_devices, "the cluster")
    problems += found
    rest = [d for d in all_devices if d not in servers]
    workers = rest
    if "workers" in config:
        workers, found = _devices(config["workers"], "workers", network, rest, "what the servers leave")
        problems += found
    elif network is not None and servers and not workers:
        problems.append(ConfigProblem(("servers",), f"no worker devices left after {len(servers)} server(s)"))
    return servers, workers, sync if isinstance(sync, bool) else True, problems


class ParameterServerCoordinator:
    """A sharded parameter server (see the module docstring); registered as ``parameter_server``."""

    def validate(self, config: Mapping[str, Any], network: Network | None) -> list[ConfigProblem]:
        """Every problem with ``config`` (the validation hook ``validate-config`` calls)."""
        return read_config(config, network)[3]

    def __call__(
        self, network: Network, model: ModelGraph, training: TrainingSpec, config: Mapping[str, Any]
    ) -> PlanWork:
        """One synchronous (or asynchronous) parameter-server step."""
        servers, workers, sync, problems = read_config(config, network)
        errors = [p for p in problems if p.severity == "error"]
        if errors:
            raise PluginError(f"{NAME}: {errors[0].message}")
        ctx = PlanContext(network, model, model.spec, training)
        return _plan(ctx, servers, workers, sync)


def _plan(ctx: PlanContext, servers: list[str], workers: list[str], sync: bool) -> PlanWork:
    spec = ctx.model_spec
    params = ctx.model.total_params
    s_count, w_count = len(servers), len(workers)
    shard_params = params / s_count
    push_bytes = shard_params * spec.bytes_per_grad
    pull_bytes = shard_params * spec.bytes_per_param
    batch = ctx.training.global_batch_size
    shares = [batch // w_count + (1 if i < batch % w_count else 0) for i in range(w_count)]
    nodes = ctx.model.order
    b = TaskGraphBuilder([*servers, *workers])
    pushes: list[list[int]] = [[] for _ in servers]  # per server: the push of every worker
    for w, dev in enumerate(workers):
        t = step_compute(ctx, dev, nodes, float(shares[w]))
        fwd = b.compute(dev, t.forward_s, category="forward", label=f"worker {w} forward")
        bwd = b.compute(dev, t.backward_s, [fwd], category="backward", label=f"worker {w} backward")
        for s, srv in enumerate(servers):
            pushes[s].append(
                b.transfer(
                    dev, srv, push_bytes, [bwd], reduce=sync, category="push", label=f"push w{w}->s{s}"
                )
            )
    pulls = []
    for s, srv in enumerate(servers):
        update_s = optimizer_seconds(ctx, srv, shard_params)
        if sync:
            upd = b.compute(srv, update_s, pushes[s], category="optimizer", label=f"server {s} update")
            for w, dev in enumerate(workers):
                pulls.append(
                    b.transfer(srv, dev, pull_bytes, [upd], category="pull", label=f"pull s{s}->w{w}")
                )
        else:
            for w, dev in enumerate(workers):
                upd = b.compute(
                    srv, update_s, [pushes[s][w]], category="optimizer", label=f"server {s} apply w{w}"
                )
                pulls.append(
                    b.transfer(srv, dev, pull_bytes, [upd], category="pull", label=f"pull s{s}->w{w}")
                )
    b.marker(pulls, label="step done")
    memory = [
        MemoryBreakdown(
            device=srv,
            capacity_bytes=ctx.network.device(srv).memory_bytes,
            params_bytes=shard_params * spec.bytes_per_param,
            grads_bytes=shard_params * spec.bytes_per_grad if sync else 0.0,
            optimizer_bytes=shard_params * spec.optimizer_bytes_per_param,
        )
        for srv in servers
    ]
    memory += [
        MemoryBreakdown(
            device=dev,
            capacity_bytes=ctx.network.device(dev).memory_bytes,
            params_bytes=params * spec.bytes_per_param,
            grads_bytes=params * spec.bytes_per_grad,
            activations_bytes=saved_activation_bytes(ctx.model, nodes, shares[w]),
        )
        for w, dev in enumerate(workers)
    ]
    mode = "synchronous" if sync else "asynchronous"
    both = sorted(set(servers) & set(workers))
    notes = [f"{mode} parameter server: {s_count} server(s), {w_count} worker(s), {s_count} shard(s)"]
    if both:
        notes.append(f"devices acting as server and worker: {', '.join(both)}")
    return PlanWork(
        graph=b.build(
            meta={"strategy": "custom", "coordinator": NAME, "servers": servers, "workers": workers}
        ),
        devices=tuple(dict.fromkeys([*servers, *workers])),
        unit="step",
        samples_per_unit=float(batch),
        memory=combine(memory),
        notes=tuple(notes),
    )
