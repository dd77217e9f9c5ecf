"""The rich views: what a user reads for simulate and compare-strategies."""

from __future__ import annotations

from rich.console import Console, RenderableType

from parplan.api.ranking import Ranked
from parplan.api.results import PlanResult
from parplan.plan.base import MemoryBreakdown
from parplan.report import tables


def render(renderable: RenderableType, width: int = 120) -> str:
    console = Console(width=width, record=True, color_system=None, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def test_simulate_view_shows_every_figure(quickstart_results: list[PlanResult]) -> None:
    text = render(tables.simulate_view("quickstart", "four hosts", quickstart_results))
    assert text.startswith("quickstart · four hosts")
    for r in quickstart_results:
        assert r.name in text
    ring = next(r for r in quickstart_results if r.name == "dp-ring")
    block = text[text.index("dp-ring  data_parallel") :]
    assert "step          448 ms = compute" in block  # the step and its split
    assert "algbw" in block and "busbw" in block
    assert f"busiest link  {ring.busiest_link}" in block
    assert "h0, h1, h2, h3" in block  # four identical devices on one memory row
    assert "bound by      communication: link" in block
    assert "samples/s" in block


def test_infeasible_plan_is_marked(pipeline_results: list[PlanResult]) -> None:
    text = render(tables.simulate_view("pipeline", None, pipeline_results))
    gpipe_row = next(line for line in text.splitlines() if line.startswith("gpipe "))
    assert "✗" in gpipe_row
    assert "bound by      memory on n0.d3" in text
    assert "122% ✗" in text  # the device over capacity, in the memory table
    assert "(×2 groups)" in text  # the 2-D plan's identical per-stage all-reduces on one line
    assert "196 MiB in 1 call" in text and "(×4 groups)" in text  # and each replica's tied embedding
    assert "bubble        stages idle 36% of the pipeline span (fill and drain" in text


def test_quality_rows(federated_results: list[PlanResult]) -> None:
    fed = next(r for r in federated_results if r.strategy_kind == "federated")
    rows = dict(tables.quality_rows(fed.quality))
    assert rows["loss/round"].startswith("0.693 → ")
    assert len(rows["loss/round"].split(" → ")[1].split()) == len(fed.quality["loss_per_round"])
    pbt = {
        "best_score_per_generation": [-0.5, -0.01],
        "best_hyperparameters": [0.56, 0.28],
        "known_optimum": {"hyperparameters": [0.6, 0.3]},
        "hyperparameter_error": 0.046,
    }
    rows = dict(tables.quality_rows(pbt))
    assert rows["best/gen"] == "-0.500 -0.010"  # common decimals
    assert rows["found"] == "best hyperparameters (0.56, 0.28), known optimum (0.6, 0.3) (distance 0.046)"
    assert tables.quality_rows({}) == []


def test_series_elides_long_runs() -> None:
    text = tables.series([float(i) for i in range(1, 31)])
    assert text.split() == [
        "1.0",
        "2.0",
        "3.0",
        "4.0",
        "5.0",
        "6.0",
        "…",
        "26.0",
        "27.0",
        "28.0",
        "29.0",
        "30.0",
    ]


def test_group_memory_aggregates_identical_devices() -> None:
    a = [MemoryBreakdown(f"h{i}", 16e9, params_bytes=1e9) for i in range(6)]
    b = MemoryBreakdown("big", 80e9, params_bytes=1e9)
    rows = tables.group_memory([*a[:3], b, *a[3:]])
    assert [r.devices for r in rows] == [("h0", "h1", "h2", "h3", "h4", "h5"), ("big",)]
    assert rows[0].label == "h0, h1, …, h5 (6)"
    assert rows[1].label == "big"


def test_compare_view(
    quickstart_results: list[PlanResult],
    pipeline_results: list[PlanResult],
    federated_results: list[PlanResult],
) -> None:
    results = [*quickstart_results[:2], next(r for r in pipeline_results if not r.fits)]
    ranked = [
        Ranked(1, "local", results[0], 1.0, True, 1e-6),
        Ranked(2, "dp-ring[num_replicas=2,algorithm=tree:2]", results[1], 0.001, False, 1e-3),
        Ranked(3, "gpipe", results[2], None, False, 0.05),
    ]
    failed = [("a[num_replicas=8]", "too many"), ("b[num_replicas=8]", "too many")]
    text = render(tables.compare_view("q", None, ranked, failed, baseline="local", top=2, duplicates=3))
    lines = text.splitlines()
    assert lines[1].split()[:3] == ["#", "plan", "step"]  # every plan's unit is a step
    row = next(i for i, line in enumerate(lines) if "dp-ring[" in line)
    assert lines[row].split()[1] == "dp-ring[num_replicas=2,"  # wrapped between overrides, not inside one
    assert lines[row + 1].split() == ["algorithm=tree:2]"]
    assert "gpipe" not in text.split("✗ cannot")[0]  # --top 2 hides the third
    assert "✗ cannot be planned: too many: a[num_replicas=8], b[num_replicas=8]" in text
    flat = " ".join(text.split())  # the legend may wrap
    assert "speed-up against local" in flat
    assert "1 more plan(s) not shown (--top 2)" in flat
    assert "3 sweep variant(s) identical to one above not repeated" in flat
    full = render(tables.compare_view("q", None, ranked))
    assert "memory: n0.d3 98.0 GiB > 80.0 GiB" in " ".join(
        full.split()
    ) and "✗ does not fit in memory" in " ".join(full.split())
    fed = next(r for r in federated_results if r.unit == "round")
    mixed = render(tables.compare_table([ranked[0], Ranked(2, fed.name, fed, 0.5, False, 0.01)]))
    assert mixed.splitlines()[0].split()[:3] == ["#", "plan", "time"]  # mixed units: the unit on each row
    assert "/round" in mixed and "/step" in mixed


def test_short_bound(quickstart_results: list[PlanResult], pipeline_results: list[PlanResult]) -> None:
    by_name = {r.name: r for r in [*quickstart_results, *pipeline_results]}
    assert tables.short_bound(by_name["local"]) == "compute on h0"
    assert tables.short_bound(by_name["dp-ring"]).startswith("link ")
    assert tables.short_bound(by_name["gpipe"]) == "memory: n0.d3 98.0 GiB > 80.0 GiB (+3)"


SAME_BOUND = {  # words of the bottleneck line -> words of the table's short form, for one bound
    "memory on": "memory:",
    "compute on": "compute on",
    "communication: link": "link ",
    "communication latency": "communication latency",
    "the pipeline bubble": "pipeline bubble",
    "waiting for other devices": "waiting for other devices",
}


def test_the_bottleneck_line_and_the_short_form_name_the_same_bound(
    quickstart_results: list[PlanResult], pipeline_results: list[PlanResult]
) -> None:
    """One rule (api.results.bound_of) behind both texts, whatever part dominates the step."""
    from dataclasses import replace

    from parplan.api.results import bottleneck_text

    fits = next(r for r in quickstart_results if r.name == "dp-ring")
    variants = [next(r for r in pipeline_results if not r.fits)]
    for compute, comm, idle in [(3.0, 1.0, 1.0), (1.0, 3.0, 1.0), (1.0, 1.0, 3.0)]:
        for link in (fits.busiest_link, None):
            for bubble in (0.4, None):
                variants.append(
                    replace(
                        fits,
                        step_time_s=compute + comm + idle,
                        compute_s=compute,
                        exposed_comm_s=comm,
                        idle_s=idle,
                        busiest_link=link,
                        bubble_fraction=bubble,
                    )
                )
    kinds = set()
    for r in variants:
        line, short = bottleneck_text(r), tables.short_bound(r)
        matches = [k for k in SAME_BOUND if line.startswith(k)]
        assert len(matches) == 1, line
        assert short.startswith(SAME_BOUND[matches[0]]), (line, short)
        kinds.add(matches[0])
    assert kinds == set(SAME_BOUND)
