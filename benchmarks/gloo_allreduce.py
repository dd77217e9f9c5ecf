"""Measure real all-reduce time with torch's gloo backend on loopback, to calibrate a "localhost" cluster.

For p = 2 and 4 processes on this machine and float32 tensors of 1 KiB .. 64 MiB (factor 4), prints
the median over several repetitions of the slowest rank's time and the bandwidths as nccl-tests
defines them: algbw = size / time, busbw = algbw * 2(p-1)/p (the per-rank link traffic of a
bandwidth-optimal all-reduce, comparable across p). Needs the torch extra.

Loopback is not a network: every "transfer" is a memory copy through the kernel, and the ranks
share the machine's cores and memory bandwidth, so these numbers describe this host, not a NIC.

    python benchmarks/gloo_allreduce.py [--ranks 2 4] [--max-size-mib 64] [--reps 10]
"""

from __future__ import annotations

import argparse
import os
import time

from parplan.config.units import format_bytes
from parplan.errors import RuntimeCheckError
from parplan.runtime.torch_check import GlooGroup, median_all_reduce_seconds

ELEMENT_BYTES = 4  # float32


def sizes_bytes(max_bytes: int) -> list[int]:
    """1 KiB, 4 KiB, ... up to ``max_bytes``."""
    sizes, size = [], 1024
    while size <= max_bytes:
        sizes.append(size)
        size *= 4
    return sizes


def reps_for(size_bytes: int, reps: int) -> int:
    """Fewer repetitions for the large sizes (at least 5), so the run stays short."""
    return max(5, reps // max(1, size_bytes // (4 << 20)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--max-size-mib", type=int, default=64)
    parser.add_argument("--reps", type=int, default=10, help="timed repetitions at small sizes")
    parser.add_argument("--timeout-s", type=float, default=300.0)
    args = parser.parse_args()

    print(f"gloo all-reduce (sum, float32) over 127.0.0.1; {os.cpu_count()} CPUs on this host")
    print(f"{'p':>3}{'size':>12}{'reps':>6}{'median time':>14}{'algbw GB/s':>12}{'busbw GB/s':>12}")
    try:
        with GlooGroup(max(args.ranks), timeout_s=args.timeout_s) as group:
            for p in args.ranks:
                for size in sizes_bytes(args.max_size_mib << 20):
                    reps = reps_for(size, args.reps)
                    t_s = median_all_reduce_seconds(
                        group, size // ELEMENT_BYTES, num_ranks=p, reps=reps, warmup=2
                    )
                    algbw = size / t_s
                    busbw = algbw * 2 * (p - 1) / p
                    print(
                        f"{p:>3}{format_bytes(size)!s:>12}{reps:>6}{t_s * 1e6:>11.1f} us"
                        f"{algbw / 1e9:>12.3f}{busbw / 1e9:>12.3f}"
                    )
    except RuntimeCheckError as exc:
        raise SystemExit(str(exc)) from None
    print(
        "note: loopback is memory-bound, not a network: transfers are kernel memory copies and the\n"
        "ranks share this host's cores and memory bandwidth (p above the core count oversubscribes\n"
        'them). Use these figures to calibrate a "localhost" cluster, not to predict an interconnect.'
    )


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"({time.perf_counter() - started:.0f} s)")
