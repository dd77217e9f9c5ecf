"""Ring broadcast and reduce: NCCL's pipelined chains, on several channels.

NCCL runs broadcast and reduce on its rings as chains: a broadcast enters the ring at ``root`` and
every rank forwards what it received to its successor; a reduce starts at the root's successor and
every rank adds its own tensor into what it received and forwards the sum, so the chain ends at
``root`` with the total. The tensor is cut into ``segments`` pieces (NCCL's chunks) that follow one
another down the chain, so a rank forwards segment ``s`` while it receives ``s + 1``.

**Channels**: ``C`` chains at once, each on its own part of the tensor (``chunk_bounds(n, C)``),
all over one ring order (:func:`~parplan.collectives.ring.ring_orders`: with rank ``groups`` the
members of each node consecutively, so a chain crosses each node boundary once), rotated to start
(broadcast) or end (reduce) at ``root``. Channel ``c``'s steps are on lane ``c`` (``meta["lane"]``),
so where a GPU has several NICs the channels cross the network through different ones, as NCCL
gives each channel its own NIC.

Steps of channel ``c``: segment ``s``, hop ``h = 0 .. p-2`` from chain position ``h`` to ``h + 1``,
laid out segment by segment. Step ``(s, h)`` depends on ``(s, h - 1)`` (the data it forwards
arrived, and for a reduce was added) and on ``(s - 1, h)`` (a rank sends its segments in order, as
NCCL's connection does; without it every segment would leave the root at once and share the link,
which is no pipeline at all).

Closed form (:class:`RingRooted`), a flow shop of ``p - 1`` hops and ``S`` segments of ``n / S``
bytes whose every stage takes the same time: ``(p - 2 + S)(alpha + n/S (beta + gamma))``, gamma
only for the reduce. The channels share every hop's port, so they take that time together (exact
without reductions; with them, exact on one channel).

>>> s = ring_chain("broadcast", 4, 8, root=1, segments=2)
>>> s.src.tolist(), s.dst.tolist()
([1, 2, 3, 1, 2, 3], [2, 3, 0, 2, 3, 0])
>>> ring_chain("reduce", 4, 8, root=1).meta["chains"]
((2, 3, 0, 1),)
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field

from parplan.collectives._build import check_sizes, make_schedule
from parplan.collectives.algorithm import (
    SPEC_MAX_CHANNELS,
    SPEC_MAX_SEGMENTS,
    Algorithm,
    AlgorithmSpecBase,
    Groups,
    Traffic,
    UniformCost,
    zero_traffic,
)
from parplan.collectives.ring import ring_channels, ring_orders
from parplan.collectives.schedule import IntArray, Schedule, chunk_bounds
from parplan.errors import CollectiveError

AUTO_SEGMENT_ELEMENTS = 1 << 17
"""Elements per segment when ``segments`` is automatic: NCCL's Simple step (4 MiB buffer over 8
steps = 512 KiB) of 4-byte elements. ``auto`` sets segments from the bytes and the protocol."""
MAX_SEGMENTS = 64
"""Most segments an automatic count gives each channel (the pipeline is full long before)."""


def auto_segments(part_elements: int) -> int:
    """Segments of a channel carrying ``part_elements`` when none are given: one per
    :data:`AUTO_SEGMENT_ELEMENTS`, 1 .. :data:`MAX_SEGMENTS`.

    >>> auto_segments(10), auto_segments(3 * 2**17 + 1), auto_segments(2**40)
    (1, 4, 64)
    """
    return max(1, min(MAX_SEGMENTS, math.ceil(part_elements / AUTO_SEGMENT_ELEMENTS)))


def chain_orders(
    collective: str, num_ranks: int, root: int, channels: int, groups: Groups | None
) -> list[list[int]]:
    """Each channel's chain: the ring order rotated to start at ``root`` (broadcast) or to end
    there (reduce); one order for every channel (channels differ by lane)."""
    if not 0 <= root < num_ranks:
        raise CollectiveError(f"root {root} is not a rank of {num_ranks}")
    order = ring_orders(num_ranks, 1, groups)[0]
    i = order.index(root) + (1 if collective == "reduce" else 0)
    return [order[i:] + order[:i]] * channels


def ring_chain(
    collective: str,
    num_ranks: int,
    num_elements: int,
    *,
    root: int = 0,
    channels: int | None = 1,
    segments: int | None = None,
    groups: Groups | None = None,
) -> Schedule:
    """A ring ``broadcast`` from ``root`` or ``reduce`` to ``root`` on ``channels`` chains (None:
    automatic, :func:`~parplan.collectives.ring.ring_channels`) of ``segments`` pieces each (None:
    :func:`auto_segments` of the channel's part). ``meta`` records the chains, channels, segments."""
    if collective not in ("broadcast", "reduce"):
        raise CollectiveError(f"a ring chain computes broadcast or reduce, not {collective!r}")
    check_sizes(num_ranks, num_elements)
    if segments is not None and segments < 1:
        raise CollectiveError(f"segments must be >= 1, got {segments}")
    p = num_ranks
    count = ring_channels(p, channels, groups)
    chains = chain_orders(collective, p, root, count, groups)
    parts = chunk_bounds(num_elements, count)
    hops = p - 1
    blocks: list[dict[str, np.ndarray]] = []
    counts: list[IntArray] = []
    deps: list[IntArray] = []
    lanes: list[IntArray] = []
    base = 0
    per_channel: list[int] = []
    for c, chain in enumerate(chains):
        part = int(parts[c + 1] - parts[c])
        segs = auto_segments(part) if segments is None else segments
        per_channel.append(segs)
        bounds = chunk_bounds(part, segs) + parts[c]
        order = np.asarray(chain, dtype=np.int32)
        total = segs * hops
        hop = np.tile(np.arange(hops, dtype=np.int64), segs)
        seg = np.repeat(np.arange(segs, dtype=np.int64), hops)
        blocks.append(
            {
                "src": order[hop],
                "dst": order[hop + 1],
                "offset": bounds[seg],
                "length": bounds[seg + 1] - bounds[seg],
                "reduce": np.full(total, collective == "reduce"),
                "phase": np.zeros(total, dtype=np.int8),
            }
        )
        index = base + np.arange(total, dtype=np.int64)
        after_hop = hop > 0  # (s, h) waits for (s, h - 1), then for (s - 1, h)
        after_seg = seg > 0
        counts.append(after_hop.astype(np.int64) + after_seg.astype(np.int64))
        pairs = np.stack([np.where(after_hop, index - 1, -1), np.where(after_seg, index - hops, -1)], axis=1)
        flat = pairs.ravel()
        deps.append(flat[flat >= 0])
        lanes.append(np.full(total, c, dtype=np.int32))
        base += total
    columns = {k: np.concatenate([b[k] for b in blocks]) for k in blocks[0]}
    return make_schedule(
        columns,
        np.concatenate(counts),
        np.concatenate(deps),
        algorithm="ring",
        collective=collective,
        num_ranks=p,
        num_elements=num_elements,
        phase_names=(collective,),
        root=root,
        meta={
            "channels": count,
            "segments": tuple(per_channel),
            "channel_bounds": tuple(int(x) for x in parts),
            "chains": tuple(tuple(c) for c in chains),
        },
        step_meta={"lane": np.concatenate(lanes)} if count > 1 else None,
    )


def chain_traffic(
    collective: str,
    num_ranks: int,
    num_elements: int,
    root: int,
    channels: int,
    groups: Groups | None,
) -> Traffic:
    """Per-rank (sent, received) elements: on each channel's chain every rank but the last sends
    the channel's part and every rank but the first receives it."""
    p = num_ranks
    sent, received = zero_traffic(p)
    if p == 1:
        return sent, received
    parts = np.diff(chunk_bounds(num_elements, channels))
    for chain, part in zip(chain_orders(collective, p, root, channels, groups), parts.tolist(), strict=True):
        sent[chain[:-1]] += part
        received[chain[1:]] += part
    return sent, received


def chain_time_s(
    num_ranks: int, size_bytes: float, segments: int, alpha_s: float, beta_s: float, gamma_s: float = 0.0
) -> float:
    """The pipelined chain's closed form: ``(p - 2 + S)(alpha + n/S (beta + gamma))``."""
    if num_ranks <= 1 or size_bytes <= 0:
        return 0.0
    piece = size_bytes / segments
    return (num_ranks - 2 + segments) * (alpha_s + piece * (beta_s + gamma_s))


class RingRootedSpec(AlgorithmSpecBase):
    """A ring (chain) broadcast or reduce: its ``root``, ``channels`` chains (None: one per device
    of the largest node, or one) and ``segments`` per channel (None: one per 128 Ki elements, up
    to 64). Short form ``"ring:8"`` for 8 channels."""

    name: Literal["ring"]
    root: int = Field(default=0, ge=0)
    channels: int | None = Field(default=None, ge=1, le=SPEC_MAX_CHANNELS)
    segments: int | None = Field(default=None, ge=1, le=SPEC_MAX_SEGMENTS)


class RingRooted(Algorithm[RingRootedSpec]):
    """The ring broadcast or reduce of the module docstring; one subclass per collective."""

    name = "ring"
    collective = "broadcast"
    spec_type = RingRootedSpec
    short_parameter = "channels"

    def variants(self, num_ranks: int) -> tuple[RingRootedSpec, ...]:
        return (
            self.default_spec(),
            RingRootedSpec(name="ring", root=num_ranks // 2, channels=2, segments=4),
            RingRootedSpec(name="ring", root=num_ranks - 1, channels=1, segments=3),
        )

    def uses_groups(self, spec: RingRootedSpec) -> bool:
        return True

    def _channels(self, spec: RingRootedSpec, num_ranks: int, groups: Groups | None) -> int:
        return ring_channels(num_ranks, spec.channels, groups)

    def build(
        self, spec: RingRootedSpec, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        return ring_chain(
            self.collective,
            num_ranks,
            num_elements,
            root=spec.root,
            channels=spec.channels,
            segments=spec.segments,
            groups=groups,
        )

    def closed_form_s(
        self,
        spec: RingRootedSpec,
        num_ranks: int,
        size_bytes: float,
        cost: UniformCost,
        groups: Groups | None,
    ) -> float:
        count = self._channels(spec, num_ranks, groups)
        # Automatic segments count 4-byte elements (see AUTO_SEGMENT_ELEMENTS).
        segments = spec.segments or auto_segments(math.ceil(size_bytes / count / 4))
        gamma = cost.gamma_s_per_byte if self.collective == "reduce" else 0.0
        return chain_time_s(num_ranks, size_bytes, segments, cost.alpha_s, cost.beta_s_per_byte, gamma)

    def traffic(
        self, spec: RingRootedSpec, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        count = self._channels(spec, num_ranks, groups)
        return chain_traffic(self.collective, num_ranks, num_elements, spec.root, count, groups)


class RingBroadcast(RingRooted):
    """Broadcast down the ring's chain from ``root``."""

    collective = "broadcast"


class RingReduce(RingRooted):
    """Reduce along the ring's chain into ``root``."""

    collective = "reduce"


BROADCAST = RingBroadcast()
REDUCE = RingReduce()
