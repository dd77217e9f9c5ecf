"""The hierarchical all-to-all (what DeepEP and Tutel do across nodes): gather inside the node,
exchange between nodes, scatter inside the node.

Each group (node) has a leader, its first rank. A block for a rank of the same group goes there
directly (phase ``gather``, like ``pairwise`` inside the node). A block for another group travels
at most three hops: its sender to its leader (``gather``, into the leader's gather region, laid
out by destination group, destination, source), leader to leader (``exchange``: one message per
pair of groups, cut into runs where buffers are not contiguous), and the destination's leader to
the destination (``scatter``). A phase starts on a leader once its longest transfers of the phase
before are done (the last to finish: the rest share the ports with them), so on a uniform switch
with ``m`` groups of ``g`` ranks and ``K = n/p`` bytes per block the phases take

    gather   a + (g-1)(p-g+1) K b    (the leader's port takes its group's blocks)
    exchange a + (m-1) g^2 K b       (one message of g^2 blocks to every other leader)
    scatter  a + (g-1)(p-g) K b      (each rank's blocks from other groups)

(a phase that moves nothing takes nothing). Few messages cross nodes, each large, at the cost of
the leader's port: the trade the node-aware all-to-alls make.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from parplan.collectives._build import check_sizes
from parplan.collectives.algorithm import Algorithm, AlgorithmSpecBase, Groups, Traffic, UniformCost
from parplan.collectives.all_to_all import all_to_all_schedule
from parplan.collectives.groups import resolve_groups
from parplan.collectives.schedule import Schedule, all_to_all_block

Hop = tuple[int, int, int, int, int, tuple[int, int]]
"""(phase, src, dst, source address, destination address, block (sender, receiver))."""


def block_hops(num_ranks: int, num_elements: int, groups: Sequence[Sequence[int]]) -> list[Hop]:
    """Every hop of every block, in phase order (see the module docstring)."""
    p, n = num_ranks, num_elements
    k = all_to_all_block(n, p)
    group_of = {r: i for i, g in enumerate(groups) for r in g}
    biggest = max(len(g) for g in groups)
    gather_base, receive_base = 2 * n, (2 + biggest) * n
    gather_at: dict[tuple[int, int], int] = {}  # (source, destination) -> slot at the source's leader
    receive_at: dict[tuple[int, int], int] = {}  # ... at the destination's leader
    for a, group in enumerate(groups):
        others = [g for b, g in enumerate(groups) if b != a]
        gather_at.update(
            ((s, d), gather_base + i * k)
            for i, (d, s) in enumerate((d, s) for g in others for d in g for s in group[1:])
        )
        receive_at.update(
            ((s, d), receive_base + i * k)
            for i, (d, s) in enumerate((d, s) for g in others for d in group[1:] for s in g)
        )
    hops: list[Hop] = []
    for s in range(p):
        for d in range(p):
            if s == d:
                continue
            ls, ld = groups[group_of[s]][0], groups[group_of[d]][0]
            if group_of[s] == group_of[d]:
                hops.append((0, s, d, d * k, n + s * k, (s, d)))
                continue
            at = d * k
            if s != ls:
                hops.append((0, s, ls, at, gather_at[(s, d)], (s, d)))
                at = gather_at[(s, d)]
            if d == ld:
                hops.append((1, ls, ld, at, n + s * k, (s, d)))
            else:
                hops.append((1, ls, ld, at, receive_at[(s, d)], (s, d)))
                hops.append((2, ld, d, receive_at[(s, d)], n + s * k, (s, d)))
    hops.sort(key=lambda h: (h[0], h[1], h[2], h[3]))
    return hops


def _merge(hops: list[Hop], k: int) -> list[tuple[int, int, int, int, int, list[tuple[int, int]]]]:
    """Contiguous hops of one phase between one pair as runs: (phase, src, dst, a, b, blocks)."""
    runs: list[tuple[int, int, int, int, int, list[tuple[int, int]]]] = []
    for phase, src, dst, a, b, block in hops:
        if runs:
            q, s0, d0, a0, b0, blocks = runs[-1]
            length = len(blocks) * k
            if (q, s0, d0) == (phase, src, dst) and a0 + length == a and b0 + length == b:
                blocks.append(block)
                continue
        runs.append((phase, src, dst, a, b, [block]))
    return runs


def hierarchical_all_to_all(num_ranks: int, num_elements: int, groups: Sequence[Sequence[int]]) -> Schedule:
    """The schedule (see the module docstring) on ``groups`` (leaders first in each)."""
    p, n = num_ranks, num_elements
    k = all_to_all_block(n, p)
    runs = _merge(block_hops(p, n, groups), k) if k else []
    holder: dict[tuple[int, tuple[int, int]], int] = {}  # (rank, block) -> step that brought it
    longest: dict[tuple[int, int, str], int] = {}  # (phase, rank, "out"/"in") -> longest step
    deps: list[list[int]] = []
    columns: dict[str, list[int]] = {c: [] for c in ("src", "dst", "offset", "dst_offset", "length")}
    for step, (phase, src, dst, a, b, blocks) in enumerate(runs):
        need = {holder[(src, x)] for x in blocks if (src, x) in holder}
        if phase:
            need |= {
                longest[key] for key in ((phase - 1, src, "out"), (phase - 1, src, "in")) if key in longest
            }
        deps.append(sorted(need))
        for column, value in zip(columns, (src, dst, a, b, len(blocks) * k), strict=True):
            columns[column].append(value)
        holder.update(((dst, x), step) for x in blocks)
        for key in ((phase, src, "out"), (phase, dst, "in")):
            if key not in longest or columns["length"][longest[key]] <= len(blocks) * k:
                longest[key] = step
    arrays = {c: np.asarray(v, dtype=np.int64) for c, v in columns.items()}
    counts = np.asarray([len(d) for d in deps], dtype=np.int64)
    flat = np.asarray([x for d in deps for x in d], dtype=np.int64)
    regions = 2 + 2 * max(len(g) for g in groups)
    return all_to_all_schedule("hierarchical", p, n, arrays, counts, flat, regions=regions)


class HierarchicalSpec(AlgorithmSpecBase):
    """Gather, exchange between groups, scatter; groups of ``group_size`` consecutive ranks, else
    the cluster's nodes. Short form ``"hierarchical:8"``."""

    name: Literal["hierarchical"]
    group_size: int | None = Field(default=None, ge=1)


class HierarchicalAllToAll(Algorithm[HierarchicalSpec]):
    """``hierarchical``: the three phases of the module docstring."""

    name = "hierarchical"
    collective = "all_to_all"
    spec_type = HierarchicalSpec
    short_parameter = "group_size"
    abbreviation = "hier"

    def variants(self, num_ranks: int) -> tuple[HierarchicalSpec, ...]:
        size = max(1, num_ranks // 2)
        return (self.default_spec(), HierarchicalSpec(name="hierarchical", group_size=size))

    def uses_groups(self, spec: HierarchicalSpec) -> bool:
        return spec.group_size is None

    def build(
        self, spec: HierarchicalSpec, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        check_sizes(num_ranks, num_elements)
        return hierarchical_all_to_all(
            num_ranks, num_elements, resolve_groups(num_ranks, groups, spec.group_size)
        )

    def closed_form_s(
        self,
        spec: HierarchicalSpec,
        num_ranks: int,
        size_bytes: float,
        cost: UniformCost,
        groups: Groups | None,
    ) -> float:
        p = num_ranks
        g = max(len(x) for x in resolve_groups(p, groups, spec.group_size))
        m = -(-p // g)
        block_s = size_bytes / p * cost.beta_s_per_byte
        phases = [
            (g > 1, (g - 1) * (p - g + 1)),  # gather: into the leader
            (m > 1, (m - 1) * g * g),  # exchange between leaders
            (g > 1 and m > 1, (g - 1) * (p - g)),  # scatter: out of the leader
        ]
        return sum(cost.alpha_s + blocks * block_s for moves, blocks in phases if moves)

    def closed_form_estimate(
        self, spec: HierarchicalSpec, num_ranks: int, groups: Groups | None = None
    ) -> str:
        sizes = {len(x) for x in resolve_groups(num_ranks, groups, spec.group_size)}
        return "" if len(sizes) == 1 else "groups of unequal size: the closed form takes the largest"

    def traffic(
        self, spec: HierarchicalSpec, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        k = all_to_all_block(num_elements, num_ranks)
        sent = np.zeros(num_ranks, dtype=np.int64)
        received = np.zeros(num_ranks, dtype=np.int64)
        resolved = resolve_groups(num_ranks, groups, spec.group_size)
        for _, src, dst, _, _, _ in block_hops(num_ranks, num_elements, resolved):
            sent[src] += k
            received[dst] += k
        return sent, received


HIERARCHICAL = HierarchicalAllToAll()
