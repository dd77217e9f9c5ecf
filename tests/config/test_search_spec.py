"""The ``search:`` block: defaults, value checks, and scenarios that only search."""

from __future__ import annotations

from pathlib import Path

import pytest

from parplan.api.evaluate import select_plans
from parplan.config.loader import load_any
from parplan.config.search import DEFAULT_LIMIT, SearchSpec
from parplan.errors import ConfigError, PlanError

SAMPLES = Path(__file__).resolve().parents[2] / "sample_configs"


def test_defaults_and_normalised_values() -> None:
    data = {"tp": [8, 2, 2], "algorithms": ["ring", "tree:2"], "bucket_sizes": ["25 MiB"]}
    spec = SearchSpec.model_validate(data)
    assert spec.tp == (2, 8)
    assert spec.pp is None and spec.devices is None
    assert [a.name for a in spec.algorithms] == ["ring", "tree"]
    assert spec.bucket_sizes_bytes == (25 * 2**20,)
    assert spec.limit == DEFAULT_LIMIT
    assert spec.recompute == ("none", "selective", "op", "full")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"tp": []}, "tp is empty"),
        ({"pp": [0, 2]}, "pp values must be >= 1"),
        ({"recompute": []}, "recompute is empty"),
        ({"memory_headroom": 1.0}, "memory_headroom"),
        ({"zero": [4]}, "zero"),
        ({"algorithms": ["bogus"]}, "algorithms"),
        ({"limit": 0}, "limit"),
    ],
)
def test_bad_values_are_refused(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SearchSpec.model_validate(data)


def _scenario(tmp_path: Path, tail: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(
        f"cluster: {SAMPLES / 'clusters' / 'dgx-a100-128nodes.yaml'}\n"
        f"model: {SAMPLES / 'models' / 'gpt3-175b.yaml'}\n"
        "training: {global_batch_size: 1536}\n" + tail
    )
    return path


def test_a_search_block_makes_plans_optional(tmp_path: Path) -> None:
    _, spec = load_any(_scenario(tmp_path, "search: {tp: [4, 8]}\n"), "scenario")
    assert spec.plans == ()
    assert spec.search is not None and spec.search.tp == (4, 8)
    with pytest.raises(PlanError, match="has no plans, only a search: block"):
        select_plans(spec, [])


def test_without_search_plans_are_required(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="plans: required key is missing"):
        load_any(_scenario(tmp_path, ""), "scenario")
    with pytest.raises(ConfigError, match=r"s.yaml:4:\d+ plans: give at least one plan"):
        load_any(_scenario(tmp_path, "plans: []\n"), "scenario")


def test_a_bad_search_block_gets_one_message(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_any(_scenario(tmp_path, "search: {tp: []}\n"), "scenario")
    assert "tp is empty" in str(caught.value)
    assert "plans" not in str(caught.value)


def test_empty_plans_with_a_search_block_are_allowed(tmp_path: Path) -> None:
    _, spec = load_any(_scenario(tmp_path, "search: {tp: [4]}\nplans: []\n"), "scenario")
    assert spec.plans == ()
