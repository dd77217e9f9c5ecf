"""The built-in ``parameter_server`` coordinator: a sharded parameter server with S servers.

Config (the ``config`` mapping of a ``custom`` strategy with ``coordinator: parameter_server``):

- ``servers``: how many server devices (int, default 1; the cluster's first devices), or a list
  of device names;
- ``workers``: how many workers (int; the first devices after the servers) or a list of device
  names; default every device that is not a server;
- ``sync``: ``true`` (default) for synchronous training, ``false`` for asynchronous.

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
from parplan.plan.memory import combine, saved_activation_bytes
from parplan.taskgraph import TaskGraphBuilder

if TYPE_CHECKING:
    from parplan.config.scenario import TrainingSpec
    from parplan.model.graph import ModelGraph
    from parplan.topology.network import Network

NAME = "parameter_server"
CONFIG_KEYS = ("servers", "workers", "sync")


def _devices(network: Network, value: Any, what: str, default: list[str], pool: str) -> list[str]:
    """Devices from an int (count, taken from ``default`` in order) or a list of names."""
    if isinstance(value, bool) or not isinstance(value, int | list | tuple):
        raise PluginError(f"{NAME}: {what} must be a count or a list of device names, got {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise PluginError(f"{NAME}: {what} must be >= 1, got {value}")
        if value > len(default):
            raise PluginError(f"{NAME}: {value} {what} asked, {pool} has only {len(default)} devices")
        return default[:value]
    names = [str(v) for v in value]
    if not names:
        raise PluginError(f"{NAME}: {what} is an empty list")
    for d in names:
        if d not in network.devices:
            raise PluginError(f"{NAME}: {what} names {d!r}, which is not a device of the cluster")
    if len(set(names)) < len(names):
        raise PluginError(f"{NAME}: {what} lists a device twice: {names}")
    return names


class ParameterServerCoordinator:
    """A sharded parameter server (see the module docstring); registered as ``parameter_server``."""

    def __call__(
        self, network: Network, model: ModelGraph, training: TrainingSpec, config: Mapping[str, Any]
    ) -> PlanWork:
        """One synchronous (or asynchronous) parameter-server step."""
        unknown = sorted(set(config) - set(CONFIG_KEYS))
        if unknown:
            raise PluginError(f"{NAME}: unknown config key {unknown[0]!r}; valid: {', '.join(CONFIG_KEYS)}")
        sync = config.get("sync", True)
        if not isinstance(sync, bool):
            raise PluginError(f"{NAME}: sync must be true or false, got {sync!r}")
        all_devices = list(network.devices)
        servers = _devices(network, config.get("servers", 1), "servers", all_devices, "the cluster")
        rest = [d for d in all_devices if d not in servers]
        if "workers" in config:
            workers = _devices(network, config["workers"], "workers", rest, "what the servers leave")
        else:
            workers = rest
        if not workers:
            raise PluginError(f"{NAME}: no worker devices left after {len(servers)} server(s)")
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
