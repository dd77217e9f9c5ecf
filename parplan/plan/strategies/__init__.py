"""Strategy expanders, one module per strategy kind, registered by ``kind``.

Each module defines ``expand(ctx: PlanContext, strategy) -> PlanWork``. Modules are imported on
first use so that loading one strategy does not pay for the others.
"""

from __future__ import annotations

import importlib
from typing import Any

from parplan.errors import PlanError
from parplan.plan.base import Expander, MemoryBreakdown, PlanContext, PlanWork

EXPANDERS: dict[str, str] = {
    "local": "parplan.plan.strategies.local",
    "data_parallel": "parplan.plan.strategies.data_parallel",
    "model_parallel": "parplan.plan.strategies.model_parallel",
    "federated": "parplan.plan.strategies.federated",
    "population_based": "parplan.plan.strategies.population_based",
    "custom": "parplan.plan.strategies.custom",
    "sharded": "parplan.plan.strategies.sharded",
}
"""Strategy kind -> module that expands it (adding a kind is adding a module and a line)."""


def _module(kind: str) -> Any:
    module = EXPANDERS.get(kind)
    if module is None:
        raise PlanError(f"unknown strategy kind {kind!r}; valid: {', '.join(EXPANDERS)}")
    return importlib.import_module(module)


def get_expander(kind: str) -> Expander:
    """The expander of a strategy kind; an unknown kind is a :class:`PlanError` listing the known ones."""
    expand: Expander = _module(kind).expand
    return expand


def expand(ctx: PlanContext, strategy: Any) -> PlanWork:
    """Expand any strategy spec into the work of one step."""
    return get_expander(strategy.kind)(ctx, strategy)


def plan_memory(ctx: PlanContext, strategy: Any) -> tuple[MemoryBreakdown, ...]:
    """Every device's peak memory under a strategy: the kind's own ``memory(ctx, strategy)`` where its
    module has one (a sharded plan's memory needs its layout, not the task graph of a whole step),
    else what :func:`expand` finds. The same figures either way."""
    module = _module(strategy.kind)
    memory = getattr(module, "memory", None)
    if memory is not None:
        result: tuple[MemoryBreakdown, ...] = memory(ctx, strategy)
        return result
    return expand(ctx, strategy).memory
