"""Model: a model spec as a networkx DAG of layers with parameters, FLOPs and activation sizes."""
