"""Evaluate plans: scenario -> context -> task graph -> engine -> :class:`~parplan.api.results.PlanResult`.

:func:`build_context` turns a scenario into the :class:`~parplan.plan.base.PlanContext` every plan is
expanded against (the network, the model graph, the training settings, and the engine as the
context's simulator, for plans that time each of their rounds or generations);
:func:`evaluate_plan` expands one plan (after optional knob overrides, :mod:`parplan.api.knobs`),
simulates its task graph and condenses the timeline into a result (:func:`summarize`, the rules in
:mod:`parplan.api.timeline`); :func:`evaluate_scenario` does every plan; :func:`select_plans` picks
the plans a command names.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from parplan.api.describe import describe_strategy
from parplan.api.knobs import OptionValueError, apply_overrides
from parplan.api.results import PlanResult, bottleneck_text
from parplan.api.timeline import bubble_fraction, summarize_collectives, time_split
from parplan.config.strategy import ShardedStrategy
from parplan.errors import PlanError
from parplan.plan.base import PlanContext, PlanWork
from parplan.plan.memory import infeasible_message

if TYPE_CHECKING:
    from parplan.config.scenario import PlanSpec, ScenarioSpec
    from parplan.engine.result import SimResult
    from parplan.taskgraph import TaskGraph
    from parplan.topology.network import Network


def makespan_s(graph: TaskGraph, network: Network) -> float:
    """Seconds the engine takes to run ``graph`` on ``network``: the contexts' simulator."""
    from parplan.engine.simulate import simulate

    return float(simulate(graph, network).makespan_s)


def build_context(scenario: ScenarioSpec) -> PlanContext:
    """The network, model graph and training settings every plan of ``scenario`` is expanded against."""
    from parplan.model.graph import build_model
    from parplan.topology.build import build_network

    return PlanContext(
        network=build_network(scenario.cluster),
        model=build_model(scenario.model),
        model_spec=scenario.model,
        training=scenario.training,
        simulator=makespan_s,
    )


def evaluate_plan(
    ctx: PlanContext, plan: PlanSpec, *, overrides: dict[str, Any] | None = None, analytic: bool = False
) -> PlanResult:
    """Expand ``plan`` (with ``overrides`` applied), simulate one unit and read off its figures.

    A plan that does not fit in memory is still timed; its result has ``fits=False`` and says why.
    Raises :class:`~parplan.errors.PlanError` (or a subclass) when the plan cannot be expanded. A
    context built by hand without a simulator gets the engine's. With ``analytic`` a sharded plan
    is evaluated in closed form (:mod:`parplan.api.sharded_analytic`) instead; other plans are
    simulated either way.
    """
    from parplan.engine.simulate import simulate
    from parplan.plan.strategies import expand

    if ctx.simulator is None:
        ctx = replace(ctx, simulator=makespan_s)
    strategy = apply_overrides(plan.strategy, overrides) if overrides else plan.strategy
    if analytic and isinstance(strategy, ShardedStrategy):
        from parplan.api.sharded_analytic import analytic_result

        return analytic_result(ctx, plan.name, strategy)
    work = expand(ctx, strategy)
    sim = simulate(work.graph, ctx.network)
    return summarize(ctx, plan.name, strategy, work, sim)


def evaluate_scenario(scenario: ScenarioSpec, *, overrides: dict[str, Any] | None = None) -> list[PlanResult]:
    """Every plan of ``scenario``, in file order (``overrides`` apply to each plan they fit)."""
    ctx = build_context(scenario)
    return [evaluate_plan(ctx, plan, overrides=overrides) for plan in scenario.plans]


def select_plans(scenario: ScenarioSpec, names: list[str]) -> list[PlanSpec]:
    """The scenario's plans, or those named (in the order named); an unknown name is a usage
    error (:class:`~parplan.api.knobs.OptionValueError`: the names come from ``--plan``); a
    scenario with only a ``search:`` block has none to give (:class:`~parplan.errors.PlanError`)."""
    if not scenario.plans:
        raise PlanError(
            f"scenario {scenario.name!r} has no plans, only a search: block; run `parplan search` on it"
        )
    if not names:
        return list(scenario.plans)
    by_name = {p.name: p for p in scenario.plans}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise OptionValueError(
            f"unknown plan {', '.join(repr(n) for n in unknown)}; the scenario's plans: {', '.join(by_name)}"
        )
    return [by_name[n] for n in dict.fromkeys(names)]


def _utilisation(ctx: PlanContext, work: PlanWork, step_s: float) -> dict[str, float]:
    """MFU and model TFLOP/s per GPU of plans whose graph states its model FLOPs (sharded plans)."""
    flops = work.graph.meta.get("model_flops_per_step")
    if not isinstance(flops, int | float) or not work.devices:
        return {}
    from parplan.api.sharded_analytic import mfu_quality

    peak = work.graph.meta.get("peak_flop_per_s")
    if not isinstance(peak, int | float):
        peak = ctx.network.device(work.devices[0]).peak_flop_per_s
    ratio = work.graph.meta.get("hfu_ratio")
    hfu = float(ratio) if isinstance(ratio, int | float) else 1.0
    return mfu_quality(float(flops), step_s, len(work.devices), float(peak), hfu)


def summarize(ctx: PlanContext, name: str, strategy: Any, work: PlanWork, sim: SimResult) -> PlanResult:
    """Condense a simulated :class:`PlanWork` into a :class:`PlanResult`."""
    g = work.graph
    step = float(sim.makespan_s)
    split = time_split(g, sim)
    samples = float(work.samples_per_unit)
    throughput = samples / step if step > 0 else 0.0
    seq = ctx.sequence_length
    units = ctx.training.steps if work.unit == "step" else work.units_per_run
    run_time = float(g.meta["run_time_s"]) if "run_time_s" in g.meta else step * units  # type: ignore[arg-type]
    memory = work.memory
    peak = max(memory, key=lambda m: m.total_bytes) if memory else None
    reason = infeasible_message(memory)
    channel = sim.busiest_channel()
    result = PlanResult(
        name=name,
        strategy_kind=str(strategy.kind),
        description=describe_strategy(strategy),
        unit=work.unit,
        step_time_s=step,
        compute_s=split.compute_s,
        exposed_comm_s=split.exposed_comm_s,
        hidden_comm_s=split.hidden_comm_s,
        idle_s=split.idle_s,
        bubble_fraction=bubble_fraction(g, sim) if "microbatches" in g.meta else None,
        critical_device=split.device,
        samples_per_step=samples,
        throughput_samples_per_s=throughput,
        tokens_per_s=throughput * seq if seq else None,
        units_per_run=units,
        run_time_s=run_time,
        memory=memory,
        peak_memory_bytes=peak.total_bytes if peak else 0.0,
        peak_memory_device=peak.device if peak else "",
        fits=reason is None,
        infeasible_reason=reason,
        busiest_link=channel.name if channel else None,
        busiest_link_utilisation=channel.utilisation if channel else 0.0,
        busiest_link_bytes=channel.bytes if channel else 0.0,
        collectives=summarize_collectives(work, g, sim),
        bottleneck="",
        num_devices=len(work.devices),
        quality={**work.quality, **_utilisation(ctx, work, step)},
        notes=work.notes,
        work=work,
        sim=sim,
    )
    return replace(result, bottleneck=bottleneck_text(result))
