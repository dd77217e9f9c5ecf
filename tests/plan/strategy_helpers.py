"""Small clusters, models and contexts for the strategy tests (built through the real spec builders)."""

from __future__ import annotations

from typing import Any

from parplan.config.cluster import ClusterSpec
from parplan.config.model import ModelSpec
from parplan.config.scenario import PlanSpec, ScenarioSpec, TrainingSpec
from parplan.model.graph import build_model
from parplan.plan.base import PlanContext
from parplan.topology.build import build_network

DEVICE = {"peak_flops": "100 TFLOP/s", "memory": "80 GiB", "efficiency": 0.5, "memory_bandwidth": "2 TB/s"}


def switch_cluster(
    hosts: int, bandwidth: str = "100 GB/s", latency: str = "1 us", **device: Any
) -> ClusterSpec:
    """``hosts`` devices ``h0 ..`` on one switch."""
    return ClusterSpec.model_validate(
        {
            "generator": {
                "kind": "switch",
                "hosts": hosts,
                "device": {**DEVICE, **device},
                "link": {"bandwidth": bandwidth, "latency": latency},
            }
        }
    )


def dgx_cluster(nodes: int = 2, per_node: int = 8, **device: Any) -> ClusterSpec:
    """A DGX-like hierarchical cluster: NVSwitch inside a node, one NIC per device on a fabric."""
    dev = {"peak_flops": "312 TFLOP/s", "memory": "80 GiB", "efficiency": 0.5, "memory_bandwidth": "2 TB/s"}
    return ClusterSpec.model_validate(
        {
            "generator": {
                "kind": "hierarchical",
                "nodes": nodes,
                "devices_per_node": per_node,
                "device": {**dev, **device},
                "intra": {"bandwidth": "300 GB/s", "latency": "1 us"},
                "nics_per_node": per_node,
                "nic": {"bandwidth": "25 GB/s", "latency": "2 us"},
            }
        }
    )


def chain_model(
    layers: int = 4,
    params: float = 1e6,
    flops: float = 1e9,
    activation: float = 1e3,
    saved: float | None = None,
) -> ModelSpec:
    """A chain ``l0 -> l1 -> ...`` of identical layers."""
    nodes = []
    for i in range(layers):
        node: dict[str, Any] = {
            "id": f"l{i}",
            "params": params,
            "forward_flops": flops,
            "activation": activation,
        }
        if saved is not None:
            node["saved_activation"] = saved
        nodes.append(node)
    return ModelSpec.model_validate({"nodes": nodes})


def diamond_model() -> ModelSpec:
    """A branching DAG: a -> (b, c) -> d -> e, with c also feeding e."""
    nodes = [
        {"id": "a", "params": 2e6, "forward_flops": 1e9, "activation": 1000},
        {"id": "b", "params": 1e6, "forward_flops": 2e9, "activation": 2000},
        {"id": "c", "params": 1e6, "forward_flops": 3e9, "activation": 3000},
        {"id": "d", "params": 3e6, "forward_flops": 1e9, "activation": 4000},
        {"id": "e", "params": 1e6, "forward_flops": 1e9, "activation": 5000},
    ]
    edges = [["a", "b"], ["a", "c"], ["b", "d"], ["c", "d"], ["d", "e"], ["c", "e"]]
    return ModelSpec.model_validate({"nodes": nodes, "edges": edges})


def context(cluster: ClusterSpec, model: ModelSpec, batch: int = 64, **training: Any) -> PlanContext:
    """A :class:`PlanContext` for a cluster, a model and a global batch."""
    return PlanContext(
        network=build_network(cluster),
        model=build_model(model),
        model_spec=model,
        training=TrainingSpec(global_batch_size=batch, **training),
    )


def plan(strategy: dict[str, Any], name: str = "p") -> PlanSpec:
    """A plan from strategy data."""
    return PlanSpec.model_validate({"name": name, "strategy": strategy})


def strategy(data: dict[str, Any]) -> Any:
    """A validated strategy spec (typed ``Any`` so tests can hand it to any expander)."""
    return plan(data).strategy


def scenario(
    cluster: ClusterSpec, model: ModelSpec, plans: list[dict[str, Any]], batch: int = 64, **training: Any
) -> ScenarioSpec:
    """A scenario with plans ``p0, p1, ...``."""
    return ScenarioSpec.model_validate(
        {
            "cluster": cluster,
            "model": model,
            "training": {"global_batch_size": batch, **training},
            "plans": [{"name": f"p{i}", "strategy": s} for i, s in enumerate(plans)],
        }
    )


def pipeline(
    workers: list[str], layers_per_stage: int, microbatches: int, schedule: str = "gpipe"
) -> dict[str, Any]:
    """A model-parallel strategy: contiguous chains of ``layers_per_stage`` layers per worker."""
    parts = []
    for s, w in enumerate(workers):
        nodes = [f"l{s * layers_per_stage + i}" for i in range(layers_per_stage)]
        parts.append({"name": f"s{s}", "nodes": nodes, "worker": w})
    return {
        "kind": "model_parallel",
        "partitions": parts,
        "communication": {"protocol": "pipeline", "microbatches": microbatches, "schedule": schedule},
    }


def hetero_cluster(speed_factors: list[float], bandwidth: str = "100 GB/s") -> ClusterSpec:
    """Devices ``h0 ..`` with the given speed factors, each linked to switch ``sw``."""
    return ClusterSpec.model_validate(
        {
            "devices": [{"name": f"h{i}", **DEVICE, "speed_factor": f} for i, f in enumerate(speed_factors)],
            "switches": [{"name": "sw"}],
            "links": [
                {"a": f"h{i}", "b": "sw", "bandwidth": bandwidth, "latency": "1 us"}
                for i in range(len(speed_factors))
            ],
        }
    )
