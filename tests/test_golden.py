"""Every sample's JSON output equals its golden copy byte for byte (see scripts/golden.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "golden", Path(__file__).parent.parent / "scripts" / "golden.py"
)
assert _SPEC is not None and _SPEC.loader is not None
golden = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(golden)


@pytest.mark.parametrize(("name", "args"), list(golden.cases()), ids=[name for name, _ in golden.cases()])
def test_output_matches_golden(name: str, args: list[str]) -> None:
    expected = (golden.GOLDEN / name).read_text()
    assert golden.run(args) == expected, (
        f"{name} changed: run `python scripts/golden.py` to see all that differ"
    )
