"""Small statistics and interval helpers behind the trace metrics (numpy only).

- ``percentiles``: mean, p50, p90, p99 with numpy's linear method; an empty input gives Nones.
- Interval arithmetic on closed-open time intervals ``[start, end)``: merging into a disjoint
  union, its total length, and how much of each of many intervals a union covers (vectorised,
  O((n + q) log n)), used for overlap and idle-time metrics.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

PERCENTILES = (50, 90, 99)


def percentiles(values: Iterable[float]) -> dict[str, float | None]:
    """``{"mean", "p50", "p90", "p99"}`` of ``values`` (numpy's linear interpolation); all None
    when empty.  Rejects NaN and infinities with a ValueError."""
    arr = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=float)
    arr = arr.ravel()
    keys = ["mean"] + [f"p{q}" for q in PERCENTILES]
    if arr.size == 0:
        return dict.fromkeys(keys)
    if not np.all(np.isfinite(arr)):
        raise ValueError("values: must be finite numbers (got NaN or infinity)")
    qs = np.percentile(arr, PERCENTILES, method="linear")
    out: dict[str, float | None] = {"mean": float(arr.mean())}
    out.update({f"p{q}": float(v) for q, v in zip(PERCENTILES, qs)})
    return out


def _as_arrays(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(starts, dtype=float).ravel()
    e = np.asarray(ends, dtype=float).ravel()
    if s.shape != e.shape:
        raise ValueError(f"intervals: {s.size} starts but {e.size} ends")
    return s, e


def merge_intervals(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as sorted, disjoint ``(starts, ends)``; empty intervals dropped;
    touching intervals are joined."""
    s, e = _as_arrays(starts, ends)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    # a new block starts where an interval begins after everything before it has ended
    new_block = np.ones(s.size, dtype=bool)
    new_block[1:] = s[1:] > reach[:-1]
    block_id = np.cumsum(new_block) - 1
    out_s = s[new_block]
    out_e = np.zeros(out_s.size)
    np.maximum.at(out_e, block_id, e)
    return out_s, out_e


def union_length(starts, ends) -> float:
    """Total length covered by the union of the intervals."""
    s, e = merge_intervals(starts, ends)
    return float(np.sum(e - s))


def _covered_up_to(ms: np.ndarray, me: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Length of the merged union (ms, me) lying in (-inf, x], for each x."""
    if ms.size == 0:
        return np.zeros_like(x)
    cum = np.concatenate(([0.0], np.cumsum(me - ms)))
    i = np.searchsorted(ms, x, side="right") - 1      # last block starting at or before x
    inside = np.where(i >= 0, np.minimum(x, me[np.maximum(i, 0)]) - ms[np.maximum(i, 0)], 0.0)
    return np.where(i >= 0, cum[np.maximum(i, 0)] + inside, 0.0)


def covered_length(union_starts, union_ends, starts, ends) -> np.ndarray:
    """For each query interval [starts[j], ends[j]), the length of it lying inside the union of
    the intervals (union_starts, union_ends) (which need not be merged)."""
    ms, me = merge_intervals(union_starts, union_ends)
    qs, qe = _as_arrays(starts, ends)
    qe = np.maximum(qe, qs)
    covered = _covered_up_to(ms, me, qe) - _covered_up_to(ms, me, qs)
    return np.clip(covered, 0.0, qe - qs)


def clip_intervals(starts, ends, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Intervals cut to the window [lo, hi]; those falling outside become empty."""
    s, e = _as_arrays(starts, ends)
    s = np.clip(s, lo, hi)
    e = np.clip(e, lo, hi)
    return s, np.maximum(e, s)
