"""A small directed graph of devices, switches and links, so the cluster path needs no networkx.

:class:`LinkGraph` holds what :func:`~parplan.topology.build.build_network` lays down and what
:class:`~parplan.topology.network.Network` reads: nodes and directed edges in insertion order, each
with an attribute dict, plus graph-level attributes in ``graph``. Its methods are the part of
networkx's ``DiGraph`` interface the project uses, with the same names, arguments and iteration
orders (``nodes``, ``edges``, ``successors``, ``out_edges``, ``has_edge``, ``degree`` ...), so code
and tests written against a networkx graph read a ``LinkGraph`` unchanged. Importing networkx costs
about 80 ms and 20 MB: more than the rest of a small ``parplan collective`` run.

:func:`as_link_graph` turns a networkx ``DiGraph`` (anything with ``nodes(data=True)``,
``edges(data=True)`` and ``graph``) into a ``LinkGraph`` without importing networkx, sharing its
attribute dicts; :meth:`LinkGraph.to_networkx` goes the other way (importing networkx then).
:func:`biconnected_blocks` is the one graph algorithm routing needs beyond a search: the
biconnected blocks of an undirected graph (the same node sets as networkx's
``biconnected_components``).

>>> g = LinkGraph()
>>> g.add_node("h0", kind="device")
>>> g.add_edge("h0", "sw0", channel=0)
>>> list(g.nodes), g.edges["h0", "sw0"], list(g.successors("h0"))
(['h0', 'sw0'], {'channel': 0}, ['sw0'])
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import networkx as nx

Attrs = dict[str, Any]


class NodeView(Mapping[str, Attrs]):
    """``graph.nodes``: a mapping of node to attributes; called, ``(node, attrs)`` pairs."""

    def __init__(self, nodes: dict[str, Attrs]) -> None:
        self._nodes = nodes

    def __getitem__(self, node: str) -> Attrs:
        return self._nodes[node]

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, node: object) -> bool:
        return node in self._nodes

    def __call__(self, data: bool | str = False, default: Any = None) -> list[Any]:
        """Nodes; with ``data=True`` ``(node, attrs)`` pairs, with ``data="key"`` ``(node, value)``."""
        if data is True:
            return list(self._nodes.items())
        if data is False:
            return list(self._nodes)
        return [(n, d.get(data, default)) for n, d in self._nodes.items()]


class EdgeView:
    """``graph.edges``: ``edges[u, v]`` is an edge's attributes; called, the edges in order."""

    def __init__(self, succ: dict[str, dict[str, Attrs]]) -> None:
        self._succ = succ

    def __getitem__(self, edge: tuple[str, str]) -> Attrs:
        u, v = edge
        return self._succ[u][v]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return ((u, v) for u, out in self._succ.items() for v in out)

    def __len__(self) -> int:
        return sum(len(out) for out in self._succ.values())

    def __contains__(self, edge: object) -> bool:
        if not isinstance(edge, tuple) or len(edge) != 2:
            return False
        u, v = edge
        return u in self._succ and v in self._succ[u]

    def __call__(self, data: bool | str = False, default: Any = None) -> list[Any]:
        """Edges ``(u, v)``; with ``data=True`` ``(u, v, attrs)``, with ``data="key"`` ``(u, v, value)``."""
        return _edges(self._succ.items(), data, default)


def _edges(items: Any, data: bool | str, default: Any, reverse: bool = False) -> list[Any]:
    """``(u, v[, data])`` triples of ``(node, {neighbour: attrs})`` items (``reverse``: ``(v, u)``)."""
    if reverse:
        if data is True:
            return [(b, a, d) for a, nbrs in items for b, d in nbrs.items()]
        if data is False:
            return [(b, a) for a, nbrs in items for b in nbrs]
        return [(b, a, d.get(data, default)) for a, nbrs in items for b, d in nbrs.items()]
    if data is True:
        return [(a, b, d) for a, nbrs in items for b, d in nbrs.items()]
    if data is False:
        return [(a, b) for a, nbrs in items for b in nbrs]
    return [(a, b, d.get(data, default)) for a, nbrs in items for b, d in nbrs.items()]


class LinkGraph:
    """A directed graph with attribute dicts on nodes and edges (networkx ``DiGraph``'s interface,
    the part parplan uses). Adding an edge adds its missing ends, as networkx does."""

    def __init__(self) -> None:
        self.graph: Attrs = {}
        """Graph-level attributes (the cluster's ``hardware`` features)."""
        self._node: dict[str, Attrs] = {}
        self._succ: dict[str, dict[str, Attrs]] = {}
        self._pred: dict[str, dict[str, Attrs]] = {}
        self._nodes_view = NodeView(self._node)
        self._edges_view = EdgeView(self._succ)

    # -- building --------------------------------------------------------------------------------
    def add_node(self, node: str, **attrs: Any) -> None:
        """Add ``node`` (or update its attributes)."""
        if node not in self._node:
            self._node[node] = {}
            self._succ[node] = {}
            self._pred[node] = {}
        self._node[node].update(attrs)

    def add_edge(self, u: str, v: str, **attrs: Any) -> None:
        """Add the edge ``u -> v`` (or update its attributes), adding missing ends."""
        for end in (u, v):
            if end not in self._node:
                self.add_node(end)
        d = self._succ[u].get(v)
        if d is None:
            d = self._succ[u][v] = self._pred[v][u] = {}
        d.update(attrs)

    # -- reading ---------------------------------------------------------------------------------
    @property
    def nodes(self) -> NodeView:
        """The nodes in insertion order (a mapping to their attributes)."""
        return self._nodes_view

    @property
    def edges(self) -> EdgeView:
        """The edges, by tail in node order, then by head in the order they were added."""
        return self._edges_view

    def __contains__(self, node: object) -> bool:
        return node in self._node

    def __iter__(self) -> Iterator[str]:
        return iter(self._node)

    def __len__(self) -> int:
        return len(self._node)

    def has_node(self, node: object) -> bool:
        """Whether ``node`` is in the graph."""
        return node in self._node

    def has_edge(self, u: str, v: str) -> bool:
        """Whether the edge ``u -> v`` is in the graph."""
        return u in self._succ and v in self._succ[u]

    def successors(self, node: str) -> Iterator[str]:
        """Heads of the edges out of ``node``."""
        return iter(self._succ[node])

    neighbors = successors

    def predecessors(self, node: str) -> Iterator[str]:
        """Tails of the edges into ``node``."""
        return iter(self._pred[node])

    def adjacency(self) -> Iterator[tuple[str, dict[str, Attrs]]]:
        """``(node, {head: edge attributes})`` per node in insertion order (networkx's
        ``adjacency``): every edge without building a tuple per edge."""
        return iter(self._succ.items())

    def out_edges(self, node: str | None = None, data: bool | str = False, default: Any = None) -> list[Any]:
        """Edges out of ``node`` (every edge when None), shaped as :meth:`EdgeView.__call__`'s."""
        items = self._succ.items() if node is None else [(node, self._succ[node])]
        return _edges(items, data, default)

    def in_edges(self, node: str, data: bool | str = False, default: Any = None) -> list[Any]:
        """Edges into ``node`` as ``(u, node[, data])``."""
        return _edges([(node, self._pred[node])], data, default, reverse=True)

    def out_degree(self, node: str) -> int:
        """Number of edges out of ``node``."""
        return len(self._succ[node])

    def in_degree(self, node: str) -> int:
        """Number of edges into ``node``."""
        return len(self._pred[node])

    def degree(self, node: str) -> int:
        """Edges into and out of ``node`` (networkx's ``DiGraph.degree``)."""
        return len(self._succ[node]) + len(self._pred[node])

    def number_of_nodes(self) -> int:
        """How many nodes."""
        return len(self._node)

    def number_of_edges(self) -> int:
        """How many directed edges."""
        return sum(len(out) for out in self._succ.values())

    # -- reachability ----------------------------------------------------------------------------
    def descendants(self, node: str) -> set[str]:
        """Nodes reachable from ``node`` (``node`` itself left out, as networkx does)."""
        return _reach(node, self._succ)

    def ancestors(self, node: str) -> set[str]:
        """Nodes that reach ``node`` (``node`` itself left out)."""
        return _reach(node, self._pred)

    def weakly_connected_components(self) -> list[set[str]]:
        """Node sets joined by edges in either direction, ordered by their first node."""
        seen: set[str] = set()
        out: list[set[str]] = []
        for start in self._node:
            if start in seen:
                continue
            part = {start}
            stack = [start]
            while stack:
                x = stack.pop()
                for y in (*self._succ[x], *self._pred[x]):
                    if y not in part:
                        part.add(y)
                        stack.append(y)
            seen |= part
            out.append(part)
        return out

    # -- networkx --------------------------------------------------------------------------------
    def to_networkx(self) -> nx.DiGraph:
        """The same graph as a networkx ``DiGraph`` (same orders; attribute dicts copied)."""
        import networkx as nx

        g = nx.DiGraph()
        g.graph.update(self.graph)
        g.add_nodes_from((n, dict(d)) for n, d in self._node.items())
        g.add_edges_from((u, v, dict(d)) for u, out in self._succ.items() for v, d in out.items())
        return g


def as_link_graph(graph: LinkGraph | nx.DiGraph) -> LinkGraph:
    """``graph`` as a :class:`LinkGraph`: itself, or a networkx ``DiGraph`` read into one (its
    node, edge and graph attribute dicts shared, not copied; networkx is not imported)."""
    if isinstance(graph, LinkGraph):
        return graph
    out = LinkGraph()
    graph_attrs = getattr(graph, "graph", None)
    if isinstance(graph_attrs, dict):
        out.graph = graph_attrs
    for node, attrs in graph.nodes(data=True):
        out._node[node] = attrs
        out._succ[node] = {}
        out._pred[node] = {}
    for u, v, attrs in graph.edges(data=True):
        out._succ[u][v] = out._pred[v][u] = attrs
    return out


def _reach(start: str, adjacency: dict[str, dict[str, Attrs]]) -> set[str]:
    seen: set[str] = set()
    stack = [start]
    while stack:
        for y in adjacency[stack.pop()]:
            if y not in seen:
                seen.add(y)
                stack.append(y)
    seen.discard(start)
    return seen


def biconnected_blocks(adjacency: list[list[int]]) -> list[list[int]]:
    """The biconnected blocks of an undirected simple graph on nodes ``0..n-1`` (``adjacency[v]``:
    the neighbours of ``v``, each once, no self-loops), each as a sorted node list; the blocks
    sorted. Isolated nodes belong to no block. Hopcroft and Tarjan's depth-first search with an
    edge stack, iterative so deep graphs (long rings) do not hit Python's recursion limit.

    >>> biconnected_blocks([[1, 2], [0, 2], [0, 1, 3], [2]])  # a triangle with a tail
    [[0, 1, 2], [2, 3]]
    """
    n = len(adjacency)
    disc = [-1] * n
    low = [0] * n
    clock = 0
    blocks: list[list[int]] = []
    for root in range(n):
        if disc[root] != -1 or not adjacency[root]:
            continue
        disc[root] = low[root] = clock
        clock += 1
        stack: list[tuple[int, int, Iterator[int]]] = [(root, -1, iter(adjacency[root]))]
        edges: list[tuple[int, int]] = []
        while stack:
            v, parent, nbrs = stack[-1]
            descended = False
            for w in nbrs:
                if w == parent:
                    continue
                if disc[w] == -1:
                    disc[w] = low[w] = clock
                    clock += 1
                    edges.append((v, w))
                    stack.append((w, v, iter(adjacency[w])))
                    descended = True
                    break
                if disc[w] < disc[v]:  # a back edge to an ancestor
                    low[v] = min(low[v], disc[w])
                    edges.append((v, w))
            if descended:
                continue
            stack.pop()
            if not stack:
                continue
            u = stack[-1][0]
            low[u] = min(low[u], low[v])
            if low[v] >= disc[u]:  # u separates v's subtree: the edges since (u, v) are a block
                block: set[int] = set()
                while True:
                    edge = edges.pop()
                    block.update(edge)
                    if edge == (u, v):
                        break
                blocks.append(sorted(block))
    blocks.sort()
    return blocks
