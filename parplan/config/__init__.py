"""Configuration: typed, frozen specs for clusters, models, strategies, partitions and scenarios,
loaded from YAML, TOML or JSON with errors that name the file, the line and the field."""

from parplan.config.algorithms import AlgorithmSpec, algorithm_label, parse_algorithm
from parplan.config.cluster import ClusterSpec, DeviceSpec, LinkSpec, SwitchSpec
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
    StrategySpec,
)

__all__ = [
    "AlgorithmSpec",
    "ClusterSpec",
    "CustomStrategy",
    "DataParallelStrategy",
    "DeviceSpec",
    "FederatedStrategy",
    "LinkSpec",
    "LocalStrategy",
    "ModelNodeSpec",
    "ModelParallelStrategy",
    "ModelSpec",
    "PartitionFileSpec",
    "PartitionSpec",
    "PlanSpec",
    "PopulationBasedStrategy",
    "ScenarioSpec",
    "StrategySpec",
    "SwitchSpec",
    "TrainingSpec",
    "algorithm_label",
    "parse_algorithm",
]
