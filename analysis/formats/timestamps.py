"""Arrival timestamps of public traces turned into seconds.

Traces write arrival times as plain numbers in a documented unit (BurstGPT: seconds,
Mooncake: milliseconds) or as date-times (Azure: ``2023-11-16 18:15:46.6805900`` with
seven fractional digits, 2024: ``2024-05-10 00:00:00.009930+00:00``, sometimes without the
fraction).  :class:`TimeColumn` accepts either kind for a column, insists that one file keeps
to one kind, and names the field when a value is neither (the unit cannot be told).
"""
from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone

from .errors import fail, shown
from .parsing import PathLike

_DATETIME = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
    r"(Z|[+-]\d{2}:?\d{2})?$")
_UNIT_DIVISOR = {"s": 1.0, "ms": 1e3, "us": 1e6}


def _datetime_parts(text: str) -> tuple[int, float] | None:
    """(whole seconds since the Unix epoch, fraction) for an ISO-like date-time (any number of
    fractional digits; no zone = UTC), or None when ``text`` is not one."""
    m = _DATETIME.match(text.strip())
    if m is None:
        return None
    year, month, day, hour, minute, sec = (int(g) for g in m.groups()[:6])
    frac, zone = m.group(7), m.group(8)
    tz = timezone.utc
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
    try:
        whole = int(datetime(year, month, day, hour, minute, sec, tzinfo=tz).timestamp())
    except ValueError:
        return None
    return whole, (float("0." + frac) if frac else 0.0)


def parse_datetime(text: str) -> float | None:
    """Seconds since the Unix epoch for an ISO-like date-time, or None when it is not one."""
    parts = _datetime_parts(text)
    return None if parts is None else parts[0] + parts[1]


def _number(text: str) -> float | None:
    try:
        out = float(text)
    except ValueError:
        return None
    return out if math.isfinite(out) else None


class TimeColumn:
    """Converts one column's timestamps to seconds.  ``numeric_unit`` is the unit plain
    numbers are in ("s", "ms", "us"), or None where the format writes date-times only."""

    def __init__(self, path: PathLike, name: str, numeric_unit: str | None) -> None:
        if numeric_unit is not None and numeric_unit not in _UNIT_DIVISOR:
            raise ValueError(f"unknown unit {numeric_unit!r}")
        self.path, self.name, self.unit = path, name, numeric_unit
        self.kind: str | None = None  # "number" or "datetime", fixed by the first value
        self.origin: int | None = None  # whole epoch seconds of the first date-time

    def _expected(self) -> str:
        if self.unit is None:
            return "a date-time such as 2023-11-16 18:15:46.6805900"
        return f"a number of {self.unit} or a date-time such as 2023-11-16 18:15:46.68"

    def seconds(self, value: object, line: int | None) -> float:
        """``value`` in seconds.  Date-times count from the column's first date-time (whole
        seconds are subtracted as integers, so seven fractional digits survive)."""
        number: float | None = None
        parts: tuple[int, float] | None = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value) if math.isfinite(value) else None
        elif isinstance(value, str):
            number = _number(value)
            parts = None if number is not None else _datetime_parts(value)
        if number is not None and self.unit is not None:
            kind, out = "number", number / _UNIT_DIVISOR[self.unit]
        elif parts is not None:
            if self.origin is None:
                self.origin = parts[0]
            kind, out = "datetime", (parts[0] - self.origin) + parts[1]
        else:
            raise fail(self.path, f"cannot tell the time unit of {shown(value)} "
                       f"(expected {self._expected()})", line=line, field=self.name)
        if self.kind is None:
            self.kind = kind
        elif kind != self.kind:
            first = "numbers" if self.kind == "number" else "date-times"
            raise fail(self.path, f"{shown(value)} mixes units: earlier rows are {first}",
                       line=line, field=self.name)
        return out
