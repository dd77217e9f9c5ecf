"""Load cluster, model, strategy, partition and scenario files into frozen specs.

Files are YAML (``.yaml``/``.yml``, safe loader only), TOML or JSON, chosen by extension. Loading
is parse -> detect the kind -> resolve references -> validate, and every problem found on the way
(in the file or in any file it references) is collected into one
:class:`~parplan.errors.ConfigError` whose issues name the file, line, column and field.

References are paths, relative to the file that names them:

- scenario ``cluster: clusters/dgx.yaml`` and ``model: models/gpt.yaml``;
- a plan's ``strategy: strategies/dp.yaml`` (or a bare kind: ``strategy: local``);
- a model-parallel strategy's ``partitions: partitions/gpt-4stage.yaml``;
- a data-parallel strategy's ``replica: strategies/pipeline.yaml`` (a 2-D plan);
- a model's ``hf_config: hf/llama-3-8b/config.json`` (:mod:`parplan.config.hf`; kept as written,
  the converted generator beside it). A config.json given where a model is expected is converted
  the same way.

The referenced file's content replaces the path and the path is kept in the matching ``*_file``
field (``cluster_file``, ``model_file``, ``strategy_file``, ``partitions_file``, ``replica_file``),
so a spec knows where it came from; saving writes the content inline and keeps those fields.

Kind detection (:func:`detect_kind`), on the top-level keys:

1. ``plans`` -> scenario;
2. ``kind`` -> strategy (only strategies have a top-level ``kind``);
3. ``partitions`` with nothing but ``name``/``description`` beside it -> partition file;
4. ``generator`` whose ``kind`` is a cluster generator (switch, ring, torus2d, fat_tree,
   hierarchical) -> cluster; a model generator (transformer, mlp) -> model;
5. ``devices``, ``switches`` or ``links`` -> cluster; ``nodes`` or ``edges`` -> model;
   a Hugging Face config (``model_type`` or ``architectures``), ``hf_config`` or ``torch_module``
   -> model (checked right after ``plans``);
6. ``cluster``, ``model`` or ``training`` -> scenario; any other strategy key (``num_replicas``,
   ``device``, ...) -> strategy.

A strategy with no ``kind`` is ``local`` (when it has only local's keys; otherwise the missing
``kind`` is reported).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from parplan.config.cluster import ClusterGenerator, ClusterSpec
from parplan.config.hf import HFConfigError, hf_model_data, is_hf_config
from parplan.config.issues import Graft, Source, file_keys, translate, union_tags
from parplan.config.readers import FORMATS, Loc, read_file
from parplan.config.saving import dump_spec, save_spec
from parplan.errors import ConfigError, Issue

if TYPE_CHECKING:
    from parplan.config.model import ModelSpec
    from parplan.config.scenario import ScenarioSpec
    from parplan.config.strategy import PartitionFileSpec

__all__ = [
    "KINDS",
    "LoadedFile",
    "detect_kind",
    "dump_spec",
    "load_any",
    "load_cluster",
    "load_file",
    "load_model",
    "load_partitions",
    "load_scenario",
    "load_strategy",
    "save_spec",
    "spec_from_data",
    "spec_kind",
]

KINDS: tuple[str, ...] = ("cluster", "model", "strategy", "partition", "scenario")
"""The kinds of file parplan reads."""

_ROOT_TYPES: dict[str, tuple[str, str]] = {
    "cluster": ("parplan.config.cluster", "ClusterSpec"),
    "model": ("parplan.config.model", "ModelSpec"),
    "strategy": ("parplan.config.strategy", "StrategySpec"),
    "partition": ("parplan.config.strategy", "PartitionFileSpec"),
    "scenario": ("parplan.config.scenario", "ScenarioSpec"),
}
"""Where the spec type of each kind lives: imported on first use, so loading a cluster file does
not build the model, strategy and scenario specs' pydantic classes."""
_COMMON_KEYS = {"name", "description"}


@cache
def _strategy_classes() -> tuple[type, ...]:
    """The strategy spec classes (each a file's top level when its ``kind`` names it)."""
    from parplan.config import strategy

    return (
        strategy.LocalStrategy,
        strategy.DataParallelStrategy,
        strategy.ModelParallelStrategy,
        strategy.FederatedStrategy,
        strategy.PopulationBasedStrategy,
        strategy.CustomStrategy,
    )


T = TypeVar("T")


@cache
def adapter(kind: str) -> TypeAdapter[Any]:
    """The pydantic validator of one file kind (cached: building it is the slow part)."""
    return TypeAdapter(root_type(kind))


def root_type(kind: str) -> Any:
    """The spec type (or tagged union) a file of ``kind`` validates into (imported on first use)."""
    module, name = _ROOT_TYPES[kind]
    return getattr(importlib.import_module(module), name)


def spec_kind(spec: Any) -> str:
    """The file kind a spec object saves as: ``cluster``, ``model``, ``strategy``, ..."""
    if isinstance(spec, _strategy_classes()):
        return "strategy"
    for kind in _ROOT_TYPES:
        tp = root_type(kind)
        if isinstance(tp, type) and isinstance(spec, tp):
            return kind
    raise TypeError(f"not a parplan file spec: {type(spec).__name__}")


@dataclass(frozen=True)
class LoadedFile:
    """A validated file: its kind, its spec and where every part of it came from."""

    kind: str
    spec: Any
    source: Source


# -- kind detection ------------------------------------------------------------------------------------


def _generator_kinds(tp: Any) -> set[str]:
    tags = union_tags(tp)
    return set(tags[1]) if tags else set()


_GENERATOR_ALIASES = {"sequence_length": "seq_len", "vocabulary": "vocab"}


@dataclass(frozen=True)
class _DetectionKeys:
    """The keys :func:`detect_kind` and the model resolver read, from the spec classes."""

    cluster_generators: set[str]
    model_generators: set[str]
    generator_keys: set[str]
    strategy_keys: set[str]


@cache
def _keys() -> _DetectionKeys:
    """Built on first use: it imports the model and strategy specs."""
    from parplan.config.model import ModelGenerator, TransformerGenerator

    strategy_keys = {k for cls in _strategy_classes() for k in file_keys(cls)} - _COMMON_KEYS - {"kind"}
    return _DetectionKeys(
        cluster_generators=_generator_kinds(ClusterGenerator),
        model_generators=_generator_kinds(ModelGenerator),
        generator_keys=set(file_keys(TransformerGenerator)) - {"kind"},
        strategy_keys=strategy_keys,
    )


def detect_kind(data: Any, path: str = "") -> str:
    """Which kind of file ``data`` (a parsed top-level mapping) is; the rules are in the module
    docstring. Raises :class:`ConfigError` when it cannot tell.

    >>> detect_kind({"plans": []}), detect_kind({"generator": {"kind": "transformer"}})
    ('scenario', 'model')
    """
    if not isinstance(data, dict):
        raise ConfigError(Issue(path, "", "has no mapping at the top level; cannot tell the kind of file"))
    keys = set(data)
    generator = data.get("generator")
    generator_kind = generator.get("kind") if isinstance(generator, dict) else None
    if not isinstance(generator_kind, str):  # e.g. `kind: []`: no kind to look up
        generator_kind = None
    if "plans" in keys:
        return "scenario"
    if is_hf_config(data) or keys & {"hf_config", "torch_module"}:
        return "model"
    if "kind" in keys:
        return "strategy"
    if "partitions" in keys and keys <= {"partitions"} | _COMMON_KEYS:
        return "partition"
    known = _keys()
    if generator_kind in known.cluster_generators:
        return "cluster"
    if generator_kind in known.model_generators:
        return "model"
    if keys & {"devices", "switches", "links"}:
        return "cluster"
    if keys & {"nodes", "edges"}:
        return "model"
    if keys & {"cluster", "model", "training", "cluster_file", "model_file"}:
        return "scenario"
    if keys & known.strategy_keys:
        return "strategy"
    raise ConfigError(
        Issue(
            path,
            "",
            "is not recognisably a cluster (generator or devices), model (nodes or generator), "
            "strategy (kind), partition (partitions) or scenario (plans) file; pass --kind",
        )
    )


# -- reference resolution ------------------------------------------------------------------------------


def _plain_copy(value: Any) -> Any:
    """A copy with no shared sub-objects (YAML aliases), so resolving one place leaves others alone."""
    if isinstance(value, dict):
        return {k: _plain_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_copy(v) for v in value]
    return value


def _joined(base_file: str, ref: str) -> str:
    """A referenced path as shown and opened: relative to the directory of the naming file."""
    if os.path.isabs(ref):
        return os.path.normpath(ref)
    return os.path.normpath(os.path.join(os.path.dirname(base_file), ref))


@dataclass
class _Resolver:
    """Replaces references by the data of the files they name, recording grafts and issues."""

    source: Source
    issues: list[Issue] = field(default_factory=list)
    failed: list[Loc] = field(default_factory=list)
    active: list[str] = field(default_factory=list)

    def resolve(self, kind: str, data: Any, loc: Loc, shown: str) -> None:
        if not isinstance(data, dict):
            return
        if kind == "scenario":
            self._scenario(data, loc, shown)
        elif kind == "strategy":
            self._strategy(data, loc, shown)
        elif kind == "model":
            self._model(data, loc, shown)

    def _model(self, data: dict[str, Any], loc: Loc, shown: str) -> None:
        """A Hugging Face config.json becomes a model's data; ``hf_config: path`` is read, converted
        and overridden by the generator keys beside it (at the top level or under ``generator``)."""
        if is_hf_config(data) and not data.keys() & {"generator", "nodes", "hf_config"}:
            try:
                converted = hf_model_data(data, shown)
            except HFConfigError as exc:
                self._fail_at(loc, exc.field if exc.field in data else "", exc.message)
                return
            data.clear()
            data.update(converted)
            return
        ref = data.get("hf_config")
        given = data.get("generator")
        if not isinstance(ref, str) or (isinstance(given, dict) and "kind" in given):
            return  # no reference, or already converted (a saved file keeps the path as a record)
        target = _joined(shown, ref)
        if not Path(target).is_file():
            self._fail_at(loc, "hf_config", f"file not found: {target}")
            return
        try:
            hf, _ = read_file(target)
        except ConfigError as exc:
            self.issues.extend(exc.issues)
            self.failed.append(loc)
            return
        if not is_hf_config(hf):
            message = f"{target} is not a Hugging Face config.json (no model_type or architectures)"
            self._fail_at(loc, "hf_config", message)
            return
        try:
            converted = hf_model_data(hf, target)
        except HFConfigError as exc:
            field = f" field {exc.field!r}:" if exc.field else ""
            self._fail_at(loc, "hf_config", f"{target}:{field} {exc.message}")
            return
        generator = dict(converted["generator"])
        if isinstance(given, dict):
            generator.update(given)
        for key in list(data):
            if key in _keys().generator_keys:
                generator[key] = data.pop(key)
        for name, alias in _GENERATOR_ALIASES.items():
            if name in generator and alias in generator:
                del generator[alias]  # the file's own key wins over the converted alias
        data["generator"] = generator
        data.setdefault("name", converted["name"])

    def _fail_at(self, loc: Loc, key: str, message: str) -> None:
        """An issue located at ``key`` of the data at ``loc``; the whole of ``loc`` is marked failed."""
        self.issues.append(self.source.issue((*loc, key) if key else loc, message))
        self.failed.append(loc)

    def _scenario(self, data: dict[str, Any], loc: Loc, shown: str) -> None:
        from parplan.config.strategy import STRATEGY_KINDS

        for key in ("cluster", "model"):
            ref = data.get(key)
            if isinstance(ref, str):
                loaded = self._load(ref, key, (*loc, key), shown)
                if loaded is not None:
                    data[key] = loaded
                    data[f"{key}_file"] = ref
        plans = data.get("plans")
        if not isinstance(plans, list):
            return
        for i, plan in enumerate(plans):
            if not isinstance(plan, dict):
                continue
            at = (*loc, "plans", i, "strategy")
            strategy = plan.get("strategy")
            if isinstance(strategy, str):
                if strategy in STRATEGY_KINDS:
                    plan["strategy"] = {"kind": strategy}
                else:
                    loaded = self._load(strategy, "strategy", at, shown)
                    if loaded is not None:
                        plan["strategy"] = loaded
                        plan["strategy_file"] = strategy
                    continue  # a loaded file was resolved relative to itself
            if isinstance(plan.get("strategy"), dict):
                self._strategy(plan["strategy"], at, shown)

    def _strategy(self, data: dict[str, Any], loc: Loc, shown: str, replica: bool = False) -> None:
        from parplan.config.strategy import LocalStrategy

        if "kind" not in data and not replica and set(data) <= set(file_keys(LocalStrategy)):
            data["kind"] = "local"
        kind = data.get("kind", "model_parallel" if replica else None)
        if kind == "model_parallel":
            ref = data.get("partitions")
            if isinstance(ref, str):
                loaded = self._load(ref, "partition", (*loc, "partitions"), shown)
                if loaded is not None:
                    data["partitions"] = loaded
                    data["partitions_file"] = ref
        elif kind == "data_parallel":
            ref = data.get("replica")
            if isinstance(ref, str):
                loaded = self._load(ref, "strategy", (*loc, "replica"), shown, replica=True)
                if loaded is not None:
                    data["replica"] = loaded
                    data["replica_file"] = ref
            elif isinstance(ref, dict):
                self._strategy(ref, (*loc, "replica"), shown, replica=True)

    def _load(self, ref: str, kind: str, loc: Loc, shown: str, replica: bool = False) -> Any:
        """The data of a referenced file (already resolved itself), or None after recording why not."""
        target = _joined(shown, ref)
        problem = None
        if Path(target).suffix.lower() not in FORMATS:
            problem = f"{ref!r} is not a {kind} file path (.yaml, .yml, .toml or .json)"
        elif not Path(target).exists():
            problem = f"file not found: {target}"
        elif Path(target).is_dir():
            problem = f"{target} is a directory, not a file"
        elif os.path.realpath(target) in self.active:
            problem = f"{target} refers back to itself"
        if problem is not None:
            return self._fail(loc, problem)
        try:
            data, positions = read_file(target)
        except ConfigError as exc:
            self.issues.extend(exc.issues)
            self.failed.append(loc)
            return None
        data = _plain_copy(data)
        try:
            found = detect_kind(data, target)
        except ConfigError:
            found = kind
        if replica and found in ("strategy", "partition"):
            other = data.get("kind", "model_parallel")
            if other != "model_parallel":
                return self._fail(
                    loc, f"{target} is a {other} strategy; a replica must be a model_parallel plan"
                )
        elif found != kind:
            return self._fail(loc, f"{target} is a {found} file, expected a {kind} file")
        inner: Loc = ()
        if kind == "partition":
            if not isinstance(data.get("partitions"), list):
                return self._fail(loc, f"{target} has no partitions list")
            inner = ("partitions",)
        self.source.add(Graft(loc, target, positions, inner))
        self.active.append(os.path.realpath(target))
        try:
            if kind == "strategy":
                self._strategy(data, loc, target, replica=replica)
            elif kind == "model":
                self._model(data, loc, target)
        finally:
            self.active.pop()
        return data["partitions"] if kind == "partition" else data

    def _fail(self, loc: Loc, message: str) -> None:
        self.issues.append(self.source.issue(loc, message))
        self.failed.append(loc)
        return None


# -- public API ----------------------------------------------------------------------------------------


def spec_from_data(kind: str, data: Any, path: str = "<data>", source: Source | None = None) -> LoadedFile:
    """Validate already-parsed data of a known kind; references resolve against ``path``.

    ``data`` is not modified. Raises :class:`ConfigError` with every issue found.
    """
    if kind not in KINDS:
        raise ConfigError(Issue(path, "", f"unknown kind {kind!r}; valid: {', '.join(KINDS)}"))
    data = _plain_copy(data)
    source = source or Source.single(path, {(): (1, 1)})
    resolver = _Resolver(source, active=[os.path.realpath(path)])
    resolver.resolve(kind, data, (), path)
    try:
        spec = adapter(kind).validate_python(data)
    except ValidationError as exc:
        issues = translate(exc, root_type(kind), data, source, skip=resolver.failed)
        raise ConfigError(resolver.issues + issues) from None
    if resolver.issues:
        raise ConfigError(resolver.issues)
    return LoadedFile(kind, spec, source)


def load_file(path: str | Path, kind: str | None = None) -> LoadedFile:
    """Read, detect (unless ``kind`` is given), resolve and validate one file."""
    shown = str(path)
    data, positions = read_file(path)
    if kind is None:
        kind = detect_kind(data, shown)
    return spec_from_data(kind, data, shown, Source.single(shown, positions))


def load_any(path: str | Path, kind: str | None = None) -> tuple[str, Any]:
    """The kind and spec of any parplan file."""
    loaded = load_file(path, kind)
    return loaded.kind, loaded.spec


def _load_as(path: str | Path, kind: str) -> Any:
    return load_file(path, kind).spec


def load_cluster(path: str | Path) -> ClusterSpec:
    """A cluster file."""
    spec: ClusterSpec = _load_as(path, "cluster")
    return spec


def load_model(path: str | Path) -> ModelSpec:
    """A model file."""
    spec: ModelSpec = _load_as(path, "model")
    return spec


def load_strategy(path: str | Path) -> Any:
    """A strategy file (any kind of :data:`~parplan.config.strategy.StrategySpec`)."""
    return _load_as(path, "strategy")


def load_partitions(path: str | Path) -> PartitionFileSpec:
    """A partition file."""
    spec: PartitionFileSpec = _load_as(path, "partition")
    return spec


def load_scenario(path: str | Path) -> ScenarioSpec:
    """A scenario file with everything it references."""
    spec: ScenarioSpec = _load_as(path, "scenario")
    return spec
