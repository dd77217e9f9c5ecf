"""Topology: a cluster spec as a networkx graph of devices, switches and directed links, with routing
and placement of collective ranks onto devices."""
