"""The search's builders kept from one evaluation to the next on the same cluster, so their memos
(per-block figures, chunk call sums, stage calls and sums, meshes) are worked out once per
cluster, model and search settings instead of once per evaluation: a search evaluated in slices
(``--jobs``), again, or over batch sizes on one network reads them back.

Every memo inside the builders is keyed on what it reads of the plan; what they read of the
context is the network (this store is the network's, and goes with it), the model's transformer
shape and spec, and the settings every candidate of a search shares (dtype, kernels, flash
attention, TP overlap: the :class:`~parplan.config.search.SearchSpec`), which key the store. The
training block is not read by any memo (the micro-batch count, which the global batch sets, is
part of every key it enters), so contexts alike but for it share the builders; each evaluation
hands the builders its own context (:meth:`Builders.bind`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from parplan.api.search.chunks import ChunkBuilder
from parplan.api.search.meshes import Meshes
from parplan.api.search.stages import SyncBuilder
from parplan.plan.sharded.clock import GroupClock

if TYPE_CHECKING:
    from parplan.config.search import SearchSpec
    from parplan.model.transformer import TransformerShape
    from parplan.plan.base import PlanContext
    from parplan.topology.network import Network


@dataclass
class Builders:
    """An evaluation's chunk and sync builders and meshes, shared across evaluations (module
    docstring)."""

    chunks: ChunkBuilder
    stages: SyncBuilder
    meshes: Meshes

    def bind(self, ctx: PlanContext) -> Builders:
        """The builders reading ``ctx`` (same network, model and search settings) from now on:
        what they read of it unmemoised, the global batch, is this context's."""
        self.chunks.ctx = self.stages.ctx = self.stages.holdings.ctx = ctx
        return self


_STORE: weakref.WeakKeyDictionary[Network, dict[tuple[Any, ...], Builders]] = weakref.WeakKeyDictionary()
"""Per network: the builders per (shape, model spec, search settings)."""


def builders(ctx: PlanContext, search: SearchSpec, shape: TransformerShape) -> Builders:
    """The builders for ``ctx`` and ``search`` on ``ctx``'s network, made on first use."""
    store = _STORE.setdefault(ctx.network, {})
    key = (shape, ctx.model_spec, search)
    found = store.get(key)
    if found is None:
        clock = GroupClock(ctx.network, share_congruent=True)
        meshes = Meshes(ctx.network)
        found = store[key] = Builders(
            ChunkBuilder(ctx, shape, clock, meshes), SyncBuilder(ctx, shape, clock, meshes), meshes
        )
    return found.bind(ctx)


def forget(network: Network) -> None:
    """Drop the builders kept for ``network`` (the next evaluation on it builds them anew; the
    clock's per-network memos stay): what a benchmark calls to time an evaluation without them."""
    _STORE.pop(network, None)
