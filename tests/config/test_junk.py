"""Whatever is in a file, loading it gives specs or a ConfigError, never another exception."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parplan.api.validate_config import validate_file
from parplan.config.loader import KINDS, load_any, spec_from_data
from parplan.config.readers import read_file
from parplan.config.saving import dump_data
from parplan.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted(p for p in (ROOT / "sample_configs").rglob("*") if p.is_file())
SUFFIXES = (".yaml", ".toml", ".json")
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def only_config_errors(path: Path) -> None:
    for kind in (None, *KINDS):
        try:
            load_any(path, kind)
        except ConfigError as exc:
            assert exc.issues and all(i.message for i in exc.issues)
    report = validate_file(path)  # never raises
    assert report.valid or report.errors


@FUZZ
@given(content=st.binary(max_size=300), suffix=st.sampled_from(SUFFIXES))
def test_random_bytes(tmp_path: Path, content: bytes, suffix: str) -> None:
    path = tmp_path / f"junk{suffix}"
    path.write_bytes(content)
    only_config_errors(path)


@FUZZ
@given(
    content=st.text(
        alphabet=st.sampled_from(list("{}[]:,=-#'\"!&*|>?%@`\n\t .0123456789abcxyz_\\")), max_size=200
    ),
    suffix=st.sampled_from(SUFFIXES),
)
def test_random_syntax_soup(tmp_path: Path, content: str, suffix: str) -> None:
    path = tmp_path / f"soup{suffix}"
    path.write_text(content)
    only_config_errors(path)


KEYS = st.sampled_from(
    [
        "kind",
        "name",
        "generator",
        "devices",
        "links",
        "nodes",
        "edges",
        "plans",
        "partitions",
        "cluster",
        "model",
        "training",
        "strategy",
        "num_replicas",
        "aggregation",
        "algorithm",
        "bandwidth",
        "hosts",
        "worker",
        "replica",
        "device",
        "memory",
        "peak_flops",
        "global_batch_size",
        "switch",
        "tree:1",
        "ring",
        "x",
    ]
)
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(-5, 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(
        ["25 GB/s", "tree:4", "local", "data_parallel", "h0", "switch", "", "1e999 B", "model_parallel"]
    )
    | st.text(max_size=6)
)
STRUCTURES = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=25,
)


@FUZZ
@given(data=st.dictionaries(KEYS, STRUCTURES, min_size=1, max_size=6), fmt=st.sampled_from(["yaml", "json"]))
def test_random_structures(tmp_path: Path, data: dict[str, Any], fmt: str) -> None:
    path = tmp_path / f"structure.{fmt}"
    path.write_text(yaml.safe_dump(data) if fmt == "yaml" else json.dumps(data))
    only_config_errors(path)


def _mutate(value: Any, rng: random.Random, junk: Any) -> Any:
    """Replace one randomly chosen sub-value of ``value`` with ``junk``."""
    if isinstance(value, dict) and value and rng.random() < 0.8:
        key = rng.choice(sorted(value))
        return {**value, key: _mutate(value[key], rng, junk)}
    if isinstance(value, list) and value and rng.random() < 0.8:
        i = rng.randrange(len(value))
        return [*value[:i], _mutate(value[i], rng, junk), *value[i + 1 :]]
    return junk


@settings(max_examples=120, deadline=None)
@given(sample=st.sampled_from(SAMPLES), seed=st.integers(0, 2**32), junk=LEAVES | STRUCTURES)
def test_mutated_samples(sample: Path, seed: int, junk: Any) -> None:
    """A valid sample with one value replaced by junk: still only ConfigErrors, from data and files."""
    data, _ = read_file(sample)
    mutated = _mutate(data, random.Random(seed), junk)
    kind = load_any(sample)[0]
    try:
        loaded = spec_from_data(kind, mutated, str(sample))
    except ConfigError as exc:
        assert exc.issues
    else:
        from parplan.api.checks import check_spec

        for issue in check_spec(kind, loaded.spec, loaded.source):
            assert issue.message


@pytest.fixture(scope="module")
def samples_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of sample_configs/, so fuzzed files can sit beside the files they reference."""
    target = tmp_path_factory.mktemp("samples") / "sample_configs"
    shutil.copytree(ROOT / "sample_configs", target)
    return target


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sample=st.sampled_from(SAMPLES),
    seed=st.integers(0, 2**32),
    junk=LEAVES,
    fmt=st.sampled_from(["yaml", "toml", "json"]),
)
def test_mutated_samples_as_files(samples_copy: Path, sample: Path, seed: int, junk: Any, fmt: str) -> None:
    data, _ = read_file(sample)
    mutated = _mutate(data, random.Random(seed), junk)
    if not isinstance(mutated, dict):
        return
    try:
        text = dump_data(mutated, fmt)
    except (ConfigError, ValueError, TypeError, OverflowError):
        return  # TOML cannot hold null (or ints past 64 bits): nothing to load
    path = samples_copy / sample.relative_to(ROOT / "sample_configs").parent / f"fuzz.{fmt}"
    path.write_text(text)
    only_config_errors(path)
