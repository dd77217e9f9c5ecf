"""Writing report files atomically: a temporary file in the target's directory, then ``os.replace``.

A reader (or an interrupted run) never sees half a report: the old file stays until the new one
is complete. The new file gets the usual permissions (0666 minus the umask), not the 0600 of a
temporary file. Special files (``/dev/null``, FIFOs) are written into, never replaced, and a
symbolic link is followed. Errors are the ``OSError`` of the failing call; the CLI turns them
into messages.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to ``path``, replacing it in one step."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_target(path) as tmp, open(tmp, "wb") as fh:
        fh.write(payload)
        fh.flush()
        os.fsync(fh.fileno())


def is_special(path: str | Path) -> bool:
    """Whether ``path`` exists and is not a regular file (``/dev/null``, a FIFO, ``/dev/stdout``):
    such a target is written into, never replaced."""
    p = Path(path)
    return p.exists() and not p.is_file()


@contextmanager
def atomic_target(path: str | Path) -> Iterator[Path]:
    """A temporary path next to ``path`` for a writer that wants a file name; on success it is
    moved onto ``path``, on failure removed. It keeps ``path``'s suffix (writers may look at it).

    A symbolic link is followed (the file it points to is replaced, the link stays). A special
    file (:func:`is_special`) is not replaced: the finished temporary file is copied into it.
    """
    target = Path(os.path.realpath(path)) if Path(path).is_symlink() else Path(path)
    if is_special(target):
        with tempfile.TemporaryDirectory() as tmpdir:
            tmp = Path(tmpdir) / f"out{target.suffix}"
            yield tmp
            with open(tmp, "rb") as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
        return
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=f".tmp{target.suffix}")
    os.close(fd)
    try:
        yield Path(name)
        os.chmod(name, 0o666 & ~_umask())
        os.replace(name, target)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
