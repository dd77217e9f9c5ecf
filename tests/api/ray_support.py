"""What the Ray tests share: whether Ray is here, their marks, and a way to lose the cluster
mid-run (the session's local Ray instance is the ``ray_instance`` fixture in conftest.py)."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

HAVE_RAY = importlib.util.find_spec("ray") is not None

RAY_MARKS = [
    pytest.mark.ray,
    pytest.mark.xdist_group("ray"),
    pytest.mark.skipif(not HAVE_RAY, reason="Ray is not installed (pip install 'parplan[ray]')"),
]
"""A Ray test module's ``pytestmark``: marked, in one xdist worker, skipped with the reason."""


def lose_the_cluster_after(monkeypatch: pytest.MonkeyPatch, ray: Any, calls: int) -> None:
    """Make ``ray.get`` fail as a lost cluster does after ``calls`` calls."""
    real_get = ray.get
    count = {"n": 0}

    def flaky_get(refs: Any, *args: Any, **kwargs: Any) -> Any:
        count["n"] += 1
        if count["n"] > calls:
            raise ray.exceptions.RaySystemError("the GCS went away")
        return real_get(refs, *args, **kwargs)

    monkeypatch.setattr(ray, "get", flaky_get)
