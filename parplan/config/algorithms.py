"""All-reduce algorithm specs for config files: a re-export of :mod:`parplan.collectives.specs`,
where the tagged union with short forms is built from the registry of algorithms."""

from parplan.collectives.specs import (
    AlgorithmSpec,
    CentralizedAlgorithm,
    DoubleBinaryTreeAlgorithm,
    HalvingDoublingAlgorithm,
    HierarchicalAlgorithm,
    RingAlgorithm,
    TreeAlgorithm,
    algorithm_label,
    parse_algorithm,
)

__all__ = [
    "AlgorithmSpec",
    "CentralizedAlgorithm",
    "DoubleBinaryTreeAlgorithm",
    "HalvingDoublingAlgorithm",
    "HierarchicalAlgorithm",
    "RingAlgorithm",
    "TreeAlgorithm",
    "algorithm_label",
    "parse_algorithm",
]
