"""Training strategy specs: a tagged union on ``kind`` (default ``local``).

Strategies are data: they load from and save to YAML, TOML and JSON losslessly. A model-parallel
plan's ``partitions`` are inline or a path to a partition file; the loader in
:mod:`parplan.config.loader` replaces the path with the partitions it names before validation, and
keeps the path in ``partitions_file`` so a saved strategy still points at its file.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from parplan.config.algorithms import AlgorithmSpec, RingAlgorithm
from parplan.config.base import Spec
from parplan.config.units import Bytes


class LocalStrategy(Spec):
    """Everything on one device (the first device of the cluster unless ``device`` names one)."""

    kind: Literal["local"] = "local"
    device: str | None = None


class AggregationSpec(Spec):
    """How data-parallel gradients are combined after each step."""

    algorithm: AlgorithmSpec = Field(default_factory=lambda: RingAlgorithm(name="ring"))
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


class CommunicationSpec(Spec):
    """How a model-parallel plan moves activations: ``pipeline`` micro-batches, or ``none`` (one batch)."""

    protocol: Literal["pipeline", "none"] = "pipeline"
    microbatches: int = Field(default=1, ge=1)
    schedule: Literal["gpipe", "1f1b"] = "gpipe"


class ModelParallelStrategy(Spec):
    """Partitions of the model graph on workers, with pipelined micro-batches."""

    kind: Literal["model_parallel"]
    partitions: tuple[PartitionSpec, ...] = Field(min_length=1)
    partitions_file: str | None = Field(default=None, description="where the partitions came from")
    communication: CommunicationSpec = Field(default_factory=CommunicationSpec)

    @model_validator(mode="after")
    def _check(self) -> ModelParallelStrategy:
        names = [p.name for p in self.partitions]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"partition names used twice: {', '.join(dupes)}")
        return self


class DataParallelStrategy(Spec):
    """``num_replicas`` copies of the model (or of a model-parallel ``replica``), each on a shard of
    the batch, gradients all-reduced after each step."""

    kind: Literal["data_parallel"]
    num_replicas: int = Field(ge=1)
    aggregation: AggregationSpec = Field(default_factory=AggregationSpec)
    batch_split: Literal["round_robin", "by_speed"] = "round_robin"
    devices: tuple[str, ...] | None = Field(
        default=None, description="devices of the replicas in rank order (default: the cluster's, in order)"
    )
    replica: ModelParallelStrategy | None = Field(
        default=None, description="a model-parallel plan each replica runs (a 2-D plan)"
    )


class AllSelection(Spec):
    """Every client takes part in every round."""

    kind: Literal["all"] = "all"


class RandomSelection(Spec):
    """``k`` clients drawn at random each round, reproducibly from ``seed``."""

    kind: Literal["random"]
    k: int = Field(ge=1)
    seed: int = 0


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
        default=None, description="client devices (default: the cluster's devices after the server)"
    )
    samples_per_client: tuple[int, ...] | None = Field(
        default=None, description="local data set sizes (default: the global batch split evenly)"
    )
    seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> FederatedStrategy:
        sel = self.client_selection
        if not isinstance(sel, AllSelection) and sel.k > self.num_clients:
            raise ValueError(f"client_selection.k ({sel.k}) exceeds num_clients ({self.num_clients})")
        if self.samples_per_client is not None and len(self.samples_per_client) != self.num_clients:
            raise ValueError(
                f"samples_per_client has {len(self.samples_per_client)} entries for {self.num_clients} clients"
            )
        return self


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
    factors: tuple[float, ...] = Field(default=(0.8, 1.2), min_length=1)


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
    devices: tuple[str, ...] | None = None
    seed: int = 0


class CustomStrategy(Spec):
    """A coordinator registered by a plugin under the ``parplan.coordinators`` entry-point group."""

    kind: Literal["custom"]
    coordinator: str = Field(min_length=1)
    config: dict[str, Any] = Field(default_factory=dict)


StrategySpec = Annotated[
    LocalStrategy
    | DataParallelStrategy
    | ModelParallelStrategy
    | FederatedStrategy
    | PopulationBasedStrategy
    | CustomStrategy,
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
)
