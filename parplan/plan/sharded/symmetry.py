"""How a cluster's nodes repeat, which lets the closed-form clock (:mod:`~parplan.plan.sharded.
clock`) time a group of devices on its copy on the first nodes: whether every node is wired alike
(:func:`node_symmetry`), and whether the devices are numbered node by node alike
(:func:`regular_node_size`: then a group's copy follows from rank arithmetic alone); such copies
are tuples that hash once (:class:`HashedTuple`).
"""

from __future__ import annotations

import weakref
from typing import Any

from parplan.topology.network import Network

_SYMMETRY: weakref.WeakKeyDictionary[Network, tuple[tuple[str, ...], dict[str, tuple[int, str]]] | None] = (
    weakref.WeakKeyDictionary()
)
"""Per network: its nodes and each device's (node index, name inside the node) when every node is
wired alike (:func:`node_symmetry`), else None."""
_REGULAR: weakref.WeakKeyDictionary[Network, int | None] = weakref.WeakKeyDictionary()
"""Per network: :func:`regular_node_size`."""


class HashedTuple(tuple):  # type: ignore[type-arg]
    """A tuple whose hash is worked out once. A canonical group (hundreds of device names for a
    data-parallel group) and its ranks by node key every cache of the clock, and a plain tuple
    hashes all its items at every lookup; equal to, and hashing as, the plain tuple."""

    _hash: int

    def __new__(cls, items: Any) -> HashedTuple:
        self = super().__new__(cls, items)
        self._hash = tuple.__hash__(self)
        return self

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[HashedTuple], tuple[tuple[Any, ...]]]:
        """Pickled as its items, the hash worked out again on loading: a string's hash differs
        between processes (a Ray worker's), and a kept one would miss every lookup there."""
        return (HashedTuple, (tuple(self),))


def node_symmetry(network: Network) -> tuple[tuple[str, ...], dict[str, tuple[int, str]]] | None:
    """The nodes and each device's (node index, element name) when exchanging any two nodes maps
    the network onto itself: every element of a node is named ``NODE.NAME``, every node holds the
    same elements with the same attributes and links, and links leave a node only to elements of
    no node (NICs to the same rail or leaf switches, with the same attributes). Then a group's
    figures depend only on which of its ranks share a node and at which position: a search keys
    them on that. None when nodes differ (a fat tree's leaves, a torus, mixed nodes)."""
    if network in _SYMMETRY:
        return _SYMMETRY[network]
    graph = network.graph
    nodes = tuple(dict.fromkeys(str(graph.nodes[d].get("group") or "") for d in network.devices))
    found: tuple[tuple[str, ...], dict[str, tuple[int, str]]] | None = None
    if "" not in nodes and len(nodes) > 1:
        index = {n: k for k, n in enumerate(nodes)}
        owners: dict[Any, tuple[int, str] | None] = {}  # each element's (node index, name in node)
        elements: list[dict[str, dict[str, Any]]] = [{} for _ in nodes]  # name in node -> attributes
        for name, attrs in graph.nodes(data=True):
            head, _, tail = str(name).partition(".")
            k = index.get(head)
            where = owners[name] = None if k is None or not tail else (k, tail)
            if where is not None:  # its attributes but its node's name (None whether set or not)
                elements[where[0]][where[1]] = {**attrs, "group": None}
        links: list[dict[tuple[Any, Any], dict[str, Any]]] = [{} for _ in nodes]  # (from, to) -> attributes
        ok = True
        for u, nbrs in graph.adjacency():  # each link's tail read once per tail
            a = owners[u]
            for v, attrs in nbrs.items():
                b = owners[v]
                if a is None and b is None:
                    continue
                # its attributes but its own channel's number and name (None whether set or not)
                kept = {**attrs, "channel": None, "channel_name": None}
                if a is not None:
                    if b is not None and a[0] != b[0]:
                        ok = False  # nodes linked directly: not every permutation keeps the links
                        break
                    links[a[0]][(a[1], b[1] if b is not None else ("", str(v)))] = kept
                elif b is not None:
                    links[b[0]][(("", str(u)), b[1])] = kept
            if not ok:
                break
        # the same elements and links, with the same attributes, on every node (names are unique
        # in a node and a link's ends in the graph, so equal dicts are equal multisets)
        ok = ok and all(e == elements[0] for e in elements[1:]) and all(k == links[0] for k in links[1:])
        if ok:
            devices = {d: owners[d] for d in network.devices}
            if all(w is not None for w in devices.values()):
                found = (nodes, {d: w for d, w in devices.items() if w is not None})
    _SYMMETRY[network] = found
    return found


def regular_node_size(network: Network) -> int | None:
    """``g`` when the nodes are interchangeable (:func:`node_symmetry`) and device ``r`` (in the
    network's order) is on node ``r // g`` (in order of first appearance) at the position of node
    0's device ``r % g``, else None. Then the copy on the first nodes of the devices
    ``start, start + stride, ...`` (``count`` of them) depends only on ``(start % g, stride,
    count)``: their nodes relative to the first one's and their positions are
    ``(start % g + k stride) // g`` and ``% g``."""
    if network in _REGULAR:
        return _REGULAR[network]
    found: int | None = None
    symmetry = node_symmetry(network)
    if symmetry is not None:
        _, where = symmetry
        devices = network.devices
        size = sum(1 for d in devices if where[d][0] == 0)
        names = [where[d][1] for d in devices[:size]]
        regular = size > 0 and len(devices) % size == 0
        regular = regular and all(where[d] == (r // size, names[r % size]) for r, d in enumerate(devices))
        found = size if regular else None
    _REGULAR[network] = found
    return found
