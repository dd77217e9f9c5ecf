"""The one exception hierarchy of parplan.

Library code raises these; only the CLI turns them into a message and an exit code.
"""

from __future__ import annotations

from dataclasses import dataclass


class ParplanError(Exception):
    """Base of every error parplan raises on purpose: a user's mistake or an impossible request."""


@dataclass(frozen=True)
class Issue:
    """One problem found in a file: where it is and what is wrong.

    ``line`` and ``column`` are 1-based and 0 when the position is unknown. ``severity`` is
    ``"error"`` (the file is invalid), ``"warning"`` (valid but suspicious) or ``"info"`` (how
    parplan will read something, e.g. population members queueing for devices).
    """

    path: str
    field: str
    message: str
    line: int = 0
    column: int = 0
    severity: str = "error"

    def __str__(self) -> str:
        where = self.path
        if self.line:
            where += f":{self.line}:{self.column or 1}"
        field = f" {self.field}:" if self.field else ""
        return f"{where}{field} {self.message}"


class ConfigError(ParplanError):
    """Raised when a file cannot be read, parsed or validated; carries every issue found."""

    def __init__(self, issues: list[Issue] | Issue | str) -> None:
        if isinstance(issues, str):
            issues = [Issue(path="", field="", message=issues)]
        elif isinstance(issues, Issue):
            issues = [issues]
        self.issues: list[Issue] = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


class UnitError(ConfigError):
    """Raised when a quantity such as "25 GB/s" or "2 us" is malformed or has the wrong dimension."""


class TopologyError(ParplanError):
    """Raised when a cluster graph is inconsistent: unknown device, no route between two devices."""


class ModelError(ParplanError):
    """Raised when a model graph is inconsistent: cycles, unknown node ids in edges."""


class CollectiveError(ParplanError):
    """Raised for an unknown collective algorithm or a schedule that cannot be built or run."""


class PlanError(ParplanError):
    """Raised when a strategy cannot be expanded into work on the given cluster and model."""


class InfeasiblePlanError(PlanError):
    """Raised when a plan is well formed but cannot run, e.g. it does not fit in device memory."""


class SimulationError(ParplanError):
    """Raised when the engine cannot time a task graph (e.g. a dependency cycle)."""


class PluginError(ParplanError):
    """Raised when a custom coordinator plugin is unknown, fails to load or returns bad work."""


class RuntimeCheckError(ParplanError):
    """Raised by the numeric data-parallel runtime pieces on inconsistent inputs."""


class UsageError(ParplanError):
    """Raised when a value given on the command line (an option or argument) cannot be used: it is
    malformed (``--bucket-size huge``), out of range (a sweep's end below its start) or names
    something that does not exist (``--plan nope``). The CLI reports it as a usage error, exit
    code 2; ``option`` names the option when known."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


class EmulationError(ParplanError):
    """Raised when an emulated cluster (network namespaces shaped with tc) cannot be built or used:
    no root or CAP_NET_ADMIN, no iproute2, a cluster too large or of a shape it cannot emulate."""
