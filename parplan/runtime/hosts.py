"""Where rank processes run: one :class:`HostSlot` per host of a measurement.

``parplan measure`` launches its ranks through a list of host slots. On one machine that is a
single slot on the loopback interface (:func:`local_host`); on an emulated cluster
(``parplan emulate``) each slot is a Linux network namespace: its argv ``wrapper`` enters the
namespace (``ip netns exec NAME``), ``address`` is the host's IP inside it and ``ifname`` the
interface gloo must use (``GLOO_SOCKET_IFNAME``). The launcher starts ``nproc`` ranks per slot and
uses the first slot's address for the rendezvous. Plain data, so the runtime pieces that make slots
(network namespaces) and the ones that use them (the launcher) do not import each other.
"""

from __future__ import annotations

from dataclasses import dataclass

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class HostSlot:
    """One host of a measurement: how to run a command there and how its ranks reach the others."""

    name: str
    """A short host name for messages and reports (``h0``, ``n1``)."""
    address: str
    """The host's IPv4 address that the other hosts reach it at (the rendezvous uses slot 0's)."""
    nproc: int = 1
    """Rank processes to start on this host."""
    wrapper: tuple[str, ...] = ()
    """An argv prefix that runs a command on this host (``("ip", "netns", "exec", "pp-1a2b-h0")``);
    empty for this machine."""
    ifname: str | None = None
    """The network interface the ranks must use (gloo's ``GLOO_SOCKET_IFNAME``); None: any."""


def local_host(nproc: int) -> HostSlot:
    """This machine as one host running ``nproc`` ranks over the loopback interface."""
    return HostSlot(name="local", address=LOOPBACK, nproc=nproc, ifname=None)
