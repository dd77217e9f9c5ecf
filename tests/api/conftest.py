"""Fixtures of the api tests: the session's local Ray instance."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def ray_instance() -> Iterator[Any]:
    """One local Ray instance for the session (2 CPUs), shut down at the end."""
    import ray

    started = not ray.is_initialized()
    if started:
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        except Exception as exc:  # a machine where Ray cannot start its processes
            pytest.skip(f"a local Ray instance cannot start here: {exc}")
    yield ray
    if started:
        ray.shutdown()
