"""The knobs a plan can be changed by from the command line, and the strategy kinds each applies to.

``simulate`` overrides them, ``compare-strategies`` sweeps them and the evaluator applies them; one
table serves all three, so a knob added here is accepted everywhere. Kept free of heavy imports so
the CLI can list knobs without loading the simulation stack.
"""

from __future__ import annotations

KNOBS: dict[str, tuple[str, ...]] = {
    "algorithm": ("data_parallel",),
    "num_replicas": ("data_parallel",),
    "bucket_size": ("data_parallel",),
    "overlap": ("data_parallel",),
    "batch_split": ("data_parallel",),
    "reduce": ("data_parallel",),
    "microbatches": ("model_parallel", "data_parallel"),
    "schedule": ("model_parallel", "data_parallel"),
    "num_clients": ("federated",),
    "rounds": ("federated",),
    "local_steps": ("federated",),
    "population_size": ("population_based",),
    "generations": ("population_based",),
}
"""Knob -> strategy kinds it applies to (``microbatches`` and ``schedule`` reach a data-parallel
plan only through its model-parallel replica)."""
