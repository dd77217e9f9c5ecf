"""The README stays true to the code: its set-up commands, the files and commands it names, the
walkthrough's outputs (run and compared), where it writes files, and the rules every command keeps."""

from __future__ import annotations

import itertools
import os
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


# -- the walkthrough: every command runs, prints what the README shows, writes only under out/ -----

WALKTHROUGH = README[README.index("## Walkthrough") : README.index("## Commands")]
OUTPUT_OPTIONS = ("--json", "--csv", "--trace", "--plot", "--output", "-o")


def console_blocks(text: str = WALKTHROUGH) -> list[tuple[list[str], list[str]]]:
    """Each ``console`` block as (commands, output lines); ``\\`` continues a command."""
    blocks = []
    for body in re.findall(r"```console\n(.*?)```", text, re.S):
        commands: list[str] = []
        output: list[str] = []
        lines = iter(body.splitlines())
        for line in lines:
            if line.startswith("$ "):
                command = line[2:]
                while command.endswith("\\"):
                    command = command[:-1].rstrip() + " " + next(lines).strip()
                commands.append(command)
            else:
                output.append(line)
        blocks.append((commands, output))
    return blocks


def _same_line(expected: str, actual: str) -> bool:
    """Equal, or for an expected line ending in `` ...`` (a long line cut short), a prefix."""
    if expected.endswith(" ...") and expected != "...":
        return actual.startswith(expected[:-3])
    return expected == actual


def _same_run(expected: list[str], actual: list[str]) -> bool:
    return len(expected) == len(actual) and all(map(_same_line, expected, actual))


def _matches(expected: list[str], actual: list[str]) -> bool:
    """``actual`` is ``expected``, where a ``...`` line stands for any number of lines."""
    segments: list[list[str]] = [[]]
    for line in expected:
        if line == "...":
            segments.append([])
        else:
            segments[-1].append(line)
    if len(segments) == 1:
        return _same_run(expected, actual)
    first, *middle, last = segments
    if not _same_run(first, actual[: len(first)]):
        return False
    pos = len(first)
    for segment in middle:
        n = len(segment)
        starts = [i for i in range(pos, len(actual) - n + 1) if _same_run(segment, actual[i : i + n])]
        if not starts:
            return False
        pos = starts[0] + n
    return len(actual) - len(last) >= pos and _same_run(last, actual[len(actual) - len(last) :])


def _parplan(command: str, root: Path, env: dict[str, str]) -> str:
    import shlex

    from typer.testing import CliRunner

    args = shlex.split(command)
    assert args[0] == "parplan", command
    cwd = os.getcwd()
    os.chdir(root)
    try:
        result = CliRunner().invoke(app, args[1:], env=env)
    finally:
        os.chdir(cwd)
    assert result.exit_code in (0, 1), f"{command}\n{result.output}"  # 1: the invalid files shown
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.stdout


def test_every_walkthrough_output_is_what_the_tool_prints(tmp_path: Path) -> None:
    """The pasted outputs are refreshed from the tool: at 120 columns, without colour."""
    env = {"COLUMNS": "120", "NO_COLOR": "1"}
    checked = 0
    for commands, expected in console_blocks():
        if len(commands) != 1 or not commands[0].startswith("parplan") or not expected:
            continue
        (command,) = commands
        actual = _parplan(command, ROOT, env).splitlines()
        assert _matches(expected, actual), f"$ {command}\n" + "\n".join(actual)
        checked += 1
    assert checked >= 8


def test_walkthrough_outputs_go_to_the_ignored_out_folder_or_stdout(tmp_path: Path) -> None:
    """No walkthrough command leaves a file in the clone outside ``out/`` (git-ignored)."""
    import shlex

    assert "/out/" in (ROOT / ".gitignore").read_text().splitlines()
    written = []
    for commands, _ in console_blocks():
        for command in commands:
            args = shlex.split(command)
            for option, value in itertools.pairwise(args):
                if option in OUTPUT_OPTIONS:
                    written.append(value)
            written += re.findall(r"open\('([^']+)'", command)
    assert written  # the walkthrough does show outputs
    for path in written:
        assert path == "-" or path.startswith("out/"), path


def test_the_machine_readable_walkthrough_runs(tmp_path: Path) -> None:
    """Section 7's commands, with ``out/`` in a temporary folder: the one-liner prints what is shown."""
    import shlex
    import subprocess
    import sys

    (commands, expected) = next(b for b in console_blocks() if any("--json out/" in c for c in b[0]))
    env = {"COLUMNS": "120", "NO_COLOR": "1"}
    printed: list[str] = []
    for command in commands:
        command = command.replace("out/", f"{tmp_path}/out/")
        if command.startswith("mkdir"):
            (tmp_path / "out").mkdir()
        elif command.startswith("parplan"):
            printed += _parplan(command, ROOT, env).splitlines()
        else:
            args = shlex.split(command)
            assert args[0] == "python3"
            done = subprocess.run([sys.executable, *args[1:]], capture_output=True, text=True, check=True)
            printed += done.stdout.splitlines()
    assert printed == expected
    assert sorted(p.name for p in (tmp_path / "out").iterdir())[:3] == [
        "run.csv",
        "run.json",
        "trace.dp-centralized.json",
    ]


# -- what every user needs before the first error ---------------------------------------------------


def test_the_readme_documents_exit_codes_colour_and_width() -> None:
    section = README[README.index("### Exit codes") :]
    for code, meaning in [
        ("0", "done"),
        ("1", "invalid input files"),
        ("2", "usage error"),
        ("3", "internal error"),
        ("130", "interrupted"),
    ]:
        assert re.search(rf"^\| {code} \| {meaning}", section, re.M), code
    assert "NO_COLOR" in README and "no-color.org" in README
    assert "natural width" in README and "COLUMNS" in README
