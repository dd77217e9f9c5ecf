"""parplan: plan and simulate distributed deep-learning training before renting the cluster.

The pipeline runs left to right: config -> topology / model -> collectives -> plan -> engine ->
report -> cli. Only :mod:`parplan.cli` prints or exits.
"""

__version__ = "0.1.0"
