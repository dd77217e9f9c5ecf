"""Strategy expanders, one module per strategy kind, registered by ``kind``.

Each module defines ``expand(ctx: PlanContext, strategy) -> PlanWork``. Modules are imported on
first use so that loading one strategy does not pay for the others.
"""

from __future__ import annotations

import importlib
from typing import Any

from parplan.errors import PlanError
from parplan.plan.base import Expander, PlanContext, PlanWork

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


def get_expander(kind: str) -> Expander:
    """The expander of a strategy kind; an unknown kind is a :class:`PlanError` listing the known ones."""
    module = EXPANDERS.get(kind)
    if module is None:
        raise PlanError(f"unknown strategy kind {kind!r}; valid: {', '.join(EXPANDERS)}")
    expand: Expander = importlib.import_module(module).expand
    return expand


def expand(ctx: PlanContext, strategy: Any) -> PlanWork:
    """Expand any strategy spec into the work of one step."""
    return get_expander(strategy.kind)(ctx, strategy)
