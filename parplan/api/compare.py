"""What ``parplan compare-strategies`` does, as one call: :func:`compare_scenario`.

Plans are crossed with the sweeps of the scenario file and of the caller (the caller's replace a
scenario sweep of the same knob; :mod:`parplan.api.variants`), identical variants are evaluated
once, every variant is evaluated (optionally in worker processes, :mod:`parplan.api.parallel`) and
ranked with speed-ups against the baseline (:mod:`parplan.api.ranking`): the caller's, else the
scenario's ``baseline``, else the first local plan, else the first plan evaluated. The result is
a :class:`Comparison`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from parplan.api.evaluate import select_plans
from parplan.api.knobs import OptionValueError, Sweep, applies, parse_sweep
from parplan.api.parallel import Backend, SweepInterrupted, evaluate_variants
from parplan.api.ranking import Ranked, rank, resolve_baseline
from parplan.api.variants import Variant, dedupe_variants, expand_variants, merge_sweeps, scaling_key
from parplan.api.variants import sweeps_from_scenario as scenario_sweeps
from parplan.errors import ConfigError, Issue

if TYPE_CHECKING:
    from parplan.config.scenario import ScenarioSpec


@dataclass(frozen=True)
class Comparison:
    """Every variant of a scenario, ranked (what :func:`compare_scenario` returns).

    ``ranked`` is empty when no variant could be evaluated (``failed`` says why for each);
    ``duplicates`` maps each variant not evaluated to the identical one that was; ``baseline`` is
    the variant the speed-ups are against (None only when nothing was evaluated) and
    ``baseline_rule`` how it was chosen (a key of :data:`~parplan.api.ranking.BASELINE_RULES`).
    """

    scenario: ScenarioSpec
    scenario_file: str
    sweeps: list[Sweep]
    variants: list[Variant]
    duplicates: dict[str, str]
    ranked: list[Ranked]
    failed: list[tuple[str, str]]
    baseline: str | None
    baseline_rule: str | None = None
    interrupted: str | None = None
    """Why the sweep stopped early (the backend was lost), or None when every variant was evaluated;
    the variants not evaluated are then in ``failed`` as ``not evaluated: ...``."""

    def scaling_points(self) -> list[tuple[str, int | None, float, bool]]:
        """Each ranked variant on a step-time-against-replicas plot: ``(series, replicas,
        step_time_s, fits)``, one series per all-reduce algorithm (replicas None: a reference line,
        see :func:`~parplan.api.variants.scaling_key`)."""
        by_name = {v.name: v for v in self.variants}
        points = []
        for r in self.ranked:
            series, replicas = scaling_key(by_name[r.variant_name])
            points.append((series, replicas, r.result.step_time_s, r.result.fits))
        return points


def compare_scenario(
    scenario_file: str | Path,
    *,
    sweeps: Sequence[str] = (),
    plans: Sequence[str] = (),
    baseline: str | None = None,
    jobs: int = 1,
    progress: Callable[[int, int], None] | None = None,
    warn: Callable[[str], None] | None = None,
    backend: Backend = "local",
    address: str | None = None,
    analytic: bool = False,
) -> Comparison:
    """Rank every plan (or those named in ``plans``) and sweep variant of a scenario.

    ``sweeps`` are ``knob=v1,v2`` texts, checked before the scenario is read; ``jobs`` worker
    processes evaluate the variants (0: one per CPU) and ``progress(done, total)`` hears as each
    finishes; sweeps that change no plan and a baseline that could not be evaluated are reported to
    ``warn``. ``backend``/``address`` choose where variants are evaluated
    (:func:`~parplan.api.parallel.evaluate_variants`); a backend lost mid-sweep still gives a
    Comparison of what was gathered, with ``interrupted`` saying why; ``analytic`` evaluates
    sharded plans in closed form. Raises
    :class:`~parplan.errors.ParplanError` for a bad file, sweep, plan or baseline.
    """
    from parplan.api.kinds import load_expected

    requested = [parse_sweep(s) for s in sweeps]
    spec: ScenarioSpec = load_expected(scenario_file, "scenario", command="parplan compare-strategies")
    chosen = select_plans(spec, list(plans))
    with _from_file(scenario_file, "sweeps"):
        merged = merge_sweeps(scenario_sweeps(spec), requested)
    for s in merged:
        if warn is not None and not any(applies(s.knob, p) for p in chosen):
            warn(f"sweep {s.knob} changes none of the plans compared")
    variants, duplicates = dedupe_variants(expand_variants(chosen, merged))
    if baseline is not None:
        base_request = resolve_baseline(baseline, variants, duplicates)
    else:
        with _from_file(scenario_file, "baseline"):
            base_request = resolve_baseline(spec.baseline, variants, duplicates)
    workers = jobs if jobs > 0 else (os.cpu_count() or 1)
    interrupted: str | None = None
    try:
        results = evaluate_variants(
            spec,
            variants,
            jobs=workers,
            progress=progress,
            backend=backend,
            address=address,
            analytic=analytic,
        )
    except SweepInterrupted as exc:
        interrupted = str(exc)
        results = [f"not evaluated: {exc}" if r is None else r for r in exc.results]
    ranked, failed, base_name, rule = rank(
        variants, results, base_request, warn, from_scenario=baseline is None and base_request is not None
    )
    return Comparison(
        spec, str(scenario_file), merged, variants, duplicates, ranked, failed, base_name, rule, interrupted
    )


@contextmanager
def _from_file(scenario_file: str | Path, field: str) -> Iterator[None]:
    """A bad value read from the scenario file (its sweeps, its baseline) is the file's error
    (exit code 1), not a usage error: re-raise it as a ConfigError naming the file."""
    try:
        yield
    except OptionValueError as exc:
        raise ConfigError(Issue(str(scenario_file), field, str(exc))) from None
