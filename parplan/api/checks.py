"""Checks that need the built network or model graph, and the whole-file checks in file order.

:mod:`parplan.config.checks` checks what a spec can be checked for on its own; this module builds
the cluster's network and the model's graph and checks the rest: links name existing endpoints,
once each, between two different nodes; names do not clash with the generator's; the network
builds (every device reachable); the model graph has no cycle; every worker, device, server or
client a plan names is a device of the cluster; partitions cover every model node; replicas,
clients and population members fit the devices (or the plan says how they share them); the
devices a plan uses are connected; the global batch gives every replica (and micro-batch) a
sample; a custom strategy's coordinator is installed. :func:`check_spec` runs every check of one
loaded file, in the order the file reads. Memory fit is :mod:`parplan.api.validate_config`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from parplan.config.checks import IssueCollector, check_partitions, check_strategy_alone, suggest
from parplan.config.cluster import ClusterSpec
from parplan.config.issues import Source
from parplan.config.model import ModelSpec
from parplan.config.readers import Loc
from parplan.config.scenario import ScenarioSpec, TrainingSpec
from parplan.config.strategy import (
    CustomStrategy,
    DataParallelStrategy,
    FederatedStrategy,
    LocalStrategy,
    ModelParallelStrategy,
    PopulationBasedStrategy,
    ShardedStrategy,
)
from parplan.errors import Issue, ModelError, PlanError, TopologyError

if TYPE_CHECKING:
    from parplan.model.graph import ModelGraph
    from parplan.topology.network import Network


def _unknown_device(name: str, network: Network, role: str) -> str:
    if name in network.graph and network.graph.nodes[name].get("kind") == "switch":
        return f"{role} {name!r} is a switch, not a device"
    listed = ", ".join(network.devices[:8]) + (", ..." if len(network.devices) > 8 else "")
    hint = suggest(name, network.devices) or f" (devices: {listed})"
    return f"{role} {name!r} is not a device of cluster {network.name!r}{hint}"


def _strip_cluster(message: str) -> str:
    """TopologyError messages start with "cluster 'x': "; the issue already says which file."""
    head, sep, rest = message.partition("': ")
    return rest if sep and head.startswith("cluster '") else message


# -- clusters ------------------------------------------------------------------------------------------


def check_cluster(cluster: ClusterSpec, source: Source | None = None, prefix: Loc = ()) -> list[Issue]:
    """Links name existing endpoints, once each, between two different nodes; names do not clash
    with the generator's; and the network builds (every device reachable)."""
    report = IssueCollector(source, prefix)
    _cluster(cluster, report)
    return report.issues


def _cluster(cluster: ClusterSpec, report: IssueCollector) -> Network | None:
    from parplan.topology.build import build_network

    generated: set[str] = set()
    if cluster.generator is not None:
        bare = cluster.model_copy(update={"devices": (), "switches": (), "links": ()})
        try:
            generated = set(build_network(bare).graph.nodes)
        except TopologyError as exc:
            report.add(("generator",), _strip_cluster(str(exc)))
            return None
    clash = False
    names = [("devices", i, d.name) for i, d in enumerate(cluster.devices)]
    names += [("switches", i, s.name) for i, s in enumerate(cluster.switches)]
    for key, i, name in names:
        if name in generated:
            report.add((key, i, "name"), f"name {name!r} is already used by the generator")
            clash = True
    known = sorted(generated | {d.name for d in cluster.devices} | {s.name for s in cluster.switches})
    seen: dict[frozenset[str], int] = {}
    bad_links = False
    for i, link in enumerate(cluster.links):
        for end in ("a", "b"):
            name = getattr(link, end)
            if name not in known:
                report.add(("links", i, end), f"unknown device or switch {name!r}{suggest(name, known)}")
                bad_links = True
        if link.a == link.b:
            report.add(("links", i), f"links {link.a!r} to itself")
            bad_links = True
        pair = frozenset((link.a, link.b))
        if pair in seen:
            report.add(
                ("links", i),
                f"{link.a} - {link.b} is linked twice (also links[{seen[pair]}]); give one link with the "
                "combined bandwidth",
            )
            bad_links = True
        seen.setdefault(pair, i)
    if clash or bad_links:
        return None
    try:
        return build_network(cluster)
    except TopologyError as exc:
        report.add((), _strip_cluster(str(exc)))
        return None


# -- models --------------------------------------------------------------------------------------------


def check_model(model: ModelSpec, source: Source | None = None, prefix: Loc = ()) -> list[Issue]:
    """The model graph builds: its edges form no cycle."""
    report = IssueCollector(source, prefix)
    _model(model, report)
    return report.issues


def _model(model: ModelSpec, report: IssueCollector) -> ModelGraph | None:
    from parplan.model.graph import build_model

    try:
        return build_model(model)
    except ModelError as exc:
        message = str(exc)
        head, sep, rest = message.partition("': ")
        report.add(
            ("edges",) if model.edges is not None else (),
            rest if sep and head.startswith("model '") else message,
        )
        return None


# -- custom strategies --------------------------------------------------------------------------------


def check_coordinator(strategy: Any, source: Source | None = None, prefix: Loc = ()) -> list[Issue]:
    """A custom strategy names a coordinator installed in this environment (other kinds: nothing)."""
    report = IssueCollector(source, prefix)
    _coordinator(strategy, report)
    return report.issues


def _coordinator(strategy: Any, report: IssueCollector, network: Network | None = None) -> None:
    """A custom strategy's coordinator is installed, and its own ``validate`` hook accepts the
    config (against ``network`` when there is one), each problem located under ``config``."""
    if not isinstance(strategy, CustomStrategy):
        return
    from parplan.errors import PluginError
    from parplan.plan import coordinators

    installed = list(coordinators.installed())
    if strategy.coordinator not in installed:
        names = ", ".join(installed) or "none"
        report.add(
            ("coordinator",),
            f"no coordinator {strategy.coordinator!r} is installed (group {coordinators.GROUP}); "
            f"installed: {names}{suggest(strategy.coordinator, installed)}",
        )
        return
    try:
        problems = coordinators.check_config(strategy.coordinator, strategy.config, network)
    except PluginError as exc:
        report.add(("coordinator",), str(exc))
        return
    for problem in problems:
        report.add(("config", *problem.loc), problem.message, problem.severity)


# -- strategies against a cluster, a model and the training settings ------------------------------------


@dataclass(frozen=True)
class _World:
    network: Network
    model: ModelGraph | None
    training: TrainingSpec


def check_plan(
    strategy: Any,
    network: Network,
    model: ModelGraph | None,
    training: TrainingSpec,
    source: Source | None = None,
    prefix: Loc = (),
) -> list[Issue]:
    """One strategy against a built cluster, model graph and training settings (and on its own)."""
    report = IssueCollector(source, prefix)
    check_strategy_alone(strategy, report)
    _coordinator(strategy, report)
    _plan(strategy, _World(network, model, training), report)
    return report.issues


def _plan(strategy: Any, world: _World, report: IssueCollector) -> None:
    checker: dict[type, Callable[[Any, _World, IssueCollector], list[str]]] = {
        LocalStrategy: _local,
        DataParallelStrategy: _data_parallel,
        ModelParallelStrategy: _model_parallel,
        FederatedStrategy: _federated,
        PopulationBasedStrategy: _population,
        ShardedStrategy: _sharded,
    }
    check = checker.get(type(strategy))
    if check is None:
        return
    before = len(report.issues)
    used = check(strategy, world, report)
    if len(report.issues) == before or all(i.severity != "error" for i in report.issues[before:]):
        _connected(used, world.network, report)


def _known(name: str, loc: Loc, role: str, world: _World, report: IssueCollector) -> bool:
    if name in world.network.devices:
        return True
    report.add(loc, _unknown_device(name, world.network, role))
    return False


def _local(strategy: LocalStrategy, world: _World, report: IssueCollector) -> list[str]:
    device = strategy.device or world.network.devices[0]
    return [device] if _known(device, ("device",), "device", world, report) else []


def _data_parallel(strategy: DataParallelStrategy, world: _World, report: IssueCollector) -> list[str]:
    net = world.network
    n = strategy.num_replicas
    ok = True
    if strategy.devices is not None:
        for k, d in enumerate(strategy.devices):
            ok &= _known(d, ("devices", k), "device", world, report)
    if strategy.replica is not None:
        ok &= _pipeline_ok(strategy.replica, world, report.at(("replica",)), per_replica=n)
    if not ok or (strategy.devices is not None and len(set(strategy.devices)) != len(strategy.devices)):
        return []  # the unknown or repeated devices are reported already
    try:
        replicas = strategy.replica_devices(net.devices)
    except PlanError as exc:
        report.add(("devices",) if strategy.devices is not None else ("num_replicas",), str(exc))
        return []
    batch = world.training.global_batch_size
    if batch < n:
        report.add(
            ("num_replicas",),
            f"{n} replicas need at least one sample each, but training.global_batch_size is {batch}",
        )
    return [d for devices in replicas for d in devices]


def _model_parallel(strategy: ModelParallelStrategy, world: _World, report: IssueCollector) -> list[str]:
    return list(strategy.workers()) if _pipeline_ok(strategy, world, report) else []


def _pipeline_ok(
    strategy: ModelParallelStrategy, world: _World, report: IssueCollector, per_replica: int = 1
) -> bool:
    """Workers exist, partitions cover the model exactly, micro-batches get samples."""
    ok = True
    for j, part in enumerate(strategy.partitions):
        ok &= _known(part.worker, ("partitions", j, "worker"), "worker", world, report)
    model = world.model
    if model is not None:
        known = set(model.order)
        covered: set[str] = set()
        for j, part in enumerate(strategy.partitions):
            for k, node in enumerate(part.nodes):
                if node not in known:
                    report.add(
                        ("partitions", j, "nodes", k),
                        f"{node!r} is not a node of model {model.spec.name!r}{suggest(node, model.order)}",
                    )
                    ok = False
                covered.add(node)
        missing = [node for node in model.order if node not in covered]
        if missing:
            shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
            report.add(("partitions",), f"model nodes in no partition: {shown}")
            ok = False
    comm = strategy.communication
    if comm.protocol == "pipeline":
        samples = world.training.global_batch_size // per_replica
        if comm.microbatches > samples > 0:
            whose = "per replica" if per_replica > 1 else "in the global batch"
            report.add(
                ("communication", "microbatches"),
                f"{comm.microbatches} micro-batches need at least {comm.microbatches} samples, "
                f"there are {samples} {whose}",
            )
    return ok


def _federated(strategy: FederatedStrategy, world: _World, report: IssueCollector) -> list[str]:
    net = world.network
    server = strategy.server or net.devices[0]
    ok = _known(server, ("server",), "server", world, report)
    if strategy.clients is not None:
        for k, d in enumerate(strategy.clients):
            ok &= _known(d, ("clients", k), "client device", world, report)
        pool = list(strategy.clients[: strategy.num_clients])
    else:
        pool = [d for d in net.devices if d != server]
        if not pool:
            report.add(
                ("server",), f"the server {server!r} is the cluster's only device; clients need others"
            )
            return []
    if not ok:
        return []
    n = strategy.num_clients
    distinct = len(dict.fromkeys(pool[: min(n, len(pool))]))
    if n > distinct:
        report.add(
            ("num_clients",),
            f"{n} clients on {distinct} devices: clients sharing a device train one after another",
            "info",
        )
    batch = world.training.global_batch_size
    if strategy.samples_per_client is None and batch < n:
        report.add(
            ("num_clients",),
            f"training.global_batch_size ({batch}) split over {n} clients leaves {n - batch} without data",
            "warning",
        )
    return list(dict.fromkeys([server, *pool[: min(n, len(pool))]]))


def _population(strategy: PopulationBasedStrategy, world: _World, report: IssueCollector) -> list[str]:
    devices = list(strategy.devices) if strategy.devices is not None else list(world.network.devices)
    ok = True
    if strategy.devices is not None:
        for k, d in enumerate(strategy.devices):
            ok &= _known(d, ("devices", k), "device", world, report)
    if not ok:
        return []
    width = len(dict.fromkeys(devices))
    if strategy.population_size > width:
        waves = strategy.waves(width)
        report.add(
            ("population_size",),
            f"{strategy.population_size} members on {width} devices: {waves} waves per generation",
            "info",
        )
    return devices[: strategy.population_size]


_SHARDED_FIELDS: tuple[tuple[str, str], ...] = (
    ("devices are not a multiple", "dp"),
    ("the cluster has", "dp"),
    ("devices", "devices"),
    ("shard_group", "shard_group"),
    ("schedule", "schedule"),
    ("sequence parallelism", "sequence_parallel"),
    ("sequence_parallel", "sequence_parallel"),
    ("global batch", "microbatch_size"),
    ("micro-batches", "microbatch_size"),
    ("ep (", "ep"),
    ("experts", "ep"),
    ("heads", "tp"),
    ("ffn_hidden", "tp"),
    ("layers", "pp"),
    ("sequence length", "cp"),
)
"""Which field a sharded plan's :class:`PlanError` is about, by the words it uses."""


def _sharded(strategy: ShardedStrategy, world: _World, report: IssueCollector) -> list[str]:
    """The mesh on the cluster, the shape checks against the model, the batch into micro-batches
    (the checks :func:`parplan.plan.sharded.costs.layout_plan` makes, each at the field it is about)."""
    from parplan.plan.sharded.mesh import build_mesh, check_shape, microbatches_per_pipeline

    if strategy.devices is not None:
        bad = [
            k
            for k, d in enumerate(strategy.devices)
            if not _known(d, ("devices", k), "device", world, report)
        ]
        listed = len(strategy.devices)
        if bad or len(set(strategy.devices)) != listed:
            return []
        if strategy.dp is not None and listed != strategy.dp * strategy.model_parallel_size():
            return []  # reported by the checks of the strategy alone
    try:
        mesh = build_mesh(strategy, world.network)
        microbatches_per_pipeline(strategy, world.training.global_batch_size, mesh.dp)
        if world.model is not None:
            from parplan.model.transformer import shape_of

            shape = shape_of(world.model, world.training.sequence_length)
            if shape is None:
                report.add(
                    ("kind",), f"a sharded plan needs a transformer model; {world.model.name!r} is not one"
                )
                return []
            check_shape(strategy, shape, mesh)
    except PlanError as exc:
        text = str(exc)
        field = next((f for words, f in _SHARDED_FIELDS if words in text), "dp")
        report.add((field,), text)
        return []
    return list(mesh.devices)


def _connected(devices: Sequence[str], network: Network, report: IssueCollector) -> None:
    """Every device a plan uses can reach every other (checked against the first, both ways)."""
    used = list(dict.fromkeys(devices))
    if len(used) < 2:
        return
    graph = network.graph
    first = used[0]
    reach = graph.descendants(first)
    back = graph.ancestors(first)
    for d in used[1:]:
        if d not in reach:
            report.add(
                (),
                f"the plan uses devices {first!r} and {d!r}, but there is no route from {first!r} to {d!r}",
            )
        elif d not in back:
            report.add(
                (),
                f"the plan uses devices {first!r} and {d!r}, but there is no route from {d!r} to {first!r}",
            )


# -- scenarios -----------------------------------------------------------------------------------------


def check_scenario(scenario: ScenarioSpec, source: Source | None = None) -> list[Issue]:
    """Everything: the cluster, the model, and every plan against them and the training settings."""
    report = IssueCollector(source)
    network = _cluster(scenario.cluster, report.at(("cluster",)))
    model = _model(scenario.model, report.at(("model",)))
    for i, plan in enumerate(scenario.plans):
        sub = report.at(("plans", i, "strategy"))
        check_strategy_alone(plan.strategy, sub)
        _coordinator(plan.strategy, sub, network)
        if network is not None:
            _plan(plan.strategy, _World(network, model, scenario.training), sub)
    return report.issues


def check_spec(kind: str, spec: Any, source: Source | None = None) -> list[Issue]:
    """Every check for one loaded file of ``kind``, in the order the file reads."""
    if kind == "scenario":
        return check_scenario(spec, source)
    if kind == "cluster":
        return check_cluster(spec, source)
    if kind == "model":
        return check_model(spec, source)
    if kind == "partition":
        return check_partitions(spec, source)
    if kind == "strategy":
        report = IssueCollector(source)
        check_strategy_alone(spec, report)
        _coordinator(spec, report)
        return report.issues
    raise ValueError(f"unknown kind {kind!r}")
