"""Chrome traces: valid JSON, one complete event per task, tracks per device and per link."""

from __future__ import annotations

import itertools
import json
import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from parplan.collectives.registry import build_schedule
from parplan.engine.simulate import simulate
from parplan.errors import ParplanError
from parplan.plan.collective import collective_taskgraph
from parplan.report.trace import DEVICES_PID, LINKS_PID, write_chrome_trace
from parplan.taskgraph import TaskGraphBuilder
from tests.engine.nets import switch_network


def _load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def _complete_events(data: dict[str, Any]) -> list[dict[str, Any]]:
    events = data["traceEvents"]
    assert isinstance(events, list)
    return [e for e in events if e["ph"] == "X"]


def test_mixed_graph_gives_one_event_per_timed_task(tmp_path: Path) -> None:
    net = switch_network(3, 1e9, 1e-6, memory_bandwidth_Bps=1e11)
    b = TaskGraphBuilder()
    c0 = b.compute("h0", 1e-3, label="fwd")
    c1 = b.compute("h1", 2e-3, label="fwd")
    m = b.marker([c0, c1])
    t1 = b.transfer("h0", "h2", 1e6, [m], reduce=True, label="grad")
    t2 = b.transfer("h1", "h2", 1e6, [m], reduce=True, label="grad")
    same = b.transfer("h2", "h2", 1e6, [t1, t2])
    graph = b.build()
    result = simulate(graph, net)
    path = tmp_path / "trace.json"
    written = write_chrome_trace(result, graph, net, path)
    data = _load(path)
    events = _complete_events(data)
    assert written == len(events) == graph.num_tasks - 1  # every task but the marker
    assert sorted(e["args"]["task"] for e in events) == sorted({c0, c1, t1, t2, same})
    by_task = {e["args"]["task"]: e for e in events}
    assert by_task[c1]["pid"] == DEVICES_PID and by_task[c1]["dur"] == pytest.approx(2000.0)
    assert by_task[t1]["pid"] == LINKS_PID and by_task[t1]["name"] == "grad"
    # The two gradient flows overlap in time on different links (h0->sw0, h1->sw0).
    assert by_task[t1]["tid"] != by_task[t2]["tid"]
    assert by_task[t1]["args"]["reduce_end_us"] >= by_task[t1]["ts"] + by_task[t1]["dur"]
    assert by_task[same]["pid"] == DEVICES_PID
    names = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in data["traceEvents"] if e["name"] == "thread_name"
    }
    assert {names[(DEVICES_PID, i)] for i in range(3)} == set(graph.devices)
    assert names[(LINKS_PID, by_task[t1]["tid"])] == "h0->sw0"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json"]  # the temporary file was moved


def test_overlapping_flows_on_one_link_get_lanes(tmp_path: Path) -> None:
    net = switch_network(2, 1e9, 0.0)
    b = TaskGraphBuilder()
    b.transfer("h0", "h1", 1e6)
    b.transfer("h0", "h1", 2e6)
    graph = b.build()
    path = tmp_path / "t.json"
    write_chrome_trace(simulate(graph, net), graph, net, path)
    events = _complete_events(_load(path))
    assert len({e["tid"] for e in events}) == 2
    # Each thread's slices are disjoint, so they nest trivially.
    for tid in {e["tid"] for e in events}:
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["tid"] == tid)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))


def test_collective_trace(tmp_path: Path) -> None:
    net = switch_network(5, 1e9, 1e-6)
    graph = collective_taskgraph(build_schedule("tree:2", 5, 1000), net.devices, 4.0)
    path = tmp_path / "c.json"
    write_chrome_trace(simulate(graph, net), graph, net, path)
    events = _complete_events(_load(path))
    assert len(events) == graph.num_tasks
    assert {e["name"] for e in events} == {"tree:reduce", "tree:broadcast"}


def test_trace_limits_and_errors(tmp_path: Path) -> None:
    net = switch_network(2, 1e9, 0.0)
    b = TaskGraphBuilder()
    b.transfer("h0", "h1", 1e6)
    b.transfer("h1", "h0", 1e6)
    graph = b.build()
    result = simulate(graph, net)
    with pytest.raises(ParplanError, match="too large"):
        write_chrome_trace(result, graph, net, tmp_path / "x.json", max_events=1)
    with pytest.raises(ParplanError, match="cannot write"):
        write_chrome_trace(result, graph, net, tmp_path / "missing" / "x.json")


def _small_run() -> tuple[Any, Any, Any]:
    net = switch_network(2, 1e9, 0.0)
    b = TaskGraphBuilder()
    b.transfer("h0", "h1", 1e6)
    graph = b.build()
    return simulate(graph, net), graph, net


def test_trace_into_a_special_file_leaves_it_in_place(tmp_path: Path) -> None:
    # A FIFO stands for /dev/null or /dev/stdout: written into, never replaced by a regular file.
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    assert write_chrome_trace(*_small_run(), fifo) == 1
    reader.join(timeout=10)
    assert len(received) == 1, "nothing was written into the FIFO"
    assert len(_complete_events(json.loads(received[0]))) == 1
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json"]


def test_trace_through_a_symlink_replaces_its_target(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_chrome_trace(*_small_run(), link)
    assert link.is_symlink()
    assert len(_complete_events(_load(real))) == 1
