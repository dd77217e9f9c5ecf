"""The order a sharded plan's event-simulated step appends its pipeline units in
(:func:`strict_order`), apart from the builder of :mod:`parplan.plan.sharded.tasks` that uses it."""

from __future__ import annotations

from collections.abc import Sequence

from parplan.errors import PlanError
from parplan.pipeline import Unit

__all__ = ["strict_order"]


def strict_order(orders: Sequence[Sequence[Unit]], pp: int, v: int) -> list[tuple[int, Unit]]:
    """Every (stage, unit) in an order that puts each after the unit before it on its stage and
    after the units it needs data from (the previous model chunk's forward, the next one's
    backward): the order the builder appends them, so each unit can wait for its predecessor on
    its stage, as Megatron's blocking schedule runs them (a topological order, smallest position
    first; the schedules' orders make no cycle, tests/pipeline prove it)."""
    import heapq

    last = pp * v - 1
    place = [{u: k for k, u in enumerate(order)} for order in orders]
    indegree: dict[tuple[int, Unit], int] = {}
    for s, order in enumerate(orders):
        for k, u in enumerate(order):
            g = u.chunk * pp + s
            needs = int(k > 0)
            if u.direction == "F":
                needs += int(g > 0)
            else:
                needs += (
                    1 if g < last else 0
                )  # the next chunk's backward (the last: its own forward, earlier)
            indegree[(s, u)] = needs
    ready = [(0, s, orders[s][0]) for s in range(pp) if orders[s] and indegree[(s, orders[s][0])] == 0]
    heapq.heapify(ready)
    out: list[tuple[int, Unit]] = []
    while ready:
        _, s, u = heapq.heappop(ready)
        out.append((s, u))
        g = u.chunk * pp + s
        followers = []
        k = place[s][u]
        if k + 1 < len(orders[s]):
            followers.append((s, orders[s][k + 1]))
        if u.direction == "F" and g < last:
            followers.append(((g + 1) % pp, Unit("F", u.microbatch, (g + 1) // pp)))
        if u.direction == "B" and g > 0:
            followers.append(((g - 1) % pp, Unit("B", u.microbatch, (g - 1) // pp)))
        for key in followers:
            indegree[key] -= 1
            if indegree[key] == 0:
                heapq.heappush(ready, (place[key[0]][key[1]], key[0], key[1]))
    if len(out) != len(indegree):
        raise PlanError("the pipeline schedule's orders deadlock against the chunks' data dependencies")
    return out
