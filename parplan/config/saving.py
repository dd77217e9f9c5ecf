"""Write specs back to YAML, TOML or JSON, atomically, so they load back equal.

Specs write their file keys (``bandwidth``, not ``bandwidth_Bps``), human units that parse back
to exactly the same float ("25 GB/s"), and leave out fields that are ``None``. Referenced files
are written inline; the ``*_file`` fields keep where they came from. TOML has no null, so a
``null`` inside a custom strategy's free-form ``config`` cannot be saved as TOML (a
:class:`~parplan.errors.ConfigError` says so).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import tomli_w
import yaml

from parplan.config.readers import Loc, _dotted, file_format
from parplan.errors import ConfigError, Issue
from parplan.spec import Spec


def _toml_ready(value: Any, loc: Loc) -> None:
    if value is None:
        raise ConfigError(
            Issue("", _dotted(loc), "is null, which TOML cannot represent; save as .yaml or .json instead")
        )
    if isinstance(value, dict):
        for key, item in value.items():
            _toml_ready(item, (*loc, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _toml_ready(item, (*loc, i))


def dump_data(data: dict[str, Any], fmt: str) -> str:
    """Plain data as ``yaml``, ``toml`` or ``json`` text."""
    if fmt == "yaml":
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100)
    if fmt == "toml":
        _toml_ready(data, ())
        return tomli_w.dumps(data)
    if fmt == "json":
        return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    raise ValueError(f"unknown format {fmt!r}; valid: yaml, toml, json")


def dump_spec(spec: Spec, fmt: str) -> str:
    """A spec as ``yaml``, ``toml`` or ``json`` text, in the form its file kind loads."""
    return dump_data(spec.to_data(), fmt)


def save_spec(spec: Spec, path: str | Path) -> None:
    """Write a spec to ``path`` in the format its extension names, atomically (a temporary file in
    the same directory, then :func:`os.replace`), so a reader never sees half a file."""
    target = Path(path)
    try:
        text = dump_spec(spec, file_format(target))
    except ConfigError as exc:
        raise ConfigError([Issue(str(path), i.field, i.message) for i in exc.issues]) from None
    directory = target.parent
    if not directory.is_dir():
        raise ConfigError(Issue(str(path), "", f"cannot write: directory {str(directory)!r} does not exist"))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        raise ConfigError(Issue(str(path), "", f"cannot write: {exc.strerror or exc}")) from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
