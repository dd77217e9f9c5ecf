"""The launcher of ``parplan measure``: torchrun ranks over loopback, and nothing left behind when a
rank is killed, hangs, or the launcher gets Ctrl-C.

Every test tags the processes it starts with a unique environment variable and looks for that tag
in ``/proc/*/environ`` afterwards, so processes of other runs on the machine never count. The
launches are few and tiny (2 ranks, a few KiB, 1-2 iterations): torchrun and torch take seconds
to start and the machine has 2 cores.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from parplan.errors import RuntimeCheckError
from parplan.runtime.hosts import HostSlot, local_host
from parplan.runtime.launch import Rendezvous, descendants, launch, torchrun_command

HAVE_TORCH = importlib.util.find_spec("torch") is not None
requires_torch = pytest.mark.skipif(
    not HAVE_TORCH, reason="torch is not installed: no ranks to launch (pip install 'parplan[torch]')"
)
HAVE_PROC = Path("/proc/self/environ").exists()
requires_proc = pytest.mark.skipif(not HAVE_PROC, reason="no /proc: cannot look for leftover processes")
TAG = "PARPLAN_TEST_LAUNCH_TAG"
ARGS = ["--algorithms", "backend,ring", "--counts", "64", "--warmup", "1", "--iters", "2"]


def tagged(tag: str) -> list[int]:
    """Processes whose environment carries ``TAG=tag`` (the ones a test started)."""
    needle = f"{TAG}={tag}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                environ = Path(entry.path, "environ").read_bytes()
                state = Path(entry.path, "stat").read_text().rpartition(")")[2].split()[0]
            except OSError:
                continue
            if needle in environ.split(b"\0") and state != "Z":
                found.append(int(entry.name))
    return found


@pytest.fixture
def tag(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """A unique tag for the processes the test starts; the launcher's temporary files go under
    ``tmp_path/tmp`` so the test can see they are removed."""
    value = uuid.uuid4().hex
    monkeypatch.setenv(TAG, value)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return value


def test_torchrun_command_follows_the_slot() -> None:
    slot = HostSlot("h1", "10.0.0.2", nproc=3, wrapper=("ip", "netns", "exec", "pp-h1"), ifname="veth1")
    argv = torchrun_command(slot, 1, 4, "10.0.0.1:29500", "run-1", ["--x"], 30.0)
    assert argv[:5] == ["ip", "netns", "exec", "pp-h1", sys.executable]
    joined = " ".join(argv)
    for part in ("--nnodes 4", "--node-rank 1", "--nproc-per-node 3", "--rdzv-backend c10d",
                 "--rdzv-endpoint 10.0.0.1:29500", "--max-restarts 0",
                 "-m parplan.runtime.measure_worker --x"):  # fmt: skip
        assert part in joined


def test_launch_refuses_bad_requests() -> None:
    if not HAVE_TORCH:
        pytest.skip("torch is not installed: launch refuses before it looks at the request")
    with pytest.raises(RuntimeCheckError, match="no host"):
        launch(ARGS, [])
    with pytest.raises(RuntimeCheckError, match="timeout must be > 0"):
        launch(ARGS, [local_host(2)], timeout_s=0)
    with pytest.raises(RuntimeCheckError, match="one node"):
        launch(ARGS, [local_host(1), local_host(1)], rendezvous=Rendezvous(2, 0, "127.0.0.1:1"))


def test_missing_torch_gives_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "torch.distributed", None)
    with pytest.raises(RuntimeCheckError, match=r"pip install 'parplan\[torch\]'"):
        launch(ARGS, [local_host(2)])


@pytest.mark.torch
@requires_torch
@requires_proc
def test_a_run_returns_rank_0s_document_and_leaves_nothing(tag: str, tmp_path: Path) -> None:
    document = launch(ARGS, [local_host(2)], timeout_s=120)
    assert document["world_size"] == 2 and document["backend"] == "gloo"
    assert [(r["algorithm"], r["count"], r["wrong"]) for r in document["rows"]] == [
        ("backend", 64, 0),
        ("ring", 64, 0),
    ]
    assert tagged(tag) == []
    assert list((tmp_path / "tmp").iterdir()) == []  # the results file and logs are gone


@pytest.mark.torch
@requires_torch
@requires_proc
def test_a_killed_rank_is_reported_and_nothing_is_left(
    tag: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PARPLAN_MEASURE_FAULT", "kill:1")
    with pytest.raises(RuntimeCheckError, match=r"rank 1 on host local died: killed by SIGKILL"):
        launch(ARGS, [local_host(2)], timeout_s=120)
    assert tagged(tag) == []
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.torch
@requires_torch
@requires_proc
def test_a_hung_rank_times_out_and_nothing_is_left(tag: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARPLAN_MEASURE_FAULT", "hang:1")
    start = time.monotonic()
    with pytest.raises(RuntimeCheckError, match=r"did not finish within 15 s .*every rank was stopped"):
        launch(ARGS, [local_host(2)], timeout_s=15)
    assert time.monotonic() - start < 15 + 20  # the timeout, then a bounded cleanup
    assert tagged(tag) == []


@pytest.mark.torch
@requires_torch
@requires_proc
def test_ctrl_c_stops_every_rank(tag: str) -> None:
    env = dict(os.environ, PARPLAN_MEASURE_FAULT="hang:0")
    cmd = [sys.executable, "-m", "parplan", "measure", "--ranks", "2", "-s", "1KiB", "-w", "1", "-n", "2"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while len(list(descendants(proc.pid))) < 3 and time.monotonic() < deadline:  # torchrun + 2 ranks
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
        time.sleep(1.0)  # the ranks are past their start-up
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert tagged(tag) == []
