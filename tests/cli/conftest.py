"""Shared set-up of the CLI tests: rich output pinned to a wide, colourless terminal, and the
global options reset (a test app without parplan's callback would otherwise inherit them)."""

from __future__ import annotations

import pytest

from parplan.cli.common import STATE


@pytest.fixture(autouse=True)
def stable_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wide, colourless output, whatever terminal the tests run in."""
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("NO_COLOR", "1")
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(STATE, "debug", False)
    monkeypatch.setattr(STATE, "quiet", False)
