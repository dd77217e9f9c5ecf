"""JSON Schemas of the file kinds, for editors (YAML language servers, VS Code, ...).

The schemas come from the pydantic specs (file keys, human units as strings or plain numbers)
and are widened where files may write a path instead of content: a scenario's ``cluster``,
``model`` and plans' ``strategy`` (which may also be a bare kind such as ``local``), a
model-parallel strategy's ``partitions`` and a data-parallel strategy's ``replica``. They check
shape only; ``parplan validate-config`` checks everything.

>>> schema = json_schema("cluster")
>>> schema["title"], "generator" in schema["properties"]
('parplan cluster file', True)
"""

from __future__ import annotations

import json
from typing import Any

from parplan.config.hf import HF_SCHEMAS
from parplan.config.loader import KINDS, adapter
from parplan.config.strategy import STRATEGY_KINDS

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _path(what: str) -> dict[str, Any]:
    return {"type": "string", "description": f"path to a {what} file, relative to this file"}


def _widen(schema: dict[str, Any], name: str, alternative: dict[str, Any]) -> None:
    prop = schema.get("properties", {}).get(name)
    if prop is None:
        return
    kept = {k: v for k, v in prop.items() if k in ("title", "description", "default")}
    body = {k: v for k, v in prop.items() if k not in kept}
    schema["properties"][name] = {**kept, "anyOf": [body, alternative]}


def json_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one file kind."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; valid: {', '.join(KINDS)}")
    schema: dict[str, Any] = adapter(kind).json_schema(by_alias=True, mode="validation")
    defs: dict[str, Any] = schema.get("$defs", {})
    if kind == "scenario":
        _widen(schema, "cluster", _path("cluster"))
        _widen(schema, "model", _path("model"))
    plan = defs.get("PlanSpec")
    if plan is not None:
        strategy_or_kind = {
            "anyOf": [_path("strategy"), {"enum": list(STRATEGY_KINDS), "description": "a strategy kind"}]
        }
        _widen(plan, "strategy", strategy_or_kind)
    model_parallel = (
        schema if schema.get("title") == "ModelParallelStrategy" else defs.get("ModelParallelStrategy")
    )
    if model_parallel is not None:
        _widen(model_parallel, "partitions", _path("partition"))
    data_parallel = defs.get("DataParallelStrategy")
    if data_parallel is not None:
        _widen(data_parallel, "replica", _path("model-parallel strategy"))
    if kind == "model":  # a Hugging Face config.json, or a file naming one, is a model too
        body = {k: v for k, v in schema.items() if k not in ("title", "$defs")}
        schema = {"$defs": defs, "anyOf": [body, *HF_SCHEMAS]}
    return {
        "$schema": SCHEMA_DIALECT,
        "title": f"parplan {kind} file",
        **{k: v for k, v in schema.items() if k != "title"},
    }


def schema_text(kind: str) -> str:
    """:func:`json_schema` as indented JSON text."""
    return json.dumps(json_schema(kind), indent=2) + "\n"
