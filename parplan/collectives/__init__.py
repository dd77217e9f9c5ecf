"""Collectives: each algorithm as an explicit schedule in its own module (its spec, short form,
schedule builder, closed form and traffic volumes behind :class:`~parplan.collectives.algorithm.Algorithm`),
the registry of them, and a data plane that runs schedules on numpy arrays to prove them right.

This package sits below config, topology and everything else: it imports only
:mod:`parplan.spec`, :mod:`parplan.errors`, numpy and pydantic."""
