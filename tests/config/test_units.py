"""Human units: parsing, the messages for malformed ones, and formatting that parses back exactly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.config.units import (
    format_bandwidth,
    format_bytes,
    format_count,
    format_flop_rate,
    format_flops,
    format_time,
    parse_bandwidth,
    parse_bytes,
    parse_count,
    parse_flop_rate,
    parse_flops,
    parse_time,
)


@pytest.mark.parametrize(
    ("parse", "text", "value"),
    [
        (parse_bandwidth, "25 GB/s", 25e9),
        (parse_bandwidth, "100 Gbit/s", 12.5e9),
        (parse_bandwidth, "200 Mbit/s", 25e6),
        (parse_bandwidth, "200Mbps", 25e6),
        (parse_bandwidth, "1 GiB/s", 2.0**30),
        (parse_bandwidth, "3e9", 3e9),
        (parse_bandwidth, 1000, 1000.0),
        (parse_time, "1.5 us", 1.5e-6),
        (parse_time, "2 µs", 2e-6),
        (parse_time, "0.7 ms", 0.7e-3),
        (parse_time, "5 ns", 5e-9),
        (parse_time, "2 min", 120.0),
        (parse_bytes, "80 GiB", 80 * 2.0**30),
        (parse_bytes, "64 MiB", 64 * 2.0**20),
        (parse_bytes, "2 kB", 2000.0),
        (parse_bytes, "16 bit", 2.0),
        (parse_bytes, ".5 KiB", 512.0),
        (parse_flops, "3 GFLOP", 3e9),
        (parse_flops, "4.1 MFLOP", 4.1e6),
        (parse_flop_rate, "312 TFLOP/s", 312e12),
        (parse_flop_rate, "1 PFLOPS", 1e15),
        (parse_count, "1.3B", 1.3e9),
        (parse_count, "85M", 85e6),
        (parse_count, 25557032, 25557032.0),
    ],
)
def test_parse(parse: Callable[[Any], float], text: Any, value: float) -> None:
    assert parse(text) == pytest.approx(value, rel=1e-15)


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (parse_bandwidth, "25 GB/sec", "'25 GB/sec' is not a valid bandwidth (e.g. '25 GB/s')"),
        (parse_bandwidth, "25 GB", "'25 GB' is not a valid bandwidth"),
        (parse_bandwidth, "fast", "'fast' is not a valid bandwidth"),
        (parse_bandwidth, "-1 GB/s", "'-1 GB/s' is not a valid bandwidth: must be finite and non-negative"),
        (parse_bandwidth, True, "expected a bandwidth such as '25 GB/s', got True"),
        (parse_bandwidth, [1], "expected a bandwidth such as '25 GB/s', got list"),
        (parse_time, "2 parsecs", "'2 parsecs' is not a valid duration (e.g. '2 us')"),
        (parse_bytes, "1e999 B", "is not a valid size: must be finite"),
        (parse_bytes, float("nan"), "must be finite and non-negative"),
        (parse_flop_rate, "312 TB/s", "'312 TB/s' is not a valid compute rate"),
        (parse_count, "1.3X", "'1.3X' is not a valid count (e.g. '1.3B')"),
    ],
)
def test_malformed_units_quote_the_text(parse: Callable[[Any], float], text: Any, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse(text)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("fmt", "value", "text"),
    [
        (format_bandwidth, 25e9, "25 GB/s"),
        (format_bandwidth, 12.5e9, "12.5 GB/s"),
        (format_bytes, 80 * 2.0**30, "80 GiB"),
        (format_bytes, 1000.0, "1000 B"),
        (format_time, 2e-6, "2 us"),
        (format_time, 0.7e-6, "700 ns"),
        (format_flops, 8.2e9, "8.2 GFLOP"),
        (format_flop_rate, 312e12, "312 TFLOP/s"),
        (format_count, 25557032.0, 25557032),
        (format_count, 0.5, 0.5),
    ],
)
def test_format_is_readable(fmt: Callable[[float], Any], value: float, text: Any) -> None:
    assert fmt(value) == text


PAIRS = [
    (format_bandwidth, parse_bandwidth),
    (format_bytes, parse_bytes),
    (format_time, parse_time),
    (format_flops, parse_flops),
    (format_flop_rate, parse_flop_rate),
    (format_count, parse_count),
]


@pytest.mark.parametrize(("fmt", "parse"), PAIRS)
@settings(max_examples=200, deadline=None)
@given(value=st.floats(min_value=0, max_value=1e30, allow_nan=False) | st.integers(0, 10**15).map(float))
def test_format_parses_back_exactly(
    fmt: Callable[[float], Any], parse: Callable[[Any], float], value: float
) -> None:
    assert parse(fmt(value)) == value
