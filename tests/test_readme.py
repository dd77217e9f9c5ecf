"""The README stays true to the code: its set-up commands, the files and commands it names."""

from __future__ import annotations

import re
from pathlib import Path

from typer.main import get_command

from parplan.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _setup_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", README, re.S)
    assert block, "the README must open with a bash block of set-up commands"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_opens_with_the_two_setup_commands() -> None:
    install, tests = _setup_commands()
    assert "pip install" in install and "parplan simulate sample_configs/" in install
    assert '".[test]"' in tests and "pytest" in tests
    sample = re.search(r"(sample_configs/\S+)", install)
    assert sample and (ROOT / sample.group(1)).is_file()


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert _setup_commands()[1] in ci.splitlines()


def test_every_path_the_readme_names_exists() -> None:
    pattern = r"\b((?:sample_configs|tests|benchmarks|parplan)/[\w./-]+\.\w+)"
    for path in sorted(set(re.findall(pattern, README))):
        assert (ROOT / path).exists(), path


def test_every_command_the_readme_documents_is_registered() -> None:
    registered = set(get_command(app).commands)  # type: ignore[attr-defined]
    documented = set(re.findall(r"`parplan ([a-z][a-z-]+)", README))
    assert documented <= registered, documented - registered
    assert registered <= documented, registered - documented
