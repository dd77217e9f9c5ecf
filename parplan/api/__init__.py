"""Orchestration: scenario -> plans -> task graphs -> engine -> results; the layer the commands call."""
