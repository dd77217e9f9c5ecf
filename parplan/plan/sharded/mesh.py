"""The device mesh of a sharded plan: which device holds which (tp, cp, pp, dp) coordinate, the
groups every axis forms, and the checks a mesh must pass before any cost is computed.

**Placement.** ``strategy.placement`` orders the axes innermost first (default ``tp, cp, pp, dp``):
the device at position ``r`` of the plan's device list (``strategy.devices`` or the cluster's first
``dp x tp x pp x cp`` devices, in cluster order) has the mixed-radix digits of ``r`` as coordinates,
the first axis varying fastest. With 8-GPU nodes, TP 8 puts each TP group in one node, PP across
nodes, DP outermost, as Megatron-LM's default ``tp-cp-ep-dp-pp`` order does for TP and CP.

**Expert parallelism** is carved out of the data x context ranks as Megatron-Core does: the ``dp x
cp`` ranks sharing a (tp, pp) coordinate, taken in device order, are cut into consecutive blocks of
``ep``; each block is one EP group (its ranks hold different experts) and the ranks at the same
position of every block form the expert-data-parallel group (``edp``: they hold the same experts
and reduce their gradients together). When ``placement`` names ``ep`` explicitly, the DP axis is
split into an ``ep`` digit at that position and a ``dp / ep`` digit at DP's position.

**Groups** (:meth:`Mesh.group`): ``tp``, ``cp``, ``pp``, ``dp`` vary one axis; ``dp_cp`` varies
both (dense gradients are reduced over it: CP ranks hold the same weights); ``ep`` and ``edp`` as
above; ``dp_shard`` and ``dp_replicate`` cut ``dp_cp`` the same way for FSDP's ``hybrid_shard``
(consecutive blocks of ``shard_group`` ranks shard the state, the ranks at one position of every
block replicate it; ``shard_group`` defaults to the ``dp_cp`` ranks of one node); ``embedding`` is
the pair (first stage, last stage) that all-reduces tied embedding gradients. Members are in rank
order (the order of the plan's device list).

**Checks** (:func:`build_mesh`, :func:`check_shape`): each raises one
:class:`~parplan.errors.PlanError` naming the numbers that disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Literal, get_args

from parplan.config.strategy import ShardedStrategy
from parplan.errors import PlanError

if TYPE_CHECKING:
    from parplan.model.transformer import TransformerShape
    from parplan.topology.network import Network

GroupAxis = Literal["tp", "cp", "pp", "dp", "ep", "edp", "dp_cp", "dp_shard", "dp_replicate", "embedding"]
"""The groups a mesh answers for (see the module docstring)."""

INTERLEAVED_SCHEDULE = "interleaved_1f1b"
"""The pipeline schedule that runs virtual stages (Megatron's interleaved 1F1B)."""

MESH_AXES: tuple[str, ...] = ("tp", "cp", "pp", "dp")
"""The axes every device has a coordinate on."""


@dataclass(frozen=True)
class Mesh:
    """The devices of a sharded plan laid out on the (tp, cp, pp, dp) mesh.

    ``sizes`` maps each axis (and ``ep``) to its degree; ``digits`` are the mixed-radix digits
    innermost first as (name, size), where an explicitly placed ``ep`` splits DP into ``ep`` and
    ``dp_outer``. ``nodes`` is each device's node (its group in the cluster, or itself).
    """

    devices: tuple[str, ...]
    sizes: Mapping[str, int]
    digits: tuple[tuple[str, int], ...]
    nodes: tuple[str, ...]
    _strides: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        strides: dict[str, int] = {}
        stride = 1
        for name, size in self.digits:
            strides[name] = stride
            stride *= size
        object.__setattr__(self, "_strides", strides)

    @cached_property
    def _index(self) -> dict[str, int]:
        """Each device's rank, built on first use (a search builds many meshes of thousands of
        devices and asks few of them a device's rank)."""
        return {d: i for i, d in enumerate(self.devices)}

    # -- sizes -----------------------------------------------------------------------------------

    @property
    def tp(self) -> int:
        """Tensor-parallel degree."""
        return self.sizes["tp"]

    @property
    def cp(self) -> int:
        """Context-parallel degree."""
        return self.sizes["cp"]

    @property
    def pp(self) -> int:
        """Pipeline stages."""
        return self.sizes["pp"]

    @property
    def dp(self) -> int:
        """Data-parallel degree."""
        return self.sizes["dp"]

    @property
    def ep(self) -> int:
        """Expert-parallel degree (carved from dp x cp)."""
        return self.sizes["ep"]

    @property
    def size(self) -> int:
        """Devices in the mesh."""
        return len(self.devices)

    def rank(self, device: str) -> int:
        """Position of ``device`` in the plan's device list; a :class:`PlanError` if not in the mesh."""
        try:
            return self._index[device]
        except KeyError:
            raise PlanError(f"device {device!r} is not in the sharded plan's mesh") from None

    # -- coordinates -----------------------------------------------------------------------------

    def _digits_of(self, rank: int) -> dict[str, int]:
        return {name: (rank // self._strides[name]) % size for name, size in self.digits}

    def _rank_of(self, digits: Mapping[str, int]) -> int:
        return sum(digits[name] * self._strides[name] for name, _ in self.digits)

    def coords(self, device: str) -> dict[str, int]:
        """The (tp, cp, pp, dp) coordinates of ``device`` (dp is the whole data-parallel index)."""
        d = self._digits_of(self.rank(device))
        if "dp_outer" in d:
            dp = d.pop("ep") + self.ep * d.pop("dp_outer")
            d["dp"] = dp
        return {a: d[a] for a in MESH_AXES}

    def device(self, coords: Mapping[str, int]) -> str:
        """The device at (tp, cp, pp, dp) ``coords`` (missing axes: 0)."""
        c = {a: int(coords.get(a, 0)) for a in MESH_AXES}
        for a in MESH_AXES:
            if not 0 <= c[a] < self.sizes[a]:
                raise PlanError(f"coordinate {a}={c[a]} is outside 0..{self.sizes[a] - 1}")
        digits = dict(c)
        if any(name == "dp_outer" for name, _ in self.digits):
            digits["ep"], digits["dp_outer"] = c["dp"] % self.ep, c["dp"] // self.ep
        return self.devices[self._rank_of(digits)]

    # -- groups ----------------------------------------------------------------------------------

    def _vary(self, device: str, axes: Sequence[str]) -> tuple[str, ...]:
        """The devices sharing ``device``'s coordinates except on ``axes``, in rank order."""
        base = self.coords(device)
        members = [base]
        for a in axes:
            members = [{**m, a: i} for m in members for i in range(self.sizes[a])]
        ranks = sorted(self._index[self.device(m)] for m in members)
        return tuple(self.devices[r] for r in ranks)

    def group(self, axis: GroupAxis, device: str) -> tuple[str, ...]:
        """The devices of ``device``'s group on ``axis``, in rank order (module docstring)."""
        if axis in MESH_AXES:
            return self._vary(device, (axis,))
        data = self._vary(device, ("dp", "cp"))
        if axis == "dp_cp":
            return data
        if axis == "embedding":
            c = self.coords(device)
            ends = {self.device({**c, "pp": 0}), self.device({**c, "pp": self.pp - 1})}
            return tuple(sorted(ends, key=self._index.__getitem__))
        block = self.ep if axis in ("ep", "edp") else self.sizes["dp_shard"]
        position = data.index(device)
        if axis in ("ep", "dp_shard"):
            start = position - position % block
            return data[start : start + block]
        if axis in ("edp", "dp_replicate"):
            return data[position % block :: block]
        raise PlanError(f"unknown mesh axis {axis!r}; valid: {', '.join(get_args(GroupAxis))}")

    def stride(self, axis: str) -> int:
        """How many ranks apart two devices one step apart on ``axis`` are (a mixed-radix digit)."""
        return self._strides[axis]

    def stage_of(self, device: str) -> int:
        """The pipeline stage of ``device`` (its pp coordinate)."""
        return (self.rank(device) // self._strides["pp"]) % self.sizes["pp"]

    def stage_devices(self, stage: int) -> tuple[str, ...]:
        """Every device of pipeline stage ``stage``, in rank order."""
        return tuple(d for d in self.devices if self.stage_of(d) == stage)

    def spans_nodes(self, axis: GroupAxis) -> bool:
        """Whether the ``axis`` group of the first device crosses a node boundary (groups are
        congruent, so one speaks for all)."""
        nodes = {self.nodes[self._index[d]] for d in self.group(axis, self.devices[0])}
        return len(nodes) > 1

    def notes(self) -> tuple[str, ...]:
        """Placement remarks: a TP (or CP) group that spans nodes runs its per-layer collectives
        over the network instead of NVLink."""
        out = []
        for axis in ("tp", "cp"):
            if self.sizes[axis] > 1 and self.spans_nodes(axis):
                out.append(
                    f"{axis.upper()} groups span nodes ({axis}={self.sizes[axis]}): their per-layer "
                    "collectives cross the network; put the axis first in placement to keep it in a node"
                )
        return tuple(out)


def plan_devices(strategy: ShardedStrategy, cluster_devices: Sequence[str]) -> tuple[tuple[str, ...], int]:
    """The plan's devices in mesh order and its data-parallel degree, checked against the cluster."""
    mp = strategy.model_parallel_size()
    if strategy.devices is not None:
        devices = tuple(strategy.devices)
        known = set(cluster_devices)
        unknown = [d for d in devices if d not in known]
        if unknown:
            raise PlanError(f"devices names {unknown[0]!r}, which is not a device of the cluster")
        dupes = sorted({d for d in devices if devices.count(d) > 1})
        if dupes:
            raise PlanError(f"devices lists {dupes[0]!r} more than once")
        pool = devices
    else:
        pool = tuple(cluster_devices)
    degrees = f"tp x pp x cp = {strategy.tp} x {strategy.pp} x {strategy.cp} = {mp}"
    if strategy.dp is None:
        if len(pool) % mp:
            raise PlanError(
                f"{len(pool)} devices are not a multiple of {degrees}; give dp or degrees that divide them"
            )
        dp = len(pool) // mp
    else:
        dp = strategy.dp
    need = dp * mp
    product = f"dp x tp x pp x cp = {dp} x {strategy.tp} x {strategy.pp} x {strategy.cp} = {need}"
    if strategy.devices is not None and need != len(pool):
        raise PlanError(f"devices lists {len(pool)} devices but {product}")
    if need > len(pool):
        raise PlanError(f"{product} devices; the cluster has {len(pool)}")
    return pool[:need], dp


def build_mesh(strategy: ShardedStrategy, network: Network) -> Mesh:
    """The mesh of ``strategy`` on ``network``'s devices, with the checks that need no model."""
    devices, dp = plan_devices(strategy, network.devices)
    if strategy.virtual_stages > 1 and strategy.schedule != INTERLEAVED_SCHEDULE:
        raise PlanError(
            f"virtual_stages ({strategy.virtual_stages}) interleave model chunks; set schedule: "
            f"{INTERLEAVED_SCHEDULE} (not {strategy.schedule})"
        )
    ep = strategy.ep
    if (dp * strategy.cp) % ep:
        raise PlanError(
            f"ep ({ep}) must divide dp x cp ({dp} x {strategy.cp}): experts are split over data ranks"
        )
    sizes = {"tp": strategy.tp, "cp": strategy.cp, "pp": strategy.pp, "dp": dp, "ep": ep}
    digits: list[tuple[str, int]] = []
    for axis in strategy.placement:
        if axis == "ep":
            continue
        if axis == "dp" and "ep" in strategy.placement:
            continue
        digits.append((axis, sizes[axis]))
    if "ep" in strategy.placement:
        if dp % ep:
            raise PlanError(f"a placement naming ep needs ep ({ep}) to divide dp ({dp})")
        digits = []
        for axis in strategy.placement:
            if axis == "ep":
                digits.append(("ep", ep))
            elif axis == "dp":
                digits.append(("dp_outer", dp // ep))
            else:
                digits.append((axis, sizes[axis]))
    attrs = network.graph.nodes
    nodes = tuple(attrs[d].get("group") or d for d in devices)
    mesh = Mesh(devices=devices, sizes={**sizes, "dp_shard": 1}, digits=tuple(digits), nodes=nodes)
    data = dp * strategy.cp
    shard = strategy.shard_group
    if shard is None:
        shard = data
        if strategy.fsdp == "hybrid_shard":
            group = mesh.group("dp_cp", devices[0])
            shard = sum(1 for d in group if mesh.nodes[mesh.rank(d)] == nodes[0])
    if data % shard:
        raise PlanError(f"shard_group ({shard}) must divide the data-parallel ranks dp x cp ({data})")
    return Mesh(devices=devices, sizes={**sizes, "dp_shard": shard}, digits=tuple(digits), nodes=nodes)


def microbatches_per_pipeline(strategy: ShardedStrategy, global_batch: int, dp: int) -> int:
    """``global_batch / (dp x microbatch_size)``, or a :class:`PlanError` when it does not divide
    (or an interleaved schedule's micro-batches are not a multiple of pp, as Megatron requires)."""
    per_step = dp * strategy.microbatch_size
    if global_batch % per_step:
        raise PlanError(
            f"global batch {global_batch} is not a multiple of dp x microbatch_size = {dp} x "
            f"{strategy.microbatch_size} = {per_step}"
        )
    m = global_batch // per_step
    if strategy.virtual_stages > 1 and m % strategy.pp:
        raise PlanError(
            f"the interleaved schedule needs micro-batches per pipeline ({m}) to be a multiple of "
            f"pp ({strategy.pp})"
        )
    return m


def check_shape(strategy: ShardedStrategy, shape: TransformerShape, mesh: Mesh) -> None:
    """The checks that need the architecture: heads, KV heads and FFN width over TP, layers over
    pp x virtual stages, sequence over CP (and TP with sequence parallelism), experts over EP."""
    tp, cp, pp, v = strategy.tp, strategy.cp, strategy.pp, strategy.virtual_stages
    if shape.heads % tp:
        raise PlanError(f"heads ({shape.heads}) must be a multiple of tp ({tp})")
    if shape.kv_heads % tp:
        raise PlanError(
            f"kv_heads ({shape.kv_heads}) must be a multiple of tp ({tp}): Megatron splits the "
            "query groups over TP ranks"
        )
    if shape.ffn_hidden % tp:
        raise PlanError(f"ffn_hidden ({shape.ffn_hidden}) must be a multiple of tp ({tp})")
    if shape.layers < pp * v:
        raise PlanError(
            f"{shape.layers} layers cannot fill pp x virtual_stages = {pp} x {v} = {pp * v} model chunks"
        )
    if shape.sequence_length % cp:
        raise PlanError(f"sequence length ({shape.sequence_length}) must be a multiple of cp ({cp})")
    if strategy.sequence_parallel and (shape.sequence_length // cp) % tp:
        raise PlanError(
            f"sequence parallelism shards each CP rank's {shape.sequence_length // cp} tokens over "
            f"tp ({tp}); they must divide"
        )
    moe = shape.experts > 1
    if mesh.ep > 1 and not moe:
        raise PlanError(f"ep ({mesh.ep}) needs a mixture-of-experts model; this one is dense")
    if moe and shape.experts % mesh.ep:
        raise PlanError(f"experts ({shape.experts}) must be a multiple of ep ({mesh.ep})")
    if moe and strategy.tp > 1 and not strategy.sequence_parallel:
        raise PlanError(
            "a mixture-of-experts model with tp > 1 needs sequence_parallel (Megatron-Core requires it)"
        )
