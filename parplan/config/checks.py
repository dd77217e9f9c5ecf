"""Checks a spec can be given on its own, before any graph is built.

The schema (pydantic) checks each value on its own; these look across the values of one spec:
no model node in two partitions, partition names unique; a data-parallel plan lists as many
devices as its replicas need, none twice; a federated plan's client list fits its client count
and leaves out the server; a population's devices are listed once. Each problem is one
:class:`~parplan.errors.Issue`, located through the loaded file's
:class:`~parplan.config.issues.Source` when there is one (:class:`IssueCollector`).

Checks that need the built network or model graph (devices exist and connect, partitions cover
the model, the cluster builds) and the check that a custom strategy's coordinator is installed
run above this layer, in :mod:`parplan.api.checks`, which calls the ones here in file order.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

from parplan.config.issues import Severity, Source, make_issue
from parplan.config.readers import Loc
from parplan.config.strategy import (
    DataParallelStrategy,
    FederatedStrategy,
    ModelParallelStrategy,
    PartitionFileSpec,
    PartitionSpec,
    PopulationBasedStrategy,
    ShardedStrategy,
)
from parplan.errors import Issue


class IssueCollector:
    """Collects issues for one spec, placing each through the source at ``prefix + loc``."""

    def __init__(self, source: Source | None, prefix: Loc = ()) -> None:
        self.source = source
        self.prefix = prefix
        self.issues: list[Issue] = []

    def at(self, prefix: Loc) -> IssueCollector:
        """A report for a part of this spec that shares the issue list."""
        sub = IssueCollector(self.source, (*self.prefix, *prefix))
        sub.issues = self.issues
        return sub

    def add(self, loc: Loc, message: str, severity: Severity = "error") -> None:
        """Record ``message`` at ``prefix + loc`` (once: a repeated issue is dropped)."""
        issue = make_issue(self.source, (*self.prefix, *loc), message, severity)
        if issue not in self.issues:
            self.issues.append(issue)


def suggest(name: str, known: Sequence[str]) -> str:
    """``; did you mean 'x'?`` for the closest known name, or nothing."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def check_partitions(spec: PartitionFileSpec, source: Source | None = None, prefix: Loc = ()) -> list[Issue]:
    """A partition file on its own: no model node in two partitions, partition names unique."""
    report = IssueCollector(source, prefix)
    _partitions(spec.partitions, report.at(("partitions",)))
    return report.issues


def _partitions(partitions: Sequence[PartitionSpec], report: IssueCollector) -> None:
    owner: dict[str, str] = {}
    for j, part in enumerate(partitions):
        for k, node in enumerate(part.nodes):
            if node in owner:
                where = (
                    "earlier in this partition"
                    if owner[node] == part.name
                    else f"in partition {owner[node]!r}"
                )
                report.add((j, "nodes", k), f"model node {node!r} is already {where}")
            else:
                owner[node] = part.name


def check_strategy(strategy: Any, source: Source | None = None, prefix: Loc = ()) -> list[Issue]:
    """What a strategy file can be checked for without a cluster or a model."""
    report = IssueCollector(source, prefix)
    check_strategy_alone(strategy, report)
    return report.issues


def check_strategy_alone(strategy: Any, report: IssueCollector) -> None:
    """Add what ``strategy`` can be checked for without a cluster or a model to ``report``."""
    if isinstance(strategy, ModelParallelStrategy):
        _partitions(strategy.partitions, report.at(("partitions",)))
    elif isinstance(strategy, DataParallelStrategy):
        width = len(strategy.replica.workers()) if strategy.replica is not None else 1
        if strategy.devices is not None:
            want = strategy.num_replicas * width
            if len(strategy.devices) != want:
                what = f"num_replicas={strategy.num_replicas}" + (
                    f" x {width} workers of the replica plan" if strategy.replica is not None else ""
                )
                report.add(("devices",), f"lists {len(strategy.devices)} devices; {what} needs {want}")
            _no_repeats(strategy.devices, ("devices",), report)
        if strategy.replica is not None:
            check_strategy_alone(strategy.replica, report.at(("replica",)))
    elif isinstance(strategy, FederatedStrategy):
        if strategy.clients is not None:
            if len(strategy.clients) > strategy.num_clients:
                report.add(
                    ("clients",),
                    f"lists {len(strategy.clients)} devices for {strategy.num_clients} clients; "
                    f"only the first {strategy.num_clients} are used",
                    "warning",
                )
            if strategy.server is not None and strategy.server in strategy.clients:
                k = strategy.clients.index(strategy.server)
                report.add(
                    ("clients", k), f"the server {strategy.server!r} is also listed as a client", "warning"
                )
    elif isinstance(strategy, PopulationBasedStrategy) and strategy.devices is not None:
        _no_repeats(strategy.devices, ("devices",), report)
    elif isinstance(strategy, ShardedStrategy):
        _sharded(strategy, report)


INTERLEAVED = "interleaved_1f1b"
"""The schedule that runs a sharded plan's virtual stages."""


def _sharded(strategy: ShardedStrategy, report: IssueCollector) -> None:
    """A sharded plan's degrees against each other and its device list (no cluster, no model)."""
    mp = strategy.model_parallel_size()
    if strategy.devices is not None:
        _no_repeats(strategy.devices, ("devices",), report)
        n = len(strategy.devices)
        if strategy.dp is not None and n != strategy.dp * mp:
            report.add(
                ("devices",),
                f"lists {n} devices; dp x tp x pp x cp = {strategy.dp} x {strategy.tp} x {strategy.pp} x "
                f"{strategy.cp} needs {strategy.dp * mp}",
            )
        elif strategy.dp is None and n % mp:
            report.add(("devices",), f"lists {n} devices, not a multiple of tp x pp x cp = {mp}")
    if strategy.dp is not None and (strategy.dp * strategy.cp) % strategy.ep:
        report.add(
            ("ep",),
            f"must divide dp x cp = {strategy.dp} x {strategy.cp} (experts are split over data ranks)",
        )
    if strategy.virtual_stages > 1 and strategy.schedule != INTERLEAVED:
        report.add(
            ("schedule",),
            f"virtual_stages {strategy.virtual_stages} run {INTERLEAVED}, not {strategy.schedule}",
        )
    if strategy.shard_group is not None and strategy.fsdp != "hybrid_shard":
        report.add(("shard_group",), "is used only with fsdp: hybrid_shard", "warning")
    if strategy.tp_comm_overlap and strategy.tp == 1:
        report.add(("tp_comm_overlap",), "has no TP communication to overlap with tp 1", "warning")
    if strategy.sequence_parallel and strategy.tp == 1:
        report.add(("sequence_parallel",), "changes nothing with tp 1", "warning")


def _no_repeats(names: Sequence[str], loc: Loc, report: IssueCollector) -> None:
    first: dict[str, int] = {}
    for k, name in enumerate(names):
        if name in first:
            report.add((*loc, k), f"device {name!r} is listed twice (also at [{first[name]}])")
        first.setdefault(name, k)
