"""The --csv output: parsed back, it carries the same figures as the JSON document."""

from __future__ import annotations

import csv
import io

from parplan.api.results import PlanResult
from parplan.report.csv_report import COMPARE_COLUMNS, SIMULATE_COLUMNS, cell, document_csv
from parplan.report.json_report import scenario_info, simulate_document


def test_cells() -> None:
    assert cell(None) == ""
    assert cell(False) == "false"
    assert cell(0.1 + 0.2) == "0.30000000000000004"  # full precision
    assert cell(float("inf")) == ""
    assert cell(3) == "3"
    assert cell({"num_replicas": 8, "overlap": False}) == "num_replicas=8;overlap=false"


def test_simulate_csv_parses_back(pipeline_results: list[PlanResult]) -> None:
    doc = simulate_document(
        scenario_info("p", None, None), pipeline_results, failed=[("bad", "no such device")]
    )
    rows = list(csv.DictReader(io.StringIO(document_csv(doc))))
    assert list(rows[0]) == list(SIMULATE_COLUMNS)
    assert len(rows) == len(pipeline_results) + 1
    for row, plan in zip(rows, doc["plans"], strict=False):
        assert row["name"] == plan["name"]
        assert float(row["step_time_s"]) == plan["step_time_s"]
        assert float(row["peak_memory_bytes"]) == plan["peak_memory_bytes"]
        assert row["fits"] == ("true" if plan["fits"] else "false")
        assert row["bottleneck"] == plan["bottleneck"]
        assert row["error"] == ""
    assert (
        rows[-1]["name"] == "bad" and rows[-1]["error"] == "no such device" and rows[-1]["step_time_s"] == ""
    )


def test_compare_columns_start_with_the_ranking() -> None:
    assert COMPARE_COLUMNS[:4] == ("rank", "name", "plan", "overrides")
    assert set(SIMULATE_COLUMNS) < set(COMPARE_COLUMNS)
    assert len(set(COMPARE_COLUMNS)) == len(COMPARE_COLUMNS)
