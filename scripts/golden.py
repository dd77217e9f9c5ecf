"""Golden outputs: every sample scenario's ``parplan simulate --json -`` and ``compare-strategies
--json -``, and every sample cluster's ``parplan collective --json -`` (simulated and analytic),
kept under ``tests/golden/`` and compared byte for byte.

    python scripts/golden.py            # check: exit 1 and name every file that differs
    python scripts/golden.py --update   # rewrite the goldens (after a change of numbers on purpose)

A refactoring must leave every golden byte-identical; a change to the cost model updates them in
the same commit and says why. ``tests/test_golden.py`` runs the check in the suite. Each output is
produced in-process with typer's ``CliRunner`` (the same code path as the console script).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
SCENARIOS = sorted((ROOT / "sample_configs" / "scenarios").glob("*.*"))
CLUSTERS = sorted((ROOT / "sample_configs" / "clusters").glob("*.*"))
SWEEP_SCENARIO = "sample_configs/scenarios/dp-algorithms.yaml"
SWEEP = ["-s", "algorithm=ring,tree:2,centralized", "-s", "num_replicas=2,4"]


def cases() -> Iterator[tuple[str, list[str]]]:
    """(golden file name, parplan arguments) of every golden output."""
    for path in SCENARIOS:
        rel = str(path.relative_to(ROOT))
        yield f"simulate-{path.stem}.json", ["simulate", rel, "--json", "-"]
        yield f"compare-{path.stem}.json", ["compare-strategies", rel, "--json", "-"]
    yield "compare-sweep.json", ["compare-strategies", SWEEP_SCENARIO, *SWEEP, "--json", "-"]
    for path in CLUSTERS:
        rel = str(path.relative_to(ROOT))
        sweep = ["collective", "-c", rel, "-a", "all", "-b", "8", "-e", "64MiB", "-f", "8", "--json", "-"]
        yield f"collective-{path.stem}.json", sweep
        yield f"collective-{path.stem}-analytic.json", [*sweep, "--analytic"]


def run(args: list[str]) -> str:
    """The standard output of ``parplan ARGS``, run in-process from the repository root."""
    import os

    from typer.testing import CliRunner

    from parplan.cli.app import app

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        result = CliRunner().invoke(app, args, env={"COLUMNS": "120", "NO_COLOR": "1"})
    finally:
        os.chdir(cwd)
    if result.exit_code != 0:
        raise RuntimeError(f"parplan {' '.join(args)} exited {result.exit_code}: {result.output[-2000:]}")
    return result.stdout


def check(update: bool = False) -> list[str]:
    """The golden files whose output differs (all rewritten, and none reported, with ``update``)."""
    GOLDEN.mkdir(parents=True, exist_ok=True)
    differ = []
    for name, args in cases():
        out = run(args)
        path = GOLDEN / name
        if update:
            path.write_text(out)
        elif not path.exists() or path.read_text() != out:
            differ.append(name)
    return differ


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--update", action="store_true", help="rewrite the golden files")
    differ = check(parser.parse_args().update)
    for name in differ:
        print(f"differs: tests/golden/{name}")
    print(f"{len(list(cases()))} golden outputs, {len(differ)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
