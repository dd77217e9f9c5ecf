"""Training strategy specs: a tagged union on ``kind`` (default ``local``).

Strategies are data: they load from and save to YAML, TOML and JSON losslessly. A model-parallel
plan's ``partitions`` are inline or a path to a partition file; the loader in
:mod:`parplan.config.loader` replaces the path with the partitions it names before validation, and
keeps the path in ``partitions_file`` so a saved strategy still points at its file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import Field, GetJsonSchemaHandler, PlainValidator, ValidationInfo, field_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError

from parplan.collectives.specs import AlgorithmSpec, AutoAlgorithm
from parplan.config.units import Bytes
from parplan.errors import PlanError
from parplan.pipeline import registry as pipeline_registry
from parplan.spec import Spec


class LocalStrategy(Spec):
    """Everything on one device (the first device of the cluster unless ``device`` names one)."""

    kind: Literal["local"] = "local"
    device: str | None = None


class AggregationSpec(Spec):
    """How data-parallel gradients are combined after each step."""

    algorithm: AlgorithmSpec = Field(
        default_factory=lambda: AutoAlgorithm(name="auto"),
        description="all-reduce algorithm; default 'auto': NCCL's pick per size (the ring without a GPU)",
    )
    reduce: Literal["mean", "sum", "weighted_by_samples"] = "mean"
    bucket_size_bytes: Bytes = Field(
        default=25 * 2**20, alias="bucket_size", description="gradient bucket size (PyTorch DDP: 25 MiB)"
    )
    overlap: bool = Field(default=True, description="all-reduce buckets while backward still runs")


class PartitionSpec(Spec):
    """A set of model node ids placed on one worker (device name)."""

    name: str = Field(min_length=1)
    nodes: tuple[str, ...] = Field(min_length=1)
    worker: str = Field(min_length=1)


class PartitionFileSpec(Spec):
    """A partition file: the partitions of a model-parallel plan, referenced by path."""

    name: str = "partitions"
    description: str | None = None
    partitions: tuple[PartitionSpec, ...] = Field(min_length=1)


def _one_of(names: Sequence[str]) -> str:
    """``'a'``, ``'a' or 'b'``, ``'a', 'b' or 'c'``: the choices as pydantic lists a ``Literal``'s."""
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def _schedule_name(value: Any) -> str:
    """A registered pipeline schedule name, or the error a ``Literal`` of the names would give."""
    names = pipeline_registry.schedule_names()
    if isinstance(value, str) and value in names:
        return value
    raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": _one_of(names)})


class _ScheduleNameJsonSchema:
    """The JSON Schema of a schedule name: an enum of the names registered when it is generated."""

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"enum": list(pipeline_registry.schedule_names()), "type": "string"}


ScheduleName = Annotated[str, PlainValidator(_schedule_name), _ScheduleNameJsonSchema()]
"""A pipeline schedule's name, checked against :mod:`parplan.pipeline.registry` when validated."""


class CommunicationSpec(Spec):
    """How a model-parallel plan moves activations: ``pipeline`` micro-batches, or ``none`` (one batch)."""

    protocol: Literal["pipeline", "none"] = "pipeline"
    microbatches: int = Field(default=1, ge=1)
    schedule: ScheduleName = pipeline_registry.DEFAULT_SCHEDULE


class ModelParallelStrategy(Spec):
    """Partitions of the model graph on workers, with pipelined micro-batches.

    ``kind`` may be left out where only a model-parallel plan fits (a data-parallel ``replica``).
    """

    kind: Literal["model_parallel"] = "model_parallel"
    partitions: tuple[PartitionSpec, ...] = Field(min_length=1)
    partitions_file: str | None = Field(default=None, description="where the partitions came from")
    communication: CommunicationSpec = Field(default_factory=CommunicationSpec)

    @field_validator("partitions")
    @classmethod
    def _unique_names(cls, partitions: tuple[PartitionSpec, ...]) -> tuple[PartitionSpec, ...]:
        names = [p.name for p in partitions]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"partition names used twice: {', '.join(dupes)}")
        return partitions

    def workers(self) -> tuple[str, ...]:
        """The distinct workers of the partitions, in order of first appearance."""
        return tuple(dict.fromkeys(p.worker for p in self.partitions))


class DataParallelStrategy(Spec):
    """``num_replicas`` copies of the model (or of a model-parallel ``replica``), each on a shard of
    the batch, gradients all-reduced after each step.

    Which devices the replicas use (:meth:`replica_devices` states it in code; the data-parallel
    planner and ``validate-config`` follow the same rule):

    - Plain data parallelism: replica r runs on ``devices[r]`` (``devices`` then lists exactly
      ``num_replicas`` devices); without ``devices``, on the r-th device of the cluster. Cluster
      device order is the order the cluster file or its generator names them: ``h0, h1, ...``,
      or ``n0.d0 .. n0.d7, n1.d0 ..`` for a hierarchical cluster.
    - A 2-D plan (``replica`` is a model-parallel plan): let W be the replica plan's distinct
      workers sorted by their position in the cluster's device order. With ``devices`` given, it
      lists ``num_replicas x len(W)`` devices replica-major, and replica r runs worker ``W[j]`` on
      ``devices[r * len(W) + j]``. Without ``devices``, replica 0 runs on the workers themselves
      and replica r runs ``W[j]`` on the device ``r * len(W)`` places after ``W[j]`` in cluster
      order: a 4-stage plan on ``n0.d0 .. n0.d3`` of 8-GPU nodes puts replica 1 on
      ``n0.d4 .. n0.d7`` and replica 2 on ``n1.d0 .. n1.d3``. Every device must exist in the
      cluster and none may serve two replicas (or two workers).
    """

    kind: Literal["data_parallel"]
    num_replicas: int = Field(ge=1)
    aggregation: AggregationSpec = Field(default_factory=AggregationSpec)
    batch_split: Literal["round_robin", "by_speed"] = "round_robin"
    devices: tuple[str, ...] | None = Field(
        default=None,
        description="devices of the replicas in rank order, replica-major for a 2-D plan "
        "(default: the cluster's, in order)",
    )
    replica: ModelParallelStrategy | None = Field(
        default=None, description="a model-parallel plan each replica runs (a 2-D plan)"
    )
    replica_file: str | None = Field(default=None, description="where the replica plan came from")

    def replica_workers(self, cluster_devices: Sequence[str]) -> tuple[str, ...]:
        """W: the replica plan's distinct workers in cluster device order, or () for plain DP.

        Raises :class:`~parplan.errors.PlanError` for a worker the cluster does not have.
        """
        if self.replica is None:
            return ()
        index = {d: i for i, d in enumerate(cluster_devices)}
        workers = self.replica.workers()
        for w in workers:
            if w not in index:
                raise PlanError(f"worker {w!r} of the replica plan is not a device of the cluster")
        return tuple(sorted(workers, key=index.__getitem__))

    def replica_devices(self, cluster_devices: Sequence[str]) -> tuple[tuple[str, ...], ...]:
        """The devices of every replica in rank order; for a 2-D plan replica r's tuple gives the
        device of each worker of :meth:`replica_workers`, in that order (rule: class docstring).

        Raises :class:`~parplan.errors.PlanError` when the replicas do not fit the devices.

        >>> DataParallelStrategy(kind="data_parallel", num_replicas=2).replica_devices(["a", "b", "c"])
        (('a',), ('b',))
        """
        workers = self.replica_workers(cluster_devices)
        width = max(1, len(workers))
        if self.devices is not None:
            flat = list(self.devices)
            if len(flat) != self.num_replicas * width:
                what = f"{self.num_replicas} replicas" + (f" x {width} workers" if workers else "")
                raise PlanError(f"devices lists {len(flat)} devices for {what}")
        elif not workers:
            if self.num_replicas > len(cluster_devices):
                raise PlanError(
                    f"num_replicas ({self.num_replicas}) exceeds the cluster's {len(cluster_devices)} devices"
                )
            flat = list(cluster_devices[: self.num_replicas])
        else:
            index = {d: i for i, d in enumerate(cluster_devices)}
            flat = []
            for r in range(self.num_replicas):
                for w in workers:
                    i = index[w] + r * width
                    if i >= len(cluster_devices):
                        raise PlanError(
                            f"replica {r} would run worker {w!r} on device #{i}, but the cluster has "
                            f"{len(cluster_devices)} devices; use fewer replicas or list the devices"
                        )
                    flat.append(cluster_devices[i])
        known = set(cluster_devices)
        unknown = [d for d in flat if d not in known]
        if unknown:
            raise PlanError(f"unknown device {unknown[0]!r}")
        seen: dict[str, int] = {}
        for pos, d in enumerate(flat):
            if d in seen:
                first, again = divmod(seen[d], width), divmod(pos, width)
                if workers:
                    raise PlanError(
                        f"device {d!r} would run worker {workers[first[1]]!r} of replica {first[0]} and "
                        f"worker {workers[again[1]]!r} of replica {again[0]}; list the devices explicitly"
                    )
                raise PlanError(f"device {d!r} is listed twice (replicas {first[0]} and {again[0]})")
            seen[d] = pos
        return tuple(tuple(flat[r * width : (r + 1) * width]) for r in range(self.num_replicas))


ParallelAxis = Literal["tp", "cp", "ep", "dp", "pp"]
"""An axis of a sharded plan's device mesh (tensor, context, expert, data, pipeline parallel)."""

DEFAULT_PLACEMENT: tuple[ParallelAxis, ...] = ("tp", "cp", "pp", "dp")
"""Mesh axes innermost first: TP inside a node (NVLink), then CP, PP across nodes, DP outermost.
Expert parallelism is carved out of DP (and CP) ranks, as Megatron-Core does, so it is no axis of
its own here unless a placement names it."""


class ShardedStrategy(Spec):
    """A transformer sharded the ways LLM teams run it: a device mesh of data (``dp``), tensor
    (``tp``, Megatron column/row split; ``sequence_parallel``), pipeline (``pp``, with
    ``virtual_stages`` for interleaving), context (``cp``, ring attention) and expert (``ep``)
    parallelism, with ZeRO or FSDP sharding of the model state and activation recomputation.

    The plan uses ``dp x tp x pp x cp`` devices (``dp`` defaults to what the cluster has left); the
    scenario's global batch is split into ``dp`` shards of ``microbatch_size``-sample micro-batches,
    ``global_batch / (dp x microbatch_size)`` of them per pipeline. ``placement`` orders the mesh
    axes innermost first over the cluster's devices (or ``devices``) in their order.
    """

    kind: Literal["sharded"]
    dp: int | None = Field(
        default=None, ge=1, description="data-parallel degree (default: the devices left by tp x pp x cp)"
    )
    tp: int = Field(default=1, ge=1, description="tensor-parallel degree (Megatron column/row split)")
    pp: int = Field(default=1, ge=1, description="pipeline stages")
    cp: int = Field(default=1, ge=1, description="context-parallel degree (ring attention over the sequence)")
    ep: int = Field(
        default=1, ge=1, description="expert-parallel degree: experts split over ep ranks of dp x cp"
    )
    sequence_parallel: bool = Field(
        default=False,
        description="shard layer norms and dropout over the TP group (reduce-scatter + all-gather "
        "instead of all-reduce; activations saved / tp)",
    )
    virtual_stages: int = Field(
        default=1, ge=1, description="model chunks per pipeline stage (interleaved 1F1B when > 1)"
    )
    schedule: ScheduleName = Field(
        default="1f1b", description="pipeline schedule; 'interleaved_1f1b' with virtual_stages > 1"
    )
    microbatch_size: int = Field(default=1, ge=1, description="samples (sequences) per micro-batch")
    recompute: Literal["none", "selective", "op", "full"] = Field(
        default="none",
        description="activation recomputation: none; selective (attention core, Korthikanti et al. "
        "2022); op (torchtitan's per-op selective AC: keeps every other matmul's output and the "
        "attention's, recomputes the rest); full (every layer's forward again in backward)",
    )
    zero: Literal[0, 1, 2, 3] = Field(
        default=0,
        description="ZeRO stage over the data-parallel group: 1 shards optimizer state, 2 also "
        "gradients, 3 also parameters",
    )
    fsdp: Literal["none", "full_shard", "shard_grad_op", "hybrid_shard"] = Field(
        default="none",
        description="PyTorch FSDP sharding (exclusive with zero): full_shard ~ ZeRO-3, "
        "shard_grad_op ~ ZeRO-2, hybrid_shard: full_shard inside shard_group, replicated across",
    )
    shard_group: int | None = Field(
        default=None,
        ge=1,
        description="devices one hybrid_shard shard spans (default: the data-parallel ranks of one node)",
    )
    dtype: Literal["fp32", "tf32", "bf16", "fp16", "fp8"] = Field(
        default="bf16", description="the precision the matmuls run in (sets the device's peak)"
    )
    flash_attention: bool = Field(
        default=True, description="fused attention: scores never written to memory, recomputed in backward"
    )
    kernels: Literal["fused", "eager"] = Field(
        default="fused",
        description="memory-bound work between GEMMs: fused (Megatron's fused norm, bias-GeLU, softmax, "
        "RoPE kernels, or torch.compile) or eager (PyTorch op by op, as torchtitan or Hugging Face "
        "without torch.compile: fp32 norms, RoPE and loss, every elementwise op its own kernel)",
    )
    tp_comm_overlap: bool = Field(
        default=False, description="overlap TP communication with the GEMMs (async TP / userbuffers)"
    )
    framework: Literal["megatron", "deepspeed"] = Field(
        default="megatron",
        description="the framework's gradient handling: megatron (Megatron-LM: gradients accumulate "
        "inside the weight-gradient GEMMs); deepspeed (DeepSpeed's PipelineEngine with its "
        "BF16_Optimizer: each micro-batch's gradients are added to fp32 copies, gradients are "
        "all-reduced over the data ranks even when the optimizer state is sharded)",
    )
    capacity_factor: float = Field(
        default=1.0, gt=0, le=16, description="MoE expert capacity over the even share of tokens"
    )
    aggregation: AggregationSpec = Field(
        default_factory=AggregationSpec,
        description="gradient reduction over the data-parallel group: algorithm, buckets, overlap",
    )
    placement: tuple[ParallelAxis, ...] = Field(
        default=DEFAULT_PLACEMENT,
        description="mesh axes innermost first over the devices in order (default: tp, cp, pp, dp)",
    )
    devices: tuple[str, ...] | None = Field(
        default=None, description="the devices the mesh runs on, in order (default: the cluster's)"
    )

    @field_validator("placement")
    @classmethod
    def _placement_axes(cls, placement: tuple[str, ...]) -> tuple[str, ...]:
        dupes = sorted({a for a in placement if placement.count(a) > 1})
        if dupes:
            raise ValueError(f"axes named twice: {', '.join(dupes)}")
        missing = [a for a in ("tp", "cp", "pp", "dp") if a not in placement]
        if missing:
            raise ValueError(f"placement must name each of tp, cp, pp, dp; missing: {', '.join(missing)}")
        return placement

    @field_validator("fsdp")
    @classmethod
    def _one_sharding(cls, fsdp: str, info: ValidationInfo) -> str:
        if fsdp != "none" and info.data.get("zero", 0) != 0:
            zero = info.data["zero"]
            raise ValueError(f"fsdp ({fsdp}) and zero ({zero}) both shard the model state; give one")
        return fsdp

    @field_validator("framework")
    @classmethod
    def _deepspeed_without_fsdp(cls, framework: str, info: ValidationInfo) -> str:
        fsdp = info.data.get("fsdp", "none")
        if framework == "deepspeed" and fsdp != "none":
            raise ValueError(f"fsdp ({fsdp}) is PyTorch's; DeepSpeed shards with zero")
        return framework

    @field_validator("virtual_stages")
    @classmethod
    def _virtual_needs_pipeline(cls, virtual_stages: int, info: ValidationInfo) -> int:
        pp = info.data.get("pp", 1)
        if virtual_stages > 1 and pp == 1:
            raise ValueError("virtual_stages > 1 needs a pipeline (pp > 1)")
        return virtual_stages

    def model_parallel_size(self) -> int:
        """Devices one data-parallel replica spans: ``tp x pp x cp``."""
        return self.tp * self.pp * self.cp


class AllSelection(Spec):
    """Every client takes part in every round."""

    kind: Literal["all"] = "all"


class RandomSelection(Spec):
    """``k`` clients drawn at random each round, reproducibly from ``seed``."""

    kind: Literal["random"]
    k: int = Field(ge=1)
    seed: int = Field(default=0, ge=0, description="random seed (numpy takes non-negative seeds)")


class RoundRobinSelection(Spec):
    """``k`` clients per round, taking them in turn."""

    kind: Literal["round_robin"]
    k: int = Field(ge=1)


class FastestSelection(Spec):
    """The ``k`` clients whose round trip (compute plus link) is shortest."""

    kind: Literal["fastest"]
    k: int = Field(ge=1)


ClientSelection = Annotated[
    AllSelection | RandomSelection | RoundRobinSelection | FastestSelection, Field(discriminator="kind")
]


class FederatedStrategy(Spec):
    """Clients train on their own data; a server aggregates their updates every round."""

    kind: Literal["federated"]
    num_clients: int = Field(ge=1)
    rounds: int = Field(default=1, ge=1)
    local_steps: int = Field(default=1, ge=1)
    aggregation: Literal["fedavg", "mean"] = "fedavg"
    client_selection: ClientSelection = Field(default_factory=AllSelection)
    server: str | None = Field(default=None, description="server device (default: the cluster's first)")
    clients: tuple[str, ...] | None = Field(
        default=None,
        description="client devices: client i runs on clients[i mod len(clients)] (default: the "
        "cluster's devices after the server); clients sharing a device take turns",
    )
    samples_per_client: tuple[Annotated[int, Field(ge=0)], ...] | None = Field(
        default=None, description="local data set sizes (default: the global batch split evenly)"
    )
    seed: int = Field(default=0, ge=0, description="random seed (numpy takes non-negative seeds)")

    @field_validator("client_selection")
    @classmethod
    def _k_fits(cls, sel: Any, info: ValidationInfo) -> Any:
        num_clients = info.data.get("num_clients")
        if num_clients is not None and not isinstance(sel, AllSelection) and sel.k > num_clients:
            raise ValueError(f"k ({sel.k}) exceeds num_clients ({num_clients})")
        return sel

    @field_validator("samples_per_client")
    @classmethod
    def _one_per_client(cls, value: tuple[int, ...] | None, info: ValidationInfo) -> tuple[int, ...] | None:
        num_clients = info.data.get("num_clients")
        if value is not None and num_clients is not None and len(value) != num_clients:
            raise ValueError(f"has {len(value)} entries for num_clients={num_clients}")
        return value


class TruncationExploit(Spec):
    """The bottom ``fraction`` of the population copies the weights of the top ``fraction``."""

    kind: Literal["truncation"]
    fraction: float = Field(default=0.25, gt=0, le=0.5)


class TournamentExploit(Spec):
    """Each member meets a random ``size``-1 others and copies the best if it is not the best itself."""

    kind: Literal["tournament"]
    size: int = Field(default=2, ge=2)


class PerturbExplore(Spec):
    """Multiply each hyperparameter by one of ``factors``."""

    kind: Literal["perturb"]
    factors: tuple[Annotated[float, Field(gt=0)], ...] = Field(default=(0.8, 1.2), min_length=1)


class ResampleExplore(Spec):
    """With ``probability``, draw a hyperparameter anew from its prior."""

    kind: Literal["resample"]
    probability: float = Field(default=0.25, ge=0, le=1)


class PopulationBasedStrategy(Spec):
    """Population-based training: members train, are evaluated, exploit and explore each generation."""

    kind: Literal["population_based"]
    population_size: int = Field(ge=2)
    generations: int = Field(default=1, ge=1)
    steps_per_generation: int = Field(default=1, ge=1)
    exploit: Annotated[TruncationExploit | TournamentExploit, Field(discriminator="kind")] = Field(
        default_factory=lambda: TruncationExploit(kind="truncation")
    )
    explore: Annotated[PerturbExplore | ResampleExplore, Field(discriminator="kind")] = Field(
        default_factory=lambda: PerturbExplore(kind="perturb")
    )
    devices: tuple[str, ...] | None = Field(
        default=None,
        description="devices the members train on (default: all of the cluster's); members beyond "
        "the devices queue and train in waves",
    )
    seed: int = Field(default=0, ge=0, description="random seed (numpy takes non-negative seeds)")

    def waves(self, num_devices: int) -> int:
        """How many rounds of training one generation takes when members share ``num_devices``."""
        return math.ceil(self.population_size / max(1, num_devices))


class CustomStrategy(Spec):
    """A coordinator registered by a plugin under the ``parplan.coordinators`` entry-point group."""

    kind: Literal["custom"]
    coordinator: str = Field(min_length=1)
    config: dict[str, Any] = Field(default_factory=dict)

    @field_validator("config")
    @classmethod
    def _plain_data(cls, config: dict[str, Any]) -> dict[str, Any]:
        _check_plain(config, "config")
        return config


def _check_plain(value: Any, where: str) -> None:
    """Free-form config must be plain data (so it saves to YAML, TOML and JSON alike)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where}: keys must be strings, got {key!r}")
            _check_plain(item, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: numbers must be finite, got {value!r}")
    elif value is not None and not isinstance(value, str | int | bool):
        raise ValueError(f"{where}: expected plain data, got {type(value).__name__}")


StrategySpec = Annotated[
    LocalStrategy
    | DataParallelStrategy
    | ModelParallelStrategy
    | FederatedStrategy
    | PopulationBasedStrategy
    | CustomStrategy
    | ShardedStrategy,
    Field(discriminator="kind"),
]
"""Any strategy; ``kind`` selects the class (a missing ``kind`` is filled in as ``local`` by the loader)."""

STRATEGY_KINDS: tuple[str, ...] = (
    "local",
    "data_parallel",
    "model_parallel",
    "federated",
    "population_based",
    "custom",
    "sharded",
)
