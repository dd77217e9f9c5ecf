"""What one message costs beyond link latency and bandwidth: the transport's per-message terms.

A transfer issued at ``t`` starts moving bytes at ``t + delay`` where

    delay = L                                                 (the path's latency)
          + overhead_s                                         (the plan's: a call's first messages)
          + send_overhead_s + recv_overhead_s                  (LogGP's o on both ends)
          + 2 x (L + o_send + o_recv)  if size > eager_threshold   (rendezvous round trip)

where ``L`` is the sum of the route's link latencies, except under ``nccl``: there ``L`` is NCCL's
per-step latency of the transfer's protocol on the route's hardware, which NCCL measured end to
end on real systems (links, switches, the protocol's flag polling), so it stands for the path's.

A transfer with a ``max_rate_Bps`` moves its payload no faster than that even on an idle path
(its wire rate is capped at ``max_rate_Bps / protocol efficiency``); a capped flow's unused share
of a link is not handed to the others (an approximation of max-min fairness with ceilings).

Its bytes on the wire are ``size / protocol efficiency`` under ``nccl``: LL sends 8 bytes per 4
of data (a flag beside each word, 50%), LL128 120 of every 128 (93.75%), Simple all of them
(transfers without a protocol are Simple). The per-step latencies are NCCL 2.30.7's ``hwLat``
(:data:`parplan.collectives.nccl_tables.HW_LATENCY_US`), the tree row for a tree's steps and the
ring row otherwise, for the route's hardware: NVLink when it
stays on NVLink, PCI when it crosses PCIe, NET when it leaves the node. The ``ideal`` transport adds
nothing: the closed forms of :mod:`parplan.engine.analytic` are its oracle.

The transport is the network's (:attr:`parplan.topology.network.Network.transport`); link
efficiencies are already in the network's channel bandwidths.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from parplan.collectives.nccl_tables import HW_LATENCY_US, Algorithm, Hardware
from parplan.config.cluster import TransportCosts
from parplan.engine.arrays import FloatArray, IntArray, TaskColumn
from parplan.engine.routes import RouteTable
from parplan.taskgraph import PROTOCOLS, TREE_STEP

PROTOCOL_EFFICIENCY: dict[str, float] = {"ll": 0.5, "ll128": 120 / 128, "simple": 1.0}
"""Payload share of the bytes each NCCL protocol puts on the wire."""

_SIMPLE = PROTOCOLS.index("simple")
_HARDWARE_ROWS: tuple[Hardware, ...] = ("nvlink", "pci", "net")  # indexed by the network's hardware codes

# [hardware code, protocol code] -> seconds per step: NCCL's ring hwLat, then (codes + TREE_STEP)
# its tree hwLat.
_FAMILIES: tuple[Algorithm, ...] = ("ring", "tree")  # codes 0 .. TREE_STEP - 1, then TREE_STEP ..
STEP_LATENCY_S = np.array(
    [
        [HW_LATENCY_US[hw][family][i] * 1e-6 for family in _FAMILIES for i in range(TREE_STEP)]
        for hw in _HARDWARE_ROWS
    ]
)
_EFFICIENCY = np.tile([PROTOCOL_EFFICIENCY[p] for p in PROTOCOLS], len(_FAMILIES))


class MessagePricer:
    """Prices the transfers of one run: their delay before bytes move, their bytes on the wire."""

    def __init__(
        self,
        transport: TransportCosts,
        routes: RouteTable,
        size_bytes: FloatArray,
        protocol: np.ndarray,
        overhead_s: FloatArray,
    ) -> None:
        self.transport = transport
        self.routes = routes
        self.size_bytes = size_bytes
        self.nccl = transport.kind == "nccl"
        # int8 codes (1 byte per task, not 8): they only index small tables.
        self.protocol = _codes(protocol) if self.nccl else None
        self.overhead_s = overhead_s if bool(np.any(overhead_s)) else None
        self.per_message_s = transport.send_overhead_s + transport.recv_overhead_s
        self.plain = (
            not self.nccl
            and self.overhead_s is None
            and self.per_message_s == 0.0
            and (transport.eager_threshold_bytes == float("inf"))
        )

    def wire_bytes(self) -> TaskColumn:
        """Bytes each task puts on the wire (its size, or more under an NCCL protocol), read
        per batch."""
        return TaskColumn(self.size_bytes, self.protocol, None if self.protocol is None else _EFFICIENCY)

    def rate_cap_Bps(self, max_rate_Bps: FloatArray) -> TaskColumn | None:
        """Each task's ceiling on its wire rate (its payload ceiling over its protocol's
        efficiency), or ``None`` when no task has one."""
        if not bool(np.isfinite(max_rate_Bps).any()):
            return None
        return TaskColumn(max_rate_Bps, self.protocol, None if self.protocol is None else _EFFICIENCY)

    def delay_s(self, tasks: IntArray, rids: IntArray) -> FloatArray:
        """Seconds from issue until the bytes of ``tasks`` (on routes ``rids``) start moving."""
        latency = self.routes.latency_s[rids]
        if self.plain:
            return latency
        if self.protocol is not None:
            # NCCL's per-step latency is measured end to end on that hardware (links, switches,
            # the protocol's flag polling): it stands for the path's own latency.
            hardware = np.maximum(self.routes.hardware[rids], 0)
            latency = STEP_LATENCY_S[hardware, self.protocol[tasks]]
        delay = latency + self.per_message_s
        if self.overhead_s is not None:
            delay = delay + self.overhead_s[tasks]
        threshold = self.transport.eager_threshold_bytes
        if threshold != float("inf"):
            rendezvous = self.size_bytes[tasks] > threshold
            delay = delay + rendezvous * 2.0 * (latency + self.per_message_s)
        result: FloatArray = delay
        return result


def _codes(protocol: np.ndarray) -> npt.NDArray[np.int8]:
    """Protocol codes with "none" as Simple; a constant column stays a zero-memory constant."""
    if len(protocol) and protocol.strides == (0,):
        code = int(protocol[0])
        return np.broadcast_to(np.int8(_SIMPLE if code < 0 else code), protocol.shape)
    return np.where(protocol < 0, _SIMPLE, protocol).astype(np.int8)
