"""Which command takes which kind of file, and loading a file that must be of one kind.

A command given the wrong kind of file (``parplan simulate`` a cluster file) should not answer
with the keys a scenario would miss; it should say what the file is and where it goes.
:func:`load_expected` loads a file as the kind a command needs and, when that fails and the file
is recognisably another kind (:func:`parplan.config.loader.detect_kind`), raises one issue
saying so instead (:func:`kind_mismatch`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from parplan.errors import ConfigError, Issue

TAKEN_BY: dict[str, str] = {
    "scenario": "give it to parplan simulate or parplan compare-strategies",
    "cluster": "give it to parplan collective --cluster, or name it in a scenario's cluster key",
    "model": "name it in a scenario's model key",
    "strategy": "name it in a scenario's plans (their strategy key)",
    "partition": "name it in a model_parallel strategy's partitions key",
}
"""Where each kind of file goes, said to a user holding one."""


def detected_kind(path: str | Path) -> str | None:
    """The kind ``path`` looks like, or None when it cannot be read or told."""
    from parplan.config.loader import detect_kind
    from parplan.config.readers import read_file

    try:
        return detect_kind(read_file(path)[0], str(path))
    except ConfigError:
        return None


def kind_mismatch(path: str | Path, found: str, expected: str, taker: str) -> Issue:
    """The issue for a ``found`` file given where an ``expected`` one belongs (``taker`` takes it).

    >>> print(kind_mismatch("m.yaml", "model", "scenario", "parplan simulate").message)
    is a model file, not a scenario (parplan simulate takes a scenario); name it in a scenario's model key
    """
    return Issue(
        str(path), "", f"is a {found} file, not a {expected} ({taker} takes a {expected}); {TAKEN_BY[found]}"
    )


def load_expected(path: str | Path, kind: str, *, command: str) -> Any:
    """The spec of the ``kind`` file at ``path``, for ``command`` (named in the message).

    Raises :class:`ConfigError`: with every issue found when the file is a ``kind`` file with
    mistakes, or with the one issue of :func:`kind_mismatch` when it is another kind of file.
    """
    from parplan.config.loader import load_file

    try:
        return load_file(path, kind).spec
    except ConfigError:
        found = detected_kind(path)
        if found is None or found == kind:
            raise
        raise ConfigError(kind_mismatch(path, found, kind, command)) from None
