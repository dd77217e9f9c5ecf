"""Configuration: typed, frozen specs for clusters, models, strategies, partitions and scenarios,
loaded from YAML, TOML or JSON with errors that name the file, the line and the field.

The names below are imported on first use (PEP 562): a command that reads a cluster file imports
the cluster specs and the loader, not the model, strategy and scenario specs, whose pydantic
classes take tens of milliseconds to build.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parplan.config.algorithms import AlgorithmSpec, algorithm_label, parse_algorithm
    from parplan.config.cluster import ClusterSpec, DeviceSpec, LinkSpec, SwitchSpec
    from parplan.config.loader import (
        KINDS,
        LoadedFile,
        detect_kind,
        dump_spec,
        load_any,
        load_cluster,
        load_file,
        load_model,
        load_partitions,
        load_scenario,
        load_strategy,
        save_spec,
        spec_from_data,
        spec_kind,
    )
    from parplan.config.model import ModelNodeSpec, ModelSpec
    from parplan.config.scenario import PlanSpec, ScenarioSpec, TrainingSpec
    from parplan.config.strategy import (
        CustomStrategy,
        DataParallelStrategy,
        FederatedStrategy,
        LocalStrategy,
        ModelParallelStrategy,
        PartitionFileSpec,
        PartitionSpec,
        PopulationBasedStrategy,
        ShardedStrategy,
        StrategySpec,
    )

_EXPORTS: dict[str, str] = {
    "AlgorithmSpec": "parplan.config.algorithms",
    "ClusterSpec": "parplan.config.cluster",
    "CustomStrategy": "parplan.config.strategy",
    "DataParallelStrategy": "parplan.config.strategy",
    "DeviceSpec": "parplan.config.cluster",
    "FederatedStrategy": "parplan.config.strategy",
    "KINDS": "parplan.config.loader",
    "LinkSpec": "parplan.config.cluster",
    "LoadedFile": "parplan.config.loader",
    "LocalStrategy": "parplan.config.strategy",
    "ModelNodeSpec": "parplan.config.model",
    "ModelParallelStrategy": "parplan.config.strategy",
    "ModelSpec": "parplan.config.model",
    "PartitionFileSpec": "parplan.config.strategy",
    "PartitionSpec": "parplan.config.strategy",
    "PlanSpec": "parplan.config.scenario",
    "PopulationBasedStrategy": "parplan.config.strategy",
    "ScenarioSpec": "parplan.config.scenario",
    "ShardedStrategy": "parplan.config.strategy",
    "StrategySpec": "parplan.config.strategy",
    "SwitchSpec": "parplan.config.cluster",
    "TrainingSpec": "parplan.config.scenario",
    "algorithm_label": "parplan.config.algorithms",
    "detect_kind": "parplan.config.loader",
    "dump_spec": "parplan.config.loader",
    "load_any": "parplan.config.loader",
    "load_cluster": "parplan.config.loader",
    "load_file": "parplan.config.loader",
    "load_model": "parplan.config.loader",
    "load_partitions": "parplan.config.loader",
    "load_scenario": "parplan.config.loader",
    "load_strategy": "parplan.config.loader",
    "parse_algorithm": "parplan.config.algorithms",
    "save_spec": "parplan.config.loader",
    "spec_from_data": "parplan.config.loader",
    "spec_kind": "parplan.config.loader",
}
"""Where each public name lives."""


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (and keep the name here)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [
    "KINDS",
    "AlgorithmSpec",
    "ClusterSpec",
    "CustomStrategy",
    "DataParallelStrategy",
    "DeviceSpec",
    "FederatedStrategy",
    "LinkSpec",
    "LoadedFile",
    "LocalStrategy",
    "ModelNodeSpec",
    "ModelParallelStrategy",
    "ModelSpec",
    "PartitionFileSpec",
    "PartitionSpec",
    "PlanSpec",
    "PopulationBasedStrategy",
    "ScenarioSpec",
    "ShardedStrategy",
    "StrategySpec",
    "SwitchSpec",
    "TrainingSpec",
    "algorithm_label",
    "detect_kind",
    "dump_spec",
    "load_any",
    "load_cluster",
    "load_file",
    "load_model",
    "load_partitions",
    "load_scenario",
    "load_strategy",
    "parse_algorithm",
    "save_spec",
    "spec_from_data",
    "spec_kind",
]
