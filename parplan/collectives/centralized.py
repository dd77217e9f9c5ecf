"""Centralized all-reduce: every rank sends its tensor to the root, which sends the sum back.

Reduce phase: ``p - 1`` sends into the root (no dependencies, all concurrent; the root's incoming
link is the bottleneck). Broadcast phase: the root sends the whole result to each other rank; each
of those sends depends on all ``p - 1`` reductions into the root, the steps that wrote the data it
carries. ``(p - 1)^2`` dependency edges, built as numpy blocks.
"""

from __future__ import annotations

import numpy as np

from parplan.collectives._build import StepBuffer, check_sizes
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
