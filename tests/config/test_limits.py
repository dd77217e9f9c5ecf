"""Supported ranges and sizes: rates and capacities strictly positive, every quantity within its
kind's range, clusters and models within the supported sizes; all refused at load time with the
usual located message, from arithmetic on the spec, never by building something huge."""

from __future__ import annotations

import itertools
import math
import re
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from parplan.config.cluster import MAX_DEVICES, MAX_LINKS, MAX_NODES, ClusterSize, ClusterSpec
from parplan.config.loader import spec_from_data
from parplan.config.model import MAX_GENERATED_LAYERS, MAX_MODEL_PARAMS, ModelSpec
from parplan.config.units import (
    LIMITS,
    Bandwidth,
    Bytes,
    Count,
    FlopRate,
    Flops,
    PositiveBandwidth,
    PositiveBytes,
    PositiveFlopRate,
    Seconds,
    human_bytes,
)
from parplan.errors import ConfigError, TopologyError
from parplan.model.graph import build_model
from parplan.topology.build import build_network

DEVICE = {"peak_flops": "1 TFLOP/s", "memory": "1 GiB"}
LINK = {"bandwidth": "1 GB/s"}


def issues(kind: str, data: dict[str, Any]) -> list[str]:
    """The issues (``field: message``) loading ``data`` as ``kind`` gives; [] when it is valid."""
    try:
        spec_from_data(kind, data, "f.yaml")
    except ConfigError as exc:
        return [f"{i.field}: {i.message}" for i in exc.issues]
    return []


# -- rates and capacities ------------------------------------------------------------------------------------

GENERATED = {"kind": "hierarchical", "nodes": 1, "devices_per_node": 2, "device": DEVICE}
GENERATED |= {"intra": LINK, "nic": LINK, "pcie": LINK}
RATES = [
    ("generator.device.peak_flops", "0 TFLOP/s"),
    ("generator.device.memory", "0 GiB"),
    ("generator.device.memory_bandwidth", "0 GB/s"),
    ("generator.intra.bandwidth", "0 GB/s"),
    ("generator.nic.bandwidth", 0),
    ("generator.pcie.bandwidth", 0.0),
]


@pytest.mark.parametrize(("field", "zero"), RATES)
def test_every_rate_and_capacity_must_be_positive(field: str, zero: Any) -> None:
    data: dict[str, Any] = {"generator": {**GENERATED, "device": dict(DEVICE)}}
    *parents, key = field.split(".")
    node = data
    for part in parents:
        node[part] = dict(node[part])
        node = node[part]
    node[key] = zero
    shown = repr(zero) if isinstance(zero, str) else "0"
    assert issues("cluster", data) == [f"{field}: must be > 0, got {shown}"]
    node[key] = "1e-9 B/s" if "bandwidth" in key else "1 FLOP/s" if "flops" in key else "1 B"
    assert issues("cluster", data) == []


def test_explicit_devices_and_links_too() -> None:
    data = {
        "devices": [{"name": "a", **DEVICE, "memory_bandwidth": 0}, {"name": "b", **DEVICE, "peak_flops": 0}],
        "links": [{"a": "a", "b": "b", "bandwidth": "0 Gbit/s"}],
    }
    assert issues("cluster", data) == [
        "devices[0].memory_bandwidth: must be > 0, got 0",
        "devices[1].peak_flops: must be > 0, got 0",
        "links[0].bandwidth: must be > 0, got '0 Gbit/s'",
    ]


def test_latency_and_layer_sizes_may_be_zero() -> None:
    cluster = {"generator": {"kind": "ring", "hosts": 2, "device": DEVICE, "link": {**LINK, "latency": 0}}}
    model = {"nodes": [{"id": "relu", "params": 0, "forward_flops": 0, "activation": 0}]}
    assert issues("cluster", cluster) == issues("model", model) == []


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("speed_factor", 0, "must be > 0, got 0"),
        ("speed_factor", 1001, "must be <= 1000, got 1001"),
        ("efficiency", 0, "must be > 0, got 0"),
        ("efficiency", 1.5, "must be <= 1, got 1.5"),
    ],
)
def test_speed_factors_and_efficiencies_have_ranges(field: str, value: float, message: str) -> None:
    data = {"devices": [{"name": "a", **DEVICE, field: value}]}
    assert issues("cluster", data) == [f"devices[0].{field}: {message}"]


# -- the range of every quantity kind ------------------------------------------------------------------------

TYPES = {
    "size": (Bytes, PositiveBytes),
    "bandwidth": (Bandwidth, PositiveBandwidth),
    "duration": (Seconds,),
    "FLOP count": (Flops,),
    "compute rate": (FlopRate, PositiveFlopRate),
    "count": (Count,),
}


@pytest.mark.parametrize("kind", sorted(LIMITS))
def test_each_kind_takes_values_up_to_its_limit_and_no_further(kind: str) -> None:
    limit = LIMITS[kind]
    for tp in TYPES[kind]:
        adapter: TypeAdapter[float] = TypeAdapter(tp)
        assert adapter.validate_python(limit.maximum) == limit.maximum
        assert adapter.validate_python(limit.text.split(" (")[0]) == limit.maximum  # the text parses back
        with pytest.raises(ValidationError, match=re.escape(f"must be at most {limit.text}, got 1e+300")):
            adapter.validate_python(1e300)
        assert adapter.json_schema()["anyOf"][0]["maximum"] == limit.maximum


def test_positive_types_refuse_zero_and_say_so_in_the_schema() -> None:
    for tp in (PositiveBytes, PositiveBandwidth, PositiveFlopRate):
        adapter: TypeAdapter[float] = TypeAdapter(tp)
        with pytest.raises(ValidationError, match="must be > 0, got 0"):
            adapter.validate_python(0)
        assert adapter.json_schema()["anyOf"][0]["exclusiveMinimum"] == 0
    assert TypeAdapter(Bytes).validate_python(0) == 0.0


@pytest.mark.parametrize(
    ("size_bytes", "text"),
    [
        (0, "0 B"),
        (1000, "1000 B"),
        (1023.9, "1 KiB"),
        (1536, "1.5 KiB"),
        (1.07374e9, "1 GiB"),
        (2**30, "1 GiB"),
        (1e9, "954 MiB"),
        (12345678, "11.8 MiB"),
        (2**60, "1 EiB"),
        (0.5, "0.5 B"),
    ],
)
def test_human_bytes(size_bytes: float, text: str) -> None:
    assert human_bytes(size_bytes, precision="short") == text


# -- cluster sizes -------------------------------------------------------------------------------------------


def generator_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = [{"kind": "switch", "hosts": h} for h in (1, 2, 5)]
    cases += [{"kind": "ring", "hosts": h} for h in (2, 3, 4)]
    cases += [{"kind": "torus2d", "x": x, "y": y} for x, y in itertools.product((1, 2, 3), (1, 2, 4))]
    cases += [{"kind": "fat_tree", "k": 4}, {"kind": "fat_tree", "k": 6, "hosts": 7}]
    cases += [
        {"kind": "hierarchical", "nodes": n, "devices_per_node": d, "nics_per_node": r, "pcie": LINK}
        for n, d, r in ((1, 1, 1), (2, 4, 1), (3, 8, 2))
    ]
    cases.append({"kind": "hierarchical", "nodes": 2, "devices_per_node": 4, "nics_per_node": 4})
    for case in cases:
        case["device"] = DEVICE
        if case["kind"] == "hierarchical":
            case |= {"intra": LINK, "nic": LINK}
        else:
            case["link"] = LINK
    return cases


@pytest.mark.parametrize("generator", generator_cases(), ids=lambda g: f"{g['kind']}")
def test_size_is_what_the_network_builder_makes(generator: dict[str, Any]) -> None:
    spec = ClusterSpec.model_validate(
        {
            "generator": generator,
            "devices": [{"name": "extra", **DEVICE}],
            "links": [{"a": "extra", "b": "h0" if generator["kind"] != "hierarchical" else "n0.d0", **LINK}],
        }
        if generator["kind"] not in ("torus2d",)
        else {"generator": generator}
    )
    graph = build_network(spec).graph
    devices = sum(1 for _, d in graph.nodes(data=True) if d["kind"] == "device")
    links = len({frozenset(edge) for edge in graph.edges})
    assert spec.size() == ClusterSize(devices, graph.number_of_nodes() - devices, links)


@pytest.mark.parametrize(
    "generator",
    [
        {"kind": "switch", "hosts": MAX_DEVICES + 1},
        {"kind": "ring", "hosts": 10**18},
        {"kind": "torus2d", "x": 10**9, "y": 10**9},
        {"kind": "fat_tree", "k": 1000, "hosts": 4},  # few hosts, but a million switches
        {"kind": "hierarchical", "nodes": 30_000, "devices_per_node": 1, "nics_per_node": 8},
    ],
    ids=lambda g: g["kind"],
)
def test_clusters_beyond_the_supported_sizes_are_refused_from_arithmetic(generator: dict[str, Any]) -> None:
    generator = {**generator, "device": DEVICE}
    generator |= (
        {"intra": LINK, "nic": LINK, "pcie": LINK} if generator["kind"] == "hierarchical" else {"link": LINK}
    )
    (issue,) = issues("cluster", {"generator": generator})
    assert issue.startswith("generator: makes ")
    assert issue.endswith(
        f"parplan supports clusters of up to {MAX_DEVICES:,} devices, {MAX_NODES:,} devices and switches "
        f"together, and {MAX_LINKS:,} links"
    )


def test_the_largest_generators_are_accepted() -> None:
    at_limit = [
        {"kind": "switch", "hosts": MAX_DEVICES},
        {"kind": "fat_tree", "k": 64},
        {"kind": "torus2d", "x": 256, "y": 256},
    ]
    for generator in at_limit:
        assert issues("cluster", {"generator": {**generator, "device": DEVICE, "link": LINK}}) == []
    hierarchical = {"kind": "hierarchical", "nodes": 8192, "devices_per_node": 8, "nics_per_node": 8}
    assert (
        issues("cluster", {"generator": {**hierarchical, "device": DEVICE, "intra": LINK, "nic": LINK}}) == []
    )


def test_explicit_extras_count_towards_the_limits() -> None:
    generator = {"kind": "switch", "hosts": MAX_DEVICES, "device": DEVICE, "link": LINK}
    extra = [{"name": "one-too-many", **DEVICE}]
    (issue,) = issues("cluster", {"generator": generator, "devices": extra})
    assert issue.startswith(": makes 65,537 devices")


def test_the_network_builder_refuses_an_unvalidated_spec_beyond_the_sizes() -> None:
    spec = ClusterSpec.model_validate(
        {"generator": {"kind": "switch", "hosts": 2, "device": DEVICE, "link": LINK}}
    )
    assert spec.generator is not None
    huge = spec.model_copy(update={"generator": spec.generator.model_copy(update={"hosts": 10**7})})
    with pytest.raises(TopologyError, match="makes 10,000,000 devices"):
        build_network(huge)


# -- model sizes ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"generator": {"kind": "mlp", "widths": [784, 0, 10]}}, "generator.widths[1]: must be >= 1, got 0"),
        (
            {"generator": {"kind": "mlp", "widths": [2**24 + 1, 2]}},
            "generator.widths[0]: must be <= 16777216, got 16777217",
        ),
        (
            {"generator": {"kind": "mlp", "widths": [2**24] * 1000}},
            "generator: the widths make 2.81e17 parameters; parplan supports models of up to 1e17",
        ),
        (
            {
                "generator": {
                    "kind": "transformer",
                    "layers": 10**18,
                    "hidden": 8,
                    "heads": 2,
                    "seq_len": 4,
                    "vocab": 9,
                }
            },
            f"generator.layers: must be <= {MAX_GENERATED_LAYERS}, got 1000000000000000000",
        ),
        (
            {"nodes": [{"id": f"n{i}", "params": "1e15"} for i in range(101)]},
            ": the nodes have 1.01e17 parameters; parplan supports models of up to 1e17",
        ),
        ({"nodes": [{"id": "a", "params": "2e15"}]}, "nodes[0].params: must be at most 1e15, got '2e15'"),
        ({"nodes": [{"id": "a"}], "bytes_per_param": 1e300}, "bytes_per_param: must be <= 16, got 1e+300"),
    ],
)
def test_models_beyond_the_supported_sizes_are_refused(data: dict[str, Any], message: str) -> None:
    found = issues("model", data)
    assert any(message in issue for issue in found), found


def test_the_largest_transformer_builds_within_every_node_range() -> None:
    """The generator's limits keep every derived node inside the quantity ranges."""
    spec = ModelSpec.model_validate(
        {
            "generator": {
                "kind": "transformer",
                "layers": 64,  # layers only repeat the block; the block is what must fit
                "hidden": 2**17,
                "heads": 1024,
                "seq_len": 2**20,
                "vocab": 2**22,
                "ffn_multiplier": 64,
            },
            "bytes_per_activation_element": 16,
        }
    )
    model = build_model(spec)
    assert all(math.isfinite(n.saved_bytes_per_sample) for n in model.nodes)
    assert model.total_params / 64 * MAX_GENERATED_LAYERS < MAX_MODEL_PARAMS


@pytest.mark.parametrize(
    ("algorithm", "field", "limit"),
    [
        ({"name": "tree", "arity": 2, "segments": 3000}, "segments", 1024),
        ({"name": "double_binary_tree", "segments": 1025}, "segments", 1024),
        ({"name": "nccl_tree", "segments": 10**6}, "segments", 1024),
        ({"name": "ring", "channels": 65}, "channels", 64),
        ({"name": "nccl_tree", "channels": 1000}, "channels", 64),
    ],
)
def test_segments_and_channels_are_bounded_at_load_time(
    algorithm: dict[str, Any], field: str, limit: int
) -> None:
    """Each segment or channel copies the schedule's steps: 3000 segments used to build for minutes."""
    data = {"kind": "data_parallel", "num_replicas": 4, "aggregation": {"algorithm": algorithm}}
    found = issues("strategy", data)
    assert any(field in i and f"<= {limit}" in i for i in found), found
    algorithm = {**algorithm, field: limit}
    assert issues("strategy", {**data, "aggregation": {"algorithm": algorithm}}) == []
