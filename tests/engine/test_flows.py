"""Flows on their own: the exclusive regime's closed-form finishes, the switch to the shared regime
and back, zero-byte flows, and the bytes and busy time they book."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.engine.flows import Flows
from parplan.engine.kernel import DONE, Kernel
from parplan.engine.recorder import Recorder
from parplan.engine.routes import RouteTable
from parplan.topology.network import Network
from tests.engine.nets import chain_network, switch_network

GB = 1e9


@dataclass
class Harness:
    """Flows driven by a bare kernel: DONE events issue transfers, arrivals are logged."""

    net: Network
    src: list[int]
    dst: list[int]
    size_bytes: list[float]
    sharing: bool = True
    arrived: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.kernel = Kernel()
        self.routes = RouteTable(self.net, self.net.devices)
        self.rec = Recorder(len(self.src), self.routes.num_channels)
        self.flows = Flows(
            self.kernel, self.routes, self.rec, np.array(self.size_bytes, dtype=np.float64), self._arrive,
            sharing=self.sharing,
        )  # fmt: skip
        self.regimes: list[tuple[float, bool]] = []

    def _arrive(self, tasks: np.ndarray) -> None:
        for t in tasks.tolist():
            assert t not in self.arrived
            self.arrived[t] = self.kernel.now
        self.regimes.append((self.kernel.now, self.flows.exclusive))

    def _issue(self, tasks: np.ndarray) -> None:
        rids = self.routes.ids(np.array(self.src)[tasks], np.array(self.dst)[tasks])
        self.rec.grow_routes(self.routes.num_routes)
        self.flows.issue(tasks, rids)

    def run(self, issue_at: list[float]) -> list[float]:
        """Issue transfer ``i`` at ``issue_at[i]``; returns arrival times."""
        for t in sorted(set(issue_at)):
            self.kernel.push(t, DONE, np.array([i for i, x in enumerate(issue_at) if x == t]))
        self.kernel.run([self._issue, self._arrive, self.flows.activate, self._issue], self.flows)
        self.flows.flush()
        return [self.arrived[i] for i in range(len(self.src))]

    def channel(self, name: str) -> int:
        return self.net.channel_names.index(name)

    def channel_busy_s(self) -> np.ndarray:
        return self.rec.channel_busy(self.routes)


def test_flows_that_never_overlap_finish_in_closed_form_without_recomputation() -> None:
    net = switch_network(4, bandwidth_Bps=1 * GB, latency_s=1e-6)
    h = Harness(net, src=[0, 2, 0], dst=[1, 3, 1], size_bytes=[1e6, 2e6, 1e6])
    arrive = h.run([0.0, 0.0, 5e-3])
    assert arrive == pytest.approx([2e-6 + 1e-3, 2e-6 + 2e-3, 5e-3 + 2e-6 + 1e-3], rel=1e-12)
    assert len(h.flows.cache) == 0  # no max-min recomputation was needed
    assert all(exclusive for _, exclusive in h.regimes)
    assert h.rec.route_bytes.sum() == pytest.approx(4e6)


def test_an_overlap_switches_to_the_shared_regime_and_back() -> None:
    net = switch_network(3, bandwidth_Bps=1 * GB, latency_s=0.0)
    # Two flows into h2 at once share sw0->h2; a third, later one runs alone again.
    h = Harness(net, src=[0, 1, 0], dst=[2, 2, 1], size_bytes=[1 * GB, 2 * GB, 1 * GB])
    arrive = h.run([0.0, 0.0, 10.0])
    assert arrive == pytest.approx([2.0, 3.0, 11.0], rel=1e-12)
    assert h.regimes[0] == (pytest.approx(2.0), False)  # flow 0 arrived while sharing
    assert h.regimes[-1] == (pytest.approx(11.0), True)  # back to exclusive
    assert h.flows.exclusive
    sw_h2 = h.channel("sw0->h2")
    assert h.channel_busy_s()[sw_h2] == pytest.approx(3.0)
    assert h.channel_busy_s()[h.channel("sw0->h1")] == pytest.approx(1.0)


def test_a_flow_in_its_latency_does_not_clash_with_one_that_ends_before_it_moves() -> None:
    net = switch_network(3, bandwidth_Bps=1 * GB, latency_s=0.5)
    h = Harness(net, src=[0, 1], dst=[2, 2], size_bytes=[1 * GB, 1 * GB])
    arrive = h.run([0.0, 1.0])  # bytes move in [1, 2] and [2, 3]
    assert arrive == pytest.approx([2.0, 3.0])
    assert len(h.flows.cache) == 0


def test_zero_byte_flows_arrive_after_the_latency_and_book_no_bytes() -> None:
    net = chain_network([1 * GB, 1 * GB], [1e-6, 2e-6])
    h = Harness(net, src=[0, 0], dst=[2, 1], size_bytes=[0.0, 1e3])
    arrive = h.run([0.0, 0.0])
    assert arrive == pytest.approx([3e-6, 1e-6 + 1e-6])
    assert h.rec.route_bytes.tolist() == [1e3, 0.0]  # route ids: d0->d1, then d0->d2


def test_without_link_sharing_overlapping_flows_keep_their_narrowest_rate() -> None:
    net = switch_network(3, bandwidth_Bps=1 * GB, latency_s=0.0)
    h = Harness(net, src=[0, 1], dst=[2, 2], size_bytes=[1 * GB, 2 * GB], sharing=False)
    assert h.run([0.0, 0.0]) == pytest.approx([1.0, 2.0])
    assert h.channel_busy_s()[h.channel("sw0->h2")] == pytest.approx(2.0)


def test_flows_issued_during_sharing_wait_their_latency() -> None:
    net = switch_network(3, bandwidth_Bps=1 * GB, latency_s=0.25)
    # 0 and 1 overlap from 0.5 (shared); 2 is issued at 1.0 while sharing, moves from 1.5.
    h = Harness(net, src=[0, 1, 2], dst=[2, 2, 0], size_bytes=[1 * GB, 1 * GB, 1 * GB])
    arrive = h.run([0.0, 0.0, 1.0])
    assert arrive[:2] == pytest.approx([2.5, 2.5])
    assert arrive[2] == pytest.approx(2.5)


@settings(max_examples=40, deadline=None)
@given(
    flows=st.lists(
        st.tuples(
            st.integers(0, 3), st.integers(0, 3), st.sampled_from([0.0, 0.5, 1.0, 2.0]), st.floats(0.1, 3.0)
        ),
        min_size=1,
        max_size=12,
    )
)
def test_the_moving_flows_hold_the_first_slots(flows: list[tuple[int, int, float, float]]) -> None:
    """Whatever arrives when, the flows still in the network hold slots 0 .. n_live - 1 and every
    slot after them is free (task -1, rate 0, nothing left, finish inf): the shared regime reads
    the moving flows as slices. Every flow arrives once, none before its bytes can have moved."""
    flows = [(s, d if d != s else (s + 1) % 4, t, size) for s, d, t, size in flows]
    net = switch_network(4, bandwidth_Bps=1 * GB, latency_s=0.25)
    h = Harness(net, [s for s, _, _, _ in flows], [d for _, d, _, _ in flows], [x * GB for *_, x in flows])
    seen: list[int] = []
    arrive = h._arrive

    def check(tasks: np.ndarray) -> None:
        f = h.flows
        n = f.n_live
        assert (f.s_task[:n] >= 0).all() and (f.s_task[n:] == -1).all()
        assert (f.s_rate[n:] == 0).all() and (f.s_rem[n:] == 0).all() and np.isinf(f.s_finish[n:]).all()
        assert not set(f.s_task[:n].tolist()) & set(tasks.tolist())
        seen.extend(tasks.tolist())
        arrive(tasks)

    h.flows.on_arrive = check
    times = h.run([t for _, _, t, _ in flows])
    assert sorted(seen) == list(range(len(flows)))
    for (_, _, t, size), at in zip(flows, times, strict=True):
        assert at >= t + 0.5 + size - 1e-9  # two hops of latency, then at most 1 GB/s
