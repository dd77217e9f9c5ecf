"""Model: a model spec as a networkx DAG of layers with parameters, FLOPs and activation sizes."""

from parplan.model.graph import ModelGraph, build_model, transformer_params

__all__ = ["ModelGraph", "build_model", "transformer_params"]
