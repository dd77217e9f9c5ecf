"""Loading files into specs: kind detection, references, located issues, saving and round trips."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parplan.config.loader import (
    KINDS,
    detect_kind,
    dump_spec,
    load_any,
    load_cluster,
    load_file,
    load_model,
    load_partitions,
    load_scenario,
    load_strategy,
    save_spec,
    spec_from_data,
    spec_kind,
)
from parplan.config.strategy import DataParallelStrategy, LocalStrategy, ModelParallelStrategy
from parplan.errors import ConfigError
from tests.config.specs import SPECS

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted(p for p in (ROOT / "sample_configs").rglob("*") if p.is_file())
FORMATS = ("yaml", "toml", "json")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def messages(exc: pytest.ExceptionInfo[ConfigError]) -> list[str]:
    return [str(i) for i in exc.value.issues]


# -- kind detection ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        ({"plans": [], "cluster": {}}, "scenario"),
        ({"kind": "local"}, "strategy"),
        ({"kind": "data_parallel", "partitions": []}, "strategy"),
        ({"partitions": [], "name": "p"}, "partition"),
        ({"partitions": [], "communication": {}}, "strategy"),
        ({"generator": {"kind": "fat_tree"}}, "cluster"),
        ({"generator": {"kind": "transformer"}}, "model"),
        ({"generator": {"kind": "mlp"}, "name": "m"}, "model"),
        ({"devices": []}, "cluster"),
        ({"links": [], "name": "x"}, "cluster"),
        ({"nodes": []}, "model"),
        ({"training": {}}, "scenario"),
        ({"device": "h0"}, "strategy"),
        ({"num_replicas": 4}, "strategy"),
        ({"coordinator": "x"}, "strategy"),
    ],
)
def test_detect_kind(data: dict[str, Any], kind: str) -> None:
    assert detect_kind(data) == kind


@pytest.mark.parametrize("data", [{"name": "x"}, {"colour": 1}, {"generator": {"kind": "?"}}, [1]])
def test_detect_kind_refuses_to_guess(data: Any) -> None:
    with pytest.raises(ConfigError, match=r"pass --kind|no mapping at the top level"):
        detect_kind(data, "f.yaml")


def test_every_sample_is_detected_as_its_directory_says() -> None:
    expected = {"clusters": "cluster", "models": "model", "strategies": "strategy", "partitions": "partition"}
    expected["scenarios"] = "scenario"
    for path in SAMPLES:
        kind, _ = load_any(path)
        assert kind == expected[path.relative_to(ROOT / "sample_configs").parts[0]], path


# -- references ----------------------------------------------------------------------------------------


def test_scenario_references_resolve_relative_to_the_naming_file() -> None:
    scenario = load_scenario(ROOT / "sample_configs/scenarios/pipeline.yaml")
    assert scenario.cluster_file == "../clusters/dgx-a100-2nodes.yaml"
    assert scenario.model_file == "../models/gpt-1.3b.yaml"
    plans = {p.name: p for p in scenario.plans}
    gpipe = plans["gpipe"].strategy
    assert isinstance(gpipe, ModelParallelStrategy)
    assert plans["gpipe"].strategy_file == "../strategies/pipeline-gpipe.yaml"
    assert gpipe.partitions_file == "../partitions/gpt-1.3b-4stage.yaml"  # relative to the strategy file
    assert [p.worker for p in gpipe.partitions] == ["n0.d0", "n0.d1", "n0.d2", "n0.d3"]
    two_d = plans["dp4-x-pp4"].strategy
    assert isinstance(two_d, DataParallelStrategy) and two_d.replica is not None
    assert two_d.replica_file == "pipeline-1f1b.yaml"
    assert two_d.replica.communication.schedule == "1f1b"
    assert two_d.replica.partitions == gpipe.partitions


def test_bare_strategy_kind_and_default_local(tmp_path: Path) -> None:
    write(tmp_path / "s.yaml", "device: h1\n")
    assert load_strategy(tmp_path / "s.yaml") == LocalStrategy(kind="local", device="h1")
    scenario = write(
        tmp_path / "sc.yaml",
        "cluster: {devices: [{name: a, peak_flops: 1, memory: 1}]}\n"
        "model: {generator: {kind: mlp, widths: [2, 2]}}\n"
        "training: {global_batch_size: 1}\n"
        "plans:\n  - {name: a, strategy: local}\n  - {name: b, strategy: s.yaml}\n"
        "  - {name: c, strategy: {}}\n",
    )
    spec = load_scenario(scenario)
    assert [p.strategy for p in spec.plans] == [
        LocalStrategy(kind="local"),
        LocalStrategy(kind="local", device="h1"),
        LocalStrategy(kind="local"),
    ]
    assert [p.strategy_file for p in spec.plans] == [None, "s.yaml", None]


def test_errors_inside_a_referenced_file_name_that_file(tmp_path: Path) -> None:
    write(
        tmp_path / "strategies/dp.yaml",
        "kind: data_parallel\nnum_replicas: 2\naggregation:\n  algorithm: tree:1\n",
    )
    write(tmp_path / "strategies/mp.yaml", "kind: model_parallel\npartitions: ../parts/p.yaml\n")
    write(tmp_path / "parts/p.yaml", "partitions:\n  - {name: a, nodes: [fc0], worker: 7}\n")
    write(tmp_path / "clusters/c.toml", '[generator]\nkind = "ring"\nhosts = 1\n')
    scenario = write(
        tmp_path / "scenarios/s.yaml",
        "cluster: ../clusters/c.toml\n"
        "model: {generator: {kind: mlp, widths: [2, 2]}}\n"
        "training: {global_batch_size: 1}\n"
        "plans:\n"
        "  - {name: a, strategy: ../strategies/dp.yaml}\n"
        "  - {name: b, strategy: ../strategies/mp.yaml}\n"
        "  - {name: c, strategy: ../strategies/missing.yaml}\n",
    )
    with pytest.raises(ConfigError) as info:
        load_scenario(scenario)
    d = tmp_path
    assert messages(info) == [
        f"{d}/scenarios/s.yaml:7:15 plans[2].strategy: file not found: {d}/strategies/missing.yaml",
        f"{d}/clusters/c.toml:1:1 generator.device: required key is missing",
        f"{d}/clusters/c.toml:1:1 generator.link: required key is missing",
        f"{d}/clusters/c.toml:3:1 generator.hosts: must be >= 2, got 1",
        f"{d}/strategies/dp.yaml:4:3 aggregation.algorithm.arity: must be >= 2, got 1",
        f"{d}/parts/p.yaml:2:29 partitions[0].worker: expected a string, got a number",
    ]


def test_reference_problems(tmp_path: Path) -> None:
    write(tmp_path / "m.yaml", "generator: {kind: mlp, widths: [2, 2]}\n")
    write(tmp_path / "loop.yaml", "kind: data_parallel\nnum_replicas: 2\nreplica: loop.yaml\n")
    (tmp_path / "dir.yaml").mkdir()
    scenario = write(
        tmp_path / "s.yaml",
        "cluster: m.yaml\nmodel: dir.yaml\ntraining: {global_batch_size: 1}\n"
        "plans:\n  - {name: a, strategy: loop.yaml}\n  - {name: b, strategy: notes.txt}\n",
    )
    with pytest.raises(ConfigError) as info:
        load_scenario(scenario)
    d = tmp_path
    assert messages(info) == [
        f"{d}/s.yaml:1:1 cluster: {d}/m.yaml is a model file, expected a cluster file",
        f"{d}/s.yaml:2:1 model: {d}/dir.yaml is a directory, not a file",
        f"{d}/loop.yaml:3:1 replica: {d}/loop.yaml refers back to itself",
        f"{d}/s.yaml:6:15 plans[1].strategy: 'notes.txt' is not a strategy file path "
        "(.yaml, .yml, .toml or .json)",
    ]


def test_a_replica_file_must_be_model_parallel(tmp_path: Path) -> None:
    write(tmp_path / "pp.json", '{"partitions": [{"name": "a", "nodes": ["x"], "worker": "h0"}]}')
    write(tmp_path / "dp.yaml", "kind: data_parallel\nnum_replicas: 2\nreplica: pp.json\n")
    spec = load_strategy(tmp_path / "dp.yaml")
    assert spec.replica.partitions[0].worker == "h0"  # a partition-shaped file reads as the replica plan
    write(tmp_path / "local.yaml", "kind: local\n")
    write(tmp_path / "dp2.yaml", "kind: data_parallel\nnum_replicas: 2\nreplica: local.yaml\n")
    with pytest.raises(ConfigError) as info:
        load_strategy(tmp_path / "dp2.yaml")
    assert messages(info) == [
        f"{tmp_path}/dp2.yaml:3:1 replica: {tmp_path}/local.yaml is a local strategy; "
        "a replica must be a model_parallel plan"
    ]


# -- issues --------------------------------------------------------------------------------------------


def test_all_issues_are_collected_with_positions_in_every_format(tmp_path: Path) -> None:
    data = {
        "kind": "data_parallel",
        "num_replicas": "x",
        "aggregation": {"algorithm": {"name": "tree", "arity": 1}, "bucket_size": "25 MB/sec", "bogus": 3},
        "bach_split": "by_speed",
        "devices": ["a", 3],
    }
    expected = [
        "num_replicas: expected an integer, got 'x'",
        "aggregation.algorithm.arity: must be >= 2, got 1",
        "aggregation.bucket_size: '25 MB/sec' is not a valid size (e.g. '64 MiB')",
        "aggregation.bogus: unknown key 'bogus'; valid keys: algorithm, reduce, bucket_size, overlap",
        "bach_split: unknown key 'bach_split'; did you mean 'batch_split'?",
        "devices[1]: expected a string, got a number",
    ]
    from parplan.config.saving import dump_data

    for fmt in FORMATS:
        path = write(tmp_path / f"dp.{fmt}", dump_data(data, fmt))
        with pytest.raises(ConfigError) as info:
            load_strategy(path)
        issues = info.value.issues
        assert sorted(f"{i.field}: {i.message}" for i in issues) == sorted(expected), fmt
        assert all(i.path == str(path) and i.line > 0 for i in issues), fmt


def test_fields_written_by_python_name_are_located_and_accepted(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", "devices:\n  - {name: a, peak_flop_per_s: x, memory_bytes: 1}\n")
    with pytest.raises(ConfigError) as info:
        load_cluster(path)
    (issue,) = info.value.issues
    assert (issue.field, issue.line, issue.column) == ("devices[0].peak_flop_per_s", 2, 15)
    assert issue.message == "'x' is not a valid compute rate (e.g. '312 TFLOP/s')"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "kind: federated\nnum_clients: 2\nclient_selection: {kind: fastest, k: 3}\n",
            "3:1 client_selection: k (3) exceeds num_clients (2)",
        ),
        (
            "kind: federated\nnum_clients: 2\nclient_selection: {kind: best}\n",
            "3:20 client_selection.kind: unknown kind 'best'; valid: all, random, round_robin, fastest",
        ),
        (
            "kind: federated\nnum_clients: 2\nclient_selection: {k: 1}\n",
            "3:1 client_selection.kind: missing 'kind'; one of: all, random, round_robin, fastest",
        ),
        ("kind: population_based\npopulation_size: 1\n", "2:1 population_size: must be >= 2, got 1"),
        (
            "kind: population_based\npopulation_size: 4\nexploit: {kind: truncation, fraction: 0.9}\n",
            "3:29 exploit.fraction: must be <= 0.5, got 0.9",
        ),
        (
            "kind: data_parallel\nnum_replicas: 2\naggregation: {reduce: max}\n",
            "3:15 aggregation.reduce: must be 'mean', 'sum' or 'weighted_by_samples', got 'max'",
        ),
        (
            "kind: data_parallel\nnum_replicas: 2\naggregation: {algorithm: 'halving_doubling:2'}\n",
            "3:15 aggregation.algorithm: algorithm 'halving_doubling' takes no parameter, "
            "got 'halving_doubling:2'",
        ),
        (
            "kind: data_parallel\nnum_replicas: 2\n"
            "aggregation: {algorithm: {name: hierarchical, group_size: 0}}\n",
            "3:47 aggregation.algorithm.group_size: must be >= 1, got 0",
        ),
        ("kind: data_parallel\nnum_replicas: 2.5\n", "2:1 num_replicas: expected an integer, got 2.5"),
        (
            "kind: data_parallel\nnum_replicas: 2\noverlap: maybe\n",
            "3:1 overlap: unknown key 'overlap'; valid keys: "
            "kind, num_replicas, aggregation, batch_split, devices, replica, replica_file",
        ),
        (
            "kind: data_parallel\nnum_replicas: 2\naggregation: {overlap: maybe}\n",
            "3:15 aggregation.overlap: expected true or false, got 'maybe'",
        ),
        (
            "kind: model_parallel\npartitions:\n  - {name: a, nodes: [x], worker: h0}\n"
            "  - {name: a, nodes: [x], worker: h0}\n",
            "2:1 partitions: partition names used twice: a",
        ),
        ("kind: model_parallel\npartitions: []\n", "2:1 partitions: needs at least 1 item"),
        ("kind: custom\ncoordinator: ''\n", "2:1 coordinator: must not be empty"),
        ("kind: local\ndevice: [a]\n", "2:1 device: expected a string, got a list"),
        (
            "kind: data_parallel\nnum_replicas: 2\naggregation: [ring]\n",
            "3:1 aggregation: expected a mapping, got a list",
        ),
    ],
)
def test_schema_messages(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path / "s.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_strategy(path)
    found = [str(i).removeprefix(f"{path}:") for i in info.value.issues]
    assert expected in found
    if "partitions: needs" not in expected and "used twice" not in expected:
        assert found == [expected]


def test_cluster_and_model_messages(tmp_path: Path) -> None:
    gen = "device: {peak_flops: 1, memory: 1}, link: {bandwidth: 1}}\n"
    cases = {
        "generator: {kind: torus2d, x: 0, y: 2, " + gen: "1:28 generator.x: must be >= 1, got 0",
        "generator: {kind: fat_tree, k: 2, hosts: 9, " + gen: (
            "1:35 generator.hosts: a fat tree with k=2 has at most 2 hosts, asked 9"
        ),
        "devices:\n  - {name: a, peak_flops: 1, memory: 1, efficiency: 1.5}\n": (
            "2:41 devices[0].efficiency: must be <= 1, got 1.5"
        ),
        "devices:\n  - {name: a, peak_flops: 1, memory: 1}\nswitches: [{name: a}]\n": (
            "3:1 switches: name 'a' is used twice"
        ),
        "devices:\n  - {name: a, peak_flops: 1 GB, memory: 1}\n": (
            "2:15 devices[0].peak_flops: '1 GB' is not a valid compute rate (e.g. '312 TFLOP/s')"
        ),
        "links: []\nname: empty\n": "1:1 a cluster needs a generator or at least one device",
    }
    for text, expected in cases.items():
        path = write(tmp_path / "c.yaml", text)
        with pytest.raises(ConfigError) as info:
            load_any(path, "cluster")
        assert [str(i).removeprefix(f"{path}:") for i in info.value.issues] == [expected]
    path = write(tmp_path / "m.yaml", "nodes: [{id: a}, {id: a}]\n")
    with pytest.raises(ConfigError, match=r"m.yaml:1:1 nodes: node ids used twice: a"):
        load_model(path)
    path = write(
        tmp_path / "m.yaml",
        "generator: {kind: transformer, layers: 1, hidden: 10, heads: 3, seq_len: 1, vocab: 1}\n",
    )
    with pytest.raises(
        ConfigError, match=r"m.yaml:1:55 generator.heads: hidden \(10\) must be divisible by heads"
    ):
        load_model(path)
    path = write(tmp_path / "m.yaml", "nodes: [{id: a}]\nedges: [[a, b]]\n")
    with pytest.raises(ConfigError, match=r"m.yaml:2:1 edges: edge \[a, b\] names unknown node 'b'"):
        load_model(path)


def test_explicit_kind_overrides_detection(tmp_path: Path) -> None:
    path = write(tmp_path / "x.yaml", "name: only-a-name\n")
    with pytest.raises(ConfigError, match="plans: required key is missing"):
        load_any(path, "scenario")
    with pytest.raises(ConfigError, match="unknown kind 'bogus'"):
        load_any(path, "bogus")
    with pytest.raises(ConfigError, match="kind: missing 'kind'; one of: local, data_parallel"):
        load_any(path, "strategy")  # 'name' is not a key of local, so kind is not assumed


def test_spec_from_data_does_not_modify_its_input() -> None:
    data = {"kind": "model_parallel", "partitions": [{"name": "a", "nodes": ["x"], "worker": "h"}]}
    before = repr(data)
    loaded = spec_from_data("strategy", data)
    assert repr(data) == before
    assert loaded.kind == "strategy" and loaded.source.path == "<data>"


# -- saving and round trips ----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_every_sample_round_trips_in_every_format(tmp_path: Path, sample: Path, fmt: str) -> None:
    kind, spec = load_any(sample)
    target = tmp_path / f"copy.{fmt}"
    save_spec(spec, target)
    again_kind, again = load_any(target)
    assert (again_kind, again) == (kind, spec)
    assert spec_kind(spec) == kind


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hypothesis_specs_round_trip(tmp_path: Path, kind: str, data: st.DataObject) -> None:
    spec = data.draw(SPECS[kind])
    for fmt in FORMATS:
        target = tmp_path / f"{kind}.{fmt}"
        save_spec(spec, target)
        loaded = load_file(target, kind)
        assert loaded.spec == spec, (fmt, target.read_text())


def test_toml_cannot_hold_null(tmp_path: Path) -> None:
    from parplan.config.strategy import CustomStrategy

    spec = CustomStrategy(kind="custom", coordinator="c", config={"a": [1, None]})
    with pytest.raises(ConfigError) as info:
        save_spec(spec, tmp_path / "c.toml")
    assert messages(info) == [
        f"{tmp_path}/c.toml config.a[1]: is null, which TOML cannot represent; save as .yaml or .json instead"
    ]
    save_spec(spec, tmp_path / "c.yaml")
    assert load_strategy(tmp_path / "c.yaml") == spec
    assert not list(tmp_path.glob(".*tmp"))


def test_save_is_atomic_and_reports_problems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = LocalStrategy(kind="local", device="h0")
    target = tmp_path / "s.yaml"
    save_spec(spec, target)
    original = target.read_text()

    def fail(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(ConfigError, match="cannot write: No space left on device"):
        save_spec(LocalStrategy(kind="local", device="h1"), target)
    assert target.read_text() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]  # no temporary left behind
    with pytest.raises(ConfigError, match="does not exist"):
        save_spec(spec, tmp_path / "nope" / "s.yaml")
    with pytest.raises(ConfigError, match="unknown file extension"):
        save_spec(spec, tmp_path / "s.txt")


def test_dump_spec_writes_file_keys_and_units() -> None:
    spec = load_cluster(ROOT / "sample_configs/clusters/dgx-a100-2nodes.yaml")
    text = dump_spec(spec, "yaml")
    assert "bandwidth: 300 GB/s" in text and "bandwidth_Bps" not in text
    assert "memory: 80 GiB" in text
    assert 'bandwidth = "25 GB/s"' in dump_spec(spec, "toml")


def test_loader_functions_check_the_kind(tmp_path: Path) -> None:
    shutil.copy(ROOT / "sample_configs/partitions/gpt-1.3b-4stage.yaml", tmp_path / "p.yaml")
    assert len(load_partitions(tmp_path / "p.yaml").partitions) == 4
    with pytest.raises(ConfigError):
        load_cluster(tmp_path / "p.yaml")
