"""The next-hop tables that :mod:`parplan.topology.routing` walks inside one biconnected block.

:class:`Block` holds one block's nodes and its directed edges at least a given width wide, and
computes, per destination, the table of next hops on the fewest-hop paths (breadth-first, level-
synchronous in numpy for wide blocks, plain Python for small or long thin ones); :class:`Widths`
finds a leg's width from the connected components of the block's links at each of its distinct
bandwidths. The rules these tables serve (widest, fewest hops, lowest latency, tie-break) are
documented in :mod:`parplan.topology.routing`.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
Table = tuple[IntArray, IntArray]
"""Next-hop candidates towards one destination, block-local: ``cand[ptr[u]:ptr[u + 1]]``."""

NONE = -1
"""No node, no hop count yet."""
_NUMPY_MIN_EDGES = 256  # smaller blocks search faster in plain Python
_NUMPY_MIN_EDGES_PER_LEVEL = 48  # long thin blocks (rings) too


V = TypeVar("V", int, float)


def row_entries(ptr: IntArray, rows: IntArray) -> tuple[IntArray, IntArray]:
    """Where the entries of ``rows`` lie in a CSR list's flat array (``ptr[r]:ptr[r + 1]`` are
    row ``r``'s), row after row, and each row's count: gathered without a Python loop."""
    starts = ptr[rows]
    counts = ptr[rows + 1] - starts
    offsets = np.cumsum(counts) - counts
    positions: IntArray = np.repeat(starts - offsets, counts) + np.arange(int(counts.sum()), dtype=np.int64)
    return positions, counts


class PerNode(Generic[V]):
    """Each node's ``{neighbour: value}`` over its links in their order (``keys[ptr[u]:ptr[u + 1]]``
    and the values beside them), built when first read: routing reads a few nodes' links of
    thousands, which a dict per node for every link of the graph cost more than the routes."""

    def __init__(self, ptr: IntArray, keys: IntArray, values: npt.NDArray[Any]) -> None:
        self._ptr, self._keys, self._values = ptr, keys, values
        self._built: dict[int, dict[int, V]] = {}

    def __getitem__(self, node: int) -> dict[int, V]:
        found = self._built.get(node)
        if found is None:
            a, b = int(self._ptr[node]), int(self._ptr[node + 1])
            found = dict(zip(self._keys[a:b].tolist(), self._values[a:b].tolist(), strict=True))
            self._built[node] = found
        return found


class Edges:
    """A graph's directed links as flat arrays in insertion order (by tail, then the tail's
    out-links in order), what :class:`Block` and :class:`Widths` cut a block's links from without
    walking per-node dicts: tail and head insertion indices, latency (integer femtoseconds) and
    bandwidth (``inf`` when a link has none); ``out_ptr[u]:out_ptr[u + 1]`` are ``u``'s links."""

    def __init__(
        self, src: list[int], dst: list[int], lat_fs: list[int], width_Bps: list[float], n: int
    ) -> None:
        order = np.argsort(np.array(src, dtype=np.int64), kind="stable")  # by tail, order kept
        self.src = np.array(src, dtype=np.int64)[order]
        self.dst = np.array(dst, dtype=np.int64)[order]
        self.lat_fs = np.array(lat_fs, dtype=np.int64)[order]
        self.width_Bps = np.array(width_Bps, dtype=np.float64)[order]
        self.out_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.src, minlength=n), out=self.out_ptr[1:])
        into = np.argsort(self.dst, kind="stable")  # by head, each head's tails in the links' order
        in_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.dst, minlength=n), out=in_ptr[1:])
        self.succ: PerNode[int] = PerNode(self.out_ptr, self.dst, self.lat_fs)
        """Each node's ``{head: latency fs}``."""
        self.pred: PerNode[int] = PerNode(in_ptr, self.src[into], self.lat_fs[into])
        """Each node's ``{tail: latency fs}``."""
        self.width: PerNode[float] = PerNode(self.out_ptr, self.dst, self.width_Bps)
        """Each node's ``{head: bandwidth}``."""

    def undirected(self, n: int) -> list[list[int]]:
        """Each node's neighbours over the links taken both ways, each once (ascending)."""
        if not len(self.src):
            return [[] for _ in range(n)]
        pairs = np.unique(np.concatenate([self.src, self.dst]) * n + np.concatenate([self.dst, self.src]))
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(pairs // n, minlength=n), out=ptr[1:])
        heads, at = (pairs % n).tolist(), ptr.tolist()
        return [heads[at[i] : at[i + 1]] for i in range(n)]

    def inside(self, nodes: IntArray) -> tuple[IntArray, IntArray, IntArray]:
        """The links between ``nodes`` (sorted insertion indices): their ids, and their tails and
        heads as positions in ``nodes``, in the links' order."""
        ids, counts = row_entries(self.out_ptr, nodes)
        tails = np.repeat(np.arange(len(nodes), dtype=np.int64), counts)
        heads = self.dst[ids]
        at = np.minimum(np.searchsorted(nodes, heads), max(len(nodes) - 1, 0))
        keep = nodes[at] == heads if len(nodes) else np.zeros(0, dtype=bool)
        return ids[keep], tails[keep], at[keep]


class Block:
    """One biconnected block: its nodes in insertion order and its directed edges at least
    ``min_bandwidth_Bps`` wide, block-local."""

    def __init__(self, nodes: list[int], edges: Edges, min_bandwidth_Bps: float | None = None) -> None:
        self.nodes = np.array(sorted(nodes), dtype=np.int64)
        self.local = {g: i for i, g in enumerate(self.nodes.tolist())}
        ids, src, dst = edges.inside(self.nodes)
        if min_bandwidth_Bps is not None:
            wide = edges.width_Bps[ids] >= min_bandwidth_Bps
            ids, src, dst = ids[wide], src[wide], dst[wide]
        lat = edges.lat_fs[ids]
        n = len(self.nodes)
        self.num_edges = len(src)
        # In-edges grouped by head, for the backward search from a destination.
        order = np.argsort(dst, kind="stable")
        self.in_src = src[order]
        self.in_dst = dst[order]
        self.in_lat = lat[order]
        self.in_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.in_dst, minlength=n), out=self.in_ptr[1:])
        self._in_lists: list[list[tuple[int, int]]] | None = None
        self.use_numpy = self.num_edges >= _NUMPY_MIN_EDGES

    @property
    def in_lists(self) -> list[list[tuple[int, int]]]:
        """Each node's in-edges ``(tail, latency)`` in the links' order, for the plain-Python
        search (built on first use: a wide block searched in numpy never reads them)."""
        if self._in_lists is None:
            lists: list[list[tuple[int, int]]] = [[] for _ in range(len(self.nodes))]
            for a, b, w in zip(self.in_src.tolist(), self.in_dst.tolist(), self.in_lat.tolist(), strict=True):
                lists[b].append((a, w))
            self._in_lists = lists
        return self._in_lists

    def table(self, t: int) -> Table:
        """Optimal next hops towards block-local node ``t`` from every node of the block."""
        if self.use_numpy:
            table, levels = self._table_numpy(t)
            if levels and self.num_edges / levels < _NUMPY_MIN_EDGES_PER_LEVEL:
                self.use_numpy = False  # a long thin block: one level per numpy round trip is slow
            return table
        return self._table_python(t)

    def _table_python(self, t: int) -> Table:
        n = len(self.nodes)
        hops = [NONE] * n
        lat = [0] * n
        hops[t] = 0
        frontier = [t]
        level = 0
        cu: list[int] = []
        cv: list[int] = []
        while frontier:
            level += 1
            best: dict[int, int] = {}
            edges: list[tuple[int, int, int]] = []
            for v in frontier:
                lv = lat[v]
                for u, w in self.in_lists[v]:
                    if hops[u] == NONE:
                        via = w + lv
                        edges.append((u, v, via))
                        old = best.get(u)
                        if old is None or via < old:
                            best[u] = via
            for u, via in best.items():
                hops[u] = level
                lat[u] = via
            for u, v, via in edges:
                if via == best[u]:
                    cu.append(u)
                    cv.append(v)
            frontier = list(best)
        return csr(np.array(cu, dtype=np.int64), np.array(cv, dtype=np.int64), n)

    def _table_numpy(self, t: int) -> tuple[Table, int]:
        n = len(self.nodes)
        hops = np.full(n, NONE, dtype=np.int64)
        lat = np.zeros(n, dtype=np.int64)
        best = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        stamp = np.full(n, NONE, dtype=np.int64)
        hops[t] = 0
        frontier = np.array([t], dtype=np.int64)
        level = 0
        cu: list[IntArray] = []
        cv: list[IntArray] = []
        in_ptr, in_src, in_lat = self.in_ptr, self.in_src, self.in_lat
        while frontier.size:
            edge, counts = row_entries(in_ptr, frontier)  # every edge into the frontier
            if not len(edge):
                break
            heads = np.repeat(frontier, counts)
            u = in_src[edge]
            fresh = hops[u] == NONE
            if not fresh.any():
                break
            u, heads = u[fresh], heads[fresh]
            via = in_lat[edge[fresh]] + lat[heads]
            np.minimum.at(best, u, via)
            keep = via == best[u]
            cu.append(u[keep])
            cv.append(heads[keep])
            # The distinct new nodes, without sorting: the last writer of each slot wins.
            ids = np.arange(len(u), dtype=np.int64)
            stamp[u] = ids
            frontier = u[stamp[u] == ids]
            level += 1
            hops[frontier] = level
            lat[frontier] = best[frontier]
        if not cu:
            return csr(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), n), level
        return csr(np.concatenate(cu), np.concatenate(cv), n), level


class Widths:
    """A block's distinct link bandwidths (widest first) and, for each, which component of the
    block's links at least that wide every node lies in (links taken both ways: a cheap first
    guess at a leg's width, which the directed tables confirm). A component is named by its
    smallest block-local position; only whether two nodes share one is read."""

    def __init__(self, nodes: list[int], edges: Edges) -> None:
        order = np.array(sorted(nodes), dtype=np.int64)
        self.local = {g: i for i, g in enumerate(order.tolist())}
        ids, tails, heads = edges.inside(order)
        widths = edges.width_Bps[ids]
        self.levels: list[float] = sorted(set(widths.tolist()), reverse=True)
        self.component: list[IntArray] = []
        labels = np.arange(len(order), dtype=np.int64)
        for level in self.levels:  # the links of each level added, widest first
            wide = widths >= level
            labels = _components(labels, tails[wide], heads[wide])
            self.component.append(labels)

    def first_level(self, s: int, t: int) -> int:
        """The index of the widest level at which ``s`` and ``t`` are joined (undirected)."""
        ls, lt = self.local[s], self.local[t]
        for k, comp in enumerate(self.component):
            if comp[ls] == comp[lt]:
                return k
        return len(self.levels)

    def level_of(self, bandwidth_Bps: float) -> int:
        """The index of the narrowest level still at least ``bandwidth_Bps`` wide."""
        k = 0
        while k + 1 < len(self.levels) and self.levels[k + 1] >= bandwidth_Bps:
            k += 1
        return k


def _components(labels: IntArray, a: IntArray, b: IntArray) -> IntArray:
    """``labels`` (each node's component, named by its smallest member) joined further by the
    links ``a[i] -- b[i]``: each round hooks the larger name of every link whose ends differ onto
    the smaller (names are roots: pointing at themselves), then points every node at its root."""
    labels = labels.copy()
    while True:
        la, lb = labels[a], labels[b]
        differ = la != lb
        if not differ.any():
            return labels
        la, lb = la[differ], lb[differ]
        np.minimum.at(labels, np.maximum(la, lb), np.minimum(la, lb))
        while True:
            jumped = labels[labels]
            if np.array_equal(jumped, labels):
                break
            labels = jumped


def csr(cu: IntArray, cv: IntArray, n: int) -> Table:
    order = np.argsort(cu, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(cu, minlength=n), out=ptr[1:])
    return ptr, cv[order]
