"""Collectives sit below config, topology and everything else: they import only the spec base,
the errors, numpy and pydantic (config builds its algorithm union from their registry)."""

from __future__ import annotations

import ast
from pathlib import Path

import parplan.collectives

ALLOWED = {"parplan.collectives", "parplan.spec", "parplan.errors"}


def _parplan_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m == "parplan" or m.startswith("parplan.")}


def test_collectives_import_nothing_above_them() -> None:
    package = Path(parplan.collectives.__file__).parent
    for path in sorted(package.glob("*.py")):
        for module in _parplan_imports(path):
            assert any(module == a or module.startswith(a + ".") for a in ALLOWED), f"{path.name}: {module}"
