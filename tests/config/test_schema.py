"""The JSON Schemas editors use accept every sample and reject what the loader rejects in shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest

from parplan.config.loader import KINDS, detect_kind
from parplan.config.readers import read_file
from parplan.config.schema import json_schema

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted(p for p in (ROOT / "sample_configs").rglob("*") if p.is_file())


def validator(kind: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json_schema(kind))


@pytest.mark.parametrize("kind", KINDS)
def test_schemas_are_valid_draft_2020_12(kind: str) -> None:
    schema = json_schema(kind)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["title"] == f"parplan {kind} file"


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_every_sample_matches_its_schema(sample: Path) -> None:
    data, _ = read_file(sample)
    errors = [e.message for e in validator(detect_kind(data)).iter_errors(data)]
    assert errors == []


@pytest.mark.parametrize(
    ("kind", "data"),
    [
        ("cluster", {"generator": {"kind": "mesh", "hosts": 4}}),
        (
            "cluster",
            {"devices": [{"name": "a", "peak_flops": "1 TFLOP/s", "memory": "1 GiB", "colour": "red"}]},
        ),
        ("cluster", {"devices": [{"name": "a", "peak_flops": -1, "memory": 1}]}),
        (
            "model",
            {
                "generator": {
                    "kind": "transformer",
                    "layers": 0,
                    "hidden": 8,
                    "heads": 1,
                    "seq_len": 1,
                    "vocab": 1,
                }
            },
        ),
        ("strategy", {"kind": "data_parallel", "num_replicas": 2, "aggregation": {"algorithm": "butterfly"}}),
        (
            "strategy",
            {
                "kind": "data_parallel",
                "num_replicas": 2,
                "aggregation": {"algorithm": {"name": "tree", "arity": 1}},
            },
        ),
        ("strategy", {"kind": "federated"}),
        ("partition", {"partitions": []}),
        (
            "scenario",
            {
                "cluster": 3,
                "model": "m.yaml",
                "training": {"global_batch_size": 1},
                "plans": [{"name": "a", "strategy": "local"}],
            },
        ),
    ],
)
def test_schemas_reject_bad_shapes(kind: str, data: dict[str, Any]) -> None:
    assert list(validator(kind).iter_errors(data))


def test_schemas_accept_paths_and_short_forms() -> None:
    scenario = {
        "cluster": "../clusters/c.yaml",
        "model": "m.toml",
        "training": {"global_batch_size": 8},
        "plans": [
            {"name": "a", "strategy": "local"},
            {"name": "b", "strategy": "s.json"},
            {"name": "c", "strategy": {"kind": "model_parallel", "partitions": "p.yaml"}},
            {
                "name": "d",
                "strategy": {
                    "kind": "data_parallel",
                    "num_replicas": 2,
                    "replica": "pp.yaml",
                    "aggregation": {"algorithm": "tree:4"},
                },
            },
        ],
    }
    assert [e.message for e in validator("scenario").iter_errors(scenario)] == []
