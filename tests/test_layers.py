"""The pipeline's floors are enforced: the import-linter contract in pyproject.toml holds, covers
every part of the package, and fails when a backward import is added.

The contract is checked by running ``lint-imports`` (as CI does); the bite tests run it on a copy
of the package with one backward import added, so they prove the contract would catch each kind
of arrow the architecture forbids, not just that today's code happens to pass.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "parplan"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

BACKWARD = [
    # (importer, imported): the four backward arrows issue 11 names, config's counted twice
    ("engine", "plan"),  # the engine reading the task graph from plan
    ("plan", "engine"),  # plan simulating its own graphs
    ("engine", "report"),  # the engine writing traces
    ("config", "topology"),  # config building the network to check it
    ("config", "model"),  # config building the model graph to check it
]


def lint_imports(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)} if pythonpath else None
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(cwd / "pyproject.toml")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def contract() -> dict[str, object]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (floors,) = config["tool"]["importlinter"]["contracts"]
    assert isinstance(floors, dict)
    return floors


def test_the_package_keeps_its_floors() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


def test_every_part_of_the_package_has_a_floor() -> None:
    """A new subpackage or top-level module must be given a floor (else nothing checks it)."""
    layers = contract()["layers"]
    assert isinstance(layers, list)
    named = {part.strip().strip("()") for layer in layers for part in layer.split("|")}
    parts = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    parts |= {p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert parts <= named, parts - named


@pytest.mark.parametrize(("importer", "imported"), BACKWARD, ids=[f"{a}->{b}" for a, b in BACKWARD])
def test_a_backward_import_breaks_the_contract(tmp_path: Path, importer: str, imported: str) -> None:
    copy = tmp_path / "parplan"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    init = copy / importer / "__init__.py"
    init.write_text(init.read_text(encoding="utf-8") + f"\nimport parplan.{imported}  # backward\n")
    result = lint_imports(tmp_path, pythonpath=tmp_path)
    assert result.returncode != 0, result.stdout
    assert f"parplan.{importer} is not allowed to import parplan.{imported}" in result.stdout
    assert f"parplan.{importer} -> parplan.{imported} (l." in result.stdout
