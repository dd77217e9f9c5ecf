"""NVLS across nodes, shared by ``nvls`` (with CollNet/SHARP across) and ``nvls_tree`` (a tree).

Per slice ``k``: every rank sends the slice to its node's NVSwitch, which adds it (a switch rank
per node, capability ``nvls``); the NVSwitch hands the node's sum to the slice's *head*, member
``k mod len(node)`` (so consecutive slices leave a node through different GPUs, hence NICs); the
heads combine their sums across nodes, either through an InfiniBand switch that reduces (``sharp``:
one more switch rank, each head sends its sum up and gets the total back) or up and down a binary
tree over the nodes (``tree``: slices alternate between NCCL's two complementary trees, so every
node is interior in one and a leaf in the other); each head then sends the total back to its
NVSwitch, which multicasts it to the node's other ranks (a lone head has it already).

Program order is per (phase, pair): a pair's sends of one phase go slice after slice, and a rank's
stages overlap across slices as NCCL's do on their own channels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

import numpy as np

from parplan.collectives._build import StepBuffer
from parplan.collectives.algorithm import Traffic
from parplan.collectives.double_binary_tree import double_binary_trees
from parplan.collectives.schedule import Schedule, SwitchRank, chunk_bounds

Across = Literal["sharp", "tree"]
PHASES = ("switch reduce", "to head", "reduce across", "back across", "to switch", "multicast")


def node_trees(nodes: int) -> list[list[int]]:
    """The parent arrays over nodes the slices alternate between (one lone root on one node)."""
    return [[-1]] if nodes == 1 else list(double_binary_trees(nodes))


def tree_order(parents: list[int]) -> list[int]:
    """Nodes from the root down (breadth first)."""
    order = [parents.index(-1)]
    for u in order:
        order.extend(v for v, w in enumerate(parents) if w == u)
    return order


def nodes_all_reduce(
    algorithm: str,
    num_ranks: int,
    num_elements: int,
    nodes: Sequence[Sequence[int]],
    count: int,
    across: Across,
) -> Schedule:
    """The all-reduce of the module docstring on ``nodes`` (at least two) in ``count`` slices."""
    switch = [num_ranks + g for g in range(len(nodes))]
    sharp = num_ranks + len(nodes)
    slices = chunk_bounds(num_elements, count).tolist()
    trees = node_trees(len(nodes))
    buf = StepBuffer()
    prior: dict[tuple[int, int, int], int] = {}  # (phase, src, dst) -> the step before, that pair

    def add(src: int, dst: int, k: int, reduce: bool, phase: int, deps: list[int]) -> int:
        before = prior.get((phase, src, dst))
        step = buf.add(
            src,
            dst,
            slices[k],
            slices[k + 1] - slices[k],
            reduce,
            phase,
            [*deps, *([before] if before is not None else [])],
        )
        prior[(phase, src, dst)] = step
        return step

    for k in range(count):
        heads = [node[k % len(node)] for node in nodes]
        live: list[list[int]] = []  # per node: the steps whose writes make up its head's slice
        for g, node in enumerate(nodes):
            ups = [add(r, switch[g], k, True, 0, []) for r in node]
            live.append([add(switch[g], heads[g], k, False, 1, ups)])
        if across == "sharp":
            into = [add(heads[g], sharp, k, True, 2, live[g]) for g in range(len(nodes))]
            live = [[add(sharp, heads[g], k, False, 3, into)] for g in range(len(nodes))]
        else:
            parents = trees[k % len(trees)]
            order = tree_order(parents)
            for v in reversed(order[1:]):  # deepest first, into a head holding its node's sum
                up = add(heads[v], heads[parents[v]], k, True, 2, [*live[v], live[parents[v]][0]])
                live[parents[v]].append(up)
            for v in order[1:]:
                live[v] = [add(heads[parents[v]], heads[v], k, False, 3, live[parents[v]])]
        for g, node in enumerate(nodes):
            if len(node) > 1:
                back = add(heads[g], switch[g], k, False, 4, live[g])
                for r in node:
                    if r != heads[g]:
                        add(switch[g], r, k, False, 5, [back])
    schedule = buf.build(
        algorithm=algorithm,
        collective="all_reduce",
        num_ranks=num_ranks,
        num_elements=num_elements,
        phase_names=PHASES,
        meta={"segments": count, "groups": tuple(tuple(g) for g in nodes), "across": across},
    )
    switches = tuple(SwitchRank("nvls", tuple(n)) for n in nodes)
    if across == "sharp":
        switches += (SwitchRank("sharp", tuple(range(num_ranks))),)
    return dataclasses.replace(schedule, switches=switches)


def nodes_traffic(
    num_ranks: int, num_elements: int, nodes: Sequence[Sequence[int]], count: int, across: Across
) -> Traffic:
    """Per endpoint (ranks, each node's switch, the SHARP switch if any) elements sent and received."""
    size = num_ranks + len(nodes) + (across == "sharp")
    sent = np.zeros(size, dtype=np.int64)
    received = np.zeros(size, dtype=np.int64)
    trees = node_trees(len(nodes))

    def move(src: int, dst: int, m: int) -> None:
        sent[src] += m
        received[dst] += m

    for k, m in enumerate(np.diff(chunk_bounds(num_elements, count)).tolist()):
        heads = [node[k % len(node)] for node in nodes]
        parents = trees[k % len(trees)]
        for g, node in enumerate(nodes):
            sw = num_ranks + g
            for r in node:
                move(r, sw, m)
            move(sw, heads[g], m)
            if across == "sharp":
                move(heads[g], size - 1, m)
                move(size - 1, heads[g], m)
            elif parents[g] >= 0:
                move(heads[g], heads[parents[g]], m)
                move(heads[parents[g]], heads[g], m)
            if len(node) > 1:
                move(heads[g], sw, m)
                for r in node:
                    if r != heads[g]:
                        move(sw, r, m)
    return sent, received
