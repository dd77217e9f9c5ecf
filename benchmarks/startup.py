"""How long parplan takes to start, and how much memory it holds by then: ``parplan collective
--help``, a one-size ``parplan collective`` on the 4-host sample switch, and what the engine-scale
benchmark's case imports (``benchmarks/engine_scale.py --case switch 1024 ideal`` up to the built
network, before it simulates), against a bare interpreter, as whole processes.

    python benchmarks/startup.py             # 7 runs of each, medians
    python benchmarks/startup.py --runs 15
    python benchmarks/startup.py --imports   # also the heaviest imports of each (python -X importtime)
    python benchmarks/startup.py --no-bytecode   # compile every module on every run

Runs use cached bytecode (``__pycache__``), as an installed package does: ``PYTHONDONTWRITEBYTECODE``
is dropped from the children's environment and a first run of each command writes the cache.
Without the cache (``--no-bytecode``: an empty cache directory that is never written) every run
also compiles every module it imports.

Printed per command: the median wall time and the median CPU time (user + system, from the
operating system's accounting of the finished child), each also less the bare interpreter's
(``python -c pass``): what parplan adds; and the median peak resident memory of the process (its
own ``ru_maxrss``, which Linux carries over from the forked launcher, so no figure reads below
this script's own ~14 MiB; ``/usr/bin/time -f %M`` gives a bare interpreter ~10.5 MiB). On a
loaded machine quote the CPU figures: wall time there includes waiting for a core. Issue 15's
targets: start-up <= 0.15 s for both commands; the engine-scale case <= ~40 MB before it
simulates (its whole run <= 64 MiB at p = 1024). The last row imports only the core libraries a
one-size ``collective`` cannot do without (numpy, pydantic with its first model, rich's tables,
typer, PyYAML): the floor under that command, whatever parplan does.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = ROOT / "sample_configs" / "clusters" / "switch-4hosts.yaml"
ENGINE_SCALE_IMPORTS = """
from parplan.collectives.registry import build_schedule
from parplan.config.cluster import ClusterSpec
from parplan.engine.simulate import simulate
from parplan.plan.collective import collective_taskgraph
from parplan.plan.collective_run import call_overhead_s
from parplan.topology.build import build_network
device = {"peak_flops": "312 TFLOP/s", "memory": "80 GiB", "memory_bandwidth": "2 TB/s"}
link = {"bandwidth": "50 GB/s", "latency": "500 ns"}
generator = {"kind": "switch", "hosts": 1024, "device": device, "link": link}
build_network(ClusterSpec.model_validate({"name": "switch-1024", "generator": generator}))
"""
"""What ``engine_scale.py --case switch 1024 ideal`` imports and builds before it simulates."""
LIBRARY_FLOOR = """
import os
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy, pydantic, rich.console, rich.table, typer, yaml
class Spec(pydantic.BaseModel):
    x: int
"""
"""The core libraries a one-size ``parplan collective`` needs (arrays, validated specs, tables, the
command line, YAML) and pydantic's first model, with OpenBLAS on one thread as the CLI sets it: the
floor under that command before parplan imports or does anything of its own."""
COMMANDS: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "import parplan.cli.app": ["-c", "import parplan.cli.app"],
    "parplan collective --help": ["-m", "parplan", "collective", "--help"],
    "parplan collective -s 1MiB (4 hosts)": ["-m", "parplan", "collective", "-c", str(CLUSTER), "-s", "1MiB"],
    "engine-scale case, before simulating": ["-c", ENGINE_SCALE_IMPORTS],
    "libraries a one-size run needs": ["-c", LIBRARY_FLOOR],
}


def _once(args: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak resident MiB of one run of ``python ARGS``."""
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    _, _, usage = os.wait4(child.pid, 0)  # this child's own accounting, not all children's
    child.returncode = 0  # reaped here; keep Popen from waiting on it again
    wall = time.perf_counter() - start
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def _heaviest_imports(args: list[str], env: dict[str, str], shown: int = 8) -> list[str]:
    """The top-level packages that took the most cumulative import time, with their times."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *args], capture_output=True, text=True, env=env, check=False
    )
    totals: dict[str, int] = {}
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|")
        if name.strip() and not name.startswith("  ") and cumulative.strip().isdigit():
            totals[name.strip()] = totals.get(name.strip(), 0) + int(cumulative)
    top = sorted(totals.items(), key=lambda kv: -kv[1])[:shown]
    return [f"{name} {us / 1e3:.0f} ms" for name, us in top]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--imports", action="store_true", help="show the heaviest imports of each")
    parser.add_argument("--no-bytecode", action="store_true", help="compile every module on every run")
    args = parser.parse_args()
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "120"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if args.no_bytecode:  # an empty cache directory that is never written: every run compiles
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="parplan-no-bytecode-")
    figures: dict[str, tuple[float, float, float]] = {}
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in COMMANDS}
    for cmd in COMMANDS.values():  # warm the file cache and write the bytecode cache
        _once(cmd, env)
    for _ in range(args.runs):  # in turn, so a change of load hits every command alike
        for name, cmd in COMMANDS.items():
            runs[name].append(_once(cmd, env))
    for name, samples in runs.items():
        figures[name] = tuple(statistics.median(column) for column in zip(*samples, strict=True))  # type: ignore[assignment]
    base_wall, base_cpu, _ = figures["python -c pass"]
    cache = "without" if args.no_bytecode else "with"
    print(f"start-up, medians of {args.runs} runs {cache} cached bytecode", end=" ")
    print("(seconds; 'added' = less a bare interpreter)")
    print(f"{'command':40} {'wall':>7} {'cpu':>7} {'added wall':>11} {'added cpu':>10} {'peak MiB':>9}")
    for name, (wall, cpu, peak) in figures.items():
        added = f"{wall - base_wall:>11.3f} {cpu - base_cpu:>10.3f}"
        print(f"{name:40} {wall:>7.3f} {cpu:>7.3f} {added} {peak:>9.1f}")
        if args.imports and name != "python -c pass":
            print("    heaviest imports: " + ", ".join(_heaviest_imports(COMMANDS[name], env)))


if __name__ == "__main__":
    main()
