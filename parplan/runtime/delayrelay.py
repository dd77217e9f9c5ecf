"""Delay without netem: a user-space relay that holds a host's outgoing packets for a time.

Some kernels ship without the netem qdisc, and no other qdisc holds packets for a time (tbf's
``latency`` only bounds its queue). Where netem is missing, :mod:`parplan.runtime.netns` starts
one relay per host namespace (``python -m parplan.runtime.delayrelay ADDR=DELAY_S ...``). The relay
opens a TUN device ``ppd`` in its namespace; a routing rule sends every packet the host itself
sends to the cluster's subnet into ``ppd``; the relay reads it, keeps it until its destination's
delay has passed (the sender's delay plus the receiver's: the whole one-way path) and writes it
back into ``ppd``, from where the kernel forwards it out of the host's veth (and its tbf) to the
bridge. Offloads are on (``IFF_VNET_HDR`` and ``TUNSETOFFLOAD``), so TCP hands the relay segments
of up to 64 KiB rather than 1500-byte frames and a Python loop keeps up with hundreds of Mbit/s.

Limits (the README's "Emulated clusters" says them too): the delay is as precise as a sleeping
Python loop wakes up: ~20 us added per packet on an idle machine, 1-3 ms per round trip (up to
18 ms seen) at load 10 on two cores, although the relay runs at nice -10; every
packet a host sends costs a copy through user space, one core's worth at a few Gbit/s; the delay
applies to the sender's outgoing packets only (so a reply pays its own path's delay on its way
back, as with netem on both ends).
"""

from __future__ import annotations

import contextlib
import fcntl
import heapq
import itertools
import os
import select
import socket
import struct
import sys
import time

TUN_IFNAME = "ppd"
"""The TUN device of the relay, in its host's namespace."""
READY = "ready"
"""What the relay prints on stdout once ``ppd`` exists (before that, routes to it cannot be added)."""

_TUNSETIFF = 0x400454CA
_TUNSETOFFLOAD = 0x400454D0
_IFF_TUN = 0x0001
_IFF_NO_PI = 0x1000
_IFF_VNET_HDR = 0x4000
_TUN_F_CSUM, _TUN_F_TSO4, _TUN_F_TSO6 = 0x01, 0x02, 0x04
_VNET_HDR_BYTES = 10
_IPV4_DST = slice(_VNET_HDR_BYTES + 16, _VNET_HDR_BYTES + 20)
_READ_BYTES = 65_536 + _VNET_HDR_BYTES


def open_tun(name: str = TUN_IFNAME) -> int:
    """Create the TUN device ``name`` in this namespace with offloads on; its file descriptor."""
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TUN | _IFF_NO_PI | _IFF_VNET_HDR))
    fcntl.ioctl(fd, _TUNSETOFFLOAD, _TUN_F_CSUM | _TUN_F_TSO4 | _TUN_F_TSO6)
    os.set_blocking(fd, False)
    return fd


def _sysctl(path: str, value: str) -> None:
    """Set one of this namespace's /proc/sys/net settings."""
    with open(f"/proc/sys/net/{path}", "w", encoding="ascii") as setting:
        setting.write(value)


def relay(fd: int, delay_by_destination_s: dict[bytes, float], default_delay_s: float) -> None:
    """Forever: read packets from ``fd``, write each back once its destination's delay is over."""
    queue: list[tuple[float, int, bytes]] = []
    order = itertools.count()
    while True:
        timeout_s = max(0.0, queue[0][0] - time.monotonic()) if queue else None
        readable, _, _ = select.select([fd], [], [], timeout_s)
        now = time.monotonic()
        if readable:
            while True:
                try:
                    packet = os.read(fd, _READ_BYTES)
                except BlockingIOError:
                    break
                delay_s = delay_by_destination_s.get(packet[_IPV4_DST], default_delay_s)
                heapq.heappush(queue, (now + delay_s, next(order), packet))
        while queue and queue[0][0] <= time.monotonic():
            _, _, packet = heapq.heappop(queue)
            with contextlib.suppress(BlockingIOError):  # the kernel's backlog is full: drop the packet
                os.write(fd, packet)


def main(argv: list[str]) -> int:
    """``ADDRESS=DELAY_S ...``: the one-way delay to each destination address."""
    delays = {socket.inet_aton(a): float(d) for a, d in (arg.split("=", 1) for arg in argv)}
    fd = open_tun()
    with contextlib.suppress(OSError):  # run ahead of ordinary work: a late wake-up is added delay
        os.nice(-10)
    _sysctl("ipv4/ip_forward", "1")
    for conf in ("all", "default", TUN_IFNAME):
        _sysctl(f"ipv4/conf/{conf}/rp_filter", "0")
    _sysctl(f"ipv4/conf/{TUN_IFNAME}/accept_local", "1")
    sys.stdout.write(READY + "\n")
    sys.stdout.flush()
    relay(fd, delays, 0.0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
