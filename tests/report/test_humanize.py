"""Human formatting of times, sizes, bandwidths and rates: prefixes, 3 significant digits, no exponents."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.config.units import human_bytes
from parplan.report import humanize as hz

TIME_FACTORS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}
SIZE_FACTORS = {"B": 1.0, "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "TiB": 2.0**40, "PiB": 2.0**50}


@pytest.mark.parametrize(
    ("value_s", "text"),
    [
        (0.0, "0 s"),
        (3.2e-7, "320 ns"),
        (0.000368, "368 us"),
        (0.0009997, "1.00 ms"),  # rounds up into the next unit, not "1000 us"
        (0.4481, "448 ms"),
        (0.9996, "1.00 s"),
        (15.07, "15.1 s"),
        (112.7, "113 s"),  # below ten minutes stays in seconds
        (1126.8, "18.8 min"),
        (7000.0, "1.94 h"),
    ],
)
def test_seconds(value_s: float, text: str) -> None:
    assert hz.seconds(value_s) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(0, "0 B"), (512, "512 B"), (1023.7, "1.00 KiB"), (7454760, "7.11 MiB"), (85899345920, "80.0 GiB")],
)
def test_size(value: float, text: str) -> None:
    assert hz.size(value) == text


def test_bandwidth_rate_percent_speedup() -> None:
    assert hz.bandwidth(24.9e9) == "24.9 GB/s"
    assert hz.bandwidth(16.6e6) == "16.6 MB/s"
    assert hz.rate(1617.3) == "1.62k"
    assert hz.rate(85.7) == "85.7"
    assert hz.percent(0.456) == "46%"
    assert hz.percent(0.004) == "0.4%"
    assert hz.percent(0.0001) == "<0.1%"
    assert hz.percent(0.9988) == "99.9%"  # a part is never shown as the whole
    assert hz.percent(1.0) == "100%"
    assert hz.speedup(1.1712) == "1.17×"
    assert hz.speedup(None) == "—"
    assert hz.speedup(math.inf) == "—"


def _parse(text: str, factors: dict[str, float]) -> float:
    match = re.fullmatch(r"(-?[0-9.]+) (\S+)", text)
    assert match, text
    number, unit = match.groups()
    assert "e" not in number
    return float(number) * factors[unit]


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=1e-9, max_value=1e6, allow_nan=False))
def test_seconds_round_trips_within_rounding(value_s: float) -> None:
    text = hz.seconds(value_s)
    number = float(text.split()[0])
    assert 1 <= number < 1000 or (number < 1 and text.endswith("ns")) or text.endswith(" h")
    assert _parse(text, TIME_FACTORS) == pytest.approx(value_s, rel=5e-3)


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=1.0, max_value=2.0**55, allow_nan=False))
def test_size_round_trips_within_rounding(value: float) -> None:
    text = hz.size(value)
    assert len(text.split()[0].replace(".", "").lstrip("0")) <= 4
    assert _parse(text, SIZE_FACTORS) == pytest.approx(value, rel=5e-3)


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=1e-6, max_value=1e9, allow_nan=False))
def test_sig3_has_three_significant_digits(value: float) -> None:
    text = hz.sig3(value)
    assert "e" not in text
    digits = text.replace(".", "").lstrip("0")
    if value < 999.5:
        assert len(digits) == 3
    else:  # large values (only "h" ever gets there) are whole numbers
        assert "." not in text
    assert float(text) == pytest.approx(value, rel=5e-3)


# -- the one byte formatter: each caller's digits are what they were before it was shared ----------
def _message_bytes_before(size_bytes: float) -> str:
    """The planners' memory messages' own formatter before it was shared (kept as the oracle)."""
    for factor, unit in ((2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB")):
        if size_bytes >= factor:
            return f"{size_bytes / factor:.3g} {unit}"
    return f"{size_bytes:.0f} B"


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.floats(min_value=0.0, max_value=2.0**55), st.integers(0, 2**50).map(float)))
def test_short_bytes_are_the_memory_messages_digits(value: float) -> None:
    """Sharing the formatter changed no output, except on purpose where the old one wrote an
    exponent ("1.02e+03 MiB" is now "1 GiB"), past 1 PiB (now PiB, EiB) and below a byte."""
    before, now = _message_bytes_before(value), human_bytes(value, precision="short")
    if "e+" in before or value >= 2.0**50 or 0 < value < 1:
        assert "e+" not in now and "e-" not in now
    else:
        assert now == before
    assert human_bytes(value, unit="GiB", precision="short") == f"{value / 2**30:.3g} GiB"


def test_sizes_in_tables_and_messages() -> None:
    assert hz.size(2**31) == human_bytes(2**31) == "2.00 GiB"
    assert human_bytes(2**31, precision="short") == "2 GiB"
    assert human_bytes(3 * 2**29, unit="GiB") == "1.50 GiB"
