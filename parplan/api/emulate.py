"""Emulated clusters from parplan cluster files: the library behind ``parplan emulate`` and the
host slots that ``parplan measure --emulate`` launches on.

:func:`emulated_hosts_of` turns a cluster into one :class:`~parplan.runtime.netns.EmulatedHostSpec`
per host, and refuses (naming the field) what a bridge of network namespaces cannot stand for:

- a ``switch`` generator: host ``h{i}`` gets its link's rate (per direction) and latency (its
  one-way delay; a transfer crosses two such links, as parplan's model counts it); ``host_links``
  give per-host rates and latencies;
- explicit devices on exactly one switch, every link joining a device to it: devices sharing a
  ``group`` are one host running one rank per device (``nproc``), whose rate is the sum of their
  links' rates and delay the largest of their latencies;
- refused: more than 8 hosts; ring, torus, fat-tree and hierarchical generators (multi-level
  fabrics, NVLink inside nodes); several switches; links between devices; half-duplex links; and
  NVLink, InfiniBand or rates above 10 Gbit/s (faster than the machine can shape).

:func:`emulated_hosts` is the context manager the measure launcher uses; :func:`check_emulation`
builds the cluster, measures every pair's round-trip time and each host's TCP rate and tears it
down (``--check``); :func:`run_on_hosts` runs a command on every host (or one).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from parplan.config.cluster import ClusterSpec, LinkTemplate
from parplan.config.loader import load_cluster
from parplan.errors import EmulationError
from parplan.runtime.hosts import HostSlot
from parplan.runtime.netns import (
    MAX_HOSTS,
    EmulatedCluster,
    EmulatedHostSpec,
    MAX_RATE_Bps,
    emulated_network,
)

UNEMULATED_CLASSES = frozenset({"nvlink", "infiniband", "pcie"})
"""Link classes a veth pair does not stand for."""
PROBE_SIZE_BYTES = 4 * 1024 * 1024
"""The TCP transfer ``--check`` times per host, when not told otherwise."""
PROBE_TIME_S = 2.0
"""What ``--check`` aims each rate probe to take: the size shrinks for slow hosts."""


def _refuse(path: str, where: str, message: str) -> EmulationError:
    return EmulationError(f"{path} {where}: {message}")


def _host_from_link(path: str, where: str, name: str, link: LinkTemplate, nproc: int = 1) -> EmulatedHostSpec:
    """One host behind ``link``: its rate and latency, refused when a veth cannot stand for it."""
    if link.link_class in UNEMULATED_CLASSES:
        raise _refuse(path, f"{where}.class", f"{link.link_class} links cannot be emulated with veth pairs")
    if not link.full_duplex:
        raise _refuse(
            path, f"{where}.full_duplex", "half-duplex links cannot be emulated (tbf shapes each direction)"
        )
    if link.bandwidth_Bps > MAX_RATE_Bps:
        raise _refuse(
            path,
            f"{where}.bandwidth",
            f"{link.bandwidth_Bps * 8 / 1e9:g} Gbit/s is above the {MAX_RATE_Bps * 8 / 1e9:g} Gbit/s "
            "an emulated cluster shapes",
        )
    return EmulatedHostSpec(name, link.bandwidth_Bps, link.latency_s, nproc)


def _too_many(path: str, where: str, count: int) -> None:
    if count > MAX_HOSTS:
        raise _refuse(path, where, f"{count} hosts; an emulated cluster has at most {MAX_HOSTS}")


def _explicit_hosts(spec: ClusterSpec, path: str) -> list[EmulatedHostSpec]:
    """Hosts of an explicit cluster: devices (grouped into hosts) each linked to the one switch."""
    if len(spec.switches) != 1:
        raise _refuse(
            path,
            "switches",
            f"{len(spec.switches)} switches; an emulated cluster is hosts on exactly one switch "
            "(multi-level fabrics cannot be emulated)",
        )
    switch = spec.switches[0].name
    group_of = {d.name: d.group or d.name for d in spec.devices}
    links: dict[str, list[tuple[int, LinkTemplate]]] = {}
    for i, link in enumerate(spec.links):
        device = link.b if link.a == switch else link.a if link.b == switch else None
        if device is None or device not in group_of:
            raise _refuse(
                path, f"links[{i}]", f"{link.a} - {link.b} does not join a device to the switch {switch}"
            )
        links.setdefault(group_of[device], []).append((i, link))
    groups = list(dict.fromkeys(group_of.values()))
    _too_many(path, "devices", len(groups))
    hosts = []
    for group in groups:
        if group not in links:
            raise _refuse(path, "links", f"host {group} has no link to the switch {switch}")
        shaped = [_host_from_link(path, f"links[{i}]", group, link) for i, link in links[group]]
        nproc = sum(1 for g in group_of.values() if g == group)
        rate_Bps = sum(h.bandwidth_Bps for h in shaped)
        hosts.append(EmulatedHostSpec(group, rate_Bps, max(h.delay_s for h in shaped), nproc))
    return hosts


def emulated_hosts_of(spec: ClusterSpec, path: str = "<cluster>") -> list[EmulatedHostSpec]:
    """The hosts an emulated cluster needs to stand for ``spec`` (module docstring), or an
    EmulationError naming the field that cannot be emulated."""
    generator = spec.generator
    if generator is None:
        return _explicit_hosts(spec, path)
    if spec.devices or spec.links or spec.switches:
        raise _refuse(
            path, "devices", "a generator with explicit devices, switches or links cannot be emulated"
        )
    if generator.kind != "switch":
        raise _refuse(
            path,
            "generator.kind",
            f"{generator.kind!r} cannot be emulated: only hosts on one switch (kind: switch, or "
            "explicit devices on one switch)",
        )
    _too_many(path, "generator.hosts", generator.hosts)
    hosts = []
    for i in range(generator.hosts):
        name = f"h{i}"
        where = f"generator.host_links.{name}" if name in generator.host_links else "generator.link"
        hosts.append(_host_from_link(path, where, name, generator.host_links.get(name, generator.link)))
    return hosts


def load_emulated_hosts(cluster_path: str | Path) -> list[EmulatedHostSpec]:
    """Load a cluster file and map it to emulated hosts (:func:`emulated_hosts_of`)."""
    return emulated_hosts_of(load_cluster(cluster_path), str(cluster_path))


@contextlib.contextmanager
def emulated_hosts(
    hosts: Sequence[EmulatedHostSpec], *, delay_method: str = "auto"
) -> Iterator[list[HostSlot]]:
    """The host slots of an emulated cluster (:func:`load_emulated_hosts` of a cluster file), torn
    down on leaving: what ``parplan measure --emulate CLUSTER`` launches its ranks on.
    ``delay_method``: see :func:`~parplan.runtime.netns.emulated_network`."""
    with emulated_network(hosts, delay_method=delay_method) as cluster:
        yield cluster.slots


# -- emulate --check ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PairRtt:
    """Round-trip time between two hosts: configured (twice both delays) and measured (TCP)."""

    src: str
    dst: str
    configured_s: float
    measured_s: float


@dataclass(frozen=True)
class HostRate:
    """One TCP stream from ``src`` to ``dst``: the rate the shaping allows and what it achieved."""

    src: str
    dst: str
    configured_Bps: float
    measured_Bps: float
    size_bytes: int


@dataclass(frozen=True)
class EmulationCheck:
    """What ``parplan emulate CLUSTER --check`` found."""

    cluster: str
    prefix: str
    """The namespaces' name prefix (all torn down by the time the check returns)."""
    hosts: list[EmulatedHostSpec]
    slots: list[HostSlot]
    subnet: str
    delay_mode: str
    unapplied_delay_s: float
    rtts: list[PairRtt]
    rates: list[HostRate]

    @property
    def worst_rate_error(self) -> float:
        """The largest |measured / configured - 1| over the rate probes (0 without probes)."""
        return max((abs(r.measured_Bps / r.configured_Bps - 1) for r in self.rates), default=0.0)


def _probe(slot: HostSlot, *args: str) -> dict[str, float]:
    """Run a netprobe client on ``slot``; its JSON answer by address."""
    argv = [*slot.wrapper, sys.executable, "-m", "parplan.runtime.netprobe", *args]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise EmulationError(f"probe from {slot.name} ({' '.join(args[:1])}) failed: {last}")
    answer: dict[str, float] = json.loads(done.stdout)
    return answer


@contextlib.contextmanager
def _probe_servers(slots: Sequence[HostSlot]) -> Iterator[None]:
    """A netprobe server on every host while inside (stopped on leaving)."""
    servers = []
    try:
        for slot in slots:
            argv = [*slot.wrapper, sys.executable, "-m", "parplan.runtime.netprobe", "serve", slot.address]
            servers.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True))
        for server, slot in zip(servers, slots, strict=True):
            if server.stdout is None or server.stdout.readline().strip() != "ready":
                raise EmulationError(f"the probe server on {slot.name} did not start")
        yield
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(timeout=10)


def _measure(cluster: EmulatedCluster, size_bytes: int | None) -> tuple[list[PairRtt], list[HostRate]]:
    """RTT of every pair, then one stream per host to the next host (so each host's rate is
    checked once as a sender and once as a receiver)."""
    slots, hosts = cluster.slots, cluster.hosts
    delayed = cluster.delay_mode in ("netem", "relay")
    rtts = []
    for i, slot in enumerate(slots):
        peers = slots[i + 1 :]
        if not peers:
            continue
        measured = _probe(slot, "rtt", *(p.address for p in peers))
        for j, peer in enumerate(peers, start=i + 1):
            configured = 2 * (hosts[i].delay_s + hosts[j].delay_s) if delayed else 0.0
            rtts.append(PairRtt(slot.name, peer.name, configured, measured[peer.address]))
    rates = []
    for i, slot in enumerate(slots if len(slots) > 1 else []):
        j = (i + 1) % len(slots)
        configured_Bps = min(hosts[i].bandwidth_Bps, hosts[j].bandwidth_Bps)
        size = size_bytes or max(256 * 1024, min(PROBE_SIZE_BYTES, int(configured_Bps * PROBE_TIME_S)))
        measured = _probe(slot, "rate", str(size), slots[j].address)
        rates.append(HostRate(slot.name, slots[j].name, configured_Bps, measured[slots[j].address], size))
    return rtts, rates


def check_emulation(
    cluster_path: str | Path, *, size_bytes: int | None = None, delay_method: str = "auto"
) -> EmulationCheck:
    """Build an emulated copy of a cluster, measure it (:func:`_measure`) and tear it down."""
    spec = load_cluster(cluster_path)
    hosts = emulated_hosts_of(spec, str(cluster_path))
    with emulated_network(hosts, delay_method=delay_method) as cluster, _probe_servers(cluster.slots):
        rtts, rates = _measure(cluster, size_bytes)
    return EmulationCheck(
        spec.name,
        cluster.prefix,
        hosts,
        cluster.slots,
        cluster.subnet,
        cluster.delay_mode,
        cluster.unapplied_delay_s,
        rtts,
        rates,
    )


def median_rtt_s(check: EmulationCheck) -> float:
    """The median measured round-trip time over every pair (0 for one host)."""
    return statistics.median([r.measured_s for r in check.rtts]) if check.rtts else 0.0


# -- emulate -- COMMAND --------------------------------------------------------------------------


@dataclass(frozen=True)
class CommandRun:
    """A command run on emulated hosts: the hosts it ran on and each one's exit code."""

    slots: list[HostSlot]
    exit_codes: list[int]
    delay_mode: str
    unapplied_delay_s: float

    @property
    def exit_code(self) -> int:
        """The first non-zero exit code, else 0."""
        return next((code for code in self.exit_codes if code != 0), 0)


def host_environment(slots: Sequence[HostSlot], index: int) -> dict[str, str]:
    """What a command on host ``index`` learns about the cluster from its environment."""
    slot = slots[index]
    return {
        "PARPLAN_HOST_INDEX": str(index),
        "PARPLAN_HOST_NAME": slot.name,
        "PARPLAN_HOST_ADDRESSES": ",".join(s.address for s in slots),
        "PARPLAN_HOST_NPROC": str(slot.nproc),
        "GLOO_SOCKET_IFNAME": slot.ifname or "",
        "MASTER_ADDR": slots[0].address,
    }


def run_on_hosts(
    cluster_path: str | Path, argv: Sequence[str], *, host: int | None = None, delay_method: str = "auto"
) -> CommandRun:
    """Run ``argv`` on every host of an emulated copy of a cluster at once (or on host ``host``
    only), with :func:`host_environment` set; wait for all and tear down. The commands share this
    process's stdin, stdout and stderr."""
    hosts = load_emulated_hosts(cluster_path)
    if host is not None and not 0 <= host < len(hosts):
        raise EmulationError(f"host {host}: the cluster has hosts 0 .. {len(hosts) - 1}")
    with emulated_network(hosts, delay_method=delay_method) as cluster:
        chosen = range(len(hosts)) if host is None else [host]
        procs = []
        for i in chosen:
            env = {**os.environ, **host_environment(cluster.slots, i)}
            try:
                procs.append(subprocess.Popen([*cluster.slots[i].wrapper, *argv], env=env))
            except OSError as exc:
                raise EmulationError(f"cannot run {argv[0]!r}: {exc}") from None
        codes = [proc.wait() for proc in procs]
    ran = [cluster.slots[i] for i in chosen]
    return CommandRun(ran, codes, cluster.delay_mode, cluster.unapplied_delay_s)
