"""A search's meshes and their groups: :class:`Meshes` lays plans out on the default placement
(one mesh per shape, the cluster's first devices), :func:`group_of` and :func:`run_of` find a
stage's group of an axis by rank arithmetic (its devices, or the run of ranks they are),
:func:`stage_groups` sorts a mesh's stages into classes of congruent groups (:func:`run_period`:
the ranks after which runs' groups repeat), and :func:`applies`
says whether the array path (:mod:`~parplan.api.search.chunks`, :mod:`~parplan.api.search.stages`)
holds for a structure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from parplan.plan.sharded.mesh import INTERLEAVED_SCHEDULE, build_mesh
from parplan.plan.sharded.symmetry import regular_node_size

if TYPE_CHECKING:
    from parplan.config.strategy import ShardedStrategy
    from parplan.model.transformer import TransformerShape
    from parplan.plan.base import PlanContext
    from parplan.plan.sharded.clock import GroupClock
    from parplan.plan.sharded.mesh import Mesh
    from parplan.topology.network import DeviceInfo, Network


def applies(
    ctx: PlanContext,
    mesh: Mesh,
    strategy: ShardedStrategy,
    shape: TransformerShape,
    kind_of: Callable[[str], Any] | None = None,
) -> bool:
    """Whether the array path holds: every block alike, every stage's device alike, the default
    placement (:func:`group_of`'s rank arithmetic). ``kind_of``: a device's kind by name
    (:meth:`Meshes.kind`, memoised), else read off the network."""
    from parplan.config.strategy import DEFAULT_PLACEMENT

    if tuple(strategy.placement) != DEFAULT_PLACEMENT or strategy.devices is not None:
        return False
    if len({shape.is_moe(i) for i in range(shape.layers)}) > 1:
        return False
    kind = kind_of or (lambda device: device_kind(ctx.network.device(device)))
    step = mesh.tp * mesh.cp  # stage s's first device, on the default placement (group_of's rule)
    kinds = {kind(mesh.devices[s * step]) for s in range(mesh.pp)}
    return len(kinds) == 1


def device_kind(info: DeviceInfo) -> DeviceInfo:
    """``info`` without its name and node: what two devices that time alike share."""
    return replace(info, name="", group=None)  # alike devices time alike (costs.layout_plan's rule)


def group_of(mesh: Mesh, axis: str, stage: int, data: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """:meth:`Mesh.group` of stage ``stage``'s first device on the default placement (tp, cp, pp,
    dp innermost first), by rank arithmetic; ``pp`` the stage and its successor. ``data``: the
    stage's ``dp_cp`` group when already known (the other data axes are cut from it)."""
    tp, cp, pp, dp = mesh.tp, mesh.cp, mesh.pp, mesh.dp
    devices, base = mesh.devices, stage * tp * cp
    if axis == "pp":
        return (devices[base], devices[((stage + 1) % pp) * tp * cp])
    if axis == "tp":
        return devices[base : base + tp]
    if axis == "cp":
        return devices[base : base + tp * cp : tp]
    if axis == "dp":
        return devices[base :: tp * cp * pp][:dp]
    if axis == "embedding":
        return (devices[0], devices[(pp - 1) * tp * cp]) if pp > 1 else (devices[0],)
    if data is None:
        stride = tp * cp * pp
        if cp == 1:
            data = devices[base : base + dp * stride : stride]
        else:
            data = tuple(devices[base + c * tp + d * stride] for d in range(dp) for c in range(cp))
    if axis == "dp_cp":
        return data
    block = mesh.ep if axis in ("ep", "edp") else mesh.sizes["dp_shard"]
    return data[:block] if axis in ("ep", "dp_shard") else data[::block]


def run_of(mesh: Mesh, axis: str, stage: int) -> tuple[int, int, int] | None:
    """:func:`group_of`'s devices as the ranks ``start, start + stride, ...`` of the mesh
    (``(start, stride, count)``), by the same arithmetic; None where they are not one such run
    (the data axes with cp > 1)."""
    tp, cp, pp, dp = mesh.tp, mesh.cp, mesh.pp, mesh.dp
    base, stride = stage * tp * cp, tp * cp * pp
    if axis == "pp":
        return (base, ((stage + 1) % pp) * tp * cp - base, 2)
    if axis == "tp":
        return (base, 1, tp)
    if axis == "cp":
        return (base, tp, cp)
    if axis == "dp":
        return (base, stride, dp)
    if axis == "embedding":
        return (0, (pp - 1) * tp * cp, 2) if pp > 1 else (0, 1, 1)
    if cp > 1:
        return None
    if axis == "dp_cp":
        return (base, stride, dp)
    block = mesh.ep if axis in ("ep", "edp") else mesh.sizes["dp_shard"]
    if axis in ("ep", "dp_shard"):
        return (base, stride, min(block, dp))
    return (base, stride * block, -(-dp // block))


def run_period(clock: GroupClock, network: Network) -> int | None:
    """``g`` when runs of ranks (:func:`run_of`) ``g`` apart have one canonical group: the cluster
    numbers its devices node by node alike, ``g`` a node (:func:`~parplan.plan.sharded.symmetry.
    regular_node_size`), and ``clock`` takes a run one node on to the group it takes the run to
    (it shares congruent groups, :meth:`~parplan.plan.sharded.clock.GroupClock.canonical_run`);
    else None. Stages whose runs start ``g`` ranks apart then have the same groups."""
    size = regular_node_size(network)
    if size is None or len(network.devices) <= size:
        return None
    return size if clock.canonical_run(0, 1, 1) == clock.canonical_run(size, 1, 1) else None


class Meshes:
    """:func:`~parplan.plan.sharded.mesh.build_mesh` for a search's plans (the default placement on
    the cluster's first devices), reading the devices' nodes from the graph once per search
    instead of once per plan; anything else, or a plan ``build_mesh`` would refuse, goes to
    ``build_mesh`` itself. A test holds the two equal."""

    def __init__(self, network: Network) -> None:
        self.network = network
        self._devices = tuple(network.devices)
        self._nodes: tuple[str, ...] | None = None
        self._kinds: dict[str, DeviceInfo] = {}
        self._built: dict[tuple[int, ...], Mesh] = {}
        self._shapes: dict[int, tuple[int, ...]] = {}  # id of a kept mesh (alive) -> its shape

    def kind(self, device: str) -> DeviceInfo:
        """``device``'s record without its name and node (alike devices time alike), memoised
        for the search (its network does not change while it runs)."""
        found = self._kinds.get(device)
        if found is None:
            found = self._kinds[device] = device_kind(self.network.device(device))
        return found

    def build(self, strategy: ShardedStrategy) -> Mesh:
        """The mesh of ``strategy`` (module docstring of :mod:`parplan.plan.sharded.mesh`), kept
        per shape when laid out here (a mesh is frozen: plans of one shape share it)."""
        from parplan.config.strategy import DEFAULT_PLACEMENT
        from parplan.plan.sharded.mesh import Mesh

        s = strategy
        dp = s.dp
        custom = s.devices is not None or tuple(s.placement) != DEFAULT_PLACEMENT
        custom = custom or (s.virtual_stages > 1 and s.schedule != INTERLEAVED_SCHEDULE)
        if custom or dp is None or dp * s.tp * s.pp * s.cp > len(self._devices) or (dp * s.cp) % s.ep:
            return build_mesh(strategy, self.network)
        if self._nodes is None:
            attrs = self.network.graph.nodes
            self._nodes = tuple(attrs[d].get("group") or d for d in self._devices)
        need = dp * s.tp * s.pp * s.cp
        devices, nodes = self._devices[:need], self._nodes[:need]
        sizes = {"tp": s.tp, "cp": s.cp, "pp": s.pp, "dp": dp, "ep": s.ep}
        data = dp * s.cp
        shard = s.shard_group
        if shard is None:
            shard = data
            if s.fsdp == "hybrid_shard":  # the dp_cp ranks of the first device's node
                stride = s.tp * s.cp * s.pp
                ranks = (c * s.tp + d * stride for d in range(dp) for c in range(s.cp))
                shard = sum(1 for r in ranks if nodes[r] == nodes[0])
        if data % shard:
            return build_mesh(strategy, self.network)
        shape = (dp, s.tp, s.pp, s.cp, s.ep, shard)
        found = self._built.get(shape)
        if found is None:
            digits = tuple((axis, sizes[axis]) for axis in DEFAULT_PLACEMENT)
            found = Mesh(devices=devices, sizes={**sizes, "dp_shard": shard}, digits=digits, nodes=nodes)
            self._built[shape] = found
            self._shapes[id(found)] = shape
        return found

    def shape(self, mesh: Mesh) -> tuple[int, ...] | None:
        """``mesh``'s (dp, tp, pp, cp, ep, shard group) when :meth:`build` laid it out (and keeps
        it: one mesh per shape), else None. Such a mesh holds the network's first devices in
        order, so a rank of the mesh is that device's index in the network (:func:`run_of`)."""
        return self._shapes.get(id(mesh))


def stage_groups(
    clock: GroupClock, mesh: Mesh, axes: Sequence[str], ranked: bool = False
) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
    """Each stage's class (``[pp]``) and each class's canonical group per axis: stages whose
    groups are congruent share their collective times. ``ranked``: the mesh's ranks are the
    network's (:meth:`Meshes.shape`), so each group is found by :func:`run_of` and
    :meth:`~parplan.plan.sharded.clock.GroupClock.canonical_run`, without listing its devices."""
    classes: dict[tuple[Any, ...], int] = {}
    index = np.empty(mesh.pp, dtype=np.intp)
    for s in range(mesh.pp):
        key = tuple(canonical_group(clock, mesh, a, s, ranked) if _size(mesh, a) > 1 else () for a in axes)
        index[s] = classes.setdefault(key, len(classes))
    return index, list(classes)


def canonical_group(clock: GroupClock, mesh: Mesh, axis: str, stage: int, ranked: bool) -> tuple[str, ...]:
    """The canonical :func:`group_of` (:meth:`~parplan.plan.sharded.clock.GroupClock.canonical`),
    by :func:`run_of` when the mesh is ``ranked`` (:func:`stage_groups`) and the group is a run."""
    run = run_of(mesh, axis, stage) if ranked else None
    if run is None:
        return clock.canonical(group_of(mesh, axis, stage))
    return clock.canonical_run(*run)


def _size(mesh: Mesh, axis: str) -> int:
    return {"tp": mesh.tp, "cp": mesh.cp, "ep": mesh.ep, "pp": mesh.pp}[axis]
