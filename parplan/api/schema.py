"""What ``parplan schema`` does, as one call: :func:`file_schemas`, the JSON Schemas of the file kinds.

The schemas themselves are built by :mod:`parplan.config.schema`; this gathers those asked for, as
one document to print (one kind's schema, or every kind's in one object keyed by kind) or as one
``<kind>.schema.json`` file per kind.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class SchemaSet:
    """The schemas of some file kinds, in the loader's order."""

    kinds: tuple[str, ...]

    def document(self) -> str:
        """What to print: one kind's schema, or ``{kind: schema, ...}`` for several."""
        from parplan.config.schema import json_schema, schema_text

        if len(self.kinds) == 1:
            return schema_text(self.kinds[0])
        return json.dumps({k: json_schema(k) for k in self.kinds}, indent=2) + "\n"

    def files(self) -> dict[str, str]:
        """``<kind>.schema.json`` -> its text, one file per kind."""
        from parplan.config.schema import schema_text

        return {f"{k}.schema.json": schema_text(k) for k in self.kinds}


def file_schemas(kind: str | None = None) -> SchemaSet:
    """The schema of ``kind``, or of every file kind (an unknown kind is a ConfigError)."""
    from parplan.config.loader import KINDS
    from parplan.errors import ConfigError

    if kind is not None and kind not in KINDS:
        raise ConfigError(f"unknown file kind {kind!r}; valid: {', '.join(KINDS)}")
    return SchemaSet((kind,) if kind is not None else tuple(KINDS))
