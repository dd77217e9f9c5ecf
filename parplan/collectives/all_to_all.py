"""All-to-all, the exchange of expert parallelism: ``pairwise`` (NCCL's) and ``ring`` (a linear shift).

Rank ``r`` holds ``p`` blocks; block ``j`` goes to rank ``j``, which ends with block ``r`` of every
rank ``r`` in slot ``r`` (the layout and buffers are in :mod:`parplan.collectives.schedule`: a
step reads the sender's send buffer, region 0, and writes a slot of the receiver's output, region
1; a rank's own block is a local copy no step makes).

- ``pairwise`` is what NCCL runs (``ncclGroupStart``; a ``ncclSend`` and a ``ncclRecv`` per peer;
  ``ncclGroupEnd``): every rank posts its ``p-1`` sends and ``p-1`` receives at once, each cut
  into ``channels`` parts as NCCL spreads a peer's bytes over its p2p channels (NCCL's default:
  :data:`P2P_CHANNELS_PER_PEER`), part ``c`` on lane ``c`` so a GPU's NICs share them. On a uniform
  switch of full bisection the ports carry it all at once: ``a + (p-1)/p n b`` (with a link per
  pair of ranks, ``a + n/p b``).
- ``ring`` is the linear shift: ``p-1`` rounds, round ``t`` sends block ``r+t`` to rank ``r+t``
  (one message in flight per rank, a sendrecv per round): ``(p-1)(a + n/p b)``.

Both move ``(p-1) n/p`` elements out of and into every rank, the least an all-to-all can; busbw
as nccl-tests' alltoall_perf defines it is algbw times ``(p-1)/p``. Bruck's log-round algorithm is
in :mod:`parplan.collectives.all_to_all_bruck`, the node-aware one in
:mod:`parplan.collectives.all_to_all_hierarchical`.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from parplan.collectives._build import check_sizes, make_schedule
from parplan.collectives.algorithm import (
    SPEC_MAX_CHANNELS,
    Algorithm,
    AlgorithmSpecBase,
    Groups,
    Traffic,
    UniformCost,
)
from parplan.collectives.schedule import IntArray, Schedule, all_to_all_block, chunk_bounds

P2P_CHANNELS_PER_PEER = 2
"""NCCL's p2p channels per peer (``NCCL_NCHANNELS_PER_NET_PEER``'s default): each peer's bytes are
split over this many channels."""
P2P_LL_THRESHOLD_BYTES = 16384
"""NCCL sends a p2p message of at most this many bytes with LL, larger ones with Simple
(``NCCL_P2P_LL_THRESHOLD``'s default)."""
PHASES = ("exchange",)


def exchange_traffic(num_ranks: int, num_elements: int) -> Traffic:
    """Per-rank (sent, received) elements of a direct all-to-all: ``(p-1)`` blocks each way."""
    moved = (num_ranks - 1) * all_to_all_block(num_elements, num_ranks)
    full = np.full(num_ranks, moved, dtype=np.int64)
    return full, full.copy()


def all_to_all_schedule(
    name: str,
    num_ranks: int,
    num_elements: int,
    columns: dict[str, IntArray],
    dep_counts: IntArray,
    dep_indices: IntArray,
    *,
    regions: int = 2,
    channels: int = 1,
) -> Schedule:
    """A Schedule of all-to-all steps from columns ``src``, ``dst``, ``offset``, ``dst_offset``,
    ``length`` (and ``lane``, if any) and CSR dependencies; zero-length steps are dropped."""
    n = len(columns["src"])
    cols = {
        "src": columns["src"],
        "dst": columns["dst"],
        "offset": columns["offset"],
        "length": columns["length"],
        "reduce": np.zeros(n, dtype=np.bool_),
        "phase": np.zeros(n, dtype=np.int8),
    }
    step_meta = {"dst_offset": np.asarray(columns["dst_offset"], dtype=np.int64)}
    if "lane" in columns:
        step_meta["lane"] = np.asarray(columns["lane"], dtype=np.int32)
    return make_schedule(
        cols,
        dep_counts,
        dep_indices,
        algorithm=name,
        collective="all_to_all",
        num_ranks=num_ranks,
        num_elements=num_elements,
        phase_names=PHASES,
        meta={"regions": regions, "channels": channels},
        step_meta=step_meta,
    )


class PairwiseSpec(AlgorithmSpecBase):
    """NCCL's all-to-all: every send and receive at once, each peer's block over ``channels`` p2p
    channels (None: NCCL's default, :data:`P2P_CHANNELS_PER_PEER`). Short form ``"pairwise:4"``."""

    name: Literal["pairwise"]
    channels: int | None = Field(default=None, ge=1, le=SPEC_MAX_CHANNELS)


class Pairwise(Algorithm[PairwiseSpec]):
    """``pairwise``: ``a + (p-1)/p n b`` on a switch (see the module docstring)."""

    name = "pairwise"
    collective = "all_to_all"
    spec_type = PairwiseSpec
    short_parameter = "channels"

    def variants(self, num_ranks: int) -> tuple[PairwiseSpec, ...]:
        return (
            self.default_spec(),
            PairwiseSpec(name="pairwise", channels=1),
            PairwiseSpec(name="pairwise", channels=3),
        )

    def build(
        self, spec: PairwiseSpec, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        check_sizes(num_ranks, num_elements)
        p, n = num_ranks, num_elements
        block = all_to_all_block(n, p)
        channels = spec.channels or P2P_CHANNELS_PER_PEER
        parts = chunk_bounds(block, channels)
        src, dst = (a.ravel() for a in np.meshgrid(np.arange(p), np.arange(p), indexing="ij"))
        keep = src != dst
        src, dst = np.repeat(src[keep], channels), np.repeat(dst[keep], channels)
        lane = np.tile(np.arange(channels, dtype=np.int64), len(src) // channels)
        columns = {
            "src": src,
            "dst": dst,
            "offset": dst * block + parts[lane],
            "dst_offset": n + src * block + parts[lane],
            "length": np.diff(parts)[lane],
            "lane": lane,
        }
        none = np.zeros(len(src), dtype=np.int64)
        return all_to_all_schedule(self.name, p, n, columns, none, none[:0], channels=channels)

    def closed_form_s(
        self, spec: PairwiseSpec, num_ranks: int, size_bytes: float, cost: UniformCost, groups: Groups | None
    ) -> float:
        fan = num_ranks - 1 if cost.shared_port else 1
        return cost.alpha_s + fan * size_bytes / num_ranks * cost.beta_s_per_byte

    def traffic(
        self, spec: PairwiseSpec, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        return exchange_traffic(num_ranks, num_elements)


class RingSpec(AlgorithmSpecBase):
    """The linear shift: ``p-1`` rounds, round ``t`` to rank ``r+t``."""

    name: Literal["ring"]


class Ring(Algorithm[RingSpec]):
    """``ring`` (linear shift): ``(p-1)(a + n/p b)``."""

    name = "ring"
    collective = "all_to_all"
    spec_type = RingSpec

    def build(
        self, spec: RingSpec, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        check_sizes(num_ranks, num_elements)
        p, n = num_ranks, num_elements
        block = all_to_all_block(n, p)
        rounds = np.repeat(np.arange(1, p, dtype=np.int64), p)
        src = np.tile(np.arange(p, dtype=np.int64), p - 1)
        dst = (src + rounds) % p
        columns = {
            "src": src,
            "dst": dst,
            "offset": dst * block,
            "dst_offset": n + src * block,
            "length": np.full(len(src), block, dtype=np.int64),
        }
        # Round t's step from r waits for r's send and receive of round t-1 (a sendrecv per round).
        later = rounds > 1
        previous_send = (rounds - 2) * p + src
        previous_recv = (rounds - 2) * p + (src - rounds + 1) % p
        counts = np.where(later, 2, 0).astype(np.int64)
        deps = np.stack([previous_send, previous_recv], axis=1)[later].ravel()
        return all_to_all_schedule(self.name, p, n, columns, counts, deps)

    def closed_form_s(
        self, spec: RingSpec, num_ranks: int, size_bytes: float, cost: UniformCost, groups: Groups | None
    ) -> float:
        return (num_ranks - 1) * (cost.alpha_s + size_bytes / num_ranks * cost.beta_s_per_byte)

    def traffic(
        self, spec: RingSpec, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        return exchange_traffic(num_ranks, num_elements)


PAIRWISE = Pairwise()
RING = Ring()
