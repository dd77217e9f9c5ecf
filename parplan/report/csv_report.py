"""The ``--csv`` output: one row per plan, the headline figures of the JSON document.

Rows come from the JSON document's plan entries (:mod:`parplan.report.json_report`), so the two
never disagree (byte counts whole in both).
Columns are fixed (:data:`SIMULATE_COLUMNS`, :data:`COMPARE_COLUMNS`); quantities
in SI base units with full precision, booleans as ``true``/``false``, missing values empty,
overrides as ``knob=value;knob=value``. Plans that could not be built get a row with only the
name, plan, overrides and ``error`` filled in.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

SIMULATE_COLUMNS: tuple[str, ...] = (
    "name",
    "plan",
    "overrides",
    "strategy",
    "description",
    "unit",
    "step_time_s",
    "compute_s",
    "exposed_comm_s",
    "hidden_comm_s",
    "idle_s",
    "bubble_fraction",
    "samples_per_step",
    "throughput_samples_per_s",
    "tokens_per_s",
    "units_per_run",
    "run_time_s",
    "peak_memory_bytes",
    "peak_memory_device",
    "fits",
    "infeasible_reason",
    "busiest_link",
    "busiest_link_utilisation",
    "critical_device",
    "num_devices",
    "bottleneck",
    "error",
)
"""Columns of ``simulate --csv``."""

COMPARE_COLUMNS: tuple[str, ...] = (
    "rank",
    *SIMULATE_COLUMNS[:3],
    "time_per_sample_s",
    "speedup",
    "pareto",
    *SIMULATE_COLUMNS[3:],
)
"""Columns of ``compare-strategies --csv``: the ranking first, then the simulate columns."""


def cell(value: Any) -> str:
    """One CSV cell: ``repr`` floats, lowercase booleans, empty for None and non-finite numbers.

    >>> cell(0.1), cell(True), cell(None), cell({"algorithm": "ring", "num_replicas": 4})
    ('0.1', 'true', '', 'algorithm=ring;num_replicas=4')
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    if isinstance(value, Mapping):
        return ";".join(f"{k}={cell(v)}" for k, v in value.items())
    return str(value)


def document_csv(document: Mapping[str, Any]) -> str:
    """The CSV text of a simulate or compare-strategies JSON document."""
    from parplan.report.json_report import whole_bytes

    columns = COMPARE_COLUMNS if document.get("command") == "compare-strategies" else SIMULATE_COLUMNS
    rows: list[Mapping[str, Any]] = [*document["plans"], *document.get("failed", [])]
    return rows_csv(columns, whole_bytes(rows))


def rows_csv(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    """A header and one line per row (missing keys empty), ``\\n`` line ends."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([cell(row.get(c)) for c in columns])
    return buf.getvalue()
