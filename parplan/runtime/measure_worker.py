"""The rank process of ``parplan measure``: times collectives on torch.distributed as nccl-tests does.

torchrun starts this module once per rank (``python -m torch.distributed.run ... -m
parplan.runtime.measure_worker ARGS``; :mod:`parplan.runtime.launch` builds the command). Every
rank joins the default process group (gloo on CPUs, NCCL when CUDA is present, ``--backend``
forces one) and, for each algorithm and size, runs the collective out of place: ``-w`` warm-up
iterations, then ``-n`` timed iterations back to back between two barriers; a rank's time is the
mean of its timed iterations and the reported time the largest over ranks (the collective is done
when its last rank is). One more run on fresh buffers is checked element by element against the
exact reference: inputs are small integers (exact in every dtype), so ``#wrong`` counts every
element, over all ranks, that differs from the exact sum or gathered value.

What runs: ``backend`` is the backend's own collective (``all_reduce`` on a copy of the input,
which is how an out-of-place all-reduce looks in torch; ``all_gather_into_tensor``;
``reduce_scatter_tensor``; ``all_to_all_single``, which gloo and NCCL both have); any other name
is a parplan schedule (:mod:`parplan.collectives`) executed step by step over ``isend``/``irecv``
by :class:`ScheduleRunner`. A rank with local rank 0 writes the results as JSON to ``--out``
(every rank holds them: the times are all-reduced).

For tests, ``PARPLAN_MEASURE_FAULT=kill:R`` makes rank ``R`` kill itself with SIGKILL and
``hang:R`` makes it sleep until it is killed, after joining the group.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from parplan.collectives.registry import build_schedule
from parplan.collectives.schedule import Schedule, chunk_bounds

BACKEND = "backend"
"""The algorithm name that means the backend's own collective."""
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
FAULT_ENV = "PARPLAN_MEASURE_FAULT"
DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The worker's options (the launcher writes them; users do not)."""
    parser = argparse.ArgumentParser(prog="parplan.runtime.measure_worker")
    parser.add_argument("--collective", choices=COLLECTIVES, default="all_reduce")
    parser.add_argument("--algorithms", default=BACKEND, help="comma list of labels")
    parser.add_argument("--counts", required=True, help="comma list of element counts")
    parser.add_argument("--dtype", choices=DTYPES, default="float32")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--step", default=None, help="JSON of a DDP step to time instead")
    parser.add_argument("--out", required=True)
    return parser.parse_args(list(argv))


@dataclass
class Buffers:
    """One rank's buffers for one (algorithm, size): input, output and the exact expected output."""

    send: Any
    recv: Any
    expected: Any


def rank_input(torch: Any, rank: int, count: int, dtype: Any, device: Any) -> Any:
    """Rank ``rank``'s input: small integers (1..4), exact in every dtype and in sums of <= 31 ranks."""
    index = torch.arange(count, dtype=torch.int64, device=device)
    return ((index + rank) % 4 + 1).to(dtype)


def make_buffers(
    torch: Any, collective: str, rank: int, world: int, count: int, dtype: Any, device: Any
) -> Buffers:
    """Input, output and expected output of ``collective`` with ``count`` elements in all
    (all-gather: the output; reduce-scatter and all-to-all: the input; ``count`` is a multiple of
    ``world``). An all-to-all's rank ``j`` expects block ``j`` of every rank, in rank order."""
    if collective == "all_to_all":
        block = count // world
        mine = slice(rank * block, (rank + 1) * block)
        expected = torch.cat([rank_input(torch, r, count, dtype, device)[mine] for r in range(world)])
        return Buffers(rank_input(torch, rank, count, dtype, device), torch.empty_like(expected), expected)
    if collective == "all_reduce":
        expected = sum(rank_input(torch, r, count, torch.int64, device) for r in range(world)).to(dtype)
        return Buffers(rank_input(torch, rank, count, dtype, device), torch.empty_like(expected), expected)
    shard = count // world
    if collective == "all_gather":
        parts = [
            rank_input(torch, r, count, dtype, device)[r * shard : (r + 1) * shard] for r in range(world)
        ]
        expected = torch.cat(parts)
        return Buffers(parts[rank].clone(), torch.empty_like(expected), expected)
    full = sum(rank_input(torch, r, count, torch.int64, device) for r in range(world)).to(dtype)
    expected = full[rank * shard : (rank + 1) * shard].clone()
    return Buffers(rank_input(torch, rank, count, dtype, device), torch.empty_like(expected), expected)


class ScheduleRunner:
    """One rank's part of a parplan :class:`Schedule`, run over ``isend``/``irecv``.

    Each step this rank takes part in is posted as soon as its dependencies that involve this
    rank have completed (the others are ordered by the peer); each message carries its step index
    as its tag, so any posting order matches. The rank then waits for its lowest-numbered
    outstanding step. That never deadlocks: the lowest-numbered unfinished step of the whole
    schedule has all its dependencies done, so both of its ranks have posted it and wait for it.
    """

    def __init__(self, torch: Any, dist: Any, schedule: Schedule, rank: int) -> None:
        self.torch, self.dist, self.rank = torch, dist, rank
        mine = [j for j in range(schedule.num_steps) if rank in (int(schedule.src[j]), int(schedule.dst[j]))]
        mine_set = set(mine)
        self.steps = mine
        self.src = {j: int(schedule.src[j]) for j in mine}
        self.dst = {j: int(schedule.dst[j]) for j in mine}
        self.lo = {j: int(schedule.offset[j]) for j in mine}
        self.hi = {j: int(schedule.offset[j] + schedule.length[j]) for j in mine}
        landing = schedule.dst_offset  # where a step lands: its offset, but for an all-to-all
        self.at = {j: int(landing[j]) for j in mine}
        self.reduce = {j: bool(schedule.reduce[j]) for j in mine}
        self.deps = {j: [int(x) for x in schedule.deps(j) if int(x) in mine_set] for j in mine}
        self.dependents: dict[int, list[int]] = {j: [] for j in mine}
        for j in mine:
            for x in self.deps[j]:
                self.dependents[x].append(j)

    def run(self, buffer: Any) -> None:
        """Run this rank's steps on ``buffer`` (1-D, the whole tensor), in place."""
        waiting = {j: len(self.deps[j]) for j in self.steps}
        ready = [j for j in self.steps if waiting[j] == 0]
        pending: list[tuple[int, Any, Any]] = []
        while ready or pending:
            for j in ready:
                work, scratch = self._post(j, buffer)
                heapq.heappush(pending, (j, work, scratch))
            ready = []
            j, work, scratch = heapq.heappop(pending)
            work.wait()
            if scratch is not None:
                buffer[self.at[j] : self.at[j] + self.hi[j] - self.lo[j]].add_(scratch)
            for nxt in self.dependents[j]:
                waiting[nxt] -= 1
                if waiting[nxt] == 0:
                    ready.append(nxt)

    def _post(self, j: int, buffer: Any) -> tuple[Any, Any]:
        lo, hi, at = self.lo[j], self.hi[j], self.at[j]
        if self.src[j] == self.rank:
            return self.dist.isend(buffer[lo:hi], self.dst[j], tag=j), None
        if self.reduce[j]:
            scratch = self.torch.empty(hi - lo, dtype=buffer.dtype, device=buffer.device)
            return self.dist.irecv(scratch, self.src[j], tag=j), scratch
        return self.dist.irecv(buffer[at : at + hi - lo], self.src[j], tag=j), None


def collective_call(
    torch: Any,
    dist: Any,
    collective: str,
    algorithm: str,
    world: int,
    count: int,
    rank: int,
    buffers: Buffers,
    groups: list[list[int]] | None = None,
) -> Callable[[], None]:
    """One out-of-place run of ``algorithm`` (``backend`` or a parplan label) on ``buffers``;
    ``groups`` (the ranks of each host) reach the schedules that use them."""
    send, recv = buffers.send, buffers.recv
    if algorithm == BACKEND:
        if collective == "all_reduce":

            def backend_all_reduce() -> None:
                recv.copy_(send)
                dist.all_reduce(recv)

            return backend_all_reduce
        # torch 2.13 renamed the *_tensor forms *_single; take the newer name where it exists.
        if collective == "all_gather":
            gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
            return lambda: gather(recv, send)
        if collective == "all_to_all":
            return lambda: dist.all_to_all_single(recv, send)
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: scatter(recv, send)
    schedule = build_schedule(algorithm, world, count, groups=groups, collective=collective)
    runner = ScheduleRunner(torch, dist, schedule, rank)
    if collective == "all_to_all":
        return _schedule_all_to_all(torch, runner, schedule, rank, buffers)
    bounds = chunk_bounds(count, world)
    lo, hi = int(bounds[rank]), int(bounds[rank + 1])
    if collective == "all_reduce":

        def schedule_all_reduce() -> None:
            recv.copy_(send)
            runner.run(recv)

        return schedule_all_reduce
    if collective == "all_gather":

        def schedule_all_gather() -> None:
            recv[lo:hi].copy_(send)
            runner.run(recv)

        return schedule_all_gather
    work = torch.empty_like(send)

    def schedule_reduce_scatter() -> None:
        work.copy_(send)
        runner.run(work)
        recv.copy_(work[lo:hi])

    return schedule_reduce_scatter


def _schedule_all_to_all(
    torch: Any, runner: ScheduleRunner, schedule: Schedule, rank: int, buffers: Buffers
) -> Callable[[], None]:
    """An all-to-all schedule on a workspace of its buffers end to end (send, receive, scratch;
    :mod:`parplan.collectives.schedule`): the input in, the rank's own block copied locally, the
    steps run, the receive buffer out."""
    send, recv = buffers.send, buffers.recv
    n = schedule.num_elements
    block = n // schedule.num_ranks
    work = torch.empty(schedule.address_elements, dtype=send.dtype, device=send.device)

    def schedule_all_to_all() -> None:
        work[:n].copy_(send)
        work[n + rank * block : n + (rank + 1) * block].copy_(send[rank * block : (rank + 1) * block])
        runner.run(work)
        recv.copy_(work[n : 2 * n])

    return schedule_all_to_all


def _max_over_ranks(torch: Any, dist: Any, value: float, device: Any) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _sum_over_ranks(torch: Any, dist: Any, value: int, device: Any) -> int:
    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return int(t.item())


def _sync(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def host_groups(node_of_rank: Sequence[int]) -> list[list[int]] | None:
    """The ranks of each host, hosts in order; None on one host (the schedules' own default).

    >>> host_groups([0, 0, 1, 1]), host_groups([0, 0])
    ([[0, 1], [2, 3]], None)
    """
    groups: dict[int, list[int]] = {}
    for rank, node in enumerate(node_of_rank):
        groups.setdefault(node, []).append(rank)
    return [groups[n] for n in sorted(groups)] if len(groups) > 1 else None


def time_one(
    torch: Any, dist: Any, args: argparse.Namespace, algorithm: str, count: int, device: Any
) -> dict[str, Any]:
    """Time and check one (algorithm, element count): the row this size contributes."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.collective != "all_reduce":  # equal shards; the launcher rounds already unless the
        count = max(world, count - count % world)  # world is only known here (torchrun's nodes)
    dtype = getattr(torch, args.dtype)
    buffers = make_buffers(torch, args.collective, rank, world, count, dtype, device)
    call = collective_call(torch, dist, args.collective, algorithm, world, count, rank, buffers, args.groups)
    for _ in range(args.warmup):
        call()
    _sync(torch, device)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.iters):
        call()
    _sync(torch, device)
    mean_s = (time.perf_counter() - start) / args.iters
    buffers.recv.fill_(0)  # the checked run must write every element it is judged on
    call()
    _sync(torch, device)
    wrong = int((buffers.recv != buffers.expected).sum().item())
    element_bytes = buffers.expected.element_size()
    return {
        "collective": args.collective,
        "algorithm": algorithm,
        "size_bytes": count * element_bytes,
        "count": count,
        "time_s": _max_over_ranks(torch, dist, mean_s, device),
        "wrong": _sum_over_ranks(torch, dist, wrong, device),
    }


def synthetic_layers(num_parameters: int, width: int = 1024) -> list[tuple[int, int]]:
    """``(in, out)`` shapes of bias-free linear layers holding ``num_parameters`` in all: square
    ``width`` layers, then one ``width x k`` layer with the rest (at least one parameter).

    >>> synthetic_layers(2 * 1024 * 1024 + 10)
    [(1024, 1024), (1024, 1024), (1024, 1)]
    """
    full, rest = divmod(max(num_parameters, 1), width * width)
    shapes = [(width, width)] * full
    if rest:
        shapes.append((width, -(-rest // width)))
    return shapes


def time_ddp_step(torch: Any, dist: Any, device: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Median (and every) time of a DDP training step (forward, backward with the gradient
    all-reduce in ``bucket_bytes`` buckets, SGD update) of a synthetic model with
    ``spec["parameters"]`` parameters on ``spec["batch"]`` samples per rank."""
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    width = 1024
    layers = [torch.nn.Linear(i, o, bias=False) for i, o in synthetic_layers(int(spec["parameters"]), width)]
    model = torch.nn.Sequential(*layers).to(device)
    bucket_mb = float(spec["bucket_bytes"]) / 2**20
    ddp = DistributedDataParallel(model, bucket_cap_mb=bucket_mb)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-6)
    x = torch.ones(int(spec["batch"]), width, device=device)
    times = []
    for i in range(int(spec["warmup"]) + int(spec["steps"])):
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad()
        ddp(x).square().mean().backward()
        optimizer.step()
        _sync(torch, device)
        elapsed = _max_over_ranks(torch, dist, time.perf_counter() - start, device)
        if i >= int(spec["warmup"]):
            times.append(elapsed)
    count = sum(p.numel() for p in model.parameters())
    # DDP's reducer sits in a reference cycle (its autograd hooks); left to the collector it can be
    # freed after the process group is destroyed, and its gloo work then aborts the rank at exit
    # ("terminate called without an active exception", about one run in five). Free it now.
    del ddp, optimizer
    gc.collect()
    return {"parameters": count, "bucket_bytes": int(spec["bucket_bytes"]), "times_s": times}


def _fault(rank: int) -> None:
    """Test hook: die or hang on the rank ``PARPLAN_MEASURE_FAULT`` names (``kill:1``, ``hang:0``)."""
    what, _, who = os.environ.get(FAULT_ENV, "").partition(":")
    if not what or not who.isdigit() or int(who) != rank:
        return
    if what == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if what == "hang":
        while True:
            time.sleep(3600)


def _init(args: argparse.Namespace) -> tuple[Any, Any, Any, str]:
    """Join the default group; returns torch, torch.distributed, this rank's device, the backend."""
    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout))
    return torch, dist, device, backend


def main(argv: Sequence[str] | None = None) -> int:
    """Run the measurement this rank was started for; 0 on success."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    torch, dist, device, backend = _init(args)
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        _fault(rank)
        hosts: list[Any] = [None] * world
        dist.all_gather_object(hosts, os.environ.get("GROUP_RANK", "0"))
        document: dict[str, Any] = {
            "backend": backend,
            "world_size": world,
            "torch": torch.__version__,
            "warmup_iters": args.warmup,
            "iters": args.iters,
            "dtype": args.dtype,
            "node_of_rank": [int(h) for h in hosts],
        }
        args.groups = host_groups([int(h) for h in hosts])
        if args.step is not None:
            document["step"] = time_ddp_step(torch, dist, device, json.loads(args.step))
        else:
            rows = []
            for count in (int(c) for c in args.counts.split(",")):
                for algorithm in args.algorithms.split(","):
                    rows.append(time_one(torch, dist, args, algorithm, count, device))
            document["rows"] = rows
        if os.environ.get("LOCAL_RANK", "0") == "0":
            tmp = f"{args.out}.part"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(document, f)
            os.replace(tmp, args.out)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
