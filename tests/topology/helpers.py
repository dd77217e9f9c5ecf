"""Small helpers shared by the topology tests: spec dictionaries for devices and links."""

from __future__ import annotations

from typing import Any

from parplan.config.cluster import ClusterSpec
from parplan.topology.build import build_network
from parplan.topology.network import Network

DEVICE: dict[str, Any] = {"peak_flops": "100 TFLOP/s", "memory": "16 GiB", "efficiency": 0.5}
LINK: dict[str, Any] = {"bandwidth": "10 GB/s", "latency": "1 us"}


def cluster(**fields: Any) -> ClusterSpec:
    """A validated cluster spec from file-style keys."""
    return ClusterSpec.model_validate(fields)


def network(**fields: Any) -> Network:
    """The network of a cluster spec given as file-style keys."""
    return build_network(cluster(**fields))
