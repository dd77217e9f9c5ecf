"""How long one :class:`~parplan.plan.sharded.comm.CommCall` takes in its group of a sharded
plan's mesh, in closed form: what the analytic evaluation (:mod:`parplan.api.sharded_analytic`)
puts on its critical path.

All-reduce, all-gather, reduce-scatter and broadcast: NCCL's ``auto`` pick (algorithm, protocol)
on the system the group's ranks form (:func:`parplan.plan.collective.resolve_run`), timed by that
algorithm's closed form (its registry entry's ``time_s``, the oracle the engine meets) on the
group's bottleneck alpha and beta, plus the call's overhead; data-parallel all-reduces run
``aggregation.algorithm`` instead. An all-to-all costs ``(p - 1) alpha + (p - 1) / p n beta``
(every rank sends all but its own share through its port); a send/recv ``latency + n /
bandwidth`` on its route. A group's alpha and beta are the worst latency and narrowest route
among ring neighbours and partners half the group away (what ring and halving schedules use).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from parplan.collectives.auto import AutoAlgorithm
from parplan.plan.base import PlanContext
from parplan.plan.sharded.comm import CommCall
from parplan.plan.sharded.costs import ShardedLayout
from parplan.topology.network import Network

_MISSING: Any = object()
_NETWORK_CACHE: weakref.WeakKeyDictionary[Network, tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any]]] = (
    weakref.WeakKeyDictionary()
)
"""Per network: each group's (alpha, beta, gamma, shared port), NCCL system and ranks by node,
kept for the next plan evaluated on the same cluster (a sweep evaluates many)."""
_AUTO = AutoAlgorithm(name="auto")


def _uses_groups(spec: Any, collective: str) -> bool:
    """Whether ``spec`` (or the fallback of ``auto``) reads the ranks' node groups."""
    from parplan.collectives.registry import get

    return bool(get(spec.name, collective).uses_groups(spec))


@lru_cache(maxsize=4096)
def _closed_form(
    spec: Any,
    collective: str,
    p: int,
    size_bytes: float,
    system: Any,
    transport: Any,
    params: tuple[float, float, float, bool],
    groups: tuple[tuple[int, ...], ...] | None,
) -> float:
    """One call's seconds: ``auto``'s pick on ``system`` (or ``spec`` as named) by its closed form
    on the group's (alpha, beta, gamma, shared port), plus the call's overhead. Cached: congruent
    groups of a mesh share every argument."""
    from parplan.collectives.algorithm import UniformCost
    from parplan.collectives.registry import get
    from parplan.plan.collective import resolve_run

    run = resolve_run(spec, size_bytes, system, transport, collective=collective)
    algorithm = get(run.spec.name, collective)
    if groups is None and algorithm.uses_groups(run.spec):
        groups = ((*range(p),),)
    alpha, beta, gamma, shared = params
    cost = UniformCost(alpha_s=alpha, beta_s_per_byte=beta, gamma_s_per_byte=gamma, shared_port=shared)
    return float(algorithm.time_s(run.spec, p, size_bytes, cost, groups)) + run.call_overhead_s


class CollectiveClock:
    """Seconds of a :class:`CommCall` in its group on the network (module docstring), cached."""

    def __init__(self, ctx: PlanContext, layout: ShardedLayout) -> None:
        self.network: Network = ctx.network
        self.layout = layout
        self._groups: dict[tuple[str, int], tuple[str, ...]] = {}
        cache = _NETWORK_CACHE.setdefault(ctx.network, ({}, {}, {}))
        self._params: dict[tuple[str, ...], tuple[float, float, float, bool]] = cache[0]
        self._systems: dict[tuple[str, ...], Any] = cache[1]
        self._groups_by_node: dict[tuple[str, ...], tuple[tuple[int, ...], ...]] = cache[2]
        self._times: dict[tuple[str, str, float, int], float] = {}

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

    def _uniform(self, devices: tuple[str, ...]) -> tuple[float, float, float, bool]:
        """(alpha, beta, gamma, shared port) of a group: the worst latency and narrowest route among
        ring neighbours and each rank's partner half the group away (what ring and halving
        schedules use), O(p) routes instead of all pairs."""
        found = self._params.get(devices)
        if found is None:
            net = self.network
            p = len(devices)
            pairs = {(devices[i], devices[(i + 1) % p]) for i in range(p)}
            pairs |= {(devices[i], devices[(i + p // 2) % p]) for i in range(p)}
            worst_lat, worst_bw, direct = 0.0, float("inf"), True
            for a, b in pairs:
                channels, latency = net.route(a, b)
                worst_lat = max(worst_lat, latency)
                worst_bw = min(worst_bw, float(net.channel_bandwidth_Bps[channels].min()))
                direct = direct and len(channels) == 1
            memory_Bps = net.graph.nodes[devices[0]].get("memory_bandwidth_Bps")
            gamma = 3.0 / float(memory_Bps) if memory_Bps else 0.0
            found = self._params[devices] = (worst_lat, 1.0 / worst_bw, gamma, not direct)
        return found

    def seconds(self, call: CommCall, stage: int) -> float:
        """Seconds ``call`` takes on stage ``stage``'s group."""
        key = (call.collective, call.axis, call.size_bytes, stage)
        found = self._times.get(key)
        if found is None:
            found = self._times[key] = self._time(call, self.group(call.axis, stage))
        return found

    def _time(self, call: CommCall, devices: tuple[str, ...]) -> float:
        p = len(devices)
        if p < 2 or call.size_bytes <= 0:
            return 0.0
        if call.collective == "send_recv":
            channels, latency = self.network.route(devices[0], devices[1])
            bw = float(self.network.channel_bandwidth_Bps[channels].min()) if len(channels) else float("inf")
            return latency + call.size_bytes / bw
        params = self._uniform(devices)
        if call.collective == "all_to_all":
            return (p - 1) * params[0] + (p - 1) / p * call.size_bytes * params[1]
        return self._nccl(call, devices, params)

    def _nccl(
        self, call: CommCall, devices: tuple[str, ...], params: tuple[float, float, float, bool]
    ) -> float:
        from parplan.topology.nccl_system import nccl_system
        from parplan.topology.placement import groups_by_node

        system = self._systems.get(devices, _MISSING)
        if system is _MISSING:
            system = self._systems[devices] = nccl_system(self.network, devices)
        spec: Any = _AUTO
        if call.collective == "all_reduce" and call.axis in ("dp", "dp_cp", "edp", "dp_replicate"):
            spec = self.layout.strategy.aggregation.algorithm
        groups = None
        if _uses_groups(spec, call.collective):
            groups = self._groups_by_node.get(devices)
            if groups is None:
                groups = tuple(tuple(g) for g in groups_by_node(self.network, devices))
                self._groups_by_node[devices] = groups
        return _closed_form(
            spec,
            call.collective,
            len(devices),
            call.size_bytes,
            system,
            self.network.transport,
            params,
            groups,
        )

    def total(self, calls: Sequence[CommCall], stage: int) -> float:
        """Seconds of ``calls`` run one after another."""
        return sum(self.seconds(c, stage) for c in calls)
