"""How long one :class:`~parplan.plan.sharded.comm.CommCall` takes in its group of a sharded
plan's mesh, in closed form: what the analytic evaluation (:mod:`parplan.api.sharded_analytic`)
puts on its critical path.

All-reduce, all-gather, reduce-scatter and broadcast on GPUs NCCL's model knows: NCCL's ``auto``
pick (algorithm, protocol, channels) on the system the group's ranks form, at the time NCCL's
tuner predicts for it (its latency plus bytes over its bus bandwidth, which counts a node's NICs
and NVLinks) plus the transport's call latency. Otherwise (no NCCL system, or
``aggregation.algorithm`` named for the data-parallel all-reduce) the algorithm's closed form (its
registry entry's ``time_s``, the oracle the engine meets) on the group's figures
(:meth:`CollectiveClock._uniform`: between and inside nodes when the group spans several nodes
with several ranks on each), plus the call's overhead. An all-to-all costs ``(p - 1) alpha`` plus
each rank's bytes for other nodes at the inter-node beta and for its own node at the intra-node
beta (``(p - 1) / p n beta`` on one level); a send/recv ``latency + n / bandwidth`` on its route.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from parplan.collectives.auto import AutoAlgorithm, AutoChoice
from parplan.plan.base import PlanContext
from parplan.plan.sharded.blocks import bus_bytes
from parplan.plan.sharded.comm import CommCall
from parplan.plan.sharded.costs import ShardedLayout
from parplan.plan.sharded.symmetry import HashedTuple, node_symmetry, regular_node_size
from parplan.topology.network import DeviceInfo, Network

Params = tuple[float, float, float, bool, float | None, float | None]
"""A group's (alpha, beta, gamma, shared port, intra alpha, intra beta) for the closed forms."""

_MISSING: Any = object()
_NETWORK_CACHE: weakref.WeakKeyDictionary[Network, tuple[dict[Any, Any], ...]] = weakref.WeakKeyDictionary()
"""Per network: each group's (alpha, beta, gamma, shared port), NCCL system and ranks by node, each
call's closed-form seconds (:func:`_closed_form`) and NCCL's ``auto`` picks (:func:`_auto_choice`),
kept for the next plan evaluated on the same cluster (a sweep evaluates many) and gone with it (a
new cluster, even an equal one, starts cold)."""
_AUTO = AutoAlgorithm(name="auto")
_CANONICAL: weakref.WeakKeyDictionary[Network, dict[tuple[str, ...], tuple[str, ...]]] = (
    weakref.WeakKeyDictionary()
)
"""Per network: groups and their congruent copies on the first nodes."""
_RUNS: weakref.WeakKeyDictionary[Network, dict[tuple[int, int, int], tuple[str, ...]]] = (
    weakref.WeakKeyDictionary()
)
"""Per network: the copies on the first nodes of runs of devices (:meth:`GroupClock.canonical_run`)."""
_CHANNELS: weakref.WeakKeyDictionary[Network, dict[tuple[str, float, tuple[str, ...]], int]] = (
    weakref.WeakKeyDictionary()
)
"""Per network: the NCCL channels of each (collective, size, group) (:meth:`GroupClock.channels`)."""


def _closed_form(
    spec: Any,
    collective: str,
    p: int,
    size_bytes: float,
    system: Any,
    transport: Any,
    params: Params,
    groups: tuple[tuple[int, ...], ...] | None,
    choices: dict[Any, AutoChoice],
) -> float:
    """One call's seconds (module docstring); ``choices``: the network's memo of ``auto``'s picks.
    Memoised per network by :meth:`GroupClock._nccl`: congruent groups of a mesh share every
    argument."""
    from parplan.collectives.algorithm import UniformCost
    from parplan.collectives.registry import get
    from parplan.plan.collective_run import resolve_run

    if isinstance(spec, AutoAlgorithm) and system is not None:
        choice = _auto_choice(spec, collective, size_bytes, system, choices)
        if choice.nccl is not None:
            return choice.nccl.time_us * 1e-6 + float(transport.call_latency_s)
    run = resolve_run(spec, size_bytes, system, transport, collective=collective)
    algorithm = get(run.spec.name, collective)
    alpha, beta, gamma, shared, intra_alpha, intra_beta = params
    if (
        groups is not None
        and intra_alpha is not None
        and intra_beta is not None
        and algorithm.uses_groups(run.spec)
    ):
        # one ring per rank of a node (the schedule parplan builds, and NCCL's channel per NIC):
        # each carries 1/k of the tensor across nodes, while every ring's bytes cross each rank's
        # port inside the node
        rings = min(len(g) for g in groups)
        whole = ((*range(p),),)
        across = UniformCost(alpha_s=alpha, beta_s_per_byte=beta, gamma_s_per_byte=gamma, shared_port=shared)
        inside = UniformCost(alpha_s=intra_alpha, beta_s_per_byte=intra_beta, gamma_s_per_byte=gamma)
        seconds = max(
            algorithm.time_s(run.spec, p, size_bytes / rings, across, whole),
            algorithm.time_s(run.spec, p, size_bytes, inside, whole),
        )
        return float(seconds) + run.call_overhead_s
    if groups is None and algorithm.uses_groups(run.spec):
        groups = ((*range(p),),)
    cost = UniformCost(
        alpha_s=alpha,
        beta_s_per_byte=beta,
        gamma_s_per_byte=gamma,
        shared_port=shared,
        intra_alpha_s=intra_alpha,
        intra_beta_s_per_byte=intra_beta,
    )
    return float(algorithm.time_s(run.spec, p, size_bytes, cost, groups)) + run.call_overhead_s


def _nccl_channels(collective: str, size_bytes: float, system: Any, choices: dict[Any, AutoChoice]) -> int:
    """The channels NCCL's ``auto`` pick launches for one call (its runtime channels), 0 when its
    model does not cover the call."""
    choice = _auto_choice(_AUTO, collective, size_bytes, system, choices)
    return choice.nccl.channels if choice.nccl is not None else 0


def _auto_choice(
    spec: AutoAlgorithm, collective: str, size_bytes: float, system: Any, choices: dict[Any, AutoChoice]
) -> AutoChoice:
    """What ``auto`` picks for one call on ``system``, memoised in ``choices`` (the network's):
    apart from :func:`_closed_form`, since it and :func:`_nccl_channels` both ask it for
    ``auto``'s default spec (a call's time and its channels: one pick, not two)."""
    key = (spec, collective, size_bytes, system)
    found = choices.get(key)
    if found is None:
        from parplan.collectives.auto_collectives import choose_for
        from parplan.collectives.registry import algorithms

        found = choices[key] = choose_for(spec, system, size_bytes, algorithms(collective), collective)
    return found


class GroupClock:
    """Seconds of a :class:`CommCall` on an explicit group of devices of one network (module
    docstring), with the per-network caches every :class:`CollectiveClock` on it shares. What a
    search memoises its collective times on: (call, group devices, all-reduce algorithm)."""

    def __init__(self, network: Network, *, share_congruent: bool = False) -> None:
        self.network = network
        cache = _NETWORK_CACHE.setdefault(network, ({}, {}, {}, {}, {}))
        self._params: dict[tuple[str, ...], Params] = cache[0]
        self._systems: dict[tuple[str, ...], Any] = cache[1]
        self._groups_by_node: dict[tuple[str, ...], tuple[tuple[int, ...], ...]] = cache[2]
        self._forms: dict[tuple[Any, ...], float] = cache[3]
        self._choices: dict[tuple[Any, ...], AutoChoice] = cache[4]
        self._symmetry: tuple[tuple[str, ...], dict[str, tuple[int, str]]] | None = None
        self._canonical: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._node_size: int | None = None
        self._runs: dict[tuple[int, int, int], tuple[str, ...]] = {}
        if share_congruent:
            self._symmetry = node_symmetry(network)
            self._canonical = _CANONICAL.setdefault(network, {})
            self._node_size = regular_node_size(network)
            self._runs = _RUNS.setdefault(network, {})

    def canonical(self, devices: tuple[str, ...]) -> tuple[str, ...]:
        """``devices`` moved to the first nodes in order of appearance, positions kept, when the
        clock shares congruent groups (``share_congruent``: the network's nodes are
        interchangeable, :func:`node_symmetry`; the same figures, a few distinct groups instead
        of one per pipeline stage and mesh); else as given."""
        if self._symmetry is None:
            return devices
        found = self._canonical.get(devices)
        if found is None:
            nodes, where = self._symmetry
            renumber: dict[int, int] = {}
            out = []
            for d in devices:
                k, name = where[d]
                out.append(f"{nodes[renumber.setdefault(k, len(renumber))]}.{name}")
            found = self._canonical[devices] = HashedTuple(out)
            self._canonical.setdefault(found, found)  # a canonical group is its own (idempotent)
        return found

    def canonical_run(self, start: int, stride: int, count: int) -> tuple[str, ...]:
        """:meth:`canonical` of the network's devices ``start, start + stride, ...`` (``count`` of
        them, by index in its order), memoised on ``(start % g, stride, count)`` when the devices
        are numbered node by node alike (:func:`~parplan.plan.sharded.symmetry.regular_node_size`,
        ``g`` devices a node), which fixes the copy without reading the devices; else
        :meth:`canonical` of the devices."""
        size = self._node_size
        if size is None:
            return self.canonical(self._run(start, stride, count))
        key = (start % size, stride, count)
        found = self._runs.get(key)
        if found is None:
            found = self._runs[key] = self.canonical(self._run(start, stride, count))
        return found

    def _run(self, start: int, stride: int, count: int) -> tuple[str, ...]:
        devices = self.network.devices
        return tuple(devices[start + k * stride] for k in range(count))

    def _node_groups(self, devices: tuple[str, ...]) -> tuple[tuple[int, ...], ...]:
        """The ranks of ``devices`` by node (cached per cluster)."""
        from parplan.topology.placement import groups_by_key

        found = self._groups_by_node.get(devices)
        if found is None:
            keys: list[Any]
            if self._symmetry is not None:  # every device on a node: its node's number
                where = self._symmetry[1]
                keys = [where[d][0] for d in devices]
            else:
                # groups_by_node's keys, read off the graph (its DeviceInfo per device costs more
                # than the grouping)
                attrs = self.network.graph.nodes
                keys = [("group", g) if (g := attrs[d].get("group")) else ("device", d) for d in devices]
            found = HashedTuple(tuple(g) for g in groups_by_key(keys))
            self._groups_by_node[devices] = found
        return found

    def _worst(self, pairs: set[tuple[str, str]]) -> tuple[float, float, bool]:
        """The worst latency, the narrowest route's bandwidth and whether every pair is one hop."""
        net = self.network
        worst_lat, worst_bw, direct = 0.0, float("inf"), True
        if self._symmetry is not None:  # a pair's route is its copy's on the first nodes (canonical)
            nodes, where = self._symmetry
            alike = {(where[a][1], where[b][1], where[a][0] == where[b][0]) for a, b in pairs}
            pairs = {(f"{nodes[0]}.{a}", f"{nodes[0 if same else 1]}.{b}") for a, b, same in alike}
        for a, b in pairs:
            channels, latency = net.route(a, b)
            worst_lat = max(worst_lat, latency)
            worst_bw = min(worst_bw, float(net.channel_bandwidth_Bps[channels].min()))
            direct = direct and len(channels) == 1
        return worst_lat, worst_bw, direct

    def _uniform(self, devices: tuple[str, ...]) -> Params:
        """A group's figures for the closed forms: (alpha, beta, gamma, shared port, intra alpha,
        intra beta). One node, or one rank per node: the worst latency and narrowest route among
        ring neighbours and partners half the group away. Several ranks on each of several nodes:
        alpha and beta between nodes from the rings that join the same position of every node
        (what hierarchical schedules use, one per rank of a node), the intra figures inside nodes."""
        found = self._params.get(devices)
        if found is None:
            p = len(devices)
            groups = self._node_groups(devices)
            memory_Bps = self.network.graph.nodes[devices[0]].get("memory_bandwidth_Bps")
            gamma = 3.0 / float(memory_Bps) if memory_Bps else 0.0
            width = min(len(g) for g in groups)
            if len(groups) > 1 and width > 1:
                g = len(groups)
                across = {
                    (devices[groups[j][i]], devices[groups[(j + 1) % g][i]])
                    for i in range(width)
                    for j in range(g)
                }
                inside = {
                    (devices[grp[i]], devices[grp[(i + 1) % len(grp)]])
                    for grp in groups
                    for i in range(len(grp))
                }
                lat, bw, direct = self._worst(across)
                ilat, ibw, _ = self._worst(inside)
                found = (lat, 1.0 / bw, gamma, not direct, ilat, 1.0 / ibw)
            else:
                pairs = {(devices[i], devices[(i + 1) % p]) for i in range(p)}
                pairs |= {(devices[i], devices[(i + p // 2) % p]) for i in range(p)}
                lat, bw, direct = self._worst(pairs)
                found = (lat, 1.0 / bw, gamma, not direct, None, None)
            self._params[devices] = found
        return found

    def seconds(self, call: CommCall, devices: tuple[str, ...], algorithm: Any = _AUTO) -> float:
        """Seconds ``call`` takes on ``devices``; ``algorithm`` runs the data-parallel all-reduces."""
        devices = self.canonical(devices)
        p = len(devices)
        if p < 2 or call.size_bytes <= 0:
            return 0.0
        if call.collective == "send_recv":
            channels, latency = self.network.route(devices[0], devices[1])
            bw = float(self.network.channel_bandwidth_Bps[channels].min()) if len(channels) else float("inf")
            return latency + call.size_bytes / bw
        params = self._uniform(devices)
        if call.collective == "all_to_all":
            alpha, beta, _, _, _, intra_beta = params
            local = max(len(g) for g in self._node_groups(devices))
            if intra_beta is None:
                return (p - 1) * alpha + (p - 1) / p * call.size_bytes * beta
            return (p - 1) * alpha + call.size_bytes * ((p - local) / p * beta + (local - 1) / p * intra_beta)
        return self._nccl(call, devices, params, algorithm)

    def channels(self, call: CommCall, devices: tuple[str, ...]) -> int:
        """The NCCL channels (one CTA, one SM each) ``call`` runs on ``devices``: NCCL's ``auto``
        pick's (also for a data-parallel all-reduce given another algorithm: NCCL runs it on its
        channels); 0 for send/recv, all-to-all, a group of one or no NCCL system."""
        from parplan.collectives.schedule import COLLECTIVES

        devices = self.canonical(devices)
        if len(devices) < 2 or call.size_bytes <= 0 or call.collective not in COLLECTIVES:
            return 0
        if call.collective == "all_to_all":
            return 0
        cache = _CHANNELS.setdefault(self.network, {})
        key = (call.collective, call.size_bytes, devices)
        found = cache.get(key)
        if found is None:
            system = self._system(devices)
            found = (
                0
                if system is None
                else _nccl_channels(call.collective, call.size_bytes, system, self._choices)
            )
            cache[key] = found
        return found

    def _system(self, devices: tuple[str, ...]) -> Any:
        from parplan.topology.nccl_system import nccl_system

        system = self._systems.get(devices, _MISSING)
        if system is _MISSING:
            system = self._systems[devices] = nccl_system(self.network, devices)
        return system

    def _nccl(self, call: CommCall, devices: tuple[str, ...], params: Params, algorithm: Any) -> float:
        system = self._system(devices)
        spec: Any = _AUTO
        if call.collective == "all_reduce" and call.axis in ("dp", "dp_cp", "edp", "dp_replicate"):
            spec = algorithm
        groups = self._node_groups(devices) if len(self._node_groups(devices)) > 1 else None
        key = (
            spec,
            call.collective,
            len(devices),
            call.size_bytes,
            system,
            self.network.transport,
            params,
            groups,
        )
        found = self._forms.get(key)
        if found is None:
            found = self._forms[key] = _closed_form(*key, self._choices)
        return found


class CollectiveClock:
    """Seconds of a :class:`CommCall` in its group on the network (module docstring), cached."""

    def __init__(self, ctx: PlanContext, layout: ShardedLayout, *, share_congruent: bool = False) -> None:
        self.ctx = ctx
        self.network: Network = ctx.network
        self.layout = layout
        self.groups = GroupClock(ctx.network, share_congruent=share_congruent)
        self._groups: dict[tuple[str, int], tuple[str, ...]] = {}
        self._times: dict[tuple[str, str, float, int], float] = {}
        self._shares: dict[tuple[str, str, float, int], float] = {}
        self._excess: dict[tuple[str, str, float, int], float] = {}
        self._memory_shares: dict[int, float] = {}
        self._devices: dict[int, DeviceInfo] = {}  # each stage's first device

    def group(self, axis: str, stage: int) -> tuple[str, ...]:
        """The devices of ``axis``'s group holding stage ``stage``'s first device."""
        key = (axis, stage)
        found = self._groups.get(key)
        if found is None:
            mesh = self.layout.mesh
            device = mesh.device({"pp": stage})
            if axis == "pp":
                found = (device, mesh.device({"pp": (stage + 1) % mesh.pp}))
            else:
                found = mesh.group(axis, device)  # type: ignore[arg-type]
            self._groups[key] = found
        return found

    def seconds(self, call: CommCall, stage: int) -> float:
        """Seconds ``call`` takes on stage ``stage``'s group."""
        key = (call.collective, call.axis, call.size_bytes, stage)
        found = self._times.get(key)
        if found is None:
            algorithm = self.layout.strategy.aggregation.algorithm
            found = self._times[key] = self.groups.seconds(call, self.group(call.axis, stage), algorithm)
        return found

    def total(self, calls: Sequence[CommCall], stage: int) -> float:
        """Seconds of ``calls`` run one after another."""
        return sum(self.seconds(c, stage) for c in calls)

    def sm_share(self, call: CommCall, stage: int) -> float:
        """Share of stage ``stage``'s device's SMs ``call`` holds while it runs
        (:func:`~parplan.plan.compute.comm_sm_share` of its NCCL channels)."""
        from parplan.plan.compute import comm_sm_share

        key = (call.collective, call.axis, call.size_bytes, stage)
        found = self._shares.get(key)
        if found is None:
            device = self._devices.get(stage)
            if device is None:
                device = self._devices[stage] = self.network.device(self.layout.mesh.device({"pp": stage}))
            channels = self.groups.channels(call, self.group(call.axis, stage))
            found = self._shares[key] = comm_sm_share(device, channels)
        return found

    def _device(self, stage: int) -> DeviceInfo:
        device = self._devices.get(stage)
        if device is None:
            device = self._devices[stage] = self.network.device(self.layout.mesh.device({"pp": stage}))
        return device

    def memory_share(self, stage: int) -> float:
        """The memory-bound share of a block's kernel seconds on stage ``stage``'s device
        (:func:`~parplan.plan.sharded.costs.block_memory_share`)."""
        found = self._memory_shares.get(stage)
        if found is None:
            from parplan.plan.sharded.costs import block_memory_share

            layout = self.layout
            found = block_memory_share(self.ctx, layout.strategy, layout.mesh, self._device(stage))
            self._memory_shares[stage] = found
        return found

    def memory_excess(self, call: CommCall, stage: int) -> float:
        """How much more of a memory-bound kernel's rate than of a GEMM's ``call`` takes on stage
        ``stage``'s device (:func:`~parplan.plan.compute.comm_memory_excess`, on the call's
        closed-form seconds and its bus bytes)."""
        from parplan.plan.compute import comm_memory_excess

        key = (call.collective, call.axis, call.size_bytes, stage)
        found = self._excess.get(key)
        if found is None:
            devices = self.group(call.axis, stage)
            channels = self.groups.channels(call, devices)
            moved = bus_bytes(call.collective, call.size_bytes, len(devices))
            seconds = self.seconds(call, stage)
            found = self._excess[key] = comm_memory_excess(self._device(stage), channels, seconds, moved)
        return found

    def compute_share(self, call: CommCall, stage: int) -> float:
        """Share of stage ``stage``'s device's compute rate ``call`` takes while it runs beside the
        blocks: its NCCL channels' SMs and the memory bandwidth its traffic takes from their
        memory-bound kernels (:func:`~parplan.plan.compute.comm_compute_share`)."""
        return self.sm_share(call, stage) + self.memory_share(stage) * self.memory_excess(call, stage)

    def sm_stolen(self, calls: Sequence[CommCall], stage: int) -> float:
        """Each call's seconds times its :meth:`sm_share`, summed: what the calls take of any
        compute beside them."""
        return sum(self.seconds(c, stage) * self.sm_share(c, stage) for c in calls)

    def memory_stolen(self, calls: Sequence[CommCall], stage: int) -> float:
        """Each call's seconds times its :meth:`memory_excess`, summed: what the calls take beyond
        that of compute that is all memory bound (scaled by the compute's memory-bound share)."""
        return sum(self.seconds(c, stage) * self.memory_excess(c, stage) for c in calls)

    def stolen(self, calls: Sequence[CommCall], stage: int) -> float:
        """Compute seconds ``calls`` take from the compute they run beside: each call's seconds
        times its :meth:`compute_share`."""
        return sum(self.seconds(c, stage) * self.compute_share(c, stage) for c in calls)
