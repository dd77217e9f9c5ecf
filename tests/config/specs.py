"""Hypothesis strategies that draw valid specs of every kind, for round-trip and fuzz tests."""

from __future__ import annotations

import string
from typing import Any

from hypothesis import strategies as st

from parplan.config.algorithms import (
    CentralizedAlgorithm,
    DoubleBinaryTreeAlgorithm,
    HalvingDoublingAlgorithm,
    HierarchicalAlgorithm,
    RingAlgorithm,
    TreeAlgorithm,
)
from parplan.config.cluster import (
    ClusterSpec,
    DeviceSpec,
    DeviceTemplate,
    FatTreeGenerator,
    HierarchicalGenerator,
    LinkSpec,
    LinkTemplate,
    MatmulEfficiencySpec,
    RingGenerator,
    SwitchGenerator,
    SwitchSpec,
    Torus2DGenerator,
)
from parplan.config.model import MLPGenerator, ModelNodeSpec, ModelSpec, TransformerGenerator
from parplan.config.scenario import PlanSpec, ScenarioSpec, SweepSpec, TrainingSpec
from parplan.config.strategy import (
    AggregationSpec,
    AllSelection,
    CommunicationSpec,
    CustomStrategy,
    DataParallelStrategy,
    FastestSelection,
    FederatedStrategy,
    LocalStrategy,
    ModelParallelStrategy,
    PartitionFileSpec,
    PartitionSpec,
    PerturbExplore,
    PopulationBasedStrategy,
    RandomSelection,
    ResampleExplore,
    RoundRobinSelection,
    TournamentExploit,
    TruncationExploit,
)

names = st.text(alphabet=string.ascii_letters + string.digits + "._-", min_size=1, max_size=8)
# free text: anything printable, including quotes, colons, '#', unicode and leading spaces
texts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Co", "Cn", "Zl", "Zp")), max_size=20
) | st.sampled_from(["yes", "null", "1.5", "0x10", "- a", "#c", "a: b", "'q'", '"q"', "\\", "~", "=", "[x]"])
positive = st.floats(min_value=1e-12, max_value=1e18, allow_nan=False, allow_infinity=False)
nice = st.sampled_from([1.0, 2.5, 1e3, 25e9, 12.5e9, 2**30, 80 * 2**30, 312e12, 1.5e-6, 2e-6, 0.7e-6])
quantity = positive | nice
non_negative = st.just(0.0) | quantity
# durations stay within a day (parplan.config.units.LIMITS); every other kind allows 1e18
durations = (
    st.just(0.0)
    | st.floats(min_value=1e-12, max_value=86400.0)
    | st.sampled_from([1.5e-6, 2e-6, 0.7e-6, 1.0, 2.5, 1e3])
)
counts = st.integers(min_value=0, max_value=10**13).map(float) | st.floats(min_value=0, max_value=1e13)
optional_text = st.none() | texts


def device_templates() -> st.SearchStrategy[DeviceTemplate]:
    return st.builds(
        DeviceTemplate,
        peak_flops=quantity,
        memory=quantity,
        efficiency=st.floats(min_value=0.01, max_value=1.0),
        memory_bandwidth=st.none() | quantity,
        speed_factor=st.floats(min_value=0.05, max_value=20),
        type=st.none() | st.sampled_from(["H100-SXM", "A100-40GB", "T4", "MI300X"]),
        peak_flops_by_dtype=st.none() | st.dictionaries(st.sampled_from(["fp32", "bf16", "fp8"]), quantity),
        matmul_efficiency=st.none()
        | st.builds(MatmulEfficiencySpec, max=st.floats(min_value=0.1, max_value=1.0), half_at=quantity),
    )


def link_templates() -> st.SearchStrategy[LinkTemplate]:
    return st.builds(LinkTemplate, bandwidth=quantity, latency=durations, full_duplex=st.booleans())


def generators() -> st.SearchStrategy[Any]:
    dev, link = device_templates(), link_templates()
    return st.one_of(
        st.builds(SwitchGenerator, kind=st.just("switch"), hosts=st.integers(1, 64), device=dev, link=link),
        st.builds(RingGenerator, kind=st.just("ring"), hosts=st.integers(2, 64), device=dev, link=link),
        st.builds(
            Torus2DGenerator,
            kind=st.just("torus2d"),
            x=st.integers(1, 8),
            y=st.integers(1, 8),
            device=dev,
            link=link,
        ),
        st.integers(1, 3).flatmap(
            lambda half: st.builds(
                FatTreeGenerator,
                kind=st.just("fat_tree"),
                k=st.just(2 * half),
                hosts=st.none() | st.integers(1, (2 * half) ** 3 // 4),
                device=dev,
                link=link,
                uplink=st.none() | link,
            )
        ),
        hierarchical(dev, link),
    )


@st.composite
def hierarchical(
    draw: st.DrawFn, dev: st.SearchStrategy[DeviceTemplate], link: st.SearchStrategy[LinkTemplate]
) -> HierarchicalGenerator:
    """A hierarchical generator: NICs shared by devices, one each, or several per device (a whole
    number each), on one fabric switch or on rails."""
    per_node = draw(st.integers(1, 8))
    nics = draw(st.integers(1, per_node) | st.integers(1, 4).map(lambda k: k * per_node))
    fabric = draw(st.sampled_from(["switch", "rails"]))
    return HierarchicalGenerator(
        kind="hierarchical",
        nodes=draw(st.integers(1, 4)),
        devices_per_node=per_node,
        device=draw(dev),
        intra=draw(link),
        nics_per_node=nics,
        nic=draw(link),
        pcie=draw(st.none() | link),
        fabric=fabric,
        spine=draw(st.none() | link) if fabric == "rails" else None,
    )


@st.composite
def clusters(draw: st.DrawFn) -> ClusterSpec:
    generator = draw(st.none() | generators())
    device_names = draw(st.lists(names, unique=True, min_size=0 if generator else 1, max_size=5))
    switch_names = draw(st.lists(names.filter(lambda n: n not in device_names), unique=True, max_size=2))
    devices = [
        DeviceSpec(name=n, group=draw(st.none() | names), **draw(device_templates()).model_dump())
        for n in device_names
    ]
    ends = device_names + switch_names or ["x"]
    links = [
        LinkSpec(
            a=draw(st.sampled_from(ends)),
            b=draw(st.sampled_from(ends)),
            **draw(link_templates()).model_dump(),
        )
        for _ in range(draw(st.integers(0, 4)))
    ]
    return ClusterSpec(
        name=draw(texts.filter(bool) | st.just("cluster")),
        description=draw(optional_text),
        generator=generator,
        devices=tuple(devices),
        switches=tuple(SwitchSpec(name=n) for n in switch_names),
        links=tuple(links),
    )


@st.composite
def models(draw: st.DrawFn) -> ModelSpec:
    common = {
        "name": draw(names),
        "description": draw(optional_text),
        "bytes_per_param": draw(st.sampled_from([1.0, 2.0, 4.0, 0.5])),
        "bytes_per_grad": draw(st.floats(min_value=0.5, max_value=8)),
        "optimizer_bytes_per_param": draw(st.floats(min_value=0, max_value=16)),
        "bytes_per_activation_element": draw(st.sampled_from([2.0, 4.0])),
    }
    if draw(st.booleans()):
        heads = draw(st.integers(1, 16))
        generator: Any = draw(
            st.builds(
                TransformerGenerator,
                kind=st.just("transformer"),
                layers=st.integers(1, 48),
                hidden=st.integers(1, 64).map(lambda k: k * heads),
                heads=st.just(heads),
                seq_len=st.integers(1, 8192),
                vocab=st.integers(1, 100_000),
                ffn_multiplier=st.floats(min_value=0.5, max_value=8),
                tie_embeddings=st.booleans(),
                kv_heads=st.sampled_from([None, 1, heads]),
                ffn_hidden=st.none() | st.integers(1, 4096),
                activation=st.sampled_from(["gelu", "swiglu"]),
                norm=st.sampled_from(["layernorm", "rmsnorm"]),
                bias=st.booleans(),
                position=st.sampled_from(["learned", "rope", "alibi"]),
                dropout=st.booleans(),
                final_norm=st.booleans(),
                experts=st.sampled_from([0, 4]),
                top_k=st.sampled_from([1, 2]),
                moe_every=st.integers(1, 3),
            )
            | st.builds(
                MLPGenerator,
                kind=st.just("mlp"),
                widths=st.lists(st.integers(1, 4096), min_size=2, max_size=5).map(tuple),
                bias=st.booleans(),
            )
        )
        return ModelSpec(generator=generator, **common)
    ids = draw(st.lists(names, unique=True, min_size=1, max_size=6))
    nodes = tuple(
        ModelNodeSpec.model_validate(
            {
                "id": i,
                "params": draw(counts),
                "forward_flops": draw(non_negative),
                "activation": draw(non_negative),
                "saved_activation": draw(st.none() | non_negative),
            }
        )
        for i in ids
    )
    edges = draw(
        st.none() | st.lists(st.tuples(st.sampled_from(ids), st.sampled_from(ids)), max_size=6).map(tuple)
    )
    return ModelSpec(nodes=nodes, edges=edges, **common)


algorithms = st.one_of(
    st.builds(CentralizedAlgorithm, name=st.just("centralized"), root=st.integers(0, 16)),
    st.builds(TreeAlgorithm, name=st.just("tree"), arity=st.integers(2, 8), segments=st.integers(1, 8)),
    st.builds(RingAlgorithm, name=st.just("ring"), channels=st.none() | st.integers(1, 16)),
    st.builds(HalvingDoublingAlgorithm, name=st.just("halving_doubling")),
    st.builds(DoubleBinaryTreeAlgorithm, name=st.just("double_binary_tree")),
    st.builds(HierarchicalAlgorithm, name=st.just("hierarchical"), group_size=st.none() | st.integers(1, 8)),
)


@st.composite
def partition_lists(draw: st.DrawFn) -> tuple[PartitionSpec, ...]:
    part_names = draw(st.lists(names, unique=True, min_size=1, max_size=4))
    return tuple(
        PartitionSpec(
            name=n,
            nodes=tuple(draw(st.lists(names, min_size=1, max_size=4))),
            worker=draw(names),
        )
        for n in part_names
    )


def model_parallel() -> st.SearchStrategy[ModelParallelStrategy]:
    return st.builds(
        ModelParallelStrategy,
        kind=st.just("model_parallel"),
        partitions=partition_lists(),
        partitions_file=st.none() | st.just("partitions/p.yaml"),
        communication=st.builds(
            CommunicationSpec,
            protocol=st.sampled_from(["pipeline", "none"]),
            microbatches=st.integers(1, 64),
            schedule=st.sampled_from(["gpipe", "1f1b"]),
        ),
    )


json_like = st.recursive(
    st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def federated(draw: st.DrawFn) -> FederatedStrategy:
    n = draw(st.integers(1, 32))
    k = st.integers(1, n)
    selection = draw(
        st.builds(AllSelection, kind=st.just("all"))
        | st.builds(RandomSelection, kind=st.just("random"), k=k, seed=st.integers(0, 2**31))
        | st.builds(RoundRobinSelection, kind=st.just("round_robin"), k=k)
        | st.builds(FastestSelection, kind=st.just("fastest"), k=k)
    )
    return FederatedStrategy(
        kind="federated",
        num_clients=n,
        rounds=draw(st.integers(1, 100)),
        local_steps=draw(st.integers(1, 50)),
        aggregation=draw(st.sampled_from(["fedavg", "mean"])),
        client_selection=selection,
        server=draw(st.none() | names),
        clients=draw(st.none() | st.lists(names, min_size=1, max_size=n).map(tuple)),
        samples_per_client=draw(
            st.none() | st.lists(st.integers(0, 10**6), min_size=n, max_size=n).map(tuple)
        ),
        seed=draw(st.integers(0, 2**31)),
    )


def strategies() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.builds(LocalStrategy, kind=st.just("local"), device=st.none() | names),
        st.builds(
            DataParallelStrategy,
            kind=st.just("data_parallel"),
            num_replicas=st.integers(1, 1024),
            aggregation=st.builds(
                AggregationSpec,
                algorithm=algorithms,
                reduce=st.sampled_from(["mean", "sum", "weighted_by_samples"]),
                bucket_size=non_negative,
                overlap=st.booleans(),
            ),
            batch_split=st.sampled_from(["round_robin", "by_speed"]),
            devices=st.none() | st.lists(names, max_size=4).map(tuple),
            replica=st.none() | model_parallel(),
            replica_file=st.none() | st.just("pp.toml"),
        ),
        model_parallel(),
        federated(),
        st.builds(
            PopulationBasedStrategy,
            kind=st.just("population_based"),
            population_size=st.integers(2, 256),
            generations=st.integers(1, 100),
            steps_per_generation=st.integers(1, 10_000),
            exploit=st.builds(
                TruncationExploit,
                kind=st.just("truncation"),
                fraction=st.floats(min_value=0.01, max_value=0.5),
            )
            | st.builds(TournamentExploit, kind=st.just("tournament"), size=st.integers(2, 8)),
            explore=st.builds(
                PerturbExplore,
                kind=st.just("perturb"),
                factors=st.lists(st.floats(min_value=0.1, max_value=10), min_size=1, max_size=4).map(tuple),
            )
            | st.builds(
                ResampleExplore, kind=st.just("resample"), probability=st.floats(min_value=0, max_value=1)
            ),
            devices=st.none() | st.lists(names, max_size=4).map(tuple),
            seed=st.integers(0, 2**31),
        ),
        st.builds(
            CustomStrategy,
            kind=st.just("custom"),
            coordinator=names,
            config=st.dictionaries(texts, json_like, max_size=4),
        ),
    )


def partition_files() -> st.SearchStrategy[PartitionFileSpec]:
    return st.builds(PartitionFileSpec, name=names, description=optional_text, partitions=partition_lists())


@st.composite
def scenarios(draw: st.DrawFn) -> ScenarioSpec:
    plan_names = draw(st.lists(names, unique=True, min_size=1, max_size=3))
    plans = tuple(
        PlanSpec(
            name=n,
            strategy=draw(strategies()),
            strategy_file=draw(st.none() | st.just("s.json")),
            description=draw(optional_text),
        )
        for n in plan_names
    )
    return ScenarioSpec(
        name=draw(names),
        description=draw(optional_text),
        cluster=draw(clusters()),
        cluster_file=draw(st.none() | st.just("../c.yaml")),
        model=draw(models()),
        model_file=draw(st.none() | st.just("m.toml")),
        training=draw(
            st.builds(
                TrainingSpec,
                global_batch_size=st.integers(1, 10**6),
                sequence_length=st.none() | st.integers(1, 10**5),
                steps=st.integers(1, 10**6),
                seed=st.integers(0, 2**31),
                straggler_jitter=st.floats(min_value=0, max_value=0.99),
            )
        ),
        plans=plans,
        sweeps=tuple(
            draw(
                st.lists(
                    st.builds(
                        SweepSpec,
                        knob=names,
                        values=st.lists(
                            names | st.integers(0, 2**40) | st.floats(allow_nan=False, allow_infinity=False),
                            min_size=1,
                            max_size=4,
                        ).map(tuple),
                    ),
                    max_size=2,
                )
            )
        ),
        baseline=draw(st.none() | st.sampled_from(plan_names)),
    )


SPECS: dict[str, Any] = {
    "cluster": clusters(),
    "model": models(),
    "strategy": strategies(),
    "partition": partition_files(),
    "scenario": scenarios(),
}
"""A strategy of valid specs for every file kind."""
