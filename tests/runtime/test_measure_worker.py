"""The measure worker's pieces that need no process group: its inputs and exact references, the
synthetic DDP model's shapes, the host groups, and its options. (The ranks themselves run in the
launcher and api tests.)"""

from __future__ import annotations

import importlib.util

import pytest

from parplan.runtime.measure_worker import host_groups, parse_args, synthetic_layers

HAVE_TORCH = importlib.util.find_spec("torch") is not None
requires_torch = pytest.mark.skipif(
    not HAVE_TORCH, reason="torch is not installed: no tensors to check (pip install 'parplan[torch]')"
)


@pytest.mark.torch
@requires_torch
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int8", "int64"])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_references_are_exact_sums_and_gathers(dtype: str, world: int) -> None:
    import torch

    from parplan.runtime.measure_worker import make_buffers, rank_input

    count = 6 * world
    kind = getattr(torch, dtype)
    cpu = torch.device("cpu")
    inputs = [rank_input(torch, r, count, torch.int64, cpu) for r in range(world)]
    total = sum(inputs)
    assert total is not None
    shard = count // world
    for rank in range(world):
        reduce = make_buffers(torch, "all_reduce", rank, world, count, kind, cpu)
        assert torch.equal(reduce.send.to(torch.int64), inputs[rank])
        assert torch.equal(reduce.expected.to(torch.int64), total)  # exact: small integers
        assert reduce.recv.shape == reduce.expected.shape and reduce.recv.dtype == kind
        gather = make_buffers(torch, "all_gather", rank, world, count, kind, cpu)
        assert torch.equal(gather.send.to(torch.int64), inputs[rank][rank * shard : (rank + 1) * shard])
        want = torch.cat([inputs[r][r * shard : (r + 1) * shard] for r in range(world)])
        assert torch.equal(gather.expected.to(torch.int64), want)
        scatter = make_buffers(torch, "reduce_scatter", rank, world, count, kind, cpu)
        assert torch.equal(scatter.expected.to(torch.int64), total[rank * shard : (rank + 1) * shard])
        assert scatter.send.numel() == count and scatter.recv.numel() == shard
        exchange = make_buffers(torch, "all_to_all", rank, world, count, kind, cpu)
        want = torch.cat([inputs[r][rank * shard : (rank + 1) * shard] for r in range(world)])
        assert torch.equal(exchange.expected.to(torch.int64), want)  # block `rank` of every rank
        assert exchange.send.numel() == count == exchange.recv.numel()


def test_synthetic_model_holds_the_parameter_count() -> None:
    for parameters in (1, 1000, 1024 * 1024, 1_864_704, 3 * 1024 * 1024 + 5):
        shapes = synthetic_layers(parameters)
        held = sum(i * o for i, o in shapes)
        assert parameters <= held < parameters + 1024  # rounded up to whole columns
        assert all(i == 1024 for i, _ in shapes)


def test_host_groups_follow_the_nodes() -> None:
    assert host_groups([0, 0, 0]) is None
    assert host_groups([1, 1, 0]) == [[2], [0, 1]]
    assert host_groups([0, 1, 0, 1]) == [[0, 2], [1, 3]]


def test_options() -> None:
    args = parse_args(["--counts", "4,8", "--out", "r.json", "--collective", "all_gather"])
    assert args.counts == "4,8" and args.collective == "all_gather" and args.algorithms == "backend"
    with pytest.raises(SystemExit):
        parse_args(["--counts", "4", "--out", "r.json", "--collective", "broadcast"])
