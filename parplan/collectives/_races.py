"""The race check of the reduction data plane (:mod:`parplan.collectives.dataplane`): a write to
an element must be ordered after every earlier conflicting access of it."""

from __future__ import annotations

from parplan.collectives.schedule import IntArray
from parplan.errors import CollectiveError


def check_races(
    name: str,
    j: int,
    s: int,
    d: int,
    lo: int,
    hi: int,
    reduce: bool,
    anc: int,
    atoms: int,
    last_overwrite: IntArray,
    readers: dict[int, list[int]],
    reducers: dict[int, list[int]],
) -> None:
    """Check step ``j`` is ordered after every conflicting earlier access, then record its own."""

    def ordered(x: int) -> bool:
        return bool((anc >> x) & 1)

    for atom in range(lo, hi):
        key = s * atoms + atom
        ow = int(last_overwrite[s, atom])
        for x in ([ow] if ow >= 0 else []) + reducers.get(key, []):
            if not ordered(x):
                raise CollectiveError(
                    f"{name}: step {j} reads data of rank {s} that step {x} writes, unordered"
                )
        readers.setdefault(key, []).append(j)
    for atom in range(lo, hi):
        key = d * atoms + atom
        ow = int(last_overwrite[d, atom])
        conflicting = ([ow] if ow >= 0 else []) + readers.get(key, [])
        if not reduce:
            conflicting += reducers.get(key, [])
        for x in conflicting:
            if not ordered(x):
                raise CollectiveError(
                    f"{name}: race: step {j} writes data of rank {d} that step {x} also uses, and "
                    f"neither depends on the other"
                )
        if reduce:
            reducers.setdefault(key, []).append(j)
        else:
            readers[key] = []
            reducers[key] = []
