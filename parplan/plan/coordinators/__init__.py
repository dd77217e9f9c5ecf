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

A coordinator may also check its ``config`` before anything is planned, so ``validate-config``
reports a bad config with ``file:line:column`` like every other error instead of ``simulate``
failing on it later: give it a ``validate(config, network)`` method (:class:`ValidatingCoordinator`)
returning :class:`ConfigProblem` s, each naming the key (or list index) of ``config`` it is about.
``network`` is ``None`` when a strategy file is checked on its own and the cluster's
:class:`~parplan.topology.network.Network` when a scenario is, so checks that need device names run
only then. :func:`check_config` is what ``validate-config`` calls; a coordinator without the method
is taken as valid. A coordinator that validates should also call its own ``validate`` when it is
called, so the two never disagree (the built-in one does).

Errors: an unknown name is a :class:`~parplan.errors.PluginError` listing the installed
coordinators; a plugin that fails to import, raises, or returns anything else is a ``PluginError``
naming it. The built-in ``parameter_server`` (:mod:`parplan.plan.coordinators.parameter_server`)
is registered by parplan's own ``pyproject.toml`` and goes through this same path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

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


@dataclass(frozen=True)
class ConfigProblem:
    """One problem a coordinator's ``validate`` found in its ``config``.

    ``loc`` is the path to the value inside ``config`` (keys and list indices; ``()`` for the
    config as a whole), which ``validate-config`` turns into ``file:line:column config.<loc>``.
    ``message`` reads on its own, naming its subject (``servers must be >= 1, got 0``): it is also
    the text of the :class:`~parplan.errors.PluginError` the coordinator raises when called anyway.
    """

    loc: tuple[str | int, ...]
    message: str
    severity: Literal["error", "warning", "info"] = "error"


@runtime_checkable
class ValidatingCoordinator(Protocol):
    """A coordinator that can check its config before it is called (the optional hook)."""

    def validate(self, config: Mapping[str, Any], network: Network | None) -> Iterable[ConfigProblem]:
        """Every problem with ``config``; device names are checked only when ``network`` is given."""
        ...


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


def check_config(name: str, config: Mapping[str, Any], network: Network | None = None) -> list[ConfigProblem]:
    """The problems coordinator ``name``'s ``validate`` hook finds in ``config`` (none without a hook).

    Raises :class:`PluginError` when the coordinator cannot be loaded, or its hook raises or returns
    anything but :class:`ConfigProblem` s.
    """
    coordinator = load(name)
    if not isinstance(coordinator, ValidatingCoordinator):
        return []
    try:
        problems = list(coordinator.validate(config, network))
    except Exception as exc:  # a plugin bug must not crash validate-config with a traceback
        raise PluginError(f"coordinator {name!r}: validate raised {type(exc).__name__}: {exc}") from exc
    for problem in problems:
        if not isinstance(problem, ConfigProblem):
            raise PluginError(
                f"coordinator {name!r}: validate returned {type(problem).__name__}; expected ConfigProblem"
            )
    return problems
