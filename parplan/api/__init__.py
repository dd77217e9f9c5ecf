"""Orchestration: scenario -> plans -> task graphs -> engine -> results; the layer the commands call.

One call per command, each returning a result the report layer formats:

- :func:`parplan.api.simulate.simulate_scenario` (``simulate``) -> ``Simulation``
- :func:`parplan.api.compare.compare_scenario` (``compare-strategies``) -> ``Comparison``
- :func:`parplan.api.validate_config.validate_paths` (``validate-config``) -> ``FileReport`` per file
- :func:`parplan.api.schema.file_schemas` (``schema``) -> ``SchemaSet``
- :func:`parplan.api.accuracy.run_validation` (``validate``: predictions against nccl-tests tables)

Underneath: :mod:`~parplan.api.evaluate` (the plan context, one plan evaluated),
:mod:`~parplan.api.timeline` (reading a simulated step), :mod:`~parplan.api.results` (``PlanResult``
and what bounds a plan), :mod:`~parplan.api.describe`, :mod:`~parplan.api.knobs` (overrides and
sweeps), :mod:`~parplan.api.variants`, :mod:`~parplan.api.ranking`, :mod:`~parplan.api.parallel`
and :mod:`~parplan.api.checks` (the checks that need built graphs). This is the only floor that
knows every stage; it sits above engine and plan and below report (see docs/ARCHITECTURE.md).
Nothing is imported here, so ``import parplan.api.<module>`` pays only for what it uses.
"""
