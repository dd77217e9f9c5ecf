"""Centralized all-reduce: every rank sends its tensor to the root, which sends the sum back.

Reduce phase: ``p - 1`` sends into the root (no dependencies, all concurrent; the root's incoming
link is the bottleneck). Broadcast phase: the root sends the whole result to each other rank; each
of those sends depends on all ``p - 1`` reductions into the root, the steps that wrote the data it
carries. ``(p - 1)^2`` dependency edges, built as numpy blocks.

Closed form: ``2 alpha + 2(p-1) n beta + (p-1) n gamma`` through one port (the root's link carries
every message), ``2 alpha + 2 n beta + (p-1) n gamma`` with a link per pair. Traffic: ``(p-1) n``
into the root and ``(p-1) n`` out of it, ``n`` each way elsewhere.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from parplan.collectives._build import StepBuffer, check_sizes
from parplan.collectives.algorithm import Algorithm, AlgorithmSpecBase, Groups, Traffic, UniformCost
from parplan.collectives.schedule import Schedule
from parplan.collectives.tree import TREE_PHASES
from parplan.errors import CollectiveError


def centralized_all_reduce(num_ranks: int, num_elements: int, *, root: int = 0) -> Schedule:
    """All ranks send to ``root``; ``root`` reduces and sends the result back.

    >>> s = centralized_all_reduce(4, 100, root=2)
    >>> s.src.tolist(), s.dst.tolist()
    ([0, 1, 3, 2, 2, 2], [2, 2, 2, 0, 1, 3])
    """
    check_sizes(num_ranks, num_elements)
    if not 0 <= root < num_ranks:
        raise CollectiveError(f"root {root} is not a rank of a {num_ranks}-rank collective")
    others = np.array([r for r in range(num_ranks) if r != root], dtype=np.int32)
    m = len(others)
    buf = StepBuffer()
    full = {"offset": np.zeros(m, dtype=np.int64), "length": np.full(m, num_elements, dtype=np.int64)}
    first = buf.add_block(
        {
            "src": others,
            "dst": np.full(m, root, dtype=np.int32),
            "reduce": np.ones(m, dtype=np.bool_),
            "phase": np.zeros(m, dtype=np.int8),
            **full,
        },
        np.zeros(m, dtype=np.int64),
        np.zeros(0, dtype=np.int64),
    )
    buf.add_block(
        {
            "src": np.full(m, root, dtype=np.int32),
            "dst": others,
            "reduce": np.zeros(m, dtype=np.bool_),
            "phase": np.ones(m, dtype=np.int8),
            **full,
        },
        np.full(m, m, dtype=np.int64),
        np.tile(np.arange(first, first + m, dtype=np.int64), m),
    )
    return buf.build(
        algorithm="centralized",
        collective="all_reduce",
        num_ranks=num_ranks,
        num_elements=num_elements,
        phase_names=TREE_PHASES,
        root=root,
        meta={"root": root},
    )


class CentralizedAlgorithm(AlgorithmSpecBase):
    """Every rank sends to ``root``, which reduces and sends the result back."""

    name: Literal["centralized"]
    root: int = Field(default=0, ge=0)


class CentralizedAllReduce(Algorithm[CentralizedAlgorithm]):
    """The centralized all-reduce (see the module docstring); the root does not change the time."""

    name = "centralized"
    spec_type = CentralizedAlgorithm
    short_parameter = "root"
    abbreviation = "central"

    def variants(self, num_ranks: int) -> tuple[CentralizedAlgorithm, ...]:
        return (self.default_spec(), CentralizedAlgorithm(name="centralized", root=num_ranks - 1))

    def build(
        self, spec: CentralizedAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Schedule:
        return centralized_all_reduce(num_ranks, num_elements, root=spec.root)

    def closed_form_s(
        self,
        spec: CentralizedAlgorithm,
        num_ranks: int,
        size_bytes: float,
        cost: UniformCost,
        groups: Groups | None,
    ) -> float:
        p, n = num_ranks, size_bytes
        fan = p - 1 if cost.shared_port else 1
        return 2.0 * cost.alpha_s + 2.0 * fan * n * cost.beta_s_per_byte + (p - 1) * n * cost.gamma_s_per_byte

    def traffic(
        self, spec: CentralizedAlgorithm, num_ranks: int, num_elements: int, groups: Groups | None = None
    ) -> Traffic:
        if not 0 <= spec.root < num_ranks:
            raise CollectiveError(f"root {spec.root} is not a rank of a {num_ranks}-rank collective")
        per = np.full(num_ranks, num_elements, dtype=np.int64)
        per[spec.root] = (num_ranks - 1) * num_elements
        if num_ranks == 1:
            per[:] = 0
        return per, per.copy()


ALL_REDUCE = CentralizedAllReduce()
