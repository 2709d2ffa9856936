"""The chance that noise alone breaks a bound (`validation.noise`, whose module docstring
derives it): ``break_chance``, with correlated pairs of rows counted by ``inside_both`` and a
shift common to every row integrated on a grid (``_shift_grid``)."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from psdlab.analysis.checks import check_range


def _inside(se: float, bound: float, shift: float = 0.0) -> float:
    """P(|N(0, se^2) + shift| <= bound)."""
    if se <= 0:
        return float(abs(shift) <= bound)
    from scipy.special import ndtr
    return float(ndtr((bound - shift) / se) - ndtr((-bound - shift) / se))


def inside_both(se1: float, se2: float, rho: float, bound: float, shift: float = 0.0) -> float:
    """P(|X + s| <= b and |Y + s| <= b) for zero-mean normals with SDs se1, se2 and
    correlation rho and a fixed shift s (integrated over X on a fixed grid; exact limits at
    zero SD and |rho| = 1)."""
    if se1 <= 0 or se2 <= 0:
        return _inside(se1, bound, shift) * _inside(se2, bound, shift)
    x = np.linspace(-bound - shift, bound - shift, 2001)
    pdf = np.exp(-0.5 * (x / se1) ** 2) / (se1 * math.sqrt(2.0 * math.pi))
    mean = rho * se2 / se1 * x + shift
    spread = se2 * math.sqrt(max(0.0, 1.0 - rho * rho))
    if spread < 1e-12 * se2:
        inner = (np.abs(mean) <= bound).astype(float)
    else:
        from scipy.special import ndtr
        inner = ndtr((bound - mean) / spread) - ndtr((-bound - mean) / spread)
    y = pdf * inner
    return float(min(1.0, np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2.0))


def _all_inside(ses: Sequence[float], bound: float, links: Sequence[tuple[int, int, float]],
                shift: float) -> float:
    """P(every |N(0, se_i^2) + shift| <= bound), rows independent except ``links``."""
    inside, linked = 1.0, set()
    for i, j, rho in links:
        if i in linked or j in linked or i == j:
            raise ValueError(f"links: row {i} or {j} linked twice")
        linked |= {i, j}
        inside *= inside_both(ses[i], ses[j], rho, bound, shift)
    for i, se in enumerate(ses):
        if i not in linked:
            inside *= _inside(se, bound, shift)
    return inside


def _shift_grid(ses: Sequence[float], common: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes (in units of ``common``) and normal weights for the integral over the common
    shift.  The integrand steps from ~1 to ~0 where |shift| crosses the bound, over a width
    of about the smallest se; a uniform grid a quarter of that width apart follows the step
    (a 40-node Gauss-Hermite rule missed it by 0.02 when the se is small against the shift)."""
    step = min(0.05, 0.25 * min(ses) / common) if min(ses) > 0 else 0.002
    n = min(8001, int(math.ceil(16.0 / max(step, 0.002))) + 1)
    nodes = np.linspace(-8.0, 8.0, n)
    weights = np.exp(-0.5 * nodes ** 2)
    return nodes, weights / weights.sum()


def break_chance(ses: Sequence[float], bound: float,
                 links: Sequence[tuple[int, int, float]] = (),
                 common: float = 0.0) -> float | None:
    """P(at least one |N(0, se_i^2) + s| > bound): how often noise alone breaks the bound.
    Rows are independent except the pairs in ``links`` (i, j, correlation; each row in one pair
    at most); ``s`` is one shift common to every row, N(0, common^2) (the calibration runs'
    noise, ``calibration_se``; 0: none), integrated on a grid fine enough for its step
    (``_shift_grid``)."""
    if not ses:
        return None
    common = check_range("common", common, 0.0, math.inf)
    if common == 0.0:
        return max(0.0, 1.0 - _all_inside(ses, bound, links, 0.0))
    nodes, weights = _shift_grid(ses, common)
    inside = sum(float(w) * _all_inside(ses, bound, links, common * float(x))
                 for x, w in zip(nodes, weights))
    return min(1.0, max(0.0, 1.0 - inside))
