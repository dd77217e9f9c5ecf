"""``parplan validate``'s library: the nccl-tests reader, the manifest, error arithmetic, pruning."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from parplan.api.accuracy import (
    DEFAULT_MANIFEST,
    NCCL_ALGO_COUNTERPARTS,
    BandStats,
    ErrorStats,
    SizeResult,
    auto_candidates,
    candidate_algorithms,
    error_pct,
    load_cases,
    load_manifest,
    measured_time_s,
    predict_sizes,
    run_validation,
)
from parplan.collectives.auto import STAND_INS
from parplan.collectives.registry import ALGORITHMS
from parplan.config.loader import load_cluster
from parplan.config.nccltests import NcclTestsRow, parse_nccl_tests, read_nccl_tests
from parplan.errors import ConfigError, ParplanError
from parplan.topology.build import build_network
from parplan.topology.placement import place

ROOT = Path(__file__).resolve().parents[2]
VALIDATION = ROOT / "validation"
MANIFEST = ROOT / DEFAULT_MANIFEST
TABLES = sorted((VALIDATION / "nccl-tests").glob("*.csv"))
CLUSTERS = sorted((VALIDATION / "clusters").glob("*.yaml"))

# nccl-tests' printed output as recent versions write it (root and #wrong columns) ...
PRINTED_NEW = """\
# nThread 1 nGpus 1 minBytes 8 maxBytes 1024 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  40001 on     node-0 device  0 [0x18] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    18.83    0.00    0.00      0    18.52    0.00    0.00      0
node-0:40001:40001 [0] NCCL INFO comm 0x55d0 rank 0 nranks 8 - Init COMPLETE
          16             4     float     sum      -1    19.01    0.00    0.00      0    18.77    0.00    0.00    N/A
        1024           256     float     sum      -1    20.50    0.05    0.09      0    20.10    0.05    0.09      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.03
"""  # noqa: E501 (nccl-tests' own line width)
# ... and as 2.8-era versions did (no root, "error" instead of "#wrong").
PRINTED_OLD = """\
#                                                       out-of-place                       in-place
#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           4             1     float     sum    67.85    0.00    0.00  0e+00    67.32    0.00    0.00  0e+00
     8388608       2097152     float     sum    773.6   10.84   21.52  2e-07    770.1   10.89   21.62  2e-07
"""


# -- the reader ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.name)
def test_reader_on_every_bundled_table(path: Path) -> None:
    table = read_nccl_tests(path)
    assert table.format == "csv"
    assert any(note.startswith("source:") for note in table.notes), "each table keeps its source line"
    assert table.columns == ("time_us", "algbw_GBps", "busbw_GBps")
    sizes = [r.size_bytes for r in table.rows]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes) and sizes[0] >= 1
    assert all(r.time_us is not None or r.busbw_GBps is not None for r in table.rows)
    assert all(r.line > table.header_line for r in table.rows)


def test_bundled_tables_are_the_shared_copies_untouched() -> None:
    """The repository keeps each table's header with its source line verbatim."""
    for path in TABLES:
        text = path.read_text(encoding="utf-8")
        assert text.startswith("# system:"), path.name
        assert "\n# source:" in text, path.name


def test_reader_on_printed_output_recent_format() -> None:
    table = parse_nccl_tests(PRINTED_NEW, "run.log")
    assert table.format == "printed" and table.header_line == 7
    assert [r.size_bytes for r in table.rows] == [8, 16, 1024]
    first = table.rows[0]
    assert (first.time_us, first.in_place_time_us, first.line) == (18.83, 18.52, 9)
    last = table.rows[-1]
    assert (last.algbw_GBps, last.busbw_GBps, last.in_place_busbw_GBps) == (0.05, 0.09, 0.09)
    assert set(table.columns) == {
        "time_us",
        "algbw_GBps",
        "busbw_GBps",
        "in_place_time_us",
        "in_place_algbw_GBps",
        "in_place_busbw_GBps",
    }
    assert any("Avg bus bandwidth" in n for n in table.notes)


def test_reader_on_printed_output_old_format(tmp_path: Path) -> None:
    path = tmp_path / "old.txt"
    path.write_text(PRINTED_OLD)
    table = read_nccl_tests(path)
    assert [(r.size_bytes, r.time_us, r.in_place_time_us) for r in table.rows] == [
        (4, 67.85, 67.32),
        (8388608, 773.6, 770.1),
    ]
    assert table.rows[1].busbw_GBps == 21.52


def _only_issue(exc: pytest.ExceptionInfo[ConfigError]) -> tuple[str, int, str]:
    assert len(exc.value.issues) == 1
    issue = exc.value.issues[0]
    return issue.path, issue.line, issue.message


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("# h\nsize_bytes,time_us,algbw_GBps\n8,1.0,0.0\n16,1.5\n", 4, "2 fields, the header has 3"),
        ("size_bytes,time_us\n8,1.0\n16,fast\n", 3, "'fast' in column time_us is not a number"),
        ("size_bytes,time_us\n8,1.0\n1e3,2.0\n", 3, "size '1e3' is not a whole number"),
        ("size_bytes,time_us\n8,1.0\n8,2.0\n", 3, "size 8 appears twice (first on line 2)"),
        ("size_bytes,time_us\n8,-1.0\n", 2, "must be a finite number >= 0"),
        ("time_us,size_bytes\n1.0,8\n", 1, "the first column must be size_bytes"),
        ("size_bytes,latency\n8,1.0\n", 1, "unknown column 'latency'"),
        ("# only a comment\nsize_bytes,time_us\n", 2, "a header but no rows"),
    ],
)
def test_bad_csv_names_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_nccl_tests(text, "bad.csv")
    path, at, message = _only_issue(exc)
    assert (path, at) == ("bad.csv", line)
    assert words in message


def test_truncated_printed_row_names_the_line() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_nccl_tests(PRINTED_OLD + "          16             4     float     sum    12.0\n", "run.log")
    path, line, message = _only_issue(exc)
    assert (path, line) == ("run.log", 6) and "5 fields, the header has 12: truncated" in message


def test_printed_output_without_header() -> None:
    with pytest.raises(ConfigError, match="no nccl-tests column header"):
        parse_nccl_tests("hello\nworld\n", "x.log")
    with pytest.raises(ConfigError, match="a row before the column header"):
        parse_nccl_tests("   8   2   float   sum   1.0\n", "x.log")


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        read_nccl_tests(tmp_path / "missing.csv")
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"size_bytes,time_us\n\xff\xfe\n")
    with pytest.raises(ConfigError, match="not UTF-8") as exc:
        read_nccl_tests(binary)
    assert exc.value.issues[0].line == 2


# -- error arithmetic ----------------------------------------------------------------------------------


def test_error_pct_is_signed_relative_to_measured() -> None:
    assert error_pct(3.0, 2.0) == pytest.approx(50.0)
    assert error_pct(1.0, 2.0) == pytest.approx(-50.0)
    assert error_pct(2.0, 2.0) == 0.0


def test_error_stats_median_and_max_of_magnitudes() -> None:
    stats = ErrorStats.of([-80.0, 10.0, 20.0, -5.0])
    assert stats.count == 4
    assert stats.median_abs_pct == pytest.approx(15.0)
    assert stats.max_abs_pct == pytest.approx(80.0)
    assert ErrorStats.of([]) == ErrorStats(0, None, None)


def test_band_split_puts_the_boundary_size_in_the_large_band() -> None:
    def row(size: int, predicted: float) -> SizeResult:
        return SizeResult(size, 1, 1.0, predicted, "ring", ("ring",))

    rows = [row(2**20, 0.5), row(2**26, 1.1), row(2**30, 1.3)]
    stats = BandStats.of(rows, float(2**26))
    assert stats.large.count == 2 and stats.small.count == 1
    assert stats.large.median_abs_pct == pytest.approx(20.0)
    assert stats.small.max_abs_pct == pytest.approx(50.0)
    assert stats.overall.median_abs_pct == pytest.approx(30.0)


def test_measured_time_from_each_kind_of_column() -> None:
    row = NcclTestsRow(1, 2**20, time_us=100.0, algbw_GBps=10.0, busbw_GBps=17.5)
    assert measured_time_s(row, "time_us", 8) == pytest.approx(100e-6)
    assert measured_time_s(row, "algbw_GBps", 8) == pytest.approx(2**20 / 10e9)
    # busbw = algbw x 2(p-1)/p: 17.5 GB/s on 8 ranks is 10 GB/s of algbw
    assert measured_time_s(row, "busbw_GBps", 8) == pytest.approx(2**20 / 10e9)
    assert measured_time_s(row, "busbw_GBps", 2) == pytest.approx(2**20 / 17.5e9)
    with pytest.raises(ValueError, match="single rank"):
        measured_time_s(row, "busbw_GBps", 1)
    with pytest.raises(ValueError, match="no positive"):
        measured_time_s(NcclTestsRow(1, 8, busbw_GBps=0.0), "busbw_GBps", 8)


# -- the manifest ---------------------------------------------------------------------------------------


def test_bundled_manifest_lists_every_table_and_cluster() -> None:
    manifest = load_manifest(MANIFEST)
    listed = {manifest.resolve(t.csv).resolve() for t in manifest.spec.tables}
    assert listed == {p.resolve() for p in TABLES}
    used = {manifest.resolve(t.cluster).resolve() for t in manifest.spec.tables}
    for row in manifest.spec.training:
        if row.scenario is not None:
            scenario = manifest.resolve(row.scenario)
            cluster = yaml.safe_load(scenario.read_text())["cluster"]
            used.add((scenario.parent / cluster).resolve())
    assert used == {p.resolve() for p in CLUSTERS}
    assert manifest.spec.targets.large.median_pct == 15 and manifest.spec.targets.small.median_pct == 25


def test_bundled_manifest_loads_every_case() -> None:
    cases = load_cases(load_manifest(MANIFEST))
    assert len(cases) == len(TABLES)
    for case in cases:
        assert len(case.devices) == case.spec.ranks
        assert all(case.measured_s(r) > 0 for r in case.table.rows)


@pytest.mark.parametrize("path", CLUSTERS, ids=lambda p: p.name)
def test_validation_clusters_route_inside_a_node_over_the_node_fabric(path: Path) -> None:
    """GPU to GPU inside a node never detours through PCIe and a NIC (the latencies keep it so)."""
    network = build_network(load_cluster(path))
    for group in network.groups().values():
        if len(group) > 1:
            for dst in group[1:]:
                route = network.path(group[0], dst)
                assert len(route) == 3 and network.graph.nodes[route[1]]["role"] in ("node_switch", "switch")


def test_nccl_algo_counterparts_are_registered() -> None:
    for counterpart in NCCL_ALGO_COUNTERPARTS.values():
        assert counterpart in STAND_INS  # an algorithm of NCCL's tuner, run by auto
    # In-network schedules (NVLS, CollNet) need a switch the cluster declares: never a default candidate.
    every = [n for n, a in ALGORITHMS.items() if n != "auto" and not a.switch_capabilities]
    assert [algorithm_name(s) for s in candidate_algorithms()] == every
    assert [s.algorithm for s in auto_candidates("tree")] == ["tree"]
    assert [algorithm_name(s) for s in candidate_algorithms("double_binary_tree")] == ["double_binary_tree"]


def algorithm_name(spec: Any) -> str:
    return str(spec.name)


def write_manifest(tmp_path: Path, body: str, tables: str | None = None) -> Path:
    """A manifest in ``tmp_path`` whose [[tables]] point at the repository's files."""
    if tables is None:
        tables = f"""
            [[tables]]
            name = "ring4"
            system = "HGX H100 box"
            csv = "{VALIDATION / "nccl-tests" / "h100x4-nvswitch-algo-ring.csv"}"
            cluster = "{VALIDATION / "clusters" / "hgx-h100-8gpu.yaml"}"
            ranks = 4
            nccl_algo = "Ring"
            """
    path = tmp_path / "manifest.toml"
    path.write_text(textwrap.dedent(body) + textwrap.dedent(tables))
    return path


def test_manifest_errors_name_file_and_line(tmp_path: Path) -> None:
    path = write_manifest(
        tmp_path,
        "",
        """\
        [[tables]]
        name = "t"
        system = "s"
        csv = "t.csv"
        cluster = "c.yaml"
        ranks = 4
        nccl_algo = "Trees"
        measured = "seconds"
        """,
    )
    with pytest.raises(ConfigError) as exc:
        load_manifest(path)
    lines = {i.line: i.message for i in exc.value.issues}
    assert all(i.path == str(path) for i in exc.value.issues)
    assert "unknown NCCL_ALGO 'Trees'" in lines[7]
    assert "time_us" in lines[8]


def test_manifest_needs_ranks_or_devices_and_unique_names(tmp_path: Path) -> None:
    table = 'name = "t"\nsystem = "s"\ncsv = "t.csv"\ncluster = "c.yaml"\n'
    with pytest.raises(ConfigError, match=r"manifest.toml:1:1 tables\[0\]: give ranks"):
        load_manifest(write_manifest(tmp_path, "", f"[[tables]]\n{table}"))
    twice = f"[[tables]]\n{table}ranks = 2\n\n[[tables]]\n{table}ranks = 2\n"
    with pytest.raises(ConfigError, match="table name 't' is used twice"):
        load_manifest(write_manifest(tmp_path, "", twice))
    with pytest.raises(ConfigError, match="ranks = 3 but 2 devices"):
        load_manifest(write_manifest(tmp_path, "", f"[[tables]]\n{table}ranks = 3\ndevices = ['a', 'b']\n"))


def test_missing_files_and_too_many_ranks_are_located_in_the_manifest(tmp_path: Path) -> None:
    cluster = VALIDATION / "clusters" / "hgx-h100-8gpu.yaml"
    csv = VALIDATION / "nccl-tests" / "h100x4-nvswitch-algo-ring.csv"
    tables = f"""\
        [[tables]]
        name = "a"
        system = "s"
        csv = "nowhere.csv"
        cluster = "{cluster}"
        ranks = 4

        [[tables]]
        name = "b"
        system = "s"
        csv = "{csv}"
        cluster = "{cluster}"
        ranks = 99
        """
    manifest = load_manifest(write_manifest(tmp_path, "", tables))
    with pytest.raises(ConfigError) as exc:
        load_cases(manifest)
    issues = exc.value.issues
    assert [(i.line, i.field) for i in issues] == [(4, "tables[0].csv"), (13, "tables[1].ranks")]
    assert "no such file" in issues[0].message and "99 ranks" in issues[1].message


def test_missing_measured_column_names_the_csv_header(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("# source: a test\nsize_bytes,busbw_GBps\n1024,1.0\n")
    tables = f"""\
        [[tables]]
        name = "t"
        system = "s"
        csv = "t.csv"
        cluster = "{VALIDATION / "clusters" / "hgx-h100-8gpu.yaml"}"
        ranks = 4
        """
    with pytest.raises(ConfigError) as exc:
        load_cases(load_manifest(write_manifest(tmp_path, "", tables)))
    path, line, message = _only_issue(exc)
    assert (path, line) == (str(csv), 2) and "column 'time_us' is missing" in message


def test_unknown_table_name_lists_the_valid_ones() -> None:
    with pytest.raises(ParplanError, match="unknown table 'nope'; valid: abci-a100x4-1node-nvswitch"):
        load_cases(load_manifest(MANIFEST), ["nope"])


# -- predicting -----------------------------------------------------------------------------------------


def test_pruning_picks_what_simulating_everything_picks() -> None:
    network = build_network(load_cluster(VALIDATION / "clusters" / "abci-v100.yaml"))
    placement = place(network, None, count=8)
    table = read_nccl_tests(VALIDATION / "nccl-tests" / "abci-v100x8-2node-ib-edr.csv")
    sizes = [r.size_bytes for r in table.rows]
    candidates = candidate_algorithms()
    pruned = predict_sizes(network, placement.devices, placement.groups, candidates, sizes)
    full = predict_sizes(network, placement.devices, placement.groups, candidates, sizes, prune=False)
    assert [(p.time_s, p.algorithm) for p in pruned] == [(p.time_s, p.algorithm) for p in full]
    assert all(len(p.simulated) == len(candidates) for p in full)
    assert sum(len(p.simulated) for p in pruned) < sum(len(p.simulated) for p in full)
    assert all(p.algorithm in p.simulated for p in pruned)
    # the prediction is the fastest algorithm simulated
    for p in full:
        assert p.time_s == min(
            predict_sizes(network, placement.devices, placement.groups, [c], [p.size_bytes])[0].time_s
            for c in candidates
        )


def test_predictions_follow_the_order_of_the_sizes_given() -> None:
    network = build_network(load_cluster(VALIDATION / "clusters" / "autodl-rtx2080ti.yaml"))
    placement = place(network, None, count=2)
    ring = candidate_algorithms("ring")
    out = predict_sizes(network, placement.devices, placement.groups, ring, [4096, 8, 4096])
    assert [p.size_bytes for p in out] == [4096, 8, 4096]
    assert out[0].time_s > out[1].time_s and out[0] == out[2]


def test_run_validation_passes_within_and_fails_above_thresholds(tmp_path: Path) -> None:
    loose = write_manifest(tmp_path, "[thresholds]\noverall = { median_pct = 90, max_pct = 90 }\n")
    report = run_validation(loose)
    assert report.passed and not report.failures
    (table,) = report.tables
    assert table.algorithm_forced == "ring"
    assert all(r.algorithm.startswith("auto=ring/simple/") for r in table.rows)
    assert report.simulations_run == report.simulations_possible == 3
    assert report.overall.large.count == 3 and report.overall.small.count == 0

    tight = tmp_path / "tight"
    tight.mkdir()
    report = run_validation(
        write_manifest(tight, "[thresholds]\nlarge_from = '1 GiB'\nlarge = { median_pct = 1 }\n")
    )
    assert not report.passed
    assert [(c.band, c.statistic) for c in report.failures] == [("large", "median")]
    assert report.overall.large.count == 2
    small = next(c for c in report.checks if c.band == "small" and c.statistic == "median")
    assert small.value_pct is not None and small.threshold_pct is None and small.passed


def test_copied_manifest_resolves_paths_relative_to_itself(tmp_path: Path) -> None:
    copy = tmp_path / "validation"
    shutil.copytree(VALIDATION, copy)
    report = run_validation(copy / "manifest.toml", tables=["h100x2-nvswitch-default-1node"])
    assert [t.spec.name for t in report.tables] == ["h100x2-nvswitch-default-1node"]
    assert report.tables[0].ranks == 2
