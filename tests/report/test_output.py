"""Atomic report writes: all or nothing, no temporary files left, ordinary permissions."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from parplan.report.output import atomic_target, write_atomic


def test_writes_and_replaces(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    write_atomic(target, "first\n")
    write_atomic(target, b"second\n")
    assert target.read_bytes() == b"second\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_permissions_follow_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "a.csv", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.csv").stat().st_mode) == 0o644


def test_failure_keeps_the_old_file_and_cleans_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out.json"
    target.write_text("old")

    def boom(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="No space"):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_missing_directory_is_an_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "nope" / "out.json", "x")


def test_atomic_target_for_writers_that_want_a_path(tmp_path: Path) -> None:
    target = tmp_path / "trace.json"
    with atomic_target(target) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".json" and tmp != target
        tmp.write_text("{}")
        assert not target.exists()  # nothing visible until the writer is done
    assert target.read_text() == "{}"
    with pytest.raises(RuntimeError), atomic_target(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("writer failed")
    assert target.read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json"]


def test_special_files_are_written_into_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    write_atomic(fifo, "through the pipe\n")
    reader.join(timeout=10)
    assert received == [b"through the pipe\n"]
    assert stat.S_ISFIFO(fifo.stat().st_mode)  # still a FIFO, not a regular file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.json"]


def test_symlinks_are_followed(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
