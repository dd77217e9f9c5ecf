"""Engine: discrete-event simulation of task graphs on a shared network, and the closed forms.

:func:`parplan.engine.simulate.simulate` is the entry point; its module states the semantics (the
engine's contract) and wires the parts: ``kernel`` (event heap, time, tie rules), ``flows`` with
``allocator`` and ``routes`` (transfers sharing channels max-min fairly), ``recorder`` (times,
per-link figures, the :class:`~parplan.engine.result.SimResult`), ``tasks`` (the engine's view of
a task graph, readiness), ``streams`` (per-device compute and reduction streams) and ``replay``
with ``blocks`` (repeated collectives simulated once, replayed bit for bit). ``analytic``
holds the closed forms and ``sweep`` the collective size sweeps.
"""
