"""Topology: a cluster spec as a graph of devices, switches and directed links (a
:class:`LinkGraph`: networkx's ``DiGraph`` interface without importing networkx), with routing and
placement of collective ranks onto devices."""

from parplan.topology.build import build_network
from parplan.topology.graph import LinkGraph
from parplan.topology.network import DeviceInfo, Network, Router, shortest_hop_route, spread_route
from parplan.topology.placement import (
    Placement,
    groups_by_key,
    groups_by_node,
    groups_by_stage,
    groups_of_size,
    place,
)

__all__ = [
    "DeviceInfo",
    "LinkGraph",
    "Network",
    "Placement",
    "Router",
    "build_network",
    "groups_by_key",
    "groups_by_node",
    "groups_by_stage",
    "groups_of_size",
    "place",
    "shortest_hop_route",
    "spread_route",
]
