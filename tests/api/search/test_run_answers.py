"""Checks of the search's answers (issue 17 item 4).

- On the bundled LLM samples (their ``search:`` blocks hold every hand-written plan), the winner
  is at least as fast in closed form as every hand-written plan that fits.
- On the published training configurations of the validation set, a search of the same model
  on the same devices, in the published precision and kernels, finds a plan no slower (closed
  form) than the published one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from parplan.api.search.run import run_search, search_scenario
from parplan.config.loader import load_scenario
from parplan.config.scenario import ScenarioSpec
from parplan.config.search import SearchSpec
from parplan.config.strategy import ShardedStrategy

ROOT = Path(__file__).resolve().parents[3]
LLM_SAMPLES = ("gpt3-175b-1024xa100", "llama3-70b-64xh100", "mixtral-8x7b-64xh100")
PUBLISHED = sorted((ROOT / "validation" / "training").glob("*.yaml"))


@pytest.mark.parametrize("name", LLM_SAMPLES)
def test_the_winner_is_as_fast_as_every_hand_written_plan(name: str) -> None:
    result = search_scenario(ROOT / "sample_configs" / "scenarios" / f"{name}.yaml", top_k=0)
    winner = result.winner
    assert winner is not None
    assert result.hand_written
    for plan in result.hand_written:
        assert plan.analytic is not None, plan.error
        if plan.analytic.fits:
            assert winner.step_time_s <= plan.analytic.step_time_s * (1 + 1e-9), plan.name
            assert plan.would_rank is not None and plan.would_rank >= 1


def published_search(strategy: ShardedStrategy, devices: int) -> SearchSpec:
    """The default space on the published plan's devices, widened to hold the published plan, in
    its precision, attention and kernels (what "under the same model" means here)."""
    powers = (1, 2, 4, 8)
    return SearchSpec(
        devices=(devices,),
        tp=tuple(sorted({*powers, strategy.tp})),
        pp=tuple(sorted({*powers, 16, strategy.pp})),
        cp=(strategy.cp,),
        ep=(strategy.ep,),
        virtual_stages=tuple(sorted({1, 2, strategy.virtual_stages})),
        microbatch_size=tuple(sorted({*powers, strategy.microbatch_size})),
        zero=tuple(sorted({0, 1, strategy.zero})),  # type: ignore[arg-type]
        fsdp=tuple(dict.fromkeys(("none", "full_shard", strategy.fsdp))),  # type: ignore[arg-type]
        dtype=strategy.dtype,
        flash_attention=strategy.flash_attention,
        kernels=strategy.kernels,
        tp_comm_overlap=strategy.tp_comm_overlap,
        top_k=0,
    )


def published_scenario(path: Path) -> ScenarioSpec:
    """The validation scenario with a ``search:`` around its published plan."""
    scenario = load_scenario(path)
    (plan,) = [p for p in scenario.plans if p.name == "published"]
    strategy = plan.strategy
    assert isinstance(strategy, ShardedStrategy)
    devices = (strategy.dp or 1) * strategy.tp * strategy.pp * strategy.cp
    return scenario.model_copy(update={"search": published_search(strategy, devices), "plans": (plan,)})


@pytest.mark.parametrize("path", PUBLISHED, ids=[p.stem for p in PUBLISHED])
def test_no_slower_than_the_published_plan(path: Path) -> None:
    result = run_search(published_scenario(path), scenario_file=str(path))
    (published,) = result.hand_written
    assert published.analytic is not None, published.error
    winner = result.winner
    assert winner is not None
    if published.analytic.fits:
        assert winner.step_time_s <= published.analytic.step_time_s * (1 + 1e-9)
