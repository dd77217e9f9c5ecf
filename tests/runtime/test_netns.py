"""Emulated clusters on this machine: namespaces, shaping, delays and teardown (issue 14, item 3).

The ``netns`` tests build real namespaces; they need root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) and
iproute2, and skip saying which is missing. Each checks only the namespaces of its own prefix, so
they run beside each other (``-n 2``). The refusal tests run anywhere (the checks are patched).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from parplan.errors import EmulationError
from parplan.runtime import netns, netprobe
from parplan.runtime.netns import EmulatedHostSpec, emulated_cluster, emulated_network

ROOT = Path(__file__).resolve().parents[2]
MISSING = netns.missing_requirements()
needs_netns = pytest.mark.skipif(bool(MISSING), reason="emulated clusters need " + " and ".join(MISSING))
MBIT_Bps = 1e6 / 8


def _leftovers(prefix: str) -> list[str]:
    """Namespaces, and links of this namespace, named with ``prefix``."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return [n for n in names.split() if n.startswith(prefix)] + [
        line for line in links.splitlines() if prefix in line
    ]


@pytest.fixture
def prefix() -> Iterator[str]:
    """A fresh prefix; the test fails if anything named with it survives."""
    name = netns.new_prefix()
    yield name
    left = _leftovers(name)
    netns.cleanup_stale(name)
    assert not left, left


def _probe(slot: netns.HostSlot, *args: str) -> str:
    argv = [*slot.wrapper, sys.executable, "-m", "parplan.runtime.netprobe", *args]
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout


def _rates(slot: netns.HostSlot, size: str, address: str, rate_Bps: float, tries: int = 3) -> list[float]:
    """Bytes/s of up to ``tries`` transfers of ``size`` bytes from ``slot`` to ``address``, until one
    reaches the shaped rate within 15%. A loaded machine can only slow a probe (its processes wait
    for a core while the clock runs), never speed it past the shaping, so the best of a few probes
    measures the link, and every probe must stay under the rate."""
    rates: list[float] = []
    while len(rates) < tries and (not rates or max(rates) < rate_Bps * 0.85):
        rates.append(json.loads(_probe(slot, "rate", size, address))[address])
    return rates


def _servers(slots: list[netns.HostSlot]) -> list[subprocess.Popen[str]]:
    servers = []
    for slot in slots:
        argv = [*slot.wrapper, sys.executable, "-m", "parplan.runtime.netprobe", "serve", slot.address]
        servers.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True))
    for server in servers:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    return servers


# -- refusals (no root needed) ------------------------------------------------------------------------


def test_without_root_it_refuses_saying_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(netns, "_effective_capabilities", lambda: 0)
    hosts = [EmulatedHostSpec("h0", 10 * MBIT_Bps)]
    refused = pytest.raises(EmulationError, match="root, or the CAP_NET_ADMIN and CAP_SYS_ADMIN")
    with refused, emulated_cluster(hosts):
        pytest.fail("built without root")


def test_capabilities_are_enough_without_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(netns, "_effective_capabilities", lambda: 1 << 12 | 1 << 21)
    monkeypatch.setattr(netns.shutil, "which", lambda tool: f"/usr/sbin/{tool}")
    assert netns.missing_requirements() == []


def test_without_iproute2_it_refuses_naming_the_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns.shutil, "which", lambda tool: None)
    with pytest.raises(EmulationError, match=r"the 'ip' command .*the 'tc' command.*iproute2"):
        netns.check_can_emulate()


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        ([], "0 hosts"),
        ([EmulatedHostSpec(f"h{i}", MBIT_Bps) for i in range(9)], "9 hosts: an emulated cluster has 1 to 8"),
        ([EmulatedHostSpec("h0", 0.0)], "host h0: rate 0 bit/s is outside"),
        ([EmulatedHostSpec("h0", 40e9 / 8)], "host h0: rate 4e.* bit/s is outside"),
        ([EmulatedHostSpec("h0", MBIT_Bps, delay_s=-1)], "host h0: delay -1 s"),
        ([EmulatedHostSpec("h0", MBIT_Bps, nproc=0)], "nproc 0 must be >= 1"),
        ([EmulatedHostSpec("a", MBIT_Bps), EmulatedHostSpec("a", MBIT_Bps)], "'a' is used twice"),
    ],
)
def test_hosts_that_cannot_be_emulated_are_refused_before_anything_is_built(
    hosts: list[EmulatedHostSpec], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(netns, "check_can_emulate", lambda: None)
    monkeypatch.setattr(netns, "_build", lambda *a: pytest.fail("built"))
    with pytest.raises(EmulationError, match=message), emulated_cluster(hosts):
        pytest.fail("entered")


def test_an_unknown_delay_method_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(EmulationError, match="delay method 'warp': one of auto, netem, relay, off"):
        netns._delay_mode("warp", [EmulatedHostSpec("h0", MBIT_Bps, 0.001)], "unused")


def test_the_subnet_overlaps_none_of_the_machines_networks(monkeypatch: pytest.MonkeyPatch) -> None:
    import ipaddress

    taken = [ipaddress.IPv4Network(f"10.{200 + i}.0.0/16") for i in range(54)]  # all but 10.254/16
    monkeypatch.setattr(netns, "_machine_networks", lambda: taken)
    for _ in range(20):
        assert netns.pick_subnet().subnet_of(ipaddress.IPv4Network("10.254.0.0/16"))
    monkeypatch.setattr(netns, "_machine_networks", lambda: [ipaddress.IPv4Network("10.0.0.0/8")])
    with pytest.raises(EmulationError, match="no free private /24"):
        netns.pick_subnet()


# -- real namespaces ------------------------------------------------------------------------------------


@pytest.mark.netns
@needs_netns
@pytest.mark.parametrize("rate_mbit", [10, 100])
def test_hosts_reach_each_other_at_the_shaped_rate(rate_mbit: int, prefix: str) -> None:
    hosts = [EmulatedHostSpec(f"h{i}", rate_mbit * MBIT_Bps) for i in range(3)]
    with emulated_network(hosts, prefix=prefix, delay_method="off") as cluster:
        slots = cluster.slots
        assert [s.name for s in slots] == ["h0", "h1", "h2"]
        assert all(s.ifname == "pp0" and s.wrapper[:3] == ("ip", "netns", "exec") for s in slots)
        assert len(netns.our_namespaces(prefix)) == 4  # three hosts and the switch
        servers = _servers(slots)
        rtts = json.loads(_probe(slots[0], "rtt", slots[1].address, slots[2].address))
        assert all(0 < rtt_s < 0.05 for rtt_s in rtts.values())
        size = str(int(rate_mbit * MBIT_Bps * 1.5))  # about 1.5 s of traffic
        achieved = _rates(slots[2], size, slots[0].address, rate_mbit * MBIT_Bps)
        for server in servers:
            server.terminate()
    assert _leftovers(prefix) == []
    assert max(achieved) == pytest.approx(rate_mbit * MBIT_Bps, rel=0.15)
    assert all(rate <= rate_mbit * MBIT_Bps * 1.15 for rate in achieved)


@pytest.mark.netns
@needs_netns
def test_a_transfer_runs_at_the_slower_hosts_rate(prefix: str) -> None:
    hosts = [EmulatedHostSpec("fast", 100 * MBIT_Bps), EmulatedHostSpec("slow", 20 * MBIT_Bps)]
    with emulated_cluster(hosts, prefix=prefix, delay_method="off") as slots:
        servers = _servers(slots)
        size = str(int(20 * MBIT_Bps * 2))  # about 2 s of traffic
        into_slow = _rates(slots[0], size, slots[1].address, 20 * MBIT_Bps)
        out_of_slow = _rates(slots[1], size, slots[0].address, 20 * MBIT_Bps)
        for server in servers:
            server.terminate()
    for achieved in (into_slow, out_of_slow):
        assert max(achieved) == pytest.approx(20 * MBIT_Bps, rel=0.15)
        assert all(rate <= 20 * MBIT_Bps * 1.15 for rate in achieved)


@pytest.mark.netns
@needs_netns
@pytest.mark.parametrize("method", ["auto", "relay"])
def test_delays_add_up_along_the_path(method: str, prefix: str) -> None:
    hosts = [EmulatedHostSpec("h0", 50 * MBIT_Bps, 0.015), EmulatedHostSpec("h1", 50 * MBIT_Bps, 0.005)]
    with emulated_network(hosts, prefix=prefix, delay_method=method) as cluster:
        assert cluster.delay_mode in (("netem", "relay") if method == "auto" else ("relay",))
        assert cluster.unapplied_delay_s == 0
        servers = _servers(cluster.slots)
        there_and_back = json.loads(_probe(cluster.slots[1], "rtt", cluster.slots[0].address))
        for server in servers:
            server.terminate()
    # 2 x (15 ms + 5 ms): one host's delay alone would be 30 or 10 ms. A loaded machine adds its
    # scheduling latency to the relay's wake-ups (+1-3 ms typical at load 10 on two cores, +18 seen)
    assert 0.038 < there_and_back[cluster.slots[0].address] < 0.040 + 0.025


@pytest.mark.netns
@needs_netns
def test_delay_off_applies_none_and_says_so(prefix: str) -> None:
    hosts = [EmulatedHostSpec("h0", 50 * MBIT_Bps, 0.02)]
    with emulated_network(hosts, prefix=prefix, delay_method="off") as cluster:
        assert cluster.delay_mode == "none" and cluster.unapplied_delay_s == 0.02


@pytest.mark.netns
@needs_netns
def test_an_error_inside_tears_everything_down(prefix: str) -> None:
    hosts = [EmulatedHostSpec("h0", 10 * MBIT_Bps), EmulatedHostSpec("h1", 10 * MBIT_Bps)]
    with pytest.raises(RuntimeError, match="boom"), emulated_cluster(hosts, prefix=prefix) as slots:
        sleeper = subprocess.Popen([*slots[0].wrapper, "sleep", "60"])
        assert len(_leftovers(prefix)) == 3
        raise RuntimeError("boom")
    assert sleeper.wait(timeout=10) != 0  # stopped with its namespace
    assert _leftovers(prefix) == []


@pytest.mark.netns
@needs_netns
def test_a_failure_mid_setup_tears_down_what_was_made(prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real_shape = netns._shape
    calls: list[str] = []

    def shape(namespace: str, dev: str, host: EmulatedHostSpec, netem: bool) -> None:
        calls.append(namespace)
        if len(calls) == 3:  # host h1's own veth: h0 and the switch are made, h1 half made
            dev = "nosuchdev"  # tc refuses to shape a device that does not exist
        real_shape(namespace, dev, host, netem)

    monkeypatch.setattr(netns, "_shape", shape)
    hosts = [EmulatedHostSpec(f"h{i}", 10 * MBIT_Bps) for i in range(3)]
    failed = pytest.raises(EmulationError, match=r"'tc -n .* dev nosuchdev .*' failed: ")
    with failed, emulated_cluster(hosts, prefix=prefix):
        pytest.fail("entered a half-built cluster")
    assert _leftovers(prefix) == []


SIGINT_MID_SETUP = textwrap.dedent(
    """
    import os, signal, sys
    from parplan.runtime import netns
    real_run, calls = netns._run, []
    def run(argv, check=True):
        calls.append(argv)
        if len(calls) == 12:  # in the middle of the second host
            os.kill(os.getpid(), signal.SIGINT)
        return real_run(argv, check)
    netns._run = run
    hosts = [netns.EmulatedHostSpec(f"h{i}", 1e6) for i in range(3)]
    try:
        with netns.emulated_cluster(hosts, prefix=sys.argv[1]):
            print("entered")
    except KeyboardInterrupt:
        sys.exit(130)
    """
)


@pytest.mark.netns
@needs_netns
def test_ctrl_c_mid_setup_tears_down_what_was_made(prefix: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SIGINT_MID_SETUP, prefix], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 130, done.stderr
    assert "entered" not in done.stdout
    assert _leftovers(prefix) == []


@pytest.mark.netns
@needs_netns
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_running_tears_down(sig: signal.Signals, prefix: str) -> None:
    script = textwrap.dedent(
        """
        import subprocess, sys
        from parplan.runtime import netns
        hosts = [netns.EmulatedHostSpec("h0", 1e6, 0.001), netns.EmulatedHostSpec("h1", 1e6)]
        with netns.emulated_cluster(hosts, prefix=sys.argv[1]) as slots:
            print("up", flush=True)
            subprocess.run([*slots[1].wrapper, "sleep", "60"])
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script, prefix], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    time.sleep(0.3)
    proc.send_signal(sig)
    assert proc.wait(timeout=30) != 0
    assert _leftovers(prefix) == []


@pytest.mark.netns
@needs_netns
def test_cleanup_stale_removes_a_killed_runs_namespaces(prefix: str) -> None:
    script = textwrap.dedent(
        """
        import sys, time
        from parplan.runtime import netns
        with netns.emulated_cluster([netns.EmulatedHostSpec("h0", 1e6)], prefix=sys.argv[1]):
            print("up", flush=True)
            time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script, prefix], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    proc.kill()  # SIGKILL: no teardown
    proc.wait(timeout=10)
    assert len(_leftovers(prefix)) == 2
    assert sorted(netns.cleanup_stale(prefix)) == [f"{prefix}h0", f"{prefix}sw"]
    assert _leftovers(prefix) == []


def test_cleanup_stale_touches_only_names_of_emulated_clusters() -> None:
    with pytest.raises(EmulationError, match="prefix 'eth': emulated clusters' names start with 'pp-'"):
        netns.cleanup_stale("eth")


def test_the_probe_server_answers_on_loopback() -> None:
    """netprobe itself, without namespaces: an echo and a counted stream."""
    argv = [sys.executable, "-m", "parplan.runtime.netprobe", "serve", "127.0.0.1"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert 0 < netprobe.rtt_s("127.0.0.1", count=3) < 1
        assert netprobe.rate_Bps("127.0.0.1", 1 << 20) > 1e6
    finally:
        proc.terminate()
        proc.wait(timeout=10)
