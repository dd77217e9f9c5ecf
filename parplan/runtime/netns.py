"""Emulated clusters: Linux network namespaces joined by veth pairs to a bridge, shaped with tc.

:func:`emulated_cluster` builds one network namespace per host (``pp-<random>-h<i>``) and one for
the switch (``pp-<random>-sw``, holding the bridge), so nothing is added to the machine's own
network namespace. Each host gets a veth pair: ``pp0`` inside the host (an address in a private
/24 that overlaps none of the machine's routes) and ``h<i>`` on the bridge. Shaping, per host:

- rate: a tc ``tbf`` on ``pp0`` (the host's egress) and one on the bridge's ``h<i>`` (its
  ingress), both at the host's rate, so a transfer between two hosts runs at the lower of their
  rates, as through a switch;
- delay: a ``netem`` child of each tbf adds the host's one-way delay in both directions (a packet
  from host a to host b waits a's delay, then b's: a link's latency per hop, as parplan's cost
  model counts it). Kernels built without netem (this is checked, not assumed: tc has no other
  qdisc that holds packets for a time; tbf's ``latency`` only bounds its queue, htb and pfifo only
  pace or queue) get the same delays from a user-space relay per host
  (:mod:`parplan.runtime.delayrelay`: a TUN device its own outgoing packets are routed through,
  held for the sender's plus the receiver's delay). Its limits are in that module; ``delay_mode``
  says which was used.

Teardown deletes every namespace carrying the cluster's prefix (which takes its veths and bridge
with it) after stopping the processes still running in them; it runs on success, on error and on
Ctrl-C or SIGTERM (turned into ``KeyboardInterrupt`` while the cluster is up; signals are held
back while tearing down). :func:`cleanup_stale` removes leftovers of a process that was killed
with SIGKILL. Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2's ``ip`` and ``tc``;
without them :func:`check_can_emulate` raises an :class:`~parplan.errors.EmulationError` saying
what is missing.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import FrameType

from parplan.errors import EmulationError
from parplan.runtime.hosts import HostSlot

MAX_HOSTS = 8
"""The most hosts an emulated cluster has: each rank is a real process on this machine."""
MAX_RATE_Bps = 10e9 / 8
"""The fastest rate the emulation shapes (10 Gbit/s): above it the machine, not tc, sets the pace."""
PREFIX = "pp-"
"""What every namespace and link made here starts with."""
HOST_IFNAME = "pp0"
"""The interface of a host namespace (the ranks' ``GLOO_SOCKET_IFNAME``)."""
MTU_BYTES = 1500
"""Standard Ethernet frames, as the clusters parplan emulates use."""
QUEUE_S = 0.05
"""How long tbf lets a packet queue before dropping it (its ``latency``): a switch port's buffer."""
CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21


@dataclass(frozen=True)
class EmulatedHostSpec:
    """One host of an emulated cluster: its rate and one-way delay (each direction) and ranks."""

    name: str
    bandwidth_Bps: float
    """The host's link rate, per direction, in bytes per second."""
    delay_s: float = 0.0
    """Added one-way delay of the host's link, each direction."""
    nproc: int = 1
    """Rank processes the launcher starts on this host."""


@dataclass
class EmulatedCluster:
    """What :func:`emulated_cluster` built: the slots to launch on, and how delay was applied."""

    prefix: str
    slots: list[HostSlot]
    hosts: list[EmulatedHostSpec]
    subnet: str
    delay_mode: str
    """How delays are applied: ``netem``; ``relay`` (no netem here: a user-space relay per host,
    :mod:`parplan.runtime.delayrelay`); ``none`` (no host asks for delay)."""
    namespaces: list[str] = field(default_factory=list)
    relays: list[subprocess.Popen[str]] = field(default_factory=list)

    @property
    def unapplied_delay_s(self) -> float:
        """The largest per-host delay that was asked for but not applied (0 when all were)."""
        if self.delay_mode in ("netem", "relay"):
            return 0.0
        return max((h.delay_s for h in self.hosts), default=0.0)


# -- checks -------------------------------------------------------------------------------------


def _effective_capabilities() -> int:
    """This process's effective capability bits (0 when /proc cannot say)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def missing_requirements() -> list[str]:
    """What this machine lacks to emulate a cluster, in words (empty: nothing)."""
    missing = [
        f"the '{tool}' command (install iproute2)" for tool in ("ip", "tc") if shutil.which(tool) is None
    ]
    caps = _effective_capabilities()
    if os.geteuid() != 0 and not (caps >> CAP_NET_ADMIN & 1 and caps >> CAP_SYS_ADMIN & 1):
        missing.append("root, or the CAP_NET_ADMIN and CAP_SYS_ADMIN capabilities")
    return missing


def check_can_emulate() -> None:
    """Raise an :class:`EmulationError` naming everything missing to build namespaces."""
    missing = missing_requirements()
    if missing:
        raise EmulationError("an emulated cluster needs " + " and ".join(missing))


def check_hosts(hosts: Sequence[EmulatedHostSpec]) -> None:
    """Raise an :class:`EmulationError` for hosts that cannot be emulated."""
    if not 1 <= len(hosts) <= MAX_HOSTS:
        raise EmulationError(f"{len(hosts)} hosts: an emulated cluster has 1 to {MAX_HOSTS}")
    for i, host in enumerate(hosts):
        if not 0 < host.bandwidth_Bps <= MAX_RATE_Bps:
            raise EmulationError(
                f"host {host.name}: rate {host.bandwidth_Bps * 8:.6g} bit/s is outside (0, "
                f"{MAX_RATE_Bps * 8:.3g}] bit/s"
            )
        if not 0 <= host.delay_s <= 10:
            raise EmulationError(f"host {host.name}: delay {host.delay_s} s is outside [0, 10] s")
        if host.nproc < 1:
            raise EmulationError(f"host {host.name}: nproc {host.nproc} must be >= 1")
        if host.name in {h.name for h in hosts[:i]}:
            raise EmulationError(f"host name {host.name!r} is used twice")


# -- running ip and tc ------------------------------------------------------------------------------


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one ``ip``/``tc`` command; a failure raises an EmulationError quoting its message."""
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=30)
    if check and done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        raise EmulationError(f"'{' '.join(argv)}' failed: {message[0] if message else done.returncode}")
    return done


def new_prefix() -> str:
    """A fresh prefix ``pp-<6 hex>-`` for one cluster's namespaces."""
    return f"{PREFIX}{secrets.token_hex(3)}-"


def our_namespaces(prefix: str = PREFIX) -> list[str]:
    """The network namespaces whose names start with ``prefix``."""
    listed = _run(["ip", "netns", "list"], check=False).stdout
    names = [line.split()[0] for line in listed.splitlines() if line.strip()]
    return [n for n in names if n.startswith(prefix)]


def our_links(prefix: str = PREFIX) -> list[str]:
    """Links of this (the machine's) namespace whose names start with ``prefix``."""
    listed = _run(["ip", "-o", "link", "show"], check=False).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in listed.splitlines() if ":" in line]
    return [n for n in names if n.startswith(prefix)]


def _stop_processes(namespace: str) -> None:
    """Stop what still runs in a namespace: SIGTERM, then SIGKILL after a grace period."""
    for sig, grace_s in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 1.0)):
        pids = [int(p) for p in _run(["ip", "netns", "pids", namespace], check=False).stdout.split()]
        pids = [p for p in pids if p != os.getpid()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and _run(["ip", "netns", "pids", namespace], check=False).stdout:
            time.sleep(0.05)


def cleanup_stale(prefix: str) -> list[str]:
    """Delete every namespace and link named with ``prefix`` (stopping processes in them); returns
    what was removed. It touches nothing not named so; ``prefix`` must start with ``pp-``, and
    ``"pp-"`` itself removes every emulated cluster on the machine, running ones included."""
    if not prefix.startswith(PREFIX):
        raise EmulationError(f"prefix {prefix!r}: emulated clusters' names start with {PREFIX!r}")
    removed = []
    for namespace in our_namespaces(prefix):
        _stop_processes(namespace)
        _run(["ip", "netns", "delete", namespace], check=False)
        removed.append(namespace)
    for link in our_links(prefix):
        _run(["ip", "link", "delete", link], check=False)
        removed.append(link)
    return removed


# -- addresses ----------------------------------------------------------------------------------------


def _machine_networks() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks this machine's routes and addresses cover (the default route excluded)."""
    nets = []
    routes = _run(["ip", "-4", "route", "show", "table", "all"], check=False).stdout.splitlines()
    addresses = _run(["ip", "-4", "-o", "addr", "show"], check=False).stdout.splitlines()
    words = [line.split()[0] for line in routes if line.split()]
    words += [w for line in addresses for w in line.split() if "/" in w and w[0].isdigit()]
    for word in words:
        with contextlib.suppress(ValueError):
            net = ipaddress.ip_network(word, strict=False)
            if isinstance(net, ipaddress.IPv4Network) and net.prefixlen > 0:
                nets.append(net)
    return nets


def pick_subnet() -> ipaddress.IPv4Network:
    """A random /24 in 10.200.0.0 - 10.254.255.0 that overlaps none of the machine's networks."""
    taken = _machine_networks()
    count = 55 * 256
    start = secrets.randbelow(count)  # a random one first, then every other in turn
    for k in range(count):
        index = (start + k) % count
        candidate = ipaddress.IPv4Network(f"10.{200 + index // 256}.{index % 256}.0/24")
        if not any(candidate.overlaps(net) for net in taken):
            return candidate
    raise EmulationError("no free private /24 in 10.200.0.0/16 - 10.254.0.0/16 for the emulated hosts")


# -- building -------------------------------------------------------------------------------------------

DELAY_METHODS = ("auto", "netem", "relay", "off")
"""How delays are applied: ``auto`` netem where the kernel has it, else the relay; ``off`` not at all."""
RELAY_TABLE = "100"
"""The routing table that sends a host's own packets to the subnet through its delay relay."""

_netem: bool | None = None


def netem_available(probe_namespace: str) -> bool:
    """Whether this kernel has the netem qdisc (tried once, on a namespace's loopback)."""
    global _netem
    if _netem is None:
        added = _run(["tc", "-n", probe_namespace, "qdisc", "add", "dev", "lo", "root", "netem"], check=False)
        _netem = added.returncode == 0
        _run(["tc", "-n", probe_namespace, "qdisc", "del", "dev", "lo", "root"], check=False)
    return _netem


def _delay_mode(method: str, hosts: Sequence[EmulatedHostSpec], probe_namespace: str) -> str:
    """``netem``, ``relay`` or ``none`` (no delay asked for, or ``off``)."""
    if method not in DELAY_METHODS:
        raise EmulationError(f"delay method {method!r}: one of {', '.join(DELAY_METHODS)}")
    if method == "off" or not any(h.delay_s > 0 for h in hosts):
        return "none"
    has_netem = netem_available(probe_namespace)
    if method == "netem" and not has_netem:
        raise EmulationError("this kernel has no netem qdisc (delay method 'netem')")
    if method == "auto" and has_netem:
        return "netem"
    if method != "netem" and not os.path.exists("/dev/net/tun"):
        raise EmulationError("no netem qdisc and no /dev/net/tun here: the hosts' delays cannot be applied")
    return "netem" if method == "netem" else "relay"


def _shape(namespace: str, dev: str, host: EmulatedHostSpec, netem: bool) -> None:
    """tbf at the host's rate on ``dev``'s egress, with a netem child adding its delay."""
    rate_bit = max(int(host.bandwidth_Bps * 8), 8000)
    burst_bytes = max(4 * MTU_BYTES, int(host.bandwidth_Bps * 0.001))  # 1 ms of traffic, 4 frames at least
    # a switch port's buffer, plus the round trip's worth one TCP stream needs to fill a slow link
    limit_bytes = max(2 * burst_bytes, int(host.bandwidth_Bps * (QUEUE_S + 2 * host.delay_s)))
    tc = ["tc", "-n", namespace, "qdisc", "add", "dev", dev]
    shaping = ["tbf", "rate", f"{rate_bit}bit", "burst", str(burst_bytes), "limit", str(limit_bytes)]
    _run([*tc, "root", "handle", "1:", *shaping])
    if netem and host.delay_s > 0:
        delay = f"{max(1, round(host.delay_s * 1e6))}us"
        limit_packets = str(max(1000, int(host.bandwidth_Bps * (host.delay_s + QUEUE_S) / MTU_BYTES) * 2))
        _run([*tc, "parent", "1:1", "handle", "10:", "netem", "delay", delay, "limit", limit_packets])


def _start_relays(cluster: EmulatedCluster) -> None:
    """Start every host's delay relay (at once: each is a Python start-up), then route each host's
    own packets to the subnet through its relay."""
    for index, slot in enumerate(cluster.slots):
        own_delay_s = cluster.hosts[index].delay_s
        pairs = zip(cluster.slots, cluster.hosts, strict=True)
        delays = [f"{peer.address}={own_delay_s + host.delay_s!r}" for peer, host in pairs]
        argv = [*slot.wrapper, sys.executable, "-m", "parplan.runtime.delayrelay", *delays]
        pipe = subprocess.PIPE
        cluster.relays.append(subprocess.Popen(argv, stdout=pipe, stderr=pipe, text=True))
    for index, (slot, relay) in enumerate(zip(cluster.slots, cluster.relays, strict=True)):
        if relay.stdout is None or relay.stdout.readline().strip() != "ready":
            lines = relay.stderr.read().strip().splitlines() if relay.stderr else []
            error = lines[-1] if lines else f"exit code {relay.wait()}"
            raise EmulationError(f"the delay relay of {slot.name} did not start: {error}")
        namespace = cluster.namespaces[index + 1]
        _run(["ip", "-n", namespace, "link", "set", "ppd", "up"])
        route = [cluster.subnet, "dev", "ppd", "src", slot.address, "table", RELAY_TABLE]
        _run(["ip", "-n", namespace, "route", "add", *route])
        _run(["ip", "-n", namespace, "rule", "add", "pref", "100", "iif", "lo", "lookup", RELAY_TABLE])


def _add_host(cluster: EmulatedCluster, index: int, address: str, prefixlen: int) -> None:
    """Host ``index``: its namespace, its veth pair to the bridge, its address and its shaping."""
    host, switch = cluster.hosts[index], cluster.namespaces[0]
    namespace, port = f"{cluster.prefix}h{index}", f"h{index}"
    _run(["ip", "netns", "add", namespace])
    cluster.namespaces.append(namespace)
    veth = ["type", "veth", "peer", "name", HOST_IFNAME, "netns", namespace]
    _run(["ip", "-n", switch, "link", "add", port, *veth])
    _run(["ip", "-n", switch, "link", "set", port, "master", "br0", "up"])
    _run(["ip", "-n", namespace, "link", "set", "lo", "up"])
    _run(["ip", "-n", namespace, "addr", "add", f"{address}/{prefixlen}", "dev", HOST_IFNAME])
    _run(["ip", "-n", namespace, "link", "set", HOST_IFNAME, "up"])
    netem = cluster.delay_mode == "netem"
    _shape(namespace, HOST_IFNAME, host, netem)
    _shape(switch, port, host, netem)
    wrapper = ("ip", "netns", "exec", namespace)
    cluster.slots.append(HostSlot(host.name, address, host.nproc, wrapper, HOST_IFNAME))


def _build(cluster: EmulatedCluster, delay_method: str) -> None:
    """Make the namespaces, bridge, veths, addresses, shaping and relays of ``cluster``."""
    subnet = pick_subnet()
    cluster.subnet = str(subnet)
    switch = f"{cluster.prefix}sw"
    _run(["ip", "netns", "add", switch])
    cluster.namespaces.append(switch)
    _run(["ip", "-n", switch, "link", "set", "lo", "up"])
    _run(["ip", "-n", switch, "link", "add", "br0", "type", "bridge"])
    _run(["ip", "-n", switch, "link", "set", "br0", "up"])
    cluster.delay_mode = _delay_mode(delay_method, cluster.hosts, switch)
    for i in range(len(cluster.hosts)):
        _add_host(cluster, i, str(subnet.network_address + i + 1), subnet.prefixlen)
    if cluster.delay_mode == "relay":
        _start_relays(cluster)


# -- signals ------------------------------------------------------------------------------------------


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM and SIGHUP while a cluster is up: unwind like Ctrl-C, so teardown runs."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextlib.contextmanager
def _signals_unwind() -> Iterator[None]:
    """While inside: SIGTERM and SIGHUP raise KeyboardInterrupt (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold back SIGINT, SIGTERM and SIGHUP while inside (delivered on leaving), so a second Ctrl-C
    cannot cut a teardown short."""
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def emulated_network(
    hosts: Sequence[EmulatedHostSpec], *, prefix: str | None = None, delay_method: str = "auto"
) -> Iterator[EmulatedCluster]:
    """Build an emulated cluster of ``hosts``, yield what was built, and always tear it down.

    ``delay_method`` (:data:`DELAY_METHODS`): ``auto`` applies the hosts' delays with netem where
    the kernel has it and with the user-space relay where not; ``netem`` or ``relay`` insist on
    one (an EmulationError when it is missing); ``off`` applies none.
    """
    check_can_emulate()
    check_hosts(hosts)
    cluster = EmulatedCluster(prefix or new_prefix(), [], list(hosts), "", "none")
    with _signals_unwind():
        try:
            _build(cluster, delay_method)
            yield cluster
        finally:
            with _signals_held():
                cleanup_stale(cluster.prefix)
                for relay in cluster.relays:
                    relay.kill()
                    relay.communicate()


@contextlib.contextmanager
def emulated_cluster(
    hosts: Sequence[EmulatedHostSpec], *, prefix: str | None = None, delay_method: str = "auto"
) -> Iterator[list[HostSlot]]:
    """The host slots of an emulated cluster of ``hosts`` (:func:`emulated_network`), torn down on
    leaving, whatever the reason."""
    with emulated_network(hosts, prefix=prefix, delay_method=delay_method) as cluster:
        yield cluster.slots
