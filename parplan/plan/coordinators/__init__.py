"""Custom coordinators: plugins that turn a cluster, a model and a config into one step of work.

A coordinator is registered under the ``parplan.coordinators`` entry-point group, e.g. in a
plugin's ``pyproject.toml``::

    [project.entry-points."parplan.coordinators"]
    my_coordinator = "my_package.module:MyCoordinator"

The object the entry point names is either a callable following :class:`Coordinator`, or a class
whose instances do (it is instantiated with no arguments, then called). It is called as
``coordinator(network, model, training, config)`` with the cluster's
:class:`~parplan.topology.network.Network`, the :class:`~parplan.model.graph.ModelGraph`, the
scenario's :class:`~parplan.config.scenario.TrainingSpec` and the strategy's free-form ``config``
mapping, and returns either

- a :class:`~parplan.plan.base.PlanWork` (full control: unit, samples, memory, quality), or
- a :class:`~parplan.taskgraph.TaskGraph` of one training step; parplan then takes the step's
  samples as ``training.global_batch_size`` (or ``graph.meta["samples_per_step"]``) and reports no
  memory for it.

Errors: an unknown name is a :class:`~parplan.errors.PluginError` listing the installed
coordinators; a plugin that fails to import, raises, or returns anything else is a ``PluginError``
naming it. The built-in ``parameter_server`` (:mod:`parplan.plan.coordinators.parameter_server`)
is registered by parplan's own ``pyproject.toml`` and goes through this same path.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any, Protocol

from parplan.errors import PluginError

if TYPE_CHECKING:
    from parplan.config.scenario import TrainingSpec
    from parplan.model.graph import ModelGraph
    from parplan.plan.base import PlanWork
    from parplan.taskgraph import TaskGraph
    from parplan.topology.network import Network

GROUP = "parplan.coordinators"
"""The entry-point group coordinators register under."""


class Coordinator(Protocol):
    """Turns a cluster, a model, the training settings and a config into one step of work."""

    def __call__(
        self, network: Network, model: ModelGraph, training: TrainingSpec, config: Mapping[str, Any]
    ) -> TaskGraph | PlanWork: ...


def installed() -> dict[str, EntryPoint]:
    """The coordinators installed in this environment, by name (sorted)."""
    found: dict[str, EntryPoint] = {}
    for ep in sorted(entry_points(group=GROUP), key=lambda e: (e.name, e.value)):
        found.setdefault(ep.name, ep)
    return found


def load(name: str) -> Coordinator:
    """The coordinator registered as ``name``, ready to call."""
    available = installed()
    ep = available.get(name)
    if ep is None:
        names = ", ".join(available) or "none"
        raise PluginError(f"unknown coordinator {name!r}; installed: {names}")
    try:
        obj = ep.load()
    except Exception as exc:  # a broken plugin must not crash parplan with a traceback
        raise PluginError(f"coordinator {name!r} ({ep.value}) failed to load: {exc}") from exc
    if isinstance(obj, type):
        try:
            obj = obj()
        except Exception as exc:
            raise PluginError(f"coordinator {name!r}: cannot instantiate {ep.value}: {exc}") from exc
    if not callable(obj):
        raise PluginError(f"coordinator {name!r} ({ep.value}) is not callable")
    coordinator: Coordinator = obj
    return coordinator
