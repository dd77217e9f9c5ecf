"""``parplan measure``: time collectives on torch.distributed and set them beside parplan's prediction.

The real counterpart of ``parplan collective``. :func:`measure` is the one call the command makes:
it checks the request, predicts every (algorithm, size) on the cluster file when one is given
(the same sweep ``parplan collective`` runs, :func:`~parplan.api.collective.collective_sweep`),
then runs the ranks through :func:`measure_on_hosts`. That function is the seam for emulated
clusters: it takes the list of :class:`~parplan.runtime.hosts.HostSlot` to run on (``parplan
emulate`` makes them from network namespaces); without one, the ranks run on this machine over
the loopback interface.

Algorithms: ``backend`` is the backend's own collective; any registered parplan schedule
(``ring``, ``tree:2``, ...) runs step by step over send/recv; ``all`` is ``backend`` and every
schedule of the collective. The backend's own collective is predicted with the algorithm it
implements: ring for gloo, NCCL's tuner (``auto``) for NCCL (:data:`BACKEND_MODEL`).
"""

from __future__ import annotations

import json
import math
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parplan.api.collective import ELEMENT_BYTES, bus_factor, default_algorithm, sweep_sizes
from parplan.errors import ParplanError, UsageError
from parplan.runtime.hosts import HostSlot, local_host
from parplan.runtime.launch import Rendezvous, launch, require_torch

if TYPE_CHECKING:
    from parplan.runtime.netns import EmulatedHostSpec

BACKEND = "backend"
"""The algorithm name of the backend's own collective."""
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
"""The collectives ``parplan measure`` times (torch.distributed has each as one call, gloo too:
``all_to_all_single``)."""
DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8")
"""Element types the ranks can time (torch names)."""
BACKEND_MODEL = {"gloo": "ring", "nccl": "auto"}
"""The parplan algorithm that predicts each backend's own (gloo runs a ring, and its all-to-all
is the linear shift parplan calls ``ring``; NCCL chooses per size, as parplan's ``auto`` models)."""


def default_ranks() -> int:
    """Local ranks when none are asked for: one per core, at least 2 and at most 8."""
    return max(2, min(os.cpu_count() or 2, 8))


@dataclass(frozen=True)
class MeasureRequest:
    """What to time: a checked request (see :func:`measure_request`)."""

    collective: str
    algorithms: tuple[str, ...]
    sizes: tuple[tuple[int, int], ...]
    """``(size_bytes, count)`` pairs; for all-gather and reduce-scatter count is a multiple of ranks."""
    dtype: str = "float32"
    warmup_iters: int = 5
    iters: int = 20
    backend: str = "auto"
    timeout_s: float = 300.0
    step_factor: float = 2.0
    """The sweep's ``-f`` (nccl-tests prints it in its header)."""

    def worker_args(self) -> list[str]:
        """The options :mod:`parplan.runtime.measure_worker` takes for this request."""
        return [
            "--collective", self.collective,
            "--algorithms", ",".join(self.algorithms),
            "--counts", ",".join(str(count) for _, count in self.sizes),
            "--dtype", self.dtype,
            "--warmup", str(self.warmup_iters),
            "--iters", str(self.iters),
            "--backend", self.backend,
        ]  # fmt: skip


@dataclass(frozen=True)
class MeasuredRow:
    """One (algorithm, size): measured as nccl-tests does, and predicted when a cluster was given."""

    collective: str
    algorithm: str
    ranks: int
    size_bytes: int
    count: int
    time_s: float
    wrong: int
    predicted_s: float | None = None
    predicted_as: str | None = None
    """The parplan algorithm that predicted the row (``backend`` rows name the backend's model)."""

    @property
    def algbw_GBps(self) -> float:
        """Algorithm bandwidth: bytes over time, in GB/s (1e9 bytes per second)."""
        return self.size_bytes / self.time_s / 1e9 if self.time_s > 0 else math.inf

    @property
    def busbw_GBps(self) -> float:
        """Bus bandwidth as nccl-tests defines it for the collective."""
        return self.algbw_GBps * bus_factor(self.collective, self.ranks)

    @property
    def error(self) -> float | None:
        """Prediction over measurement minus one (+0.10: parplan predicts 10% slower)."""
        if self.predicted_s is None or self.time_s <= 0:
            return None
        return self.predicted_s / self.time_s - 1.0


@dataclass(frozen=True)
class Measurement:
    """A whole ``parplan measure`` run: its rows and how they were taken."""

    request: MeasureRequest
    backend: str
    ranks: int
    torch_version: str
    hosts: tuple[str, ...]
    rows: tuple[MeasuredRow, ...]
    cluster: str | None = None
    notes: tuple[str, ...] = field(default=())


def expand_measure_algorithms(text: str, collective: str) -> tuple[str, ...]:
    """``backend``, parplan algorithm short forms, a comma list of them, or ``all`` as labels;
    a :class:`UsageError` for an unknown or unrunnable name."""
    from parplan.api.collective import algorithm_label, expand_algorithms
    from parplan.collectives.registry import SELECTORS, schedules

    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UsageError("--algorithm: no algorithm given", "--algorithm")
    labels: list[str] = []
    for name in names:
        if name == "all":
            every = expand_algorithms("all", collective)
            labels += [BACKEND, *(algorithm_label(s, collective) for s in every)]
        elif name == BACKEND:
            labels.append(name)
        elif name.partition(":")[0] in SELECTORS:
            raise UsageError(
                f"--algorithm: {name!r} picks an algorithm per call, there is no schedule of its own to"
                f" run; give 'backend' or one of {', '.join(schedules(collective))}",
                "--algorithm",
            )
        else:
            try:
                labels += [algorithm_label(s, collective) for s in expand_algorithms(name, collective)]
            except ParplanError as exc:
                message = str(exc).replace("valid: ", f"valid: {BACKEND}, ").replace(", auto, all", ", all")
                raise UsageError(message, "--algorithm") from None
    return tuple(dict.fromkeys(labels))


def measure_request(
    *,
    ranks: int,
    algorithm: str = BACKEND,
    collective: str = "all_reduce",
    size_bytes: float | None = None,
    min_bytes: float | None = None,
    max_bytes: float | None = None,
    step_factor: float = 2.0,
    dtype: str = "float32",
    warmup_iters: int = 5,
    iters: int = 20,
    backend: str = "auto",
    timeout_s: float = 300.0,
) -> MeasureRequest:
    """A checked :class:`MeasureRequest` for ``ranks`` ranks; one :class:`UsageError` per bad option."""
    if ranks < 2:
        raise UsageError(f"--ranks: a measurement needs at least 2 ranks, got {ranks}", "--ranks")
    if collective not in COLLECTIVES:
        raise UsageError(f"--collective: {collective!r} cannot be measured; valid: {', '.join(COLLECTIVES)}",
                         "--collective")  # fmt: skip
    if dtype not in DTYPES:
        raise UsageError(f"--dtype: unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}", "--dtype")
    if backend not in ("auto", "gloo", "nccl"):
        raise UsageError(f"--backend: {backend!r}; valid: auto, gloo, nccl", "--backend")
    if warmup_iters < 0 or iters < 1:
        raise UsageError(f"iterations: need -w >= 0 and -n >= 1, got {warmup_iters} and {iters}", "--iters")
    if not timeout_s > 0:
        raise UsageError(f"--timeout: must be more than 0 s, got {timeout_s:g}", "--timeout")
    element_bytes = ELEMENT_BYTES[dtype]
    sizes = sweep_sizes(
        size_bytes=size_bytes, min_bytes=min_bytes, max_bytes=max_bytes, step_factor=step_factor,
        element_bytes=element_bytes,
    )  # fmt: skip
    if collective != "all_reduce":  # every rank holds an equal shard, as nccl-tests requires
        counts = dict.fromkeys(max(ranks, count - count % ranks) for _, count in sizes)
        sizes = [(count * element_bytes, count) for count in counts]
    return MeasureRequest(
        collective=collective,
        algorithms=expand_measure_algorithms(algorithm, collective),
        sizes=tuple(sizes),
        dtype=dtype,
        warmup_iters=warmup_iters,
        iters=iters,
        backend=backend,
        timeout_s=timeout_s,
        step_factor=step_factor,
    )


def predicted_algorithm(label: str, collective: str, backend: str) -> str:
    """The parplan algorithm that predicts ``label`` (itself, or the backend's model: gloo runs
    rings for every collective, NCCL chooses per size as ``auto`` models)."""
    if label != BACKEND:
        return label
    return BACKEND_MODEL.get(backend, default_algorithm(collective))


def predict(
    cluster: str | Path,
    request: MeasureRequest,
    ranks: int,
    backend: str,
    sizes: Sequence[tuple[int, int]] | None = None,
) -> tuple[str, dict[tuple[str, int], float]]:
    """The cluster's name and ``parplan collective``'s simulated time of every (predicting
    algorithm, size_bytes) of the request (or of ``sizes``) on the cluster file's first
    ``ranks`` devices."""
    from parplan.api.collective import collective_sweep
    from parplan.api.kinds import load_expected
    from parplan.collectives.registry import parse
    from parplan.topology.build import build_network
    from parplan.topology.placement import place

    network = build_network(load_expected(cluster, "cluster", command="parplan measure --cluster"))
    placement = place(network, None, count=ranks)
    labels = list(
        dict.fromkeys(predicted_algorithm(a, request.collective, backend) for a in request.algorithms)
    )
    sweep = collective_sweep(
        network,
        placement.devices,
        [parse(label, request.collective) for label in labels],
        list(request.sizes if sizes is None else sizes),
        element_bytes=ELEMENT_BYTES[request.dtype],
        groups=[list(g) for g in placement.groups],
        collective=request.collective,
    )
    ours = dict(zip(sweep.algorithms, labels, strict=True))  # the sweep's labels spell defaults out
    return network.name, {(ours[row.algorithm], row.size_bytes): row.time_s for row in sweep.rows}


def measure_on_hosts(
    hosts: Sequence[HostSlot],
    request: MeasureRequest,
    *,
    cluster: str | Path | None = None,
    rendezvous: Rendezvous | None = None,
) -> Measurement:
    """Run ``request`` with ranks on ``hosts`` (the emulation seam) and, with a ``cluster`` file,
    predict each row on its first devices (as many as ranks). Raises
    :class:`~parplan.errors.RuntimeCheckError` when the ranks fail, hang or torch is missing."""
    require_torch()  # before predicting: without torch nothing else matters
    ranks = sum(h.nproc for h in hosts) if rendezvous is None else 0
    backend_guess = "nccl" if request.backend == "nccl" else "gloo"
    name: str | None = None
    predicted: dict[tuple[str, int], float] = {}
    if cluster is not None and ranks:  # before the run: a bad cluster file fails fast
        name, predicted = predict(cluster, request, ranks, backend_guess)
    document = launch(request.worker_args(), hosts, timeout_s=request.timeout_s, rendezvous=rendezvous)
    backend, world = str(document["backend"]), int(document["world_size"])
    if cluster is not None and (world != ranks or backend != backend_guess):
        sizes = sorted({(int(r["size_bytes"]), int(r["count"])) for r in document.get("rows", [])})
        name, predicted = predict(cluster, request, world, backend, sizes or None)
    rows = []
    for raw in document.get("rows", []):
        row = MeasuredRow(
            collective=str(raw["collective"]),
            algorithm=str(raw["algorithm"]),
            ranks=world,
            size_bytes=int(raw["size_bytes"]),
            count=int(raw["count"]),
            time_s=float(raw["time_s"]),
            wrong=int(raw["wrong"]),
        )
        if cluster is not None:
            model = predicted_algorithm(row.algorithm, row.collective, backend)
            row = replace(row, predicted_s=predicted.get((model, row.size_bytes)), predicted_as=model)
        rows.append(row)
    return Measurement(
        request=request,
        backend=backend,
        ranks=world,
        torch_version=str(document.get("torch", "")),
        hosts=tuple(h.name for h in hosts),
        rows=tuple(rows),
        cluster=name,
    )


def measure(
    request: MeasureRequest,
    *,
    ranks: int,
    cluster: str | Path | None = None,
    rendezvous: Rendezvous | None = None,
) -> Measurement:
    """``parplan measure``: ``ranks`` ranks on this machine over loopback (or this machine's
    ranks of a real cluster with ``rendezvous``), predicted on ``cluster`` when given."""
    if rendezvous is None:
        host = local_host(ranks)
    else:  # the ranks talk over the machine's network: no loopback address, no interface pinned
        host = HostSlot(name=socket.gethostname(), address="", nproc=ranks)
    return measure_on_hosts([host], request, cluster=cluster, rendezvous=rendezvous)


def measure_emulated(
    request: MeasureRequest, cluster: str | Path, hosts: Sequence[EmulatedHostSpec], *,
    predict_on: str | Path | None = None, delay_method: str = "auto",
) -> Measurement:  # fmt: skip
    """``parplan measure --emulate CLUSTER``: build ``cluster``'s ``hosts`` (loaded once by the
    caller with :func:`~parplan.api.emulate.load_emulated_hosts`, which also gives the rank count
    to check first) as network namespaces on this machine (torn down on every exit), run the ranks
    on them and predict every row on the same file (or on ``predict_on``): the emulated cluster is
    the hardware the file describes, so the error is the model's."""
    from parplan.api.emulate import emulated_hosts

    require_torch()  # before building namespaces: without torch nothing runs on them
    with emulated_hosts(hosts, delay_method=delay_method) as slots:
        return measure_on_hosts(slots, request, cluster=predict_on if predict_on is not None else cluster)


MAX_STEP_PARAMETERS = 64 * 2**20
"""The largest synthetic model ``--step`` builds (parameters): each rank holds weights,
gradients and buckets in float32, and the ranks share this machine's memory."""


@dataclass(frozen=True)
class StepMeasurement:
    """``parplan measure --step``: a measured DDP step beside the simulated one."""

    scenario: str
    plan: str
    ranks: int
    parameters: int
    bucket_bytes: int
    batch_per_rank: int
    times_s: tuple[float, ...]
    predicted_step_s: float | None = None
    predicted_exposed_comm_s: float | None = None
    cluster: str | None = None

    @property
    def median_s(self) -> float:
        """The median measured step (the figure set beside the prediction)."""
        ordered = sorted(self.times_s)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2

    @property
    def error(self) -> float | None:
        """Predicted step over measured median minus one."""
        return None if self.predicted_step_s is None else self.predicted_step_s / self.median_s - 1.0


def measure_step(
    scenario: str | Path,
    *,
    ranks: int | None = None,
    cluster: str | Path | None = None,
    steps: int = 5,
    warmup_steps: int = 2,
    timeout_s: float = 300.0,
    hosts: Sequence[HostSlot] | None = None,
) -> StepMeasurement:
    """Time one data-parallel step with DDP on a synthetic model with the scenario's parameter
    count and bucket size (its first data-parallel plan, on that plan's replicas), median of
    ``steps`` >= 5, beside ``simulate``'s step for the plan with the cluster file (default:
    the scenario's own cluster)."""
    from parplan.api.evaluate import build_context, evaluate_plan
    from parplan.api.kinds import load_expected
    from parplan.config.strategy import DataParallelStrategy

    require_torch()
    if steps < 5:
        raise UsageError(f"--iters: a step is the median of at least 5 runs, got {steps}", "--iters")
    spec: Any = load_expected(scenario, "scenario", command="parplan measure --step")
    plan = next((p for p in spec.plans if isinstance(p.strategy, DataParallelStrategy)), None)
    if plan is None:
        raise ParplanError(f"{scenario}: --step needs a data_parallel plan; the scenario has none")
    replicas = int(plan.strategy.num_replicas)
    if ranks is not None and ranks != replicas:
        raise UsageError(f"--ranks: plan {plan.name} has {replicas} replicas, got {ranks}", "--ranks")
    if replicas < 2:
        raise UsageError(f"plan {plan.name} has 1 replica: nothing to all-reduce", "--step")
    if cluster is not None:
        spec = spec.model_copy(
            update={"cluster": load_expected(cluster, "cluster", command="parplan measure")}
        )
    ctx = build_context(spec)
    parameters = int(ctx.model.total_params)
    if parameters > MAX_STEP_PARAMETERS:
        raise ParplanError(
            f"{scenario}: {parameters:,} parameters is too many to train on this machine's ranks"
            f" (at most {MAX_STEP_PARAMETERS:,})"
        )
    predicted = evaluate_plan(ctx, plan)
    bucket = int(plan.strategy.aggregation.bucket_size_bytes)
    batch = max(1, spec.training.global_batch_size // replicas)
    step = {"parameters": parameters, "bucket_bytes": bucket, "batch": batch, "steps": steps,
            "warmup": warmup_steps}  # fmt: skip
    worker = ["--counts", "1", "--step", json.dumps(step)]
    document = launch(worker, list(hosts or [local_host(replicas)]), timeout_s=timeout_s)
    result = document["step"]
    return StepMeasurement(
        scenario=spec.name,
        plan=plan.name,
        ranks=int(document["world_size"]),
        parameters=int(result["parameters"]),
        bucket_bytes=bucket,
        batch_per_rank=batch,
        times_s=tuple(float(t) for t in result["times_s"]),
        predicted_step_s=predicted.step_time_s,
        predicted_exposed_comm_s=predicted.exposed_comm_s,
        cluster=ctx.network.name,
    )
