"""Whether a scenario's plans fit in device memory, as validation issues.

This is the plan stage's part of ``validate-config``: the config checks say whether the files are
well formed and consistent; this expands each plan (without simulating it) and reports, with the
figures, every plan whose peak memory exceeds a device's capacity. A plan that does not fit is a
warning, not an error: the file is valid and ``simulate`` still times the plan, marked infeasible.
"""

from __future__ import annotations

from pathlib import Path

from parplan.api.evaluate import build_context
from parplan.config.issues import make_issue
from parplan.config.loader import load_file
from parplan.errors import Issue, ParplanError
from parplan.plan.memory import infeasible_message
from parplan.plan.strategies import expand


def memory_issues(path: str | Path) -> list[Issue]:
    """One warning per plan of the scenario at ``path`` that does not fit, placed at the plan.

    Plans that cannot be expanded at all are skipped: the config checks already report why.
    """
    loaded = load_file(path, "scenario")
    scenario = loaded.spec
    ctx = build_context(scenario)
    issues: list[Issue] = []
    for i, plan in enumerate(scenario.plans):
        try:
            work = expand(ctx, plan.strategy)
        except ParplanError:
            continue
        message = infeasible_message(work.memory)
        if message is not None:
            issues.append(
                make_issue(
                    loaded.source,
                    ("plans", i),
                    f"plan {plan.name!r} does not fit in device memory: {message}",
                    "warning",
                )
            )
    return issues
