"""Numbers for people: times, sizes, bandwidths and rates with a sensible prefix, 3 significant digits.

Tables use these; files (JSON, CSV) keep raw SI numbers. Times step us -> ms -> s -> min -> h,
sizes are binary (KiB, MiB, GiB: what memory capacities are quoted in), bandwidths decimal
bytes per second (GB/s, as nccl-tests reports algbw and busbw). The digits and the unit scaling
are :func:`parplan.config.units.human` and :func:`~parplan.config.units.human_bytes`, shared with
the messages of the lower layers; this module adds the time, bandwidth and rate units.

>>> seconds(0.000368), seconds(0.4481), seconds(1126.8)
('368 us', '448 ms', '18.8 min')
>>> size(2631438336), bandwidth(24.9e9), rate(1617.3)
('2.45 GiB', '24.9 GB/s', '1.62k')
"""

from __future__ import annotations

import math

from parplan.config.units import human, human_bytes, sig3

__all__ = ["bandwidth", "percent", "rate", "seconds", "sig3", "size", "speedup"]

_TIME_STEPS: tuple[tuple[float, str], ...] = (
    (3600.0, "h"),
    (60.0, "min"),
    (1.0, "s"),
    (1e-3, "ms"),
    (1e-6, "us"),
    (1e-9, "ns"),
)
_BANDWIDTH_STEPS: tuple[tuple[float, str], ...] = (
    (1e12, "TB/s"),
    (1e9, "GB/s"),
    (1e6, "MB/s"),
    (1e3, "kB/s"),
    (1.0, "B/s"),
)
_SI_STEPS: tuple[tuple[float, str], ...] = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))


def seconds(value_s: float) -> str:
    """A duration: ``368 us``, ``448 ms``, ``15.1 s``, ``18.8 min``, ``2.50 h``."""
    if math.isfinite(value_s) and 60 <= abs(value_s) < 600:
        return f"{sig3(value_s)} s"  # "112 s" reads better than "1.88 min" below ten minutes
    return human(value_s, _TIME_STEPS)


def size(value_bytes: float) -> str:
    """A size in binary units: ``21.8 MiB``, ``80.0 GiB``."""
    return human_bytes(value_bytes)


def bandwidth(value_Bps: float) -> str:
    """A bandwidth in decimal bytes per second: ``24.9 GB/s``."""
    return human(value_Bps, _BANDWIDTH_STEPS)


def rate(value: float) -> str:
    """A count per second with an SI prefix and no unit: ``1.62k``, ``3.31M``."""
    return human(value, _SI_STEPS, sep="")


def percent(fraction: float) -> str:
    """A fraction as a percentage: ``0.456`` -> ``46%``; below 1% with one decimal."""
    if not math.isfinite(fraction):
        return "n/a"
    pct = fraction * 100
    if 0 < abs(pct) < 0.05:
        return "<0.1%"
    if 0 < abs(pct) < 1 or 99.5 <= abs(pct) < 100:  # never round a part up to 0% or 100%
        return f"{pct:.1f}%" if abs(pct) < 99.95 else "99.9%"
    return f"{pct:.0f}%"


def speedup(factor: float | None) -> str:
    """A speed-up factor: ``1.17×``, ``0.000822×``; ``—`` when unknown."""
    if factor is None or not math.isfinite(factor):
        return "—"
    return f"{sig3(factor)}×"
