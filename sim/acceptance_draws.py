"""What every acceptance model's sampling shares: the longest draft (`KMAX`), the check of a
draft-length argument (`k_array`) and the accepted count as the run of leading successes of
per-position trials, truncated at each request's k (`leading_accepted`).

Kept below `sim.acceptance` so the models in their own modules (`sim.acceptance_matches`,
`sim.acceptance_fitted`) import it without importing the registry that imports them."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

#: longest draft any model accepts
KMAX = 4096


def k_array(k: Any, n: int) -> np.ndarray:
    """``k`` (an int or one per request) as n int64 values in [0, KMAX]; ValueError if not."""
    arr = np.asarray(k)
    if arr.dtype.kind not in "iu" and not (arr.dtype.kind == "f" and np.all(arr == np.floor(arr))):
        raise ValueError(f"k: expected integers, got {k!r}")
    arr = np.broadcast_to(arr.astype(np.int64), (n,))
    if n and (arr.min() < 0 or arr.max() > KMAX):
        raise ValueError(f"k: must be in [0, {KMAX}], got values from {arr.min()} to {arr.max()}")
    return arr


def leading_accepted(n: int, k: Any, trials: Callable[[int], np.ndarray]) -> np.ndarray:
    """Accepted drafts of n requests: ``trials(kmax)`` gives the [n, kmax] booleans of
    positions 1..kmax (kmax = the largest k); the count is the leading run of True, at most
    each request's k."""
    karr = k_array(k, n)
    kmax = int(karr.max()) if n else 0
    if kmax == 0:
        return np.zeros(n, dtype=np.int64)
    leading = np.cumprod(trials(kmax), axis=1).sum(axis=1)
    return np.minimum(leading, karr).astype(np.int64)
