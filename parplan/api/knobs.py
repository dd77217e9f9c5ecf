"""The knobs a plan can be changed by without editing files: which strategies each reaches, how
values are read, and how they are applied to a strategy.

``simulate`` overrides them (``--algorithm``, ``--set rounds=20``), ``compare-strategies`` sweeps
them (``--sweep num_replicas=2,4``) and the evaluator applies them; one table (:data:`KNOBS`)
serves all three, so a knob added here is accepted everywhere. Values are checked when read
(:func:`parse_value`; a bad one is an :class:`OptionValueError`, a usage error): counts become
ints, ``overlap`` a bool; algorithms, sizes and choices are
checked and kept as written (``tree:4``, ``25MiB``), so variant names read like the command line.
:func:`apply_overrides` writes them into a copy of a strategy and validates it again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from parplan.errors import ConfigError, Issue, PlanError, UsageError
from parplan.pipeline import schedule_names

if TYPE_CHECKING:
    from parplan.config.scenario import PlanSpec

KNOBS: dict[str, tuple[str, ...]] = {
    "algorithm": ("data_parallel", "sharded"),
    "num_replicas": ("data_parallel",),
    "bucket_size": ("data_parallel", "sharded"),
    "overlap": ("data_parallel", "sharded"),
    "batch_split": ("data_parallel",),
    "reduce": ("data_parallel",),
    "microbatches": ("model_parallel", "data_parallel"),
    "schedule": ("model_parallel", "data_parallel", "sharded"),
    "num_clients": ("federated",),
    "rounds": ("federated",),
    "local_steps": ("federated",),
    "population_size": ("population_based",),
    "generations": ("population_based",),
    "tp": ("sharded",),
    "pp": ("sharded",),
    "dp": ("sharded",),
    "cp": ("sharded",),
    "ep": ("sharded",),
    "virtual_stages": ("sharded",),
    "microbatch_size": ("sharded",),
    "sequence_parallel": ("sharded",),
    "recompute": ("sharded",),
    "zero": ("sharded",),
    "fsdp": ("sharded",),
}
"""Knob -> strategy kinds it applies to (``microbatches`` and ``schedule`` reach a data-parallel
plan only through its model-parallel replica; a sharded plan's ``algorithm``, ``bucket_size`` and
``overlap`` are those of its gradient reduction)."""


def knobs_by_kind(skip: Sequence[str] = ()) -> str:
    """The knobs grouped by the strategy kind they belong to, for help texts (``skip``: those
    with an option of their own).

    >>> knobs_by_kind(skip=["algorithm", "num_replicas", "bucket_size", "overlap"])[:40]
    'batch_split, reduce (data_parallel); mic'
    """
    groups: dict[str, list[str]] = {}
    for knob, kinds in KNOBS.items():
        if knob not in skip:
            groups.setdefault(kinds[0], []).append(knob)
    return "; ".join(f"{', '.join(names)} ({kind})" for kind, names in groups.items())


INTEGER_KNOBS = frozenset(
    {"num_replicas", "microbatches", "num_clients", "rounds", "local_steps", "population_size", "generations"}
    | {"tp", "pp", "dp", "cp", "ep", "virtual_stages", "microbatch_size"}
)
"""Knobs whose values are positive integers."""

CHOICES: dict[str, tuple[str, ...]] = {
    "schedule": schedule_names(),
    "batch_split": ("round_robin", "by_speed"),
    "reduce": ("mean", "sum", "weighted_by_samples"),
    "recompute": ("none", "selective", "op", "full"),
    "zero": ("0", "1", "2", "3"),
    "fsdp": ("none", "full_shard", "shard_grad_op", "hybrid_shard"),
}
"""Knobs whose values come from a fixed list."""

BOOLEAN_KNOBS = frozenset({"overlap", "sequence_parallel"})
"""Knobs whose values are on/off."""

_TRUE = {"true", "on", "yes", "1"}
_FALSE = {"false", "off", "no", "0"}
_AGGREGATION_KNOBS = {"algorithm", "bucket_size", "overlap", "reduce"}
_PIPELINE_KNOBS = {"microbatches", "schedule"}


@dataclass(frozen=True)
class Sweep:
    """One knob and the values to try."""

    knob: str
    values: tuple[Any, ...]


class OptionValueError(UsageError, PlanError):
    """A knob, sweep, plan or baseline given on the command line that cannot be used: a usage
    error (exit code 2), and a :class:`PlanError` for callers that catch those. A message that
    starts with an option (``--bucket-size: ...``) names it."""

    def __init__(self, message: str, option: str | None = None) -> None:
        if option is None and message.startswith("--"):
            option = message.split(":", 1)[0]  # "--bucket-size", "--set rounds"
        super().__init__(message, option)


# -- reading values -----------------------------------------------------------------------------
def parse_value(knob: str, text: str, where: str | None = None) -> Any:
    """Check and convert one value of ``knob`` (``where`` names it in errors, e.g. ``--algorithm``).

    >>> parse_value("num_replicas", "8"), parse_value("overlap", "off"), parse_value("algorithm", "tree:4")
    (8, False, 'tree:4')
    """
    where = where or f"sweep {knob}"
    text = text.strip()
    if knob in INTEGER_KNOBS:
        try:
            value = int(text)
        except ValueError:
            raise OptionValueError(f"{where}: {text!r} is not an integer") from None
        if value < 1:
            raise OptionValueError(f"{where}: {value} must be >= 1")
        return value
    if knob in BOOLEAN_KNOBS:
        lowered = text.lower()
        if lowered not in _TRUE | _FALSE:
            raise OptionValueError(f"{where}: {text!r} is not a boolean (true/false, on/off, yes/no)")
        return lowered in _TRUE
    if knob in CHOICES:
        if text not in CHOICES[knob]:
            raise OptionValueError(f"{where}: {text!r} is not one of {', '.join(CHOICES[knob])}")
        return int(text) if knob == "zero" else text
    if knob == "bucket_size":
        _check_size(text, where)
    elif knob == "algorithm":
        _check_algorithm(text, where)
    return text


def _check_size(text: str, where: str) -> None:
    from parplan.config.units import parse_bytes

    try:
        size_bytes = parse_bytes(text)
    except ValueError as exc:
        raise OptionValueError(f"{where}: {exc}") from None
    if size_bytes <= 0:
        raise OptionValueError(f"{where}: {text!r} must be more than 0 bytes")


def _check_algorithm(text: str, where: str) -> None:
    problem = algorithm_problem(text)
    if problem is not None:
        raise OptionValueError(f"{where}: {text!r}: {problem}")


def algorithm_problem(text: str) -> str | None:
    """Why ``text`` is not an all-reduce algorithm, in the words a file's error would use, or
    None when it is one; never pydantic's own dump.

    >>> algorithm_problem("tree:1"), algorithm_problem("ring")
    ('arity: must be >= 2, got 1', None)
    """
    from parplan.collectives.registry import expand_short_form
    from parplan.collectives.specs import AlgorithmSpec, parse_algorithm
    from parplan.config.issues import translate

    try:
        parse_algorithm(text)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        errors = getattr(exc, "errors", None)
        if not callable(errors):
            return str(exc).removeprefix(f"{text!r}: ")
        try:
            data: Any = expand_short_form(text)
        except ValueError:
            data = text
        issues = translate(exc, AlgorithmSpec, data, None)  # type: ignore[arg-type]
        if not issues:
            return "not a valid algorithm"
        first = issues[0]
        message = first.message.removeprefix(f"{text!r}: ")
        return f"{first.field}: {message}" if first.field else message
    return None


def parse_sweep(text: str, where: str = "--sweep") -> Sweep:
    """Read ``knob=v1,v2,...`` (``where`` names it in errors); an unknown knob is an
    :class:`OptionValueError` listing the known ones.

    >>> parse_sweep("num_replicas=2,4")
    Sweep(knob='num_replicas', values=(2, 4))
    """
    knob, sep, values = text.partition("=")
    knob = knob.strip()
    if not sep or not values.strip():
        raise OptionValueError(f"{where} {text!r}: expected knob=value1,value2,...")
    if knob not in KNOBS:
        raise OptionValueError(f"{where}: unknown sweep knob {knob!r}; valid: {', '.join(KNOBS)}")
    items = [v.strip() for v in values.split(",") if v.strip()]
    return Sweep(knob, tuple(dict.fromkeys(parse_value(knob, v, f"{where} {knob}") for v in items)))


def parse_setting(text: str) -> tuple[str, Any]:
    """Read one ``knob=value`` (``simulate --set``).

    >>> parse_setting("rounds=20")
    ('rounds', 20)
    """
    knob, sep, value = text.partition("=")
    knob = knob.strip()
    if not sep or not value.strip():
        raise OptionValueError(f"--set {text!r}: expected knob=value")
    if knob not in KNOBS:
        raise OptionValueError(f"--set: unknown knob {knob!r}; valid: {', '.join(KNOBS)}")
    return knob, parse_value(knob, value, where=f"--set {knob}")


@dataclass(frozen=True)
class KnobOptions:
    """Knobs as a command line gives them, read by :meth:`overrides`.

    ``options`` maps each knob that has a dedicated option to ``(option name, value)``; the value
    is None when the option was not given, text (checked with :func:`parse_value`) or an
    already typed value. ``settings`` are ``knob=value`` texts (``--set``).
    """

    options: Mapping[str, tuple[str, Any]] = field(default_factory=dict)
    settings: Sequence[str] = ()

    def option_of(self, knob: str) -> str:
        """How a command line names ``knob``: its option, else ``--set knob``."""
        return self.options[knob][0] if knob in self.options else f"--set {knob}"

    def overrides(self) -> dict[str, Any]:
        """The knobs given, checked, in a fixed order (dedicated options, then ``settings``)."""
        out: dict[str, Any] = {}
        for knob, (option, value) in self.options.items():
            if value is not None:
                out[knob] = parse_value(knob, value, where=option) if isinstance(value, str) else value
        for text in self.settings:
            knob, value = parse_setting(text)
            if knob in out:
                option = self.options[knob][0] if knob in self.options else "--set"
                raise OptionValueError(f"--set {knob} given twice (or together with {option})")
            out[knob] = value
        return out


# -- applying them ------------------------------------------------------------------------------
def applies(knob: str, plan: PlanSpec) -> bool:
    """Whether ``knob`` changes ``plan`` (microbatches/schedule: pipelines and 2-D plans only)."""
    strategy = plan.strategy
    if strategy.kind not in KNOBS[knob]:
        return False
    if strategy.kind == "data_parallel" and knob in _PIPELINE_KNOBS:
        return strategy.replica is not None
    return True


def unused_knobs(
    overrides: Mapping[str, Any], plans: Sequence[PlanSpec], name: Callable[[str], str]
) -> list[str]:
    """One warning per knob that changes none of ``plans`` (``name`` says how the user wrote it)."""
    return [
        f"{name(knob)} changes none of the plans simulated (it applies to {' and '.join(KNOBS[knob])} plans)"
        for knob in overrides
        if not any(applies(knob, p) for p in plans)
    ]


def apply_overrides(strategy: Any, overrides: dict[str, Any]) -> Any:
    """A copy of ``strategy`` with command-line knobs applied and re-validated.

    Knobs (:data:`KNOBS`): ``algorithm`` ("ring", "tree:4", ...), ``num_replicas``,
    ``bucket_size`` ("25MiB"), ``overlap``, ``batch_split``, ``reduce`` for data-parallel plans;
    ``microbatches`` and ``schedule`` for model-parallel plans and the replica of 2-D plans (setting
    ``microbatches`` turns the pipeline protocol on); ``num_clients``, ``rounds``, ``local_steps``
    (federated); ``population_size``, ``generations`` (population-based); ``tp``, ``pp``, ``dp``,
    ``cp``, ``ep``, ``virtual_stages``, ``microbatch_size``, ``sequence_parallel``, ``recompute``,
    ``zero``, ``fsdp``, ``schedule`` and the aggregation knobs (sharded). A knob that does not apply
    to the strategy's kind is skipped; an unknown knob is a :class:`PlanError`, and a bad value a
    :class:`ConfigError` naming the knob.
    """
    from pydantic import ValidationError

    unknown = sorted(set(overrides) - set(KNOBS))
    if unknown:
        raise PlanError(f"unknown override {', '.join(unknown)}; valid: {', '.join(KNOBS)}")
    data: dict[str, Any] = strategy.model_dump(by_alias=True, exclude_none=True)
    changed = False
    for knob, value in overrides.items():
        changed |= _set_knob(data, strategy.kind, knob, value)
    if not changed:
        return strategy
    try:
        return type(strategy).model_validate(data)
    except ValidationError as exc:  # worded as a file's errors are, never pydantic's own text
        from parplan.config.issues import translate

        issues = [
            Issue(path="overrides", field=i.field, message=i.message)
            for i in translate(exc, type(strategy), data, None)
        ]
        raise ConfigError(issues) from None


def _set_knob(data: dict[str, Any], kind: str, knob: str, value: Any) -> bool:
    """Write one knob into a strategy's data; False when it does not apply to this strategy."""
    if kind not in KNOBS[knob]:
        return False
    if kind == "sharded" and knob not in _AGGREGATION_KNOBS:
        data[knob] = value
    elif knob in _PIPELINE_KNOBS:
        target = data
        if kind == "data_parallel":
            if "replica" not in data:
                return False
            target = data["replica"]
        comm = target.setdefault("communication", {})
        comm[knob] = value
        if knob == "microbatches":
            comm["protocol"] = "pipeline"
    elif knob in _AGGREGATION_KNOBS:
        data.setdefault("aggregation", {})[knob] = value
    else:
        data[knob] = value
    return True
