"""The base class of every spec: frozen, strict about unknown keys, human keys in files.

Fields carry their unit in their Python name (``bandwidth_Bps``) and a short alias for files
(``bandwidth``); both are accepted on input, and the alias is what is written back out. Plain
floats must be finite: ``.inf`` or ``NaN`` in a file is an error, so every spec also fits in JSON.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Spec(BaseModel):
    """A frozen, validated piece of configuration."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        use_enum_values=True,
        allow_inf_nan=False,
    )

    def to_data(self) -> dict[str, Any]:
        """Plain data for YAML / TOML / JSON, with human units and file keys, ``None`` left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
