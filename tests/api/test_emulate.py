"""Cluster files as emulated hosts: what maps, what is refused (naming the field), and the
``emulated_hosts`` context manager measure's launcher uses (issue 14, item 3)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from parplan.api.emulate import (
    check_emulation,
    emulated_hosts,
    emulated_hosts_of,
    host_environment,
    load_emulated_hosts,
    run_on_hosts,
)
from parplan.config.loader import spec_from_data
from parplan.errors import EmulationError
from parplan.runtime import netns
from parplan.runtime.hosts import HostSlot
from parplan.runtime.netns import EmulatedHostSpec

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "sample_configs" / "clusters"
MISSING = netns.missing_requirements()
needs_netns = pytest.mark.skipif(bool(MISSING), reason="emulated clusters need " + " and ".join(MISSING))
DEVICE = {"peak_flops": "1 TFLOP/s", "memory": "8 GiB"}


def _cluster(data: dict[str, Any]) -> Any:
    return spec_from_data("cluster", {"name": "t", **data}).spec


def _switch(hosts: int, **extra: Any) -> dict[str, Any]:
    link = extra.pop("link", {"bandwidth": "100 Mbit/s", "latency": "1 ms"})
    return {"generator": {"kind": "switch", "hosts": hosts, "device": DEVICE, "link": link, **extra}}


def test_a_switch_generator_gives_one_host_per_device_with_its_links_rate_and_latency() -> None:
    hosts = load_emulated_hosts(CLUSTERS / "edge-jetsons.yaml")
    assert [h.name for h in hosts] == [f"h{i}" for i in range(6)]
    assert hosts[0] == EmulatedHostSpec("h0", 1e9 / 8, 0.0002, 1)
    assert hosts[5] == EmulatedHostSpec("h5", 10e6 / 8, 0.06, 1)  # its host_links entry


def test_explicit_devices_grouped_per_host_become_ranks_of_one_host() -> None:
    devices = [{"name": f"g{i}", "group": f"node{i // 2}", **DEVICE} for i in range(4)]
    links = [{"a": f"g{i}", "b": "sw", "bandwidth": "100 Mbit/s", "latency": f"{i + 1} ms"} for i in range(4)]
    hosts = emulated_hosts_of(_cluster({"devices": devices, "switches": [{"name": "sw"}], "links": links}))
    assert hosts == [
        EmulatedHostSpec("node0", 2 * 100e6 / 8, 0.002, 2),
        EmulatedHostSpec("node1", 2 * 100e6 / 8, 0.004, 2),
    ]


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        (_switch(9), "generator.hosts", "9 hosts; an emulated cluster has at most 8"),
        (_switch(2, link={"bandwidth": "100 Gbit/s"}), "generator.link.bandwidth", "100 Gbit/s is above"),
        (_switch(2, link={"bandwidth": "1 Gbit/s", "full_duplex": False}), "generator.link.full_duplex", ""),
        (
            _switch(2, host_links={"h1": {"bandwidth": "1 Gbit/s", "class": "infiniband"}}),
            "generator.host_links.h1.class",
            "infiniband links cannot be emulated",
        ),
        (
            {"generator": {"kind": "ring", "hosts": 3, "device": DEVICE, "link": {"bandwidth": "1 Gbit/s"}}},
            "generator.kind",
            "'ring' cannot be emulated",
        ),
        (
            {
                "devices": [{"name": "a", **DEVICE}, {"name": "b", **DEVICE}],
                "switches": [{"name": "s"}, {"name": "t"}],
            },
            "switches",
            "2 switches",
        ),
        (
            {
                "devices": [{"name": "a", **DEVICE}, {"name": "b", **DEVICE}],
                "switches": [{"name": "s"}],
                "links": [{"a": "a", "b": "b", "bandwidth": "1 Gbit/s", "class": "nvlink"}],
            },
            "links[0]",
            "a - b does not join a device to the switch s",
        ),
        (
            {
                "devices": [{"name": "a", **DEVICE}, {"name": "b", **DEVICE}],
                "switches": [{"name": "s"}],
                "links": [{"a": "a", "b": "s", "bandwidth": "1 Gbit/s"}],
            },
            "links",
            "host b has no link to the switch s",
        ),
    ],
)
def test_what_cannot_be_emulated_is_refused_naming_the_field(
    data: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(
        EmulationError, match=f"^c.yaml {field.replace('[', '.').replace(']', '.')}: .*{message}"
    ):
        emulated_hosts_of(_cluster(data), "c.yaml")


@pytest.mark.parametrize(
    ("sample", "field"),
    [
        ("dgx-a100-2nodes.yaml", "generator.kind"),
        ("edge-federated.yaml", "devices"),
        ("torus-4x4.toml", "generator.kind"),
    ],
)
def test_sample_clusters_beyond_an_emulated_cluster_say_why(sample: str, field: str) -> None:
    with pytest.raises(EmulationError, match=f"{sample} {field}: "):
        load_emulated_hosts(CLUSTERS / sample)


def test_a_command_learns_the_cluster_from_its_environment() -> None:
    slots = [HostSlot("h0", "10.1.1.1", 2, ("x",), "pp0"), HostSlot("h1", "10.1.1.2", 1, ("y",), "pp0")]
    assert host_environment(slots, 1) == {
        "PARPLAN_HOST_INDEX": "1",
        "PARPLAN_HOST_NAME": "h1",
        "PARPLAN_HOST_ADDRESSES": "10.1.1.1,10.1.1.2",
        "PARPLAN_HOST_NPROC": "1",
        "GLOO_SOCKET_IFNAME": "pp0",
        "MASTER_ADDR": "10.1.1.1",
    }


@pytest.mark.netns
@needs_netns
def test_emulated_hosts_yields_slots_a_launcher_can_run_on_and_tears_down() -> None:
    with emulated_hosts(load_emulated_hosts(CLUSTERS / "switch-4hosts.yaml"), delay_method="off") as slots:
        assert [(s.name, s.nproc, s.ifname) for s in slots] == [(f"h{i}", 1, "pp0") for i in range(4)]
        prefix = slots[0].wrapper[-1].rsplit("h0", 1)[0]
        ran = subprocess.run(
            [*slots[3].wrapper, sys.executable, "-c", "print('hi')"], capture_output=True, text=True
        )
        assert ran.stdout == "hi\n"
        assert len(netns.our_namespaces(prefix)) == 5
    assert netns.our_namespaces(prefix) == []


@pytest.mark.netns
@needs_netns
def test_check_measures_every_pair_and_each_hosts_rate(tmp_path: Path) -> None:
    cluster = tmp_path / "c.yaml"
    cluster.write_text(
        "name: three\ngenerator: {kind: switch, hosts: 3, device: {peak_flops: 1 TFLOP/s, memory: 1 GiB},\n"
        "  link: {bandwidth: 40 Mbit/s, latency: 2 ms}, host_links: {h2: {bandwidth: 20 Mbit/s}}}\n"
    )
    check = check_emulation(cluster, size_bytes=2 * 1024 * 1024)
    assert [(r.src, r.dst) for r in check.rtts] == [("h0", "h1"), ("h0", "h2"), ("h1", "h2")]
    assert check.rtts[0].configured_s == pytest.approx(0.008)
    # delayed as configured; a loaded machine adds its scheduling latency on top
    assert 0.0075 < check.rtts[0].measured_s < 0.008 + 0.025
    assert check.rtts[1].configured_s == pytest.approx(0.004)  # h2 has no latency of its own
    assert [r.configured_Bps * 8 for r in check.rates] == pytest.approx([40e6, 20e6, 20e6])
    assert check.worst_rate_error < 0.15
    assert netns.our_namespaces(check.slots[0].wrapper[-1].rsplit("h0", 1)[0]) == []


@pytest.mark.netns
@needs_netns
def test_run_on_hosts_reports_each_hosts_exit_code() -> None:
    run = run_on_hosts(
        CLUSTERS / "switch-4hosts.yaml", ["sh", "-c", 'exit "$PARPLAN_HOST_INDEX"'], delay_method="off"
    )
    assert run.exit_codes == [0, 1, 2, 3] and run.exit_code == 1
    only = run_on_hosts(CLUSTERS / "switch-4hosts.yaml", ["true"], host=2, delay_method="off")
    assert [s.name for s in only.slots] == ["h2"] and only.exit_code == 0
    with pytest.raises(EmulationError, match=r"host 4: the cluster has hosts 0 \.\. 3"):
        run_on_hosts(CLUSTERS / "switch-4hosts.yaml", ["true"], host=4)
