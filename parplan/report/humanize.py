"""Numbers for people: times, sizes, bandwidths and rates with a sensible prefix, 3 significant digits.

Tables use these; files (JSON, CSV) keep raw SI numbers. Times step us -> ms -> s -> min -> h,
sizes are binary (KiB, MiB, GiB: what memory capacities are quoted in), bandwidths decimal
bytes per second (GB/s, as nccl-tests reports algbw and busbw). The digits and the unit scaling
are :func:`parplan.config.units.human`, :func:`~parplan.config.units.human_bytes` and
:func:`~parplan.config.units.human_seconds`, shared with the messages and notes of the lower
layers; this module adds the bandwidth and rate units.

>>> seconds(0.000368), seconds(0.4481), seconds(1126.8)
('368 us', '448 ms', '18.8 min')
>>> size(2631438336), bandwidth(24.9e9), rate(1617.3)
('2.45 GiB', '24.9 GB/s', '1.62k')
"""

from __future__ import annotations

import math

from parplan.config.units import human, human_bandwidth, human_bytes, human_seconds, sig3

__all__ = ["bandwidth", "percent", "rate", "seconds", "sig3", "size", "speedup"]

_SI_STEPS: tuple[tuple[float, str], ...] = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))


def seconds(value_s: float) -> str:
    """A duration: ``368 us``, ``448 ms``, ``15.1 s``, ``18.8 min``, ``2.50 h``
    (:func:`~parplan.config.units.human_seconds`, which the notes of the lower layers use too)."""
    return human_seconds(value_s)


def size(value_bytes: float) -> str:
    """A size in binary units: ``21.8 MiB``, ``80.0 GiB``; whole bytes below 1 KiB (``1000 B``).

    >>> size(8), size(1000), size(1024)
    ('8 B', '1000 B', '1.00 KiB')
    """
    if 0 <= value_bytes < 1024 and float(value_bytes).is_integer():
        return f"{int(value_bytes)} B"
    return human_bytes(value_bytes)


def bandwidth(value_Bps: float) -> str:
    """A bandwidth in decimal bytes per second: ``24.9 GB/s``."""
    return human_bandwidth(value_Bps)


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
