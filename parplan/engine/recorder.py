"""The recorder: what a run leaves behind, and the :class:`SimResult` assembled from it.

Per task: start, end and arrival times (the engine writes them by batch). Per link: bytes and busy
seconds. Both are booked where it is cheapest: bytes per route id when a flow is issued, busy time
per route id while flows run alone at their route's narrowest bandwidth (the exclusive regime of
:mod:`parplan.engine.flows`), and per channel for the shared regime's allocations; routes are
spread over their channels once, at the end.
"""

from __future__ import annotations

import numpy as np

from parplan.engine.arrays import EMPTY_F, FloatArray, IntArray
from parplan.engine.result import CollectiveStats, SimResult
from parplan.engine.routes import RouteTable
from parplan.taskgraph import TRANSFER


class Recorder:
    """Times per task, bytes and busy seconds per route and per channel, for one run.

    ``channel_busy_s`` has one entry more than the network has channels: the padding channel of
    the route matrix (see :mod:`parplan.engine.routes`), dropped from the result.
    """

    def __init__(self, num_tasks: int, num_channels: int) -> None:
        # Every task gets a start and an end before a run returns (or it raises), so these need
        # no initialisation; np.empty leaves the pages untouched until the engine writes them.
        self.start_s = np.empty(num_tasks)
        self.end_s = np.empty(num_tasks)
        self.arrive_s = np.empty(num_tasks)
        self.num_channels = num_channels
        self.route_bytes = EMPTY_F  # bytes issued per route id
        self.route_busy_s = EMPTY_F  # exclusive-regime busy seconds per route id
        self.channel_busy_s = np.zeros(num_channels + 1)  # shared-regime busy seconds per channel

    def grow_routes(self, num_routes: int) -> None:
        """Make room for route ids below ``num_routes``."""
        grow = num_routes - len(self.route_bytes)
        if grow > 0:
            self.route_bytes = np.concatenate([self.route_bytes, np.zeros(grow)])
            self.route_busy_s = np.concatenate([self.route_busy_s, np.zeros(grow)])

    def channel_bytes(self, routes: RouteTable) -> FloatArray:
        """Bytes carried per channel of ``routes`` (each route's bytes times its flows' weight on
        the channel, in a symmetric run)."""
        return self._per_channel(
            np.zeros(self.num_channels + 1), self.route_bytes, routes.channels, routes.weights
        )

    def channel_busy(self, routes: RouteTable) -> FloatArray:
        """Seconds with at least one flow moving, per network channel (after the flows' flush)."""
        return self._per_channel(self.channel_busy_s, self.route_busy_s, routes.channels)

    def _per_channel(
        self,
        base: FloatArray,
        per_route: FloatArray,
        route_channels: IntArray,
        weights: FloatArray | None = None,
    ) -> FloatArray:
        """``base`` plus each route's figure added on each of its channels (times ``weights``
        where given), padding dropped."""
        out = base.copy()
        if len(per_route):
            width = route_channels.shape[1]
            figures_on = np.repeat(per_route, width)
            if weights is not None:
                figures_on = figures_on * weights[: len(per_route)].ravel()
            np.add.at(out, route_channels[: len(per_route)].ravel(), figures_on)
        figures: FloatArray = out[: self.num_channels]
        return figures

    def result(
        self,
        *,
        kind: np.ndarray,
        devices: tuple[str, ...],
        routes: RouteTable,
        compute_busy_s: FloatArray,
        reduction_busy_s: FloatArray,
        num_events: int,
        collective: object,
    ) -> SimResult:
        """The run's :class:`SimResult`. ``kind`` is the task kinds (arrivals of other kinds become
        NaN); per-route figures are spread over ``routes``' channels; ``collective`` is the task
        graph's ``meta["collective"]`` (a dict, when it is one)."""
        makespan = float(self.end_s.max()) if len(self.end_s) else 0.0
        not_transfer = kind != TRANSFER
        if not_transfer.any():
            self.arrive_s[not_transfer] = np.nan
        stats = None
        if isinstance(collective, dict):
            stats = CollectiveStats(
                algorithm=str(collective.get("algorithm", "")),
                num_ranks=int(collective.get("ranks", 0)),
                size_bytes=float(collective.get("size_bytes", 0.0)),
                time_s=makespan,
            )
        return SimResult(
            makespan_s=makespan,
            start_s=self.start_s,
            end_s=self.end_s,
            arrive_s=self.arrive_s,
            devices=devices,
            compute_busy_s=compute_busy_s,
            reduction_busy_s=reduction_busy_s,
            channel_names=routes.network.channel_names,
            channel_bandwidth_Bps=routes.network_bandwidth_Bps,
            channel_bytes=routes.expand(self.channel_bytes(routes)),
            channel_busy_s=routes.expand(self.channel_busy(routes)),
            num_events=num_events,
            collective=stats,
        )
