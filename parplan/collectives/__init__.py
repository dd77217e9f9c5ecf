"""Collectives: each all-reduce algorithm as an explicit schedule, a registry of them, and a data
plane that runs schedules on numpy arrays to prove them right."""
