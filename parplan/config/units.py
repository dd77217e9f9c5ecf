"""Human units in files, SI base units in code.

Files may say "25 GB/s", "100 Gbit/s", "1.5 us", "80 GiB", "312 TFLOP/s", "3 GFLOP" or "1.3B";
code always holds floats in base units (bytes, seconds, bytes/s, FLOP, FLOP/s, counts). Plain numbers
in files are taken as base units. Each quantity kind has a parser that raises :class:`ValueError` with
the offending text quoted (pydantic turns it into a validation issue), and a formatter whose output
parses back to exactly the same float, so specs round-trip through every file format.

The spec types (:data:`Bytes`, :data:`Bandwidth`, ...) also hold values to the supported range of
their kind, :data:`LIMITS`: far beyond any real hardware or model, and small enough that every
product the planners and the engine form stays a finite float and fits the engine's integers. Rates
and capacities that divide (a device's compute rate, memory, memory bandwidth, a link's bandwidth)
use the ``Positive*`` types: zero is refused at load time, never turned into a division by zero or a
silently free operation. No quantity may be infinite.

For people rather than files, :func:`human_bytes` writes a size with a binary prefix and three
significant digits; it is the one byte formatter of parplan: tables (through
:mod:`parplan.report.humanize`, which also scales times and bandwidths with :func:`human`), the
bottleneck line and the memory messages of the planners all use it.

>>> parse_bandwidth("100 Gbit/s")
12500000000.0
>>> parse_time("2 us")
2e-06
>>> parse_bytes("64 MiB")
67108864.0
>>> format_bandwidth(25e9)
'25 GB/s'
>>> human_bytes(2631438336), human_bytes(2**31, precision="short")
('2.45 GiB', '2 GiB')
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, localcontext
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_QUANTITY = re.compile(rf"^\s*(?P<num>{_NUMBER})\s*(?P<unit>[^\d\s].*?)?\s*$")

_DECIMAL = {"": "1", "k": "1e3", "K": "1e3", "M": "1e6", "G": "1e9", "T": "1e12", "P": "1e15", "E": "1e18"}
_BINARY = {
    "Ki": "1024",
    "Mi": str(2**20),
    "Gi": str(2**30),
    "Ti": str(2**40),
    "Pi": str(2**50),
    "Ei": str(2**60),
}


def _build_table(bases: dict[str, str], prefixes: dict[str, str]) -> dict[str, Decimal]:
    return {p + b: Decimal(pf) * Decimal(bf) for b, bf in bases.items() for p, pf in prefixes.items()}


_BYTE_UNITS = {
    **_build_table({"B": "1", "byte": "1", "bytes": "1"}, _DECIMAL),
    **_build_table({"B": "1"}, _BINARY),
    **_build_table({"bit": "0.125", "b": "0.125"}, _DECIMAL),
    **_build_table({"bit": "0.125"}, _BINARY),
}
_BANDWIDTH_UNITS = {
    **{f"{u}/s": f for u, f in _BYTE_UNITS.items()},
    **_build_table({"Bps": "1"}, _DECIMAL),
    **_build_table({"bps": "0.125", "bit/s": "0.125"}, _DECIMAL),
}
_TIME_UNITS = {
    u: Decimal(f)
    for u, f in {
        "s": "1",
        "sec": "1",
        "ms": "1e-3",
        "us": "1e-6",
        "µs": "1e-6",
        "μs": "1e-6",
        "ns": "1e-9",
        "ps": "1e-12",
        "min": "60",
        "h": "3600",
    }.items()
}
_FLOP_UNITS = _build_table({"FLOP": "1", "FLOPs": "1", "flop": "1"}, _DECIMAL)
_FLOP_RATE_UNITS = {
    **{f"{u}/s": f for u, f in _FLOP_UNITS.items()},
    **_build_table({"FLOPS": "1", "flops": "1"}, _DECIMAL),
}
_COUNT_UNITS = {
    u: Decimal(f)
    for u, f in {"": "1", "K": "1e3", "k": "1e3", "M": "1e6", "B": "1e9", "G": "1e9", "T": "1e12"}.items()
}


def _parser(kind: str, units: dict[str, Decimal], example: str) -> Callable[[Any], float]:
    def parse(value: Any) -> float:
        if isinstance(value, bool):
            raise ValueError(f"expected a {kind} such as {example!r}, got {value!r}")
        if isinstance(value, int | float):
            number = float(value)
        elif isinstance(value, str):
            match = _QUANTITY.match(value)
            unit = (match.group("unit") or "") if match else ""
            if match is None or (unit and unit not in units):
                raise ValueError(f"{value!r} is not a valid {kind} (e.g. {example!r})")
            # exact decimal arithmetic, one rounding: "0.7 us" is exactly the float 0.7e-6
            with localcontext() as ctx:
                ctx.prec = 60
                number = float(Decimal(match.group("num")) * units.get(unit, _ONE))
        else:
            raise ValueError(f"expected a {kind} such as {example!r}, got {type(value).__name__}")
        if not math.isfinite(number) or number < 0:
            raise ValueError(f"{value!r} is not a valid {kind}: must be finite and non-negative")
        return number

    parse.__name__ = f"parse_{kind.replace(' ', '_')}"
    parse.__doc__ = f"Parse a {kind} (e.g. {example!r}) or a plain number into base units."
    return parse


_ONE = Decimal(1)

parse_bytes = _parser("size", _BYTE_UNITS, "64 MiB")
parse_bandwidth = _parser("bandwidth", _BANDWIDTH_UNITS, "25 GB/s")
parse_time = _parser("duration", _TIME_UNITS, "2 us")
parse_flops = _parser("FLOP count", _FLOP_UNITS, "3 GFLOP")
parse_flop_rate = _parser("compute rate", _FLOP_RATE_UNITS, "312 TFLOP/s")
parse_count = _parser("count", _COUNT_UNITS, "1.3B")


def _formatter(
    steps: list[tuple[str, str]], parse: Callable[[Any], float], base: str
) -> Callable[[float], str | float]:
    table = [(Decimal(factor), unit) for factor, unit in steps]

    def fmt(value: float) -> str | float:
        """The largest unit the value reaches, with the shortest digits that parse back exactly;
        the plain float when no text does."""
        if not math.isfinite(value) or value < 0:
            return value
        if value == 0:
            return f"0 {base}"
        exact = Decimal(repr(float(value)))
        for factor, unit in table:
            if exact >= factor or factor == table[-1][0]:
                with localcontext() as ctx:
                    ctx.prec = 60
                    number = (exact / factor).normalize()
                digits = format(number, "f")
                if len(digits) > 21:  # 1e-30 s reads better as "1e-21 ns" than with 20 zeros
                    digits = format(number, "e")
                text = f"{digits} {unit}"
                if parse(text) == value:
                    return text
                break
        return value

    return fmt


format_bytes = _formatter(
    [(str(2**40), "TiB"), (str(2**30), "GiB"), (str(2**20), "MiB"), ("1024", "KiB"), ("1", "B")],
    parse_bytes,
    "B",
)
format_bandwidth = _formatter(
    [("1e12", "TB/s"), ("1e9", "GB/s"), ("1e6", "MB/s"), ("1e3", "kB/s"), ("1", "B/s")],
    parse_bandwidth,
    "B/s",
)
format_time = _formatter([("1", "s"), ("1e-3", "ms"), ("1e-6", "us"), ("1e-9", "ns")], parse_time, "s")
format_flops = _formatter(
    [("1e15", "PFLOP"), ("1e12", "TFLOP"), ("1e9", "GFLOP"), ("1e6", "MFLOP"), ("1", "FLOP")],
    parse_flops,
    "FLOP",
)
format_flop_rate = _formatter(
    [("1e15", "PFLOP/s"), ("1e12", "TFLOP/s"), ("1e9", "GFLOP/s"), ("1e6", "MFLOP/s"), ("1", "FLOP/s")],
    parse_flop_rate,
    "FLOP/s",
)


def format_count(value: float) -> int | float:
    """Write a count as an integer when it is one, so files stay readable."""
    return int(value) if float(value).is_integer() else value


@dataclass(frozen=True)
class Limit:
    """The supported range of one quantity kind: up to ``maximum`` (base units), written ``text``."""

    maximum: float
    text: str


LIMITS: dict[str, Limit] = {
    "size": Limit(2.0**60, "1 EiB"),
    "bandwidth": Limit(1e18, "1 EB/s"),
    "duration": Limit(86400.0, "86400 s (one day)"),
    "FLOP count": Limit(1e24, "1e24 FLOP"),
    "compute rate": Limit(1e21, "1e21 FLOP/s"),
    "count": Limit(1e15, "1e15"),
}
"""The largest value a spec accepts for each quantity kind (what :data:`Bytes` etc. enforce)."""


def _shown(value: Any) -> str:
    """A value as the file wrote it, for messages: text quoted, numbers plain."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


def _checked(parse: Callable[[Any], float], kind: str, positive: bool) -> Callable[[Any], float]:
    """``parse`` followed by the range checks of a spec field: within :data:`LIMITS`, > 0 if asked."""
    limit = LIMITS[kind]

    def check(value: Any) -> float:
        number = parse(value)
        if positive and number <= 0:
            raise ValueError(f"must be > 0, got {_shown(value)}")
        if number > limit.maximum:
            raise ValueError(f"must be at most {limit.text}, got {_shown(value)}")
        return number

    return check


def _annotated(
    parse: Callable[[Any], float],
    fmt: Callable[[float], str | float] | Callable[[float], int | float],
    kind: str,
    example: str,
    written_as: Any = str | float,
    positive: bool = False,
) -> Any:
    bound: dict[str, float] = {"exclusiveMinimum": 0} if positive else {"minimum": 0}
    number = {"type": "number", **bound, "maximum": LIMITS[kind].maximum}
    return Annotated[
        float,
        BeforeValidator(_checked(parse, kind, positive)),
        PlainSerializer(fmt, return_type=written_as, when_used="always"),
        WithJsonSchema({"anyOf": [number, {"type": "string", "examples": [example]}]}),
    ]


Bytes = _annotated(parse_bytes, format_bytes, "size", "64 MiB")
"""A size in bytes, 0 to 1 EiB; files may write "80 GiB"."""
PositiveBytes = _annotated(parse_bytes, format_bytes, "size", "80 GiB", positive=True)
"""A capacity in bytes: like :data:`Bytes`, but 0 is refused."""
Bandwidth = _annotated(parse_bandwidth, format_bandwidth, "bandwidth", "25 GB/s")
"""A bandwidth in bytes per second, 0 to 1 EB/s; files may write "100 Gbit/s"."""
PositiveBandwidth = _annotated(parse_bandwidth, format_bandwidth, "bandwidth", "25 GB/s", positive=True)
"""A bandwidth something is divided by: like :data:`Bandwidth`, but 0 is refused."""
Seconds = _annotated(parse_time, format_time, "duration", "2 us")
"""A duration in seconds, 0 to one day; files may write "1.5 us"."""
Flops = _annotated(parse_flops, format_flops, "FLOP count", "3 GFLOP")
"""A number of floating-point operations, 0 to 1e24; files may write "3 GFLOP"."""
FlopRate = _annotated(parse_flop_rate, format_flop_rate, "compute rate", "312 TFLOP/s")
"""A compute rate in FLOP per second, 0 to 1e21; files may write "312 TFLOP/s"."""
PositiveFlopRate = _annotated(parse_flop_rate, format_flop_rate, "compute rate", "312 TFLOP/s", positive=True)
"""A compute rate something is divided by: like :data:`FlopRate`, but 0 is refused."""
Count = _annotated(parse_count, format_count, "count", "1.3B", written_as=int | float)
"""A (possibly large) count such as a parameter count, 0 to 1e15; files may write "1.3B"."""

# -- numbers for people ---------------------------------------------------------------------------
BINARY_SIZE_STEPS: tuple[tuple[float, str], ...] = (
    (2.0**60, "EiB"),
    (2.0**50, "PiB"),
    (2.0**40, "TiB"),
    (2.0**30, "GiB"),
    (2.0**20, "MiB"),
    (2.0**10, "KiB"),
    (1.0, "B"),
)
"""Binary size units, largest first (memory capacities are quoted in GiB)."""


def sig3(value: float) -> str:
    """``value`` with 3 significant digits and no exponent (``4.48``, ``44.8``, ``448``, ``1000``).

    >>> sig3(0.0123), sig3(99.96), sig3(0)
    ('0.0123', '100', '0')
    """
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, 2 - magnitude)
    text = f"{value:.{decimals}f}"
    # rounding may add a digit (99.96 -> "100.0"): drop the surplus decimal
    if decimals and len(text.lstrip("-").replace(".", "").lstrip("0")) > 3:
        text = f"{value:.{decimals - 1}f}"
    return text


def human(value: float, steps: Sequence[tuple[float, str]], sep: str = " ") -> str:
    """``value`` in the largest of ``steps`` (``(factor, unit)``, largest first) it reaches, with
    :func:`sig3` digits; a value that rounds to 1000 moves up a unit (``999.7 ms`` is written
    ``1.00 s``, not ``1000 ms``). Infinity is ``∞``, NaN ``n/a``.

    >>> human(7454760, BINARY_SIZE_STEPS), human(1023.7, BINARY_SIZE_STEPS)
    ('7.11 MiB', '1.00 KiB')
    """
    if not math.isfinite(value):
        return "∞" if value > 0 else "n/a"
    if value == 0:
        return f"0{sep}{_unit_of_one(steps)}".rstrip()
    sign = "-" if value < 0 else ""
    for i, (factor, unit) in enumerate(steps):
        scaled = abs(value) / factor
        if scaled >= 1 or i == len(steps) - 1:
            text = sig3(scaled)
            if float(text) >= 1000 and i > 0:  # 999.7 ms rounds to "1000": write 1.00 s instead
                factor, unit = steps[i - 1]
                text = sig3(abs(value) / factor)
            return f"{sign}{text}{sep}{unit}".rstrip()
    raise AssertionError("unreachable: the last step always matches")  # pragma: no cover


def _unit_of_one(steps: Sequence[tuple[float, str]]) -> str:
    return next((u for f, u in steps if f == 1.0), steps[-1][1])


def human_bytes(
    size_bytes: float, *, unit: str | None = None, precision: Literal["fixed", "short"] = "fixed"
) -> str:
    """A size for people, in binary units (``unit`` forces one, e.g. ``"GiB"``).

    ``precision="fixed"`` (tables): three significant digits kept (``2.00 GiB``), never an
    exponent, see :func:`human`. ``precision="short"`` (messages): Python's ``.3g`` (``2 GiB``,
    ``1.5 TiB``), units from TiB down to KiB and whole bytes below 1 KiB.

    >>> human_bytes(2**31), human_bytes(2**31, precision="short"), human_bytes(100, precision="short")
    ('2.00 GiB', '2 GiB', '100 B')
    >>> human_bytes(3 * 2**28, unit="GiB", precision="short")
    '0.75 GiB'
    """
    factors = {u: f for f, u in BINARY_SIZE_STEPS}
    if precision == "short":
        if unit is None:
            return _short_bytes(size_bytes)
        if unit == "B":
            return f"{size_bytes:.0f} B"
        return f"{size_bytes / factors[unit]:.3g} {unit}"
    if unit is not None:
        return f"{sig3(size_bytes / factors[unit])} {unit}"
    return human(size_bytes, BINARY_SIZE_STEPS)


def _short_bytes(size_bytes: float) -> str:
    """A size for messages: binary units, 3 significant digits, no trailing zeros, whole bytes
    below 1 KiB, never an exponent (``1023.99 MiB`` reads ``1 GiB``, not ``1.02e+03 MiB``).

    >>> _short_bytes(0), _short_bytes(1000), _short_bytes(1536), _short_bytes(1.07374e9), _short_bytes(0.5)
    ('0 B', '1000 B', '1.5 KiB', '1 GiB', '0.5 B')
    """
    magnitude = abs(size_bytes)
    if not math.isfinite(size_bytes):
        return f"{size_bytes} B"
    if magnitude < 1:  # a fraction of a byte (averages): three decimals at most, never an exponent
        return f"{float(f'{size_bytes:.3f}'):g} B"
    steps = BINARY_SIZE_STEPS
    for i, (factor, unit) in enumerate(steps):
        if magnitude >= factor:
            if unit == "B" and float(f"{size_bytes:.0f}") < 1024:  # whole bytes up to 1023
                return f"{size_bytes:.0f} B"
            scaled = float(f"{size_bytes / factor:.3g}")
            if (unit == "B" or abs(scaled) >= 1000) and i > 0:  # 1023.99 MiB: 1 GiB; 1023.9 B: 1 KiB
                factor, unit = steps[i - 1]
                scaled = float(f"{size_bytes / factor:.3g}")
            return f"{scaled:g} {unit}"
    raise AssertionError("unreachable: 1 B matches every size >= 1")  # pragma: no cover


TIME_STEPS: tuple[tuple[float, str], ...] = (
    (3600.0, "h"),
    (60.0, "min"),
    (1.0, "s"),
    (1e-3, "ms"),
    (1e-6, "us"),
    (1e-9, "ns"),
)
"""Time units for people, largest first (tables and notes; files keep seconds)."""


def human_seconds(value_s: float) -> str:
    """A duration for people, 3 significant digits: ``368 us``, ``448 ms``, ``112 s``, ``18.8 min``
    (seconds up to ten minutes: ``112 s`` reads better than ``1.87 min``).

    >>> human_seconds(0.000368), human_seconds(112.4), human_seconds(1126.65)
    ('368 us', '112 s', '18.8 min')
    """
    if math.isfinite(value_s) and 60 <= abs(value_s) < 600:
        return f"{sig3(value_s)} s"
    return human(value_s, TIME_STEPS)


BANDWIDTH_STEPS: tuple[tuple[float, str], ...] = (
    (1e12, "TB/s"),
    (1e9, "GB/s"),
    (1e6, "MB/s"),
    (1e3, "kB/s"),
    (1.0, "B/s"),
)
"""Bandwidth units for people (decimal bytes per second), largest first."""


def human_bandwidth(value_Bps: float) -> str:
    """A bandwidth for people, 3 significant digits: ``24.9 GB/s``, ``1.00 MB/s``.

    >>> human_bandwidth(25e9), human_bandwidth(1e6)
    ('25.0 GB/s', '1.00 MB/s')
    """
    return human(value_Bps, BANDWIDTH_STEPS)
