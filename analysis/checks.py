"""Argument validation shared by every layer: one-line ValueErrors that name the field and the
allowed range, so the CLI can print them as they are."""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_finite(name: str, value: Any) -> float:
    """Return value as float; reject non-numbers, NaN and infinities."""
    if not _is_number(value) and not hasattr(value, "__float__"):
        raise ValueError(f"{name}: expected a number, got {value!r}")
    x = float(value)
    if math.isnan(x) or math.isinf(x):
        raise ValueError(f"{name}: must be a finite number, got {value!r}")
    return x


def check_positive(name: str, value: Any) -> float:
    x = check_finite(name, value)
    if x <= 0:
        raise ValueError(f"{name}: must be > 0, got {value!r}")
    return x


def check_nonnegative(name: str, value: Any) -> float:
    x = check_finite(name, value)
    if x < 0:
        raise ValueError(f"{name}: must be >= 0, got {value!r}")
    return x


def check_range(name: str, value: Any, lo: float, hi: float, *, lo_open: bool = False,
                hi_open: bool = False) -> float:
    """Check lo <= value <= hi (or open ends); the message shows the interval."""
    x = check_finite(name, value)
    ok_lo = x > lo if lo_open else x >= lo
    ok_hi = x < hi if hi_open else x <= hi
    if not (ok_lo and ok_hi):
        interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise ValueError(f"{name}: must be in {interval}, got {value!r}")
    return x


def check_int(name: str, value: Any, minimum: int | None = None,
              maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int,)) and not (
            _is_number(value) and float(value).is_integer()):
        raise ValueError(f"{name}: expected an integer, got {value!r}")
    n = int(value)
    if minimum is not None and n < minimum:
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{name}: must be {bound}, got {value!r}")
    if maximum is not None and n > maximum:
        bound = f"<= {maximum}" if minimum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{name}: must be {bound}, got {value!r}")
    return n


def check_choice(name: str, value: Any, choices) -> Any:
    if value not in choices:
        raise ValueError(f"{name}: must be one of {', '.join(map(str, choices))}, got {value!r}")
    return value


def check_fields(table: Mapping[str, Any], where: str, required: Sequence[str] = (),
                 optional: Sequence[str] = (), *, named: bool = True) -> None:
    """A config table's fields, the one rule every table is checked by: an unknown field or a
    missing required one is a one-line error ``WHERE.FIELD: ...`` that lists the allowed fields
    (``where = ""``: a top-level table, ``FIELD: ...``).
    ``named``: a registry-chosen table (cost, acceptance, workload, length models), whose
    ``name`` is always allowed and named in the message."""
    allowed = tuple(required) + tuple(optional)
    name = table.get("name") if named else None
    owner = f" for {name!r}" if named else ""
    prefix = f"{where}." if where else ""
    for key in table:
        if key not in allowed and not (named and key == "name"):
            raise ValueError(f"{prefix}{key}: unknown field{owner}; allowed: "
                             f"{', '.join(sorted(allowed))}")
    for key in required:
        if key not in table:
            raise ValueError(f"{prefix}{key}: missing" + (f" (required by {name!r})" if named
                                                          else ""))
