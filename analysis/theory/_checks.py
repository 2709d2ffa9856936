"""Array-aware argument checks for the theory package.

Scalars go through `analysis.checks` (one-line ValueErrors naming the field and the allowed
range); arrays are checked element-wise with the same style of message, quoting the first bad
element."""
from __future__ import annotations

from typing import Any

import numpy as np

from psdlab.analysis.checks import check_positive, check_range

__all__ = ["positive_array", "threshold_value"]


def positive_array(name: str, value: Any) -> np.ndarray:
    """Return `value` as a float array after checking every element is finite and > 0."""
    if np.ndim(value) == 0:
        return np.asarray(check_positive(name, value), dtype=float)
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected numbers, got {value!r}") from None
    bad = ~np.isfinite(arr) | (arr <= 0)
    if bad.any():
        first = arr[bad].flat[0]
        raise ValueError(f"{name}: must be a finite number > 0, got {first!r}")
    return arr


def threshold_value(value: Any, name: str = "threshold") -> float:
    """A saving threshold: a fraction in (0, 0.5] (PSD can never save more than 50%)."""
    return check_range(name, value, 0.0, 0.5, lo_open=True)
