"""What :func:`~parplan.topology.nccl_system.nccl_system` refuses and declines: a name that is not a
device (the first such name, as :meth:`Network.device_index` words it), mixed architectures."""

from __future__ import annotations

from pathlib import Path

import pytest

from parplan.config.loader import load_cluster
from parplan.errors import TopologyError
from parplan.topology.build import build_network
from parplan.topology.nccl_system import nccl_system

_CLUSTER = Path(__file__).resolve().parents[2] / "sample_configs" / "clusters" / "dgx-h100-8nodes.yaml"


def test_a_name_that_is_not_a_device_is_refused_first_one_named() -> None:
    network = build_network(load_cluster(_CLUSTER))
    devices = list(network.devices)
    switch = next(n for n in network.graph.nodes if n not in set(devices))
    with pytest.raises(TopologyError, match=rf"unknown device '{switch}' .*a switch, not a device"):
        nccl_system(network, [*devices[:3], switch, "nowhere"])
    with pytest.raises(TopologyError, match=r"unknown device 'nowhere' .*not in it"):
        nccl_system(network, [*devices[:3], "nowhere", switch])
    with pytest.raises(TopologyError, match="unknown device 'nowhere'"):
        network.check_devices(["nowhere"])
    network.check_devices(devices)  # all devices: no error
    assert nccl_system(network, devices) is not None


def test_mixed_architectures_have_no_system() -> None:
    network = build_network(load_cluster(_CLUSTER))
    devices = network.devices
    network.graph.nodes[devices[-1]]["arch"] = "ampere"
    assert nccl_system(network, devices) is None
    assert nccl_system(network, devices[:-8]) is not None  # the last node left out
