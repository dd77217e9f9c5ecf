"""What ``parplan emulate`` shows: the hosts a cluster file becomes, and ``--check``'s figures.

:func:`hosts_view` is the table of emulated hosts (rate per direction, one-way delay, ranks);
:func:`check_view` adds the addresses and the measured round-trip times and TCP rates beside the
configured ones; :func:`delay_note` says when the kernel could not apply the delays (no netem).
Rates are in bits per second, as links are sold.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table

from parplan.api.emulate import EmulationCheck, median_rtt_s
from parplan.config.units import human
from parplan.report import humanize as hz
from parplan.runtime.netns import EmulatedHostSpec

_BIT_STEPS: tuple[tuple[float, str], ...] = (
    (1e9, "Gbit/s"),
    (1e6, "Mbit/s"),
    (1e3, "kbit/s"),
    (1.0, "bit/s"),
)


def bit_rate(bandwidth_Bps: float) -> str:
    """A rate in bits per second: ``100 Mbit/s``.

    >>> bit_rate(12.5e6)
    '100 Mbit/s'
    """
    return human(bandwidth_Bps * 8, _BIT_STEPS)


def hosts_view(name: str, hosts: Sequence[EmulatedHostSpec], addresses: Sequence[str] = ()) -> Table:
    """One row per emulated host: its rate, delay and ranks (and address once built)."""
    table = Table(title=f"emulated cluster {name}: {len(hosts)} hosts on one bridge", title_justify="left")
    table.add_column("host")
    if addresses:
        table.add_column("address")
    table.add_column("rate (each way)", justify="right")
    table.add_column("delay (one way)", justify="right")
    table.add_column("ranks", justify="right")
    for i, host in enumerate(hosts):
        cells = [host.name, *([addresses[i]] if addresses else [])]
        table.add_row(*cells, bit_rate(host.bandwidth_Bps), hz.seconds(host.delay_s), str(host.nproc))
    return table


def delay_note(delay_mode: str, unapplied_delay_s: float) -> str | None:
    """A warning when delays were asked for and not applied (None when there is nothing to say)."""
    if delay_mode == "netem" or unapplied_delay_s <= 0:
        return None
    return (
        f"this kernel has no netem qdisc: the hosts' delays (up to {hz.seconds(unapplied_delay_s)}) "
        "are not applied, only their rates"
    )


def check_view(check: EmulationCheck) -> RenderableType:
    """The hosts, then measured beside configured round-trip times and TCP rates."""
    parts: list[RenderableType] = [hosts_view(check.cluster, check.hosts, [s.address for s in check.slots])]
    if check.rtts:
        rtt = Table(title="round trip (TCP, 1 byte, median of 20)", title_justify="left")
        for column in ("from", "to", "configured", "measured"):
            rtt.add_column(column, justify="left" if column in ("from", "to") else "right")
        for p in check.rtts:
            configured = hz.seconds(p.configured_s) if p.configured_s else "—"
            rtt.add_row(p.src, p.dst, configured, hz.seconds(p.measured_s))
        parts.append(rtt)
    if check.rates:
        rates = Table(title="TCP rate (one stream, payload)", title_justify="left")
        for column in ("from", "to", "size", "shaped at", "measured", "measured/shaped"):
            rates.add_column(column, justify="left" if column in ("from", "to") else "right")
        for r in check.rates:
            ratio = hz.percent(r.measured_Bps / r.configured_Bps)
            shaped, measured = bit_rate(r.configured_Bps), bit_rate(r.measured_Bps)
            rates.add_row(r.src, r.dst, hz.size(r.size_bytes), shaped, measured, ratio)
        parts.append(rates)
    median = hz.seconds(median_rtt_s(check))
    summary = f"subnet {check.subnet}, delays by {check.delay_mode}; median RTT {median}"
    if check.rates:
        summary += f", worst rate off by {hz.percent(check.worst_rate_error)} (TCP/IP headers take ~4%)"
    parts.append(f"{summary}; namespaces {check.prefix}* torn down")
    return Group(*parts)
