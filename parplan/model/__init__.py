"""Model: a model spec as a networkx DAG of layers with parameters, FLOPs and activation sizes;
a transformer's kernels per device (:mod:`parplan.model.transformer`); torch modules traced on the
meta device (:mod:`parplan.model.trace`, the torch extra)."""

from parplan.model.graph import ModelGraph, build_model, transformer_params
from parplan.model.transformer import Op, TransformerShape, shape_of

__all__ = ["ModelGraph", "Op", "TransformerShape", "build_model", "shape_of", "transformer_params"]
