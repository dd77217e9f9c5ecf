"""The search's per-stage data-parallel figures in run-length form equal the layout path's call by
call and bit for bit: gradient buckets filled run by run (uneven buckets, the last bucket, units
without parameters), :func:`stage_sync_runs` against :func:`stage_sync` for uniform and
non-uniform blocks, and every sync key of seeded structures of each LLM sample against
``relayout_sync``; the evaluator's strategies against validated ones; and the collective clock's
shortcuts (:func:`node_symmetry`, its ranks by node) against what they replace."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

import numpy as np
import pytest

from parplan.api.search import vector
from parplan.api.search.meshes import Meshes
from parplan.api.search.space import enumerate_space
from parplan.api.search.stages import SyncBuilder, _sums
from parplan.config.loader import load_cluster
from parplan.config.strategy import ShardedStrategy
from parplan.plan.sharded.clock import GroupClock
from parplan.plan.sharded.costs import transformer_shape
from parplan.plan.sharded.symmetry import node_symmetry
from parplan.plan.sharded.sync import (
    StageSync,
    UnitParams,
    _bucket_runs,
    _dp_buckets,
    stage_sync,
    stage_sync_runs,
    unit_runs,
)
from parplan.topology.build import build_network
from parplan.topology.network import Network
from parplan.topology.placement import groups_by_node
from tests.api.search.helpers import LLM_SAMPLES, ROOT, sample, search_of, structure_of


def _one_by_one(params: Sequence[float], bucket_params: float) -> list[float]:
    """The reference: units join the open bucket one at a time (backward order given)."""
    out: list[float] = []
    current = 0.0
    for p in params:
        if p <= 0:
            continue
        current += p
        if current >= bucket_params:
            out.append(current)
            current = 0.0
    if current > 0:
        out.append(current)
    return out


def _expand(runs: Sequence[tuple[float, int]]) -> list[float]:
    return [value for value, count in runs for _ in range(count)]


@pytest.mark.parametrize(
    ("params", "bucket"),
    [
        ([3.0] * 10, 7.0),  # uneven: 3 units a bucket, a last bucket of one
        ([3.0] * 9, 9.0),  # exact fill, no last bucket
        ([5.0] * 4, 2.0),  # every unit over the bucket: one bucket each
        ([0.1] * 30, 1.0),  # float sums: 0.1 x 10 does not reach 1.0 exactly
        ([4.0, 1.0, 1.0, 1.0, 1.0, 1.0, 6.0], 5.0),  # carry into a run, then a lone big unit
        ([2.0, 0.0, 0.0, 2.0, 2.0], 5.0),  # units without parameters are skipped
        ([], 5.0),
        ([1.0] * 5, 0.0),  # no bucket size: one bucket per unit
        ([1.0] * 5, 1e12),  # one bucket for everything
    ],
)
def test_bucket_runs_equal_filling_one_by_one(params: list[float], bucket: float) -> None:
    runs = [(p, len(list(g))) for p, g in itertools.groupby(params)]
    assert _expand(_bucket_runs(runs, bucket)) == _one_by_one(params, bucket)
    units = [UnitParams("u", p, 0.0) for p in reversed(params)]
    strategy = ShardedStrategy(kind="sharded")
    aggregation = strategy.aggregation.model_copy(update={"bucket_size_bytes": bucket})
    strategy = strategy.model_copy(update={"aggregation": aggregation})
    buckets = list(_dp_buckets(strategy, [(u, 1) for u in units], 1.0, 2, 1))
    assert _expand([(n, count) for _, _, n, _, count in buckets]) == _one_by_one(params, bucket)
    assert [first for _, _, _, first, _ in buckets] == list(
        itertools.accumulate([count for *_, count in buckets[:-1]], initial=0)
    )[: len(buckets)]


def test_bucket_runs_equal_filling_one_by_one_on_random_runs() -> None:
    rng = random.Random(5)
    for _ in range(3000):
        values = [rng.choice([0.0, 0.3, 1.0, 2.5, 7.1e7, 1e8 / 3]) for _ in range(3)]
        runs = [(rng.choice(values), rng.randint(1, 40)) for _ in range(rng.randint(0, 5))]
        bucket = rng.choice([0.0, 1.0, 2.6, 2.5e7, 1e8, 7.77e7, 1e12])
        flat = [p for p, n in runs for _ in range(n)]
        assert _expand(_bucket_runs(runs, bucket)) == _one_by_one(flat, bucket)


def _calls(sync: StageSync) -> list[list[tuple[object, ...]]]:
    return [
        [(c.collective, c.size_bytes, c.axis, c.blocking) for c in part]
        for part in (sync.param_gather, sync.grad_sync, sync.param_sync)
    ]


_STRATEGIES = [
    ShardedStrategy(kind="sharded", zero=zero, framework=framework, aggregation={"bucket_size_bytes": bucket})
    for zero in (0, 1, 2, 3)
    for framework in ("megatron", "deepspeed")
    for bucket in (25 * 2**20, 200 * 2**20)
    if not (framework == "deepspeed" and zero > 1)
] + [ShardedStrategy(kind="sharded", fsdp=mode) for mode in ("full_shard", "shard_grad_op", "hybrid_shard")]

_EMBEDDING = UnitParams("embedding", 1.6e8, 0.0)
_HEAD = UnitParams("head", 1.6e8, 0.0)
_DENSE = UnitParams("block", 7.9e7, 0.0)
_MOE = UnitParams("block", 2.0e7, 1.1e8)
_UNITS = {
    "uniform": [_EMBEDDING, *[_DENSE] * 12, _HEAD],
    "uniform, small blocks": [UnitParams("block", 3.0e6, 0.0)] * 40,
    "middle stage": [_DENSE] * 7,
    "mixed blocks": [_EMBEDDING, *[_DENSE, _MOE] * 5, _HEAD],
    "equal values, other names": [UnitParams(f"layer{i}", 7.9e7, 0.0) for i in range(9)],
    "empty": [],
}


@pytest.mark.parametrize("strategy", _STRATEGIES, ids=lambda s: f"z{s.zero}-{s.fsdp}-{s.framework}")
@pytest.mark.parametrize("units", _UNITS.values(), ids=list(_UNITS))
@pytest.mark.parametrize(
    ("data", "experts", "shard"), [(16, 4, 8), (8, 8, 8), (1, 1, 1), (32, 1, 4)], ids=str
)
def test_stage_sync_runs_expand_to_stage_sync(
    strategy: ShardedStrategy, units: list[UnitParams], data: int, experts: int, shard: int
) -> None:
    kw = {"grad_bytes": 4.0, "param_bytes": 2.0, "shard_group": shard, "data_ranks": data}
    whole = stage_sync(strategy, units, expert_ranks=experts, **kw)  # type: ignore[arg-type]
    runs = stage_sync_runs(strategy, unit_runs(units), expert_ranks=experts, **kw)  # type: ignore[arg-type]
    assert _calls(runs.expanded()) == _calls(whole)
    assert all(count >= 1 and pattern for part in fields(runs) for pattern, count in getattr(runs, part.name))


def test_sums_add_in_call_order() -> None:
    """:func:`_sums` of runs equals Python's one-by-one sums of the expanded calls."""
    rng = random.Random(2)
    for _ in range(500):
        runs = [
            (
                [
                    (rng.random() * 10 ** rng.randint(-6, 1), rng.random(), rng.random() * 1e-3)
                    for _ in range(rng.randint(1, 3))
                ],
                rng.randint(1, 9),
            )
            for _ in range(rng.randint(0, 4))
        ]
        flat = [pair for pattern, n in runs for _ in range(n) for pair in pattern]
        seconds, shares, memory = [p[0] for p in flat], [p[1] for p in flat], [p[2] for p in flat]
        expected = (
            seconds[0] if flat else 0.0,
            seconds[-1] if flat else 0.0,
            sum(seconds),
            sum(shares[:1]),
            sum(shares[1:]),
            sum(shares[:-1]),
            sum(memory[:1]),
            sum(memory[1:]),
            sum(memory[:-1]),
        )
        assert _sums(runs) == expected


@pytest.mark.parametrize("name", LLM_SAMPLES)
def test_stage_figures_equal_the_layout_path_on_seeded_structures(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every candidate of seeded structures of each sample (all their sync keys: ZeRO, FSDP,
    algorithm and bucket variants) evaluated by the array path and by the layout path
    (``relayout_sync`` per sync key), bit for bit."""
    _, ctx = sample(name)
    search = search_of(name)
    table, _ = enumerate_space(ctx, search)
    inverse = structure_of(table)
    picked = np.random.default_rng(13).choice(
        inverse.max() + 1, size=min(8, inverse.max() + 1), replace=False
    )
    part = table.take(np.flatnonzero(np.isin(inverse, picked)))
    fast = vector.evaluate_candidates(ctx, search, part)
    monkeypatch.setattr(vector, "applies", lambda *args: False)
    slow = vector.evaluate_candidates(ctx, search, part)
    for f in fields(fast):
        assert np.array_equal(getattr(fast, f.name), getattr(slow, f.name)), f.name


@pytest.mark.parametrize("name", LLM_SAMPLES)
def test_a_structures_sync_table_equals_its_keys_one_at_a_time(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sync table of a structure's keys at once (each distinct ZeRO, FSDP and bucket's static
    figures and each distinct calls and algorithm's sums shared by the keys, hybrid-sharded keys
    on their own mesh, gathered per key and stage) equals each key's built alone, and the keys
    in reverse order, by fresh builders, bit for bit."""
    _, ctx = sample(name)
    search = search_of(name)
    table, _ = enumerate_space(ctx, search)
    calls: list[tuple[Any, list[ShardedStrategy]]] = []
    build = SyncBuilder.build

    def recording(self: SyncBuilder, base: Any, strategies: Sequence[ShardedStrategy]) -> Any:
        calls.append((base, list(strategies)))
        return build(self, base, strategies)

    monkeypatch.setattr(SyncBuilder, "build", recording)
    inverse = structure_of(table)
    picked = np.random.default_rng(17).choice(
        inverse.max() + 1, size=min(3, inverse.max() + 1), replace=False
    )
    vector.evaluate_candidates(ctx, search, table.take(np.flatnonzero(np.isin(inverse, picked))))
    monkeypatch.undo()
    assert len(calls) == len(picked)
    shape = transformer_shape(ctx)

    def fresh() -> SyncBuilder:
        return SyncBuilder(ctx, shape, GroupClock(ctx.network, share_congruent=True), Meshes(ctx.network))

    def flat(sync: Any) -> list[np.ndarray]:
        parts = [getattr(sync.sync, f.name) for f in fields(sync.sync)]
        return [*parts, sync.states_bytes, sync.buffers_bytes, sync.capacity_bytes]

    for base, strategies in calls:
        together = flat(fresh().build(base, strategies))
        backwards = flat(fresh().build(base, strategies[::-1]))
        one_by_one = fresh()
        alone = [flat(one_by_one.build(base, [s])) for s in strategies]
        for k, column in enumerate(together):
            expected = np.concatenate([a[k] for a in alone])
            assert column.tobytes() == expected.tobytes()
            assert backwards[k][::-1].tobytes() == expected.tobytes()


def _symmetry_one_by_one(network: Network) -> Any:
    """The reference :func:`node_symmetry`: each node's elements and links sorted by ``repr`` and
    compared as lists."""
    graph = network.graph
    nodes = tuple(dict.fromkeys(str(graph.nodes[d].get("group") or "") for d in network.devices))
    if "" in nodes or len(nodes) < 2:
        return None
    index = {n: k for k, n in enumerate(nodes)}

    def owner(name: str) -> tuple[int, str] | None:
        head, _, tail = str(name).partition(".")
        k = index.get(head)
        return None if k is None or not tail else (k, tail)

    signatures: list[list[Any]] = [[] for _ in nodes]
    for name, attrs in graph.nodes(data=True):
        where = owner(name)
        if where is not None:
            kept = sorted((k, repr(v)) for k, v in attrs.items() if k != "group")
            signatures[where[0]].append(("element", where[1], kept))
    for u, v, attrs in graph.edges(data=True):
        a, b = owner(u), owner(v)
        if a is not None and b is not None and a[0] != b[0]:
            return None
        kept = sorted((k, repr(x)) for k, x in attrs.items() if k not in ("channel", "channel_name"))
        if a is not None:
            signatures[a[0]].append(("link", a[1], b[1] if b is not None else ("", str(v)), kept))
        elif b is not None:
            signatures[b[0]].append(("link", ("", str(u)), b[1], kept))
    first = sorted(signatures[0], key=repr)
    if any(sorted(sig, key=repr) != first for sig in signatures[1:]):
        return None
    devices = {d: owner(d) for d in network.devices}
    return None if any(w is None for w in devices.values()) else (nodes, devices)


_CLUSTERS = ROOT / "sample_configs" / "clusters"
_CLUSTER_FILES = sorted(str(p.relative_to(_CLUSTERS)) for p in _CLUSTERS.rglob("*.*") if p.is_file())


@pytest.mark.parametrize("cluster", _CLUSTER_FILES)
def test_node_symmetry_equals_the_one_by_one_comparison(cluster: str) -> None:
    network = build_network(load_cluster(_CLUSTERS / cluster))
    assert node_symmetry(network) == _symmetry_one_by_one(network)


def test_node_symmetry_sees_one_node_differ() -> None:
    network = build_network(load_cluster(_CLUSTERS / "dgx-a100-128nodes.yaml"))
    assert _symmetry_one_by_one(network) is not None
    odd = build_network(load_cluster(_CLUSTERS / "dgx-a100-128nodes.yaml"))
    last = odd.devices[-1]
    odd.graph.nodes[last]["memory_bytes"] = 0.5 * float(odd.graph.nodes[last]["memory_bytes"])
    assert node_symmetry(network) is not None
    assert node_symmetry(odd) is None
    slow = build_network(load_cluster(_CLUSTERS / "dgx-a100-128nodes.yaml"))
    attrs = next(a for u, _, a in slow.graph.edges(data=True) if str(u).startswith("n7."))
    attrs["bandwidth_Bps"] = 0.5 * float(attrs["bandwidth_Bps"])  # one link of one node
    assert _symmetry_one_by_one(slow) is None
    assert node_symmetry(slow) is None


@pytest.mark.parametrize("name", LLM_SAMPLES)
def test_a_structures_rows_are_copies_of_its_first_with_their_own_fields(name: str) -> None:
    """What the evaluator builds each key's strategy from (the structure's first row, validated,
    updated with a row's varying fields) equals the row's validated strategy, for every row of
    seeded structures."""
    _, ctx = sample(name)
    search = search_of(name)
    table, _ = enumerate_space(ctx, search)
    inverse = structure_of(table)
    evaluator = vector._Evaluator(ctx, search, table)
    for structure in np.random.default_rng(17).choice(inverse.max() + 1, size=min(6, inverse.max() + 1)):
        sub = table.take(np.flatnonzero(inverse == structure))
        base = sub.strategy(0, search)
        for r in range(len(sub)):
            assert base.model_copy(update=evaluator._varying(sub, r)) == sub.strategy(r, search), sub.label(r)


@pytest.mark.parametrize("cluster", _CLUSTER_FILES)
def test_clock_groups_ranks_by_node_as_placement_does(cluster: str) -> None:
    network = build_network(load_cluster(_CLUSTERS / cluster))
    clock = GroupClock(network)
    rng = random.Random(cluster)
    devices = list(network.devices)
    for _ in range(20):
        group = tuple(rng.sample(devices, rng.randint(1, len(devices))))
        assert clock._node_groups(group) == tuple(tuple(g) for g in groups_by_node(network, group))


def test_canonical_groups_hash_once_and_are_their_own_canonical() -> None:
    """A canonical group keeps its hash (every cache of the clock is keyed on it) and is equal to,
    and hashes as, the plain tuple; canonical of a canonical group is the group itself."""
    network = build_network(load_cluster(_CLUSTERS / "dgx-a100-128nodes.yaml"))
    clock = GroupClock(network, share_congruent=True)
    devices = network.devices
    rng = random.Random(5)
    for _ in range(20):
        group = tuple(rng.sample(devices, rng.randint(1, 64)))
        canonical = clock.canonical(group)
        plain = tuple(canonical)
        assert canonical == plain and hash(canonical) == hash(plain)
        assert clock.canonical(canonical) is canonical
        assert clock.canonical(plain) == canonical
        assert {plain: 1}[canonical] == 1 and {canonical: 1}[plain] == 1
        by_node = clock._node_groups(canonical)
        assert hash(by_node) == hash(tuple(by_node))
        assert by_node == tuple(tuple(g) for g in groups_by_node(network, canonical))
