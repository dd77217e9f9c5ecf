"""NCCL's own cost model as a reference predictor: its times beside published nccl-tests tables.

For every all_reduce_perf table of the validation set (CSV with a ``#`` header, columns
size_bytes,time_us,algbw_GBps,busbw_GBps), this builds the :class:`NcclSystem` the header's hardware
describes (written by hand below from spec sheets, never fitted), asks the model of NCCL's tuner
(:mod:`parplan.collectives.nccl_tuner`) what NCCL would run and how long it predicts, and prints
measured time, model time and |error| per size, each table's median and max, and the overall median
and max |error| at >= 64 MiB and below. It is the bar parplan's own simulation must match or beat.

    python benchmarks/nccl_model_vs_tables.py                      # tables under validation/nccl-tests
    python benchmarks/nccl_model_vs_tables.py --tables DIR         # another copy of the tables
    python benchmarks/nccl_model_vs_tables.py --quiet              # per-table summary lines only

Tables that print only in-place bus bandwidth get their time from it:
time = size / (busbw * p / (2 (p - 1))). Tables where NCCL_ALGO was forced force it here too.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

from parplan.collectives.nccl_search import nic_bandwidth_GBps, nvlink_bandwidth_GBps, pci_bandwidth_GBps
from parplan.collectives.nccl_tuner import NcclSystem, select

ROOT = Path(__file__).resolve().parent.parent
LARGE_BYTES = 64 << 20

# Spec-sheet building blocks (what NCCL's topology detection would read on these machines).
A100_NVLINK = nvlink_bandwidth_GBps("ampere", 12)  # HGX A100: 12 NVLink3 per GPU to NVSwitch
H100_NVLINK = nvlink_bandwidth_GBps("hopper", 18)  # HGX H100: 18 NVLink4 per GPU
V100_NVLINK = nvlink_bandwidth_GBps("volta", 6)  # V100 SXM2: 6 NVLink2 per GPU ...
V100_PAIR = nvlink_bandwidth_GBps("volta", 2)  # ... 2 to each of 3 peers on a 4-GPU board
HDR, NDR, EDR = nic_bandwidth_GBps(200), nic_bandwidth_GBps(400), nic_bandwidth_GBps(100)
GEN3, GEN4, GEN5 = pci_bandwidth_GBps(3), pci_bandwidth_GBps(4), pci_bandwidth_GBps(5)


def _h100_box(gpus: int) -> NcclSystem:
    """A slice of one HGX H100 (NVSwitch with NVLink SHARP)."""
    return NcclSystem("hopper", 1, gpus, H100_NVLINK, nvswitch=True, nvls=True)


def _abci_a100(nodes: int, gpus: int = 8) -> NcclSystem:
    """ABCI 2.0 node (A): HGX A100-40GB, 4x HDR 200 Gb/s (one per 2 GPUs), 2x Xeon 8360Y."""
    return NcclSystem(
        "ampere",
        nodes,
        gpus,
        A100_NVLINK,
        nvswitch=True,
        nics_per_node=4,
        nic_bandwidth_GBps=HDR,
        nic_pci_bandwidth_GBps=GEN4,
    )


def _abci_v100(nodes: int) -> NcclSystem:
    """ABCI node (V): 4x V100 SXM2 all-to-all NVLink2, 2x EDR 100 Gb/s, Xeon Gold 6148 (PCIe Gen3)."""
    return NcclSystem(
        "volta",
        nodes,
        4,
        V100_NVLINK,
        intra_path_bandwidth_GBps=V100_PAIR,
        nics_per_node=2,
        nic_bandwidth_GBps=EDR,
        nic_pci_bandwidth_GBps=GEN3,
    )


@dataclass(frozen=True)
class Table:
    """How to model one published table: the system, NCCL_ALGO if forced, what NCCL reportedly ran."""

    system: NcclSystem
    algorithms: str | None = None
    reported: str = ""


TABLES: dict[str, Table] = {
    # CoreWeave HGX A100 80GB: 8x HDR per node (SuperPOD design), AMD EPYC hosts. SHARP groups are
    # created, but the job does not set NCCL_COLLNET_ENABLE, so CollNet stays off.
    "a100-16node-ib-sharp-coreweave": Table(
        NcclSystem(
            "ampere",
            16,
            8,
            A100_NVLINK,
            nvswitch=True,
            nics_per_node=8,
            nic_bandwidth_GBps=HDR,
            nic_pci_bandwidth_GBps=GEN4,
            cpu_vendor="amd",
        )
    ),
    # Azure ND A100 v4: HGX A100 80GB, AMD EPYC 7V12.
    "a100x8-nvswitch-azure-ndv4-inplace-busbw": Table(
        NcclSystem("ampere", 1, 8, A100_NVLINK, nvswitch=True, cpu_vendor="amd")
    ),
    "abci-a100x128-16node-ib-hdr": Table(_abci_a100(16)),
    "abci-a100x16-2node-ib-hdr": Table(_abci_a100(2)),
    "abci-a100x32-4node-ib-hdr": Table(_abci_a100(4)),
    "abci-a100x4-1node-nvswitch": Table(_abci_a100(1, 4)),
    "abci-a100x64-8node-ib-hdr": Table(_abci_a100(8)),
    "abci-a100x8-1node-nvswitch": Table(_abci_a100(1)),
    "abci-v100x4-1node-nvlink2": Table(_abci_v100(1)),
    "abci-v100x8-2node-ib-edr": Table(_abci_v100(2)),
    # CoreWeave HGX H100: 8x NDR 400 Gb/s, SHARP, Intel Sapphire Rapids; NCCL_ALGO=COLLNETCHAIN.
    "h100-8node-ib-sharp-coreweave": Table(
        NcclSystem(
            "hopper",
            8,
            8,
            H100_NVLINK,
            nvswitch=True,
            nvls=True,
            collnet=True,
            nics_per_node=8,
            nic_bandwidth_GBps=NDR,
            nic_pci_bandwidth_GBps=GEN5,
        ),
        algorithms="collnet_chain",
        reported="collnet_chain/simple (forced)",
    ),
    # Nebius HGX H100: 8x NDR 400 Gb/s, Intel Sapphire Rapids.
    "h100x16-2node-ib-nebius-dstack": Table(
        NcclSystem(
            "hopper",
            2,
            8,
            H100_NVLINK,
            nvswitch=True,
            nvls=True,
            nics_per_node=8,
            nic_bandwidth_GBps=NDR,
            nic_pci_bandwidth_GBps=GEN5,
        ),
        reported="tree or nvls_tree at large sizes (busbw > NIC rate)",
    ),
    "h100x2-nvswitch-default-1node": Table(_h100_box(2), reported="ring/simple"),
    "h100x4-nvswitch-algo-nvls": Table(_h100_box(4), algorithms="nvls", reported="nvls/simple (forced)"),
    "h100x4-nvswitch-algo-ring": Table(_h100_box(4), algorithms="ring", reported="ring (forced)"),
    "h100x4-nvswitch-algo-tree": Table(_h100_box(4), algorithms="tree", reported="tree (forced)"),
    "h100x4-nvswitch-default-1node": Table(_h100_box(4), reported="ring/simple at >= 256 MB"),
    "h100x6-nvswitch-default-1node": Table(_h100_box(6), reported="nvls/simple"),
    # NREL Kestrel: HGX H100 4-GPU board (6 NVLink4 between each pair, no NVSwitch), 4x Slingshot
    # 200 Gb/s per node, AMD EPYC Genoa hosts.
    "h100x64-16node-4gpn-slingshot-kestrel": Table(
        NcclSystem(
            "hopper",
            16,
            4,
            H100_NVLINK,
            intra_path_bandwidth_GBps=nvlink_bandwidth_GBps("hopper", 6),
            nics_per_node=4,
            nic_bandwidth_GBps=HDR,
            nic_pci_bandwidth_GBps=GEN5,
            cpu_vendor="amd",
        )
    ),
    # Azure ND H100 v5: HGX H100, Intel Xeon 8480C; the page says NVLS.
    "h100x8-nvswitch-nvls-azure-ndv5-inplace-busbw": Table(_h100_box(8), reported="nvls/simple"),
    # Two RTX 2080 Ti (Turing) on PCIe Gen3 x16, no P2P: NCCL sees a PCI path through the host.
    "rtx2080ti-x2-pcie-nop2p-autodl": Table(NcclSystem("turing", 1, 2, GEN3, intra_link="pci")),
}


@dataclass(frozen=True)
class Row:
    """One size of one table: measured and model time, what the model picked."""

    size_bytes: int
    measured_us: float
    model_us: float
    pick: str

    @property
    def error(self) -> float:
        """|model - measured| / measured."""
        return abs(self.model_us - self.measured_us) / self.measured_us


def _measured_us(record: dict[str, str], n_ranks: int) -> float:
    """The table's time, or the one its in-place bus bandwidth implies."""
    if record["time_us"]:
        return float(record["time_us"])
    algbw_GBps = float(record["busbw_GBps"]) * n_ranks / (2 * (n_ranks - 1))
    return int(record["size_bytes"]) / (algbw_GBps * 1e3)


def compare(path: Path, table: Table) -> list[Row]:
    """Model every row of one CSV."""
    with path.open() as handle:
        lines = [line for line in handle if not line.startswith("#")]
    rows = []
    for record in csv.DictReader(lines):
        size = int(record["size_bytes"])
        choice = select(table.system, "all_reduce", size, algorithms=table.algorithms)
        rows.append(
            Row(
                size,
                _measured_us(record, table.system.n_ranks),
                choice.time_us,
                f"{choice.algorithm}/{choice.protocol}/{choice.channels}ch",
            )
        )
    return rows


def _summary(errors: list[float]) -> str:
    """'median x% max y% (n)' or '-' when empty."""
    if not errors:
        return "-"
    return f"median {100 * statistics.median(errors):5.1f}%  max {100 * max(errors):6.1f}%  ({len(errors)})"


def main() -> None:
    """Print every table and the overall figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", type=Path, default=ROOT / "validation" / "nccl-tests")
    parser.add_argument("--quiet", action="store_true", help="only the per-table summaries")
    args = parser.parse_args()
    large: list[float] = []
    small: list[float] = []
    for name, table in TABLES.items():
        path = args.tables / f"{name}.csv"
        if not path.exists():
            print(f"{name}: missing ({path})")
            continue
        rows = compare(path, table)
        print(
            f"== {name}  ({table.system.n_nodes} x {table.system.ranks_per_node} {table.system.arch}"
            f"{', NCCL_ALGO=' + table.algorithms if table.algorithms else ''})"
            f"{'  NCCL reportedly ran: ' + table.reported if table.reported else ''}"
        )
        if not args.quiet:
            print(f"   {'size_bytes':>12} {'measured_us':>12} {'model_us':>12} {'|err|':>7}  model pick")
            for row in rows:
                print(
                    f"   {row.size_bytes:>12} {row.measured_us:>12.2f} {row.model_us:>12.2f}"
                    f" {100 * row.error:>6.1f}%  {row.pick}"
                )
        table_large = [r.error for r in rows if r.size_bytes >= LARGE_BYTES]
        table_small = [r.error for r in rows if r.size_bytes < LARGE_BYTES]
        print(f"   >= 64 MiB: {_summary(table_large)}   < 64 MiB: {_summary(table_small)}")
        large += table_large
        small += table_small
    print(f"OVERALL >= 64 MiB: {_summary(large)}")
    print(f"OVERALL  < 64 MiB: {_summary(small)}")


if __name__ == "__main__":
    main()
