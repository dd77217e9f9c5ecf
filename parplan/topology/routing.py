"""Deterministic routing: the widest path, then fewest hops, then lowest latency, then a stable tie-break.

The rule, for a route from ``s`` to ``t``:

1. the path is as wide as any: its narrowest link (``bandwidth_Bps``) is as fast as the narrowest
   link of the best path there is (the hardware's rule: traffic between two GPUs of one node stays
   on NVLink / NVSwitch even when a PCIe hop to a shared NIC has a smaller latency figure; a link
   without ``bandwidth_Bps`` counts as infinitely wide);
2. among the paths of that width (every link at least that wide), the fewest hops (edges);
3. among those, the lowest total latency, compared exactly at femtosecond resolution
   (``round(latency_s * 1e15)`` per edge, summed as integers, so the order of addition never
   changes a comparison);
4. among those, the path is chosen hop by hop from ``s``: each node forwards to one of its
   neighbours that still lies on such an optimal path to ``t``. With the default ``first``
   tie-break that is the neighbour added to the graph first (node insertion order), so the route is
   the lexicographically smallest optimal path by insertion index. This is destination-based
   routing, as a switch's forwarding table does it, and deliberately ECMP-free: on a fat tree every
   flow between two edge switches takes the first aggregation switch and the first core switch of
   the candidates, which concentrates traffic on them. The ``spread`` tie-break instead reads the
   destination's insertion index as mixed-radix digits: at each hop with ``c > 1`` candidates (in
   insertion order) it takes candidate ``key mod c`` and continues with ``key // c``. On a fat tree
   that is D-mod-k routing, as InfiniBand subnet managers program them: still deterministic and
   ECMP-free, but the up-paths to consecutive destinations fan out over all aggregation and core
   switches.

Lanes. A route may be asked for on a *lane* (a collective's channel: NCCL runs each channel's ring
through its own NIC). Under ``spread``, at a hop with ``c > 1`` candidates lane ``L`` takes
candidate ``(digit + L) mod c`` where lane 0 takes ``digit``, so the lanes of one (source,
destination) pair walk through the equally good next hops in turn at every hop: between GPUs with
k NICs each, lanes ``0 .. k-1`` leave through k different NICs and arrive through k different
ones. Lane 0 is the route without a lane. ``first`` ignores lanes: it has one route per pair by
design.

On a graph whose links all have one bandwidth, rule 1 changes nothing and costs nothing.

How it stays fast at thousands of devices. The graph (as undirected) is cut into its biconnected
blocks: every path between two nodes passes through the cut vertices between their blocks in order
(a host's link to its edge switch is a block of its own; so is each node of a hierarchical cluster,
joined to the others at the fabric switch), and an optimal route is the concatenation of optimal
routes inside each block, which holds for the tie-breaks as well, since every optimal route has the
same segment lengths. Inside a block, one- and two-hop routes are read off the adjacency and longer
ones walk a next-hop table for the segment's end, computed once per (block, destination) by a
breadth-first search (level-synchronous in numpy for wide blocks, plain Python for small or long
thin ones; :mod:`parplan.topology.route_tables`) and kept in a bounded cache. Routing the 4,096
ring-neighbour pairs of a k=26 fat tree (4,394 hosts) takes about 0.15 s on one core, the 25
destination tables it needs included.
Devices may be transit nodes (rings, tori, explicit graphs): the blocks and tables cover them like
any node.

Widths. A route's width is the narrowest of its legs' widths (legs between cut vertices are in
series), and a leg's width is the widest bandwidth ``w`` at which its ends are joined by links of at
least ``w``: found per block from the connected components of its links at each of its distinct
bandwidths (computed once per block), confirmed by the directed table. Every leg is then routed
(fewest hops, latency, tie-break) over the links at least as wide as the route, with tables cached
per (block, width, destination).

The graph must not change after the first route is asked for: everything is cached.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable
from typing import TYPE_CHECKING, Literal

import numpy as np

from parplan.errors import TopologyError
from parplan.topology.graph import LinkGraph, as_link_graph, biconnected_blocks
from parplan.topology.route_tables import NONE as _NONE
from parplan.topology.route_tables import Block, Edges, Table, Widths

if TYPE_CHECKING:
    import networkx as nx

TieBreak = Literal["first", "spread"]

_FS_PER_S = 1e15


def latency_fs(latency_s: float) -> int:
    """An edge latency as integer femtoseconds, the unit routes compare latencies in."""
    return round(float(latency_s) * _FS_PER_S)


class RoutingTables:
    """Lazily built, cached routing state for one graph and one tie-break rule.

    ``index`` gives every node its insertion position, the order ties are broken in. At most
    ``cache_entries`` table entries (integers) are kept; the least recently used tables go first.
    """

    def __init__(
        self,
        graph: LinkGraph | nx.DiGraph,
        tie_break: TieBreak = "first",
        name: str = "cluster",
        *,
        cache_entries: int = 8_000_000,
    ) -> None:
        if tie_break not in ("first", "spread"):
            raise TopologyError(f"unknown tie-break {tie_break!r}; valid: first, spread")
        self.tie_break: TieBreak = tie_break
        self.name = name
        graph = as_link_graph(graph)
        self.nodes: tuple[Hashable, ...] = tuple(graph.nodes)
        self.index: dict[Hashable, int] = {n: i for i, n in enumerate(self.nodes)}
        n = len(self.nodes)
        idx = self.index
        adjacency = list(graph.adjacency())
        src = [idx[u] for u, nbrs in adjacency for _ in nbrs]
        dst = [idx[v] for _, nbrs in adjacency for v in nbrs]
        data = [d for _, nbrs in adjacency for d in nbrs.values()]
        if any(a == b for a, b in zip(src, dst, strict=True)):  # a self-loop is no link to route over
            kept = [i for i, (a, b) in enumerate(zip(src, dst, strict=True)) if a != b]
            src, dst, data = [src[i] for i in kept], [dst[i] for i in kept], [data[i] for i in kept]
        latencies = [d["latency_s"] for d in data]
        fs = {x: latency_fs(x) for x in set(latencies)}  # each distinct latency converted once
        lat = [fs[x] for x in latencies]
        if fs and min(fs.values()) < 0:
            i = next(i for i, w in enumerate(lat) if w < 0)
            raise TopologyError(f"link {self.nodes[src[i]]}->{self.nodes[dst[i]]} has a negative latency")
        wide = [float(d.get("bandwidth_Bps", math.inf)) for d in data]
        edges = self._edges = Edges(src, dst, lat, wide, n)
        self._succ, self._pred, self._width = edges.succ, edges.pred, edges.width
        self._uniform = len(set(wide)) <= 1
        """One bandwidth on every link: widths never decide, and the plain tables serve."""
        self._init_blocks(edges.undirected(n), n)
        self._blocks: dict[tuple[int, int], Block] = {}
        self._widths: dict[int, Widths] = {}
        self._cache: OrderedDict[tuple[int, int, int], Table] = OrderedDict()
        self._cache_entries = 0
        self._cache_limit = cache_entries
        self.tables_built = 0
        """How many (block, destination) tables have been computed, for benchmarks and tests."""
        self._lane = 0  # the lane of the path being walked (see the module docstring)

    def _init_blocks(self, undirected: list[list[int]], n: int) -> None:
        """Biconnected blocks and the block-cut forest, rooted per component, for path queries."""
        blocks = biconnected_blocks(undirected)
        self._block_nodes = blocks
        nb = len(blocks)
        member: list[list[int]] = [[] for _ in range(n)]
        for b, nodes in enumerate(blocks):
            for v in nodes:
                member[v].append(b)
        # Forest nodes: blocks 0..nb-1, then one per cut vertex (a node in several blocks).
        self._tree_node = np.full(n, _NONE, dtype=np.int64)
        cut_vertex: list[int] = []
        adjacency: list[list[int]] = [[] for _ in range(nb)]
        for v in range(n):
            if len(member[v]) == 1:
                self._tree_node[v] = member[v][0]
            elif len(member[v]) > 1:
                tn = nb + len(cut_vertex)
                cut_vertex.append(v)
                self._tree_node[v] = tn
                adjacency.append(list(member[v]))
                for b in member[v]:
                    adjacency[b].append(tn)
        self._cut_vertex = cut_vertex
        self._num_blocks = nb
        total = len(adjacency)
        self._parent = [_NONE] * total
        self._depth = [_NONE] * total
        for root in range(total):
            if self._depth[root] != _NONE:
                continue
            self._depth[root] = 0
            stack = [root]
            while stack:
                x = stack.pop()
                for y in adjacency[x]:
                    if self._depth[y] == _NONE:
                        self._depth[y] = self._depth[x] + 1
                        self._parent[y] = x
                        stack.append(y)

    # -- public ----------------------------------------------------------------------------------
    def path(self, src: Hashable, dst: Hashable, lane: int = 0) -> list[Hashable]:
        """The node path from ``src`` to ``dst`` (both included) under this object's rule, on
        ``lane`` (see the module docstring; ``first`` ignores it)."""
        for end in (src, dst):
            if end not in self.index:
                raise TopologyError(f"unknown node {end!r} in cluster {self.name!r}")
        return [self.nodes[i] for i in self.index_path(self.index[src], self.index[dst], lane)]

    def index_path(self, s: int, t: int, lane: int = 0) -> list[int]:
        """Like :meth:`path` on insertion indices."""
        if lane < 0:
            raise TopologyError(f"a lane must be >= 0, got {lane}")
        if s == t:
            return [s]
        out = [s]
        key = [t]
        self._lane = lane
        legs = self._segments(s, t)
        floor = 0.0 if self._uniform else min(self._leg_width(x, y, block) for x, y, block in legs)
        for x, y, block in legs:
            leg = self._segment(x, y, block, key, floor)
            if leg is None:
                raise self._no_route(s, t)
            out.extend(leg[1:])
        return out

    # -- internals -------------------------------------------------------------------------------
    def _no_route(self, s: int, t: int) -> TopologyError:
        return TopologyError(f"no route from {self.nodes[s]!r} to {self.nodes[t]!r} in cluster {self.name!r}")

    def _segments(self, s: int, t: int) -> list[tuple[int, int, int]]:
        """``(from, to, block)`` legs between the cut vertices on the way from ``s`` to ``t``."""
        a, b = int(self._tree_node[s]), int(self._tree_node[t])
        if a == _NONE or b == _NONE:
            raise self._no_route(s, t)
        up: list[int] = []
        down: list[int] = []
        depth, parent = self._depth, self._parent
        while depth[a] > depth[b]:
            up.append(a)
            a = parent[a]
        while depth[b] > depth[a]:
            down.append(b)
            b = parent[b]
        while a != b:
            if a == _NONE or b == _NONE:
                raise self._no_route(s, t)
            up.append(a)
            down.append(b)
            a, b = parent[a], parent[b]
        if a == _NONE:
            raise self._no_route(s, t)
        chain = [*up, a, *reversed(down)]
        legs: list[tuple[int, int, int]] = []
        cur = s
        nb = self._num_blocks
        for i, tn in enumerate(chain):
            if tn >= nb:  # a cut vertex: where the previous leg ended (or s itself)
                cur = self._cut_vertex[tn - nb]
                continue
            nxt = self._cut_vertex[chain[i + 1] - nb] if i + 1 < len(chain) else t
            legs.append((cur, nxt, tn))
            cur = nxt
        return legs

    def _pick(self, candidates: list[int], key: list[int]) -> int:
        """Choose among optimal next hops (sorted by insertion index); ``key[0]`` holds the digits
        of the destination not yet used by the ``spread`` rule."""
        c = len(candidates)
        if self.tie_break == "first" or c == 1:
            return candidates[0]
        digit = key[0] % c
        key[0] //= c
        return candidates[(digit + self._lane) % c]

    def _leg_width(self, s: int, t: int, block_id: int) -> float:
        """The widest bandwidth at which a directed path joins ``s`` to ``t`` inside the block
        (0 when none does: the route then fails as it would without widths)."""
        if t in self._width[s] and self._width[s][t] >= max(self._width[s].values()):
            return self._width[s][t]
        widths = self._block_widths(block_id)
        for k in range(widths.first_level(s, t), len(widths.levels)):
            block = self._block(block_id, k)
            ptr, _ = self._table(block_id, k, block, block.local[t])
            u = block.local[s]
            if ptr[u] != ptr[u + 1]:
                return widths.levels[k]
        return 0.0

    def _segment(self, s: int, t: int, block_id: int, key: list[int], floor: float = 0.0) -> list[int] | None:
        """The optimal path from ``s`` to ``t`` inside one block over links at least ``floor``
        wide, or None if there is none."""
        succ = self._succ[s]
        width = self._width
        if t in succ and width[s][t] >= floor:
            return [s, t]
        pred_t = self._pred[t]
        best: int | None = None
        mids: list[int] = []
        for m, w in succ.items():
            w2 = pred_t.get(m)
            if w2 is None or width[s][m] < floor or width[m][t] < floor:
                continue
            total = w + w2
            if best is None or total < best:
                best, mids = total, [m]
            elif total == best:
                mids.append(m)
        if mids:
            return [s, self._pick(sorted(mids), key), t]
        level = 0 if self._uniform else self._block_widths(block_id).level_of(floor)
        block = self._block(block_id, level)
        lt = block.local[t]
        ptr, cand = self._table(block_id, level, block, lt)
        u = block.local[s]
        if ptr[u] == ptr[u + 1]:
            return None
        out = [s]
        nodes = block.nodes
        while u != lt:
            u = self._pick(sorted(cand[ptr[u] : ptr[u + 1]].tolist()), key)
            out.append(int(nodes[u]))
        return out

    def _block(self, block_id: int, level: int = 0) -> Block:
        """The block's links at least as wide as its ``level``-th bandwidth (every link when the
        network is uniform)."""
        block = self._blocks.get((block_id, level))
        if block is None:
            if self._uniform:
                block = Block(self._block_nodes[block_id], self._edges)
            else:
                floor = self._block_widths(block_id).levels[level]
                block = Block(self._block_nodes[block_id], self._edges, floor)
            self._blocks[(block_id, level)] = block
        return block

    def _block_widths(self, block_id: int) -> Widths:
        widths = self._widths.get(block_id)
        if widths is None:
            widths = self._widths[block_id] = Widths(self._block_nodes[block_id], self._edges)
        return widths

    def _table(self, block_id: int, level: int, block: Block, t: int) -> Table:
        key = (block_id, level, t)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        table = block.table(t)
        self.tables_built += 1
        self._cache[key] = table
        self._cache_entries += len(table[0]) + len(table[1])
        while self._cache_entries > self._cache_limit and len(self._cache) > 1:
            _, (ptr, cand) = self._cache.popitem(last=False)
            self._cache_entries -= len(ptr) + len(cand)
        return table
