"""The ``custom`` strategy: a coordinator plugin found by name in the ``parplan.coordinators`` group.

The coordinator is loaded with :func:`parplan.plan.coordinators.load` and called with the cluster,
the model, the training settings and the strategy's ``config``. What it returns is checked: a
:class:`~parplan.plan.base.PlanWork` is used as it is, a :class:`~parplan.taskgraph.TaskGraph`
is wrapped as one step of ``graph.meta["samples_per_step"]`` (default: the global batch) samples
with no memory figures; every device either names must exist in the cluster. Anything else, or an
exception inside the coordinator, is a :class:`~parplan.errors.PluginError` naming it.
"""

from __future__ import annotations

from parplan.config.strategy import CustomStrategy
from parplan.errors import ParplanError, PluginError
from parplan.plan import coordinators
from parplan.plan.base import PlanContext, PlanWork
from parplan.taskgraph import TaskGraph


def expand(ctx: PlanContext, strategy: CustomStrategy) -> PlanWork:
    """Run the named coordinator and check its work."""
    name = strategy.coordinator
    coordinator = coordinators.load(name)
    try:
        out = coordinator(ctx.network, ctx.model, ctx.training, dict(strategy.config))
    except PluginError:
        raise
    except ParplanError as exc:
        raise PluginError(f"coordinator {name!r}: {exc}") from exc
    except Exception as exc:  # a plugin's bug is reported, not a traceback
        raise PluginError(f"coordinator {name!r} raised {type(exc).__name__}: {exc}") from exc
    if isinstance(out, PlanWork):
        work = out
    elif isinstance(out, TaskGraph):
        samples = out.meta.get("samples_per_step", ctx.training.global_batch_size)
        if not isinstance(samples, int | float) or isinstance(samples, bool) or samples <= 0:
            raise PluginError(f"coordinator {name!r}: graph meta samples_per_step must be a positive number")
        work = PlanWork(
            graph=out,
            devices=out.devices,
            unit="step",
            samples_per_unit=float(samples),
            memory=(),
            notes=(f"coordinator {name!r} returned a bare task graph: no memory figures",),
        )
    else:
        raise PluginError(
            f"coordinator {name!r} returned {type(out).__name__}; expected a TaskGraph or a PlanWork"
        )
    unknown = [d for d in (*work.graph.devices, *work.devices) if d not in ctx.network.devices]
    if unknown:
        raise PluginError(f"coordinator {name!r} uses device {unknown[0]!r}, which the cluster does not have")
    return work
