"""Bad input is a first-class case: whatever is in a file, the commands answer with exit 0 or 1 and a
located message, never a traceback, a crash (exit 3), a usage error (exit 2) or unbounded time and
memory.

The first tests pin one hostile input each (a zero rate, a plugin's bad config, an alias bomb, a
million-host cluster); the property test at the end mutates every sample file in the ways users and
attackers do and runs ``validate-config`` on it and ``simulate`` on a scenario that uses it.
"""

from __future__ import annotations

import random
import re
import resource
import shutil
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from parplan.cli.app import app
from parplan.config.loader import load_file
from parplan.config.readers import read_text
from parplan.config.saving import dump_data

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_configs"
SAMPLE_FILES = sorted(p.relative_to(SAMPLES) for p in SAMPLES.rglob("*") if p.is_file())
FORMATS = {".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".json": "json"}

runner = CliRunner()


@pytest.fixture()
def samples(tmp_path: Path) -> Path:
    """A private copy of sample_configs/, so edited files sit beside the files they reference."""
    target = tmp_path / "sample_configs"
    shutil.copytree(SAMPLES, target)
    return target


def invoke(*args: str) -> Result:
    """Run one command in-process, checking the contract every hostile input must keep."""
    result = runner.invoke(app, list(args))
    assert result.exit_code in (0, 1), f"exit {result.exit_code}: {result.output}"
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    return result


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


# -- one hostile input each --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("peak_flops: 65 TFLOP/s", "peak_flops: 0 TFLOP/s", "generator.device.peak_flops"),
        ("memory_bandwidth: 320 GB/s", "memory_bandwidth: 0 GB/s", "generator.device.memory_bandwidth"),
        ("memory: 16 GiB", "memory: 0 GiB", "generator.device.memory"),
        ("bandwidth: 200 Mbit/s", "bandwidth: 0 Mbit/s", "generator.link.bandwidth"),
    ],
)
def test_a_zero_rate_is_refused_at_load_time_by_every_command(
    samples: Path, old: str, new: str, field: str
) -> None:
    """Today's main passes validate-config, then simulate dies of ZeroDivisionError (exit 3) and
    collective silently makes reductions free."""
    cluster = samples / "clusters" / "switch-4hosts.yaml"
    edit(cluster, old, new)
    line = next(i for i, text in enumerate(cluster.read_text().splitlines(), 1) if new in text)
    where = re.compile(rf"switch-4hosts\.yaml:{line}:\d+ {re.escape(field)}: must be > 0, got '0 ")
    for args in (
        ["validate-config", str(cluster)],
        ["simulate", str(samples / "scenarios" / "quickstart.yaml")],
        ["collective", "-c", str(cluster), "-a", "centralized"],
    ):
        result = invoke(*args)
        assert result.exit_code == 1, result.output
        assert where.search(result.output), result.output


def test_a_coordinators_own_check_runs_in_validate_config_with_the_line(samples: Path) -> None:
    """Today's main reports the file valid and only simulate fails on it."""
    strategy = samples / "strategies" / "custom-parameter-server.yaml"
    edit(strategy, "servers: 2", "servers: abc")
    message = "config.servers: servers must be a count or a list of device names, got 'abc'"
    for path in (strategy, samples / "scenarios" / "parameter-server.yaml"):
        result = invoke("validate-config", str(path))
        assert result.exit_code == 1
        assert f"custom-parameter-server.yaml:8:3 {message}" in result.output


def test_a_coordinator_checks_device_names_against_the_scenarios_cluster(samples: Path) -> None:
    strategy = samples / "strategies" / "custom-parameter-server.yaml"
    edit(strategy, "servers: 2", "servers: [h0, h9]")
    assert invoke("validate-config", str(strategy)).exit_code == 0  # no cluster: names cannot be checked
    result = invoke("validate-config", str(samples / "scenarios" / "parameter-server.yaml"))
    assert result.exit_code == 1
    expected = (
        "custom-parameter-server.yaml:8:17 config.servers[1]: servers names 'h9', which is not a device"
    )
    assert expected in result.output


def billion_laughs(levels: int = 9, width: int = 9) -> str:
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    return "\n".join([*lines, "name: laughs", ""])


def test_an_alias_bomb_is_refused_early_in_little_memory_with_its_line(tmp_path: Path) -> None:
    """Today's main needs 3.9 s and 480 MB to refuse it, with no line in the message."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(billion_laughs())
    tracemalloc.start()
    try:
        result = invoke("validate-config", str(bomb))
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 1
    assert re.search(r"bomb\.yaml:6:10 too many nodes: alias \*a4 repeats 66,430 values", result.output)
    assert peak_bytes < 20 * 2**20


def test_a_million_host_cluster_is_refused_before_any_graph_is_built(tmp_path: Path) -> None:
    """Today's main validates it after 51 s and 2.5 GB."""
    cluster = tmp_path / "huge.yaml"
    cluster.write_text(
        "generator:\n  kind: switch\n  hosts: 1000000\n"
        "  device: {peak_flops: 1 TFLOP/s, memory: 1 GiB}\n  link: {bandwidth: 1 GB/s}\n"
    )
    tracemalloc.start()
    try:
        results = [invoke("validate-config", str(cluster)), invoke("collective", "-c", str(cluster))]
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    for result in results:
        assert result.exit_code == 1
        assert "huge.yaml:1:1 generator: makes 1,000,000 devices" in result.output
        assert "parplan supports clusters of up to 65,536 devices" in result.output
    assert peak_bytes < 20 * 2**20


def test_sizes_in_messages_read_like_sizes() -> None:
    """Today's main says "the sweep's end (1024 B) is below its start (1.07374e+09 B)"; a bad option
    value is a usage error (exit 2, the command-line contract)."""
    cluster = str(SAMPLES / "clusters" / "switch-4hosts.yaml")
    result = runner.invoke(app, ["collective", "-c", cluster, "-b", "1GiB", "-e", "1KiB"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "the sweep's end (-e 1 KiB) is below its start (-b 1 GiB)" in result.output


# -- the property test: every sample, mutated --------------------------------------------------------------


def _scenario_uses() -> dict[Path, tuple[Path, tuple[str, ...]]]:
    """For each sample file, a scenario that loads it and the plans to simulate (() = all): the
    cheapest scenario, and only the plan that names a strategy file."""
    uses: dict[Path, list[tuple[Path, tuple[str, ...]]]] = {}
    for scenario in sorted((SAMPLES / "scenarios").iterdir()):
        loaded = load_file(scenario)
        for graft in loaded.source.grafts:
            plans: tuple[str, ...] = ()
            if graft.prefix[:1] == ("plans",) and isinstance(graft.prefix[1], int):
                plans = (loaded.spec.plans[graft.prefix[1]].name,)
            uses.setdefault(Path(graft.path).resolve().relative_to(SAMPLES), []).append((scenario, plans))
    cost = {"dp-algorithms.yaml": 1}  # seven plans on sixteen GPUs: the slowest scenario to simulate
    return {
        path: min(found, key=lambda use: (cost.get(use[0].name, 0), len(use[1]) == 0, use[0].name))
        for path, found in uses.items()
    }


USES = _scenario_uses()
HUGE_OK = ("clusters", "models")  # files whose every number has a supported range (see the README)


def _leaves(value: Any, loc: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*loc, key), item
            yield from _leaves(item, (*loc, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield (*loc, i), item
            yield from _leaves(item, (*loc, i))


def _set(data: Any, loc: tuple[Any, ...], value: Any) -> None:
    for part in loc[:-1]:
        data = data[part]
    data[loc[-1]] = value


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int | float) or bool(re.match(r"^\s*[-+]?\.?\d", str(value)))


DATA_MUTATIONS = ("word", "zero", "negative", "huge", "unknown_name", "drop_key", "rename_key")
TEXT_MUTATIONS = ("truncate", "binary_junk", "alias_bomb")


def mutate(rel: Path, text: str, how: str, rng: random.Random) -> str | None:
    """``text`` of sample ``rel`` mutated ``how`` (None when the mutation does not apply)."""
    if how == "truncate":
        return text[: rng.randrange(len(text))]
    if how == "binary_junk":  # raw bytes, not always UTF-8: written as they are
        raw = text.encode()
        at = rng.randrange(len(raw) + 1)
        junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        return (raw[:at] + junk + raw[at:]).decode("utf-8", errors="surrogateescape")
    if how == "alias_bomb":
        return text + "\n" + billion_laughs(levels=rng.randint(6, 9), width=rng.randint(8, 12))
    data, _ = read_text(text, rel.name)
    leaves = list(_leaves(data))
    numbers = [loc for loc, value in leaves if _is_number(value)]
    strings = [loc for loc, value in leaves if isinstance(value, str) and not _is_number(value)]
    keys = [loc for loc, _ in leaves if isinstance(loc[-1], str)]
    if how in ("word", "zero", "negative", "huge") and numbers:
        if how == "huge" and (rel.parts[0] not in HUGE_OK):
            return None  # strategy counts (microbatches, rounds, ...) have no supported range yet
        loc = rng.choice(numbers)
        value = {
            "word": rng.choice(["twelve", "fast", "1.5 parsecs", "NaN GB/s", ""]),
            "zero": rng.choice([0, 0.0, "0 GB/s", "0 TFLOP/s", "0 GiB", "0 us"]),
            "negative": rng.choice([-1, -0.5, "-25 GB/s", "-1 GiB", -(2**40)]),
            "huge": rng.choice([1e300, 10**18, 2**63, "1e30 GB/s", "1e300 s", "9e18"]),
        }[how]
        _set(data, loc, value)
    elif how == "unknown_name" and strings:
        _set(data, rng.choice(strings), rng.choice(["no-such-thing", "h99", "tree:x", "ring:0", "Ring"]))
    elif how in ("drop_key", "rename_key") and keys:
        loc = rng.choice(keys)
        parent = data
        for part in loc[:-1]:
            parent = parent[part]
        value = parent.pop(loc[-1])
        if how == "rename_key":
            parent[loc[-1] + rng.choice(["x", "_", "s"])] = value
    else:
        return None
    try:
        return dump_data(data, FORMATS[rel.suffix])
    except (ValueError, TypeError, OverflowError):
        return None  # TOML holds no null and no integer past 64 bits: nothing to write


MAX_CPU_SECONDS = 10.0
CLOSED_FORM = frozenset(
    {
        "gpt3-175b-1024xa100.yaml",
        "llama3-70b-64xh100.yaml",
        "mixtral-8x7b-64xh100.yaml",
        "mt-nlg-530b-5128xa100.yaml",
    }
)
"""The LLM samples: their plans are simulated in closed form here (every file is still loaded and
every plan expanded and checked); event by event they take 5-20 s of CPU each, over the bound."""
MAX_GROWTH_BYTES = 256 * 2**20


def bounded(*args: str) -> Result:
    """:func:`invoke`, also bounding its CPU time (wall time depends on whoever else shares the
    machine) and its growth of this process's peak memory."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.process_time()
    result = invoke(*args)
    cpu_s = time.process_time() - start
    growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert cpu_s < MAX_CPU_SECONDS, f"{args} took {cpu_s:.1f} s of CPU"
    assert growth < MAX_GROWTH_BYTES, f"{args} grew the peak memory by {growth / 2**20:.0f} MiB"
    return result


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of sample_configs/ whose all-reduce scenario trains the small MLP instead of GPT-1.3B:
    the same seven algorithms on the same sixteen GPUs, in a tenth of the time."""
    target = tmp_path_factory.mktemp("hostile") / "sample_configs"
    shutil.copytree(SAMPLES, target)
    light = target / "scenarios" / "dp-algorithms.yaml"
    light.write_text(light.read_text().replace("../models/gpt-1.3b.yaml", "../models/mlp-small.yaml"))
    return target


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rel=st.sampled_from(SAMPLE_FILES),
    how=st.sampled_from(DATA_MUTATIONS + TEXT_MUTATIONS),
    seed=st.integers(0, 2**32),
)
def test_mutated_samples_give_exit_0_or_1_and_name_the_file(
    sandbox: Path, rel: Path, how: str, seed: int
) -> None:
    path = sandbox / rel
    original = path.read_text()
    text = mutate(rel, original, how, random.Random(seed))
    if text is None:
        return
    path.write_bytes(text.encode("utf-8", errors="surrogateescape"))
    try:
        result = bounded("validate-config", str(path))
        if result.exit_code == 1:
            assert rel.name in result.output, result.output
        scenario, plans = USES.get(rel, (SAMPLES / rel, ()))
        if scenario.parent.name == "scenarios":
            target = sandbox / "scenarios" / scenario.name
            options = [arg for name in plans for arg in ("--plan", name)]
            if scenario.name in CLOSED_FORM:
                options.append("--analytic")
            result = bounded("simulate", str(target), *options)
            if result.exit_code == 1 and not (rel.name in result.output or scenario.name in result.output):
                # simulate names the plan it could not build (or that --plan asked for and does not
                # fit), not the file; validate-config must then say where the problem is: an error,
                # or the warning that the plan does not fit in memory
                checked = bounded("validate-config", str(target))
                assert checked.exit_code == 1 or "does not fit" in checked.output, (
                    f"{result.output}\nvalidate-config: {checked.output}"
                )
                assert rel.name in checked.output or scenario.name in checked.output, checked.output
    finally:
        path.write_text(original)
