"""The paper's Lemma 1, Lemma 2 and Theorem 1 as written, checked against the exact ratio.

Dimensionless x = alpha*V, R = 1, times in units of 1/alpha (see `exponential`).

As written (MineDraft, Sec. 4):
* Lemma 1: t* = -(1/alpha) W_{-1}(-e^{-(alpha V + 1)}) - (V + 1/alpha), with
  ln(x + 1) < alpha t* < ln(2(x + 1)), hence
  alpha T_SD > [ln(x + 1) + x] / [1 - 1/(2(x + 1))].
* Lemma 2: t_PSD = V, alpha T_PSD = x / (1 - e^{-x}).
* Theorem 1: if x >= x0 = -W_{-1}(-1/(2e)) - 1 = 1.67835 then T_SD > 1.59 T_PSD ("PSD cuts
  the time by more than 37%").

Findings (reproduce with `psdlab theory` or the functions below; numbers to 4-5 digits):
1. Lemma 1 is correct, including both bounds on t* (alpha t* = ln(1 + x + alpha t*), and
   alpha t* < x + 1 for all x > 0).  Lemma 2 is correct.
2. Exact ratio r(x) = (1 + x + s*)(1 - e^{-x})/x with s* = alpha t*.  r -> 1 both as x -> 0 and
   as x -> infinity (r ~ 1 + (ln x + 1)/x); it is 2 (saving exactly 50%, the "naive" bound is
   *reached*) at x_peak = -W_{-1}(-1/(2 sqrt e)) - 1/2 = 1.25643, where t*_SD = V.
3. Exact saving >= 37% (ratio >= 1/0.63 = 1.58730) exactly for x in [0.18584, 5.24517];
   ratio > 1.59 for x in (0.18781, 5.21109).  At x0 itself the exact ratio is 1.98000
   (saving 49.49%).
4. **Theorem 1 is false as stated**: its claim is made for *all* x >= 1.678, but the exact
   ratio falls below 1.59 for x > 5.2111 (x = 10: ratio 1.3610, saving 26.5%; x = 100: 1.0566;
   x = 1000: 1.0079) and tends to 1.  It holds only on [1.678, 5.211].
5. The paper's bound B(x) = Lemma-1 lower bound / Lemma 2
   = (1 + ln(1 + x)/x) (1 - e^{-x}) 2(x + 1)/(2x + 1)
   is a valid lower bound on r(x) everywhere but is loose; it reaches 1/0.63 only for x in
   [1.68129, 3.00942] (max 1.61111, saving 37.93%, at x = 2.2334) and B(x0) = 1.58701 < 1/0.63,
   i.e. the bound itself does not quite give 37% at the theorem's own threshold.
6. The proof's last step goes the wrong way: ln(1 + x)/x is decreasing, so for x >= x0 it is
   <= its value at x0, which bounds B(x) from *above*, not below (the factor 2(x+1)/(2x+1) is
   decreasing too); B rises from B(x0) = 1.587 to 1.611 at x = 2.23, then falls to 1.  The
   constant 1.59 looks like B(x0) = 1.58701 rounded up, and "37%" like 1 - 1/B(x0) = 36.99%;
   strictly, 1/0.63 = 1.5873 < 1.59, so "> 1.59" and "more than 37%" are not the same claim.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy.optimize import brentq
from scipy.special import lambertw

from psdlab.analysis.checks import check_positive
from psdlab.analysis.theory._checks import positive_array, threshold_value
from psdlab.analysis.theory.exponential import exact_ratio, exact_saving, peak_alpha_v

__all__ = ["THEOREM1_RATIO", "THEOREM1_SAVING", "lemma1_t_star", "lemma1_t_star_bounds",
           "lemma1_sd_lower_bound", "lemma2_t_psd", "theorem1_threshold", "paper_ratio_bound",
           "paper_saving_bound", "Peak", "peak", "region", "Theorem1Check", "theorem1_check"]

THEOREM1_RATIO = 1.59
THEOREM1_SAVING = 0.37
X_MIN, X_MAX = 1e-3, 1e3
_GRID = 8193


def lemma1_t_star(alpha, V) -> np.ndarray:
    """Lemma 1's SD-optimal drafting time, formula as written (plain Lambert W, no polishing;
    `exponential.sd_draft_time_exponential` is the accurate version)."""
    a, v = positive_array("alpha", alpha), positive_array("V", V)
    w = lambertw(-np.exp(-(a * v + 1.0)), -1).real
    return -w / a - (v + 1.0 / a)


def lemma1_t_star_bounds(alpha, V) -> tuple[np.ndarray, np.ndarray]:
    """Lemma 1's bounds (1/alpha) ln(alpha V + 1) < t* < (1/alpha) ln(2 (alpha V + 1))."""
    a, v = positive_array("alpha", alpha), positive_array("V", V)
    return np.log1p(a * v) / a, np.log(2.0 * (a * v + 1.0)) / a


def lemma1_sd_lower_bound(alpha, V, R=1.0) -> np.ndarray:
    """Lemma 1's lower bound R [ln(alpha V + 1)/alpha + V] / [1 - 1/(2 (alpha V + 1))]."""
    a, v = positive_array("alpha", alpha), positive_array("V", V)
    r = positive_array("R", R)
    x = a * v
    return r * (np.log1p(x) / a + v) / (1.0 - 0.5 / (x + 1.0))


def lemma2_t_psd(alpha, V, R=1.0) -> np.ndarray:
    """Lemma 2: T_PSD = R V / (1 - exp(-alpha V)) (correct; equals `t_psd_exponential`)."""
    a, v = positive_array("alpha", alpha), positive_array("V", V)
    return positive_array("R", R) * v / (-np.expm1(-a * v))


def theorem1_threshold() -> float:
    """Theorem 1's condition alpha V >= -W_{-1}(-1/(2e)) - 1 (= 1.6783...)."""
    return float(-lambertw(-0.5 / np.e, -1).real - 1.0)


def paper_ratio_bound(x) -> np.ndarray:
    """The ratio bound the paper's proof uses: Lemma 1's T_SD bound over Lemma 2's T_PSD."""
    x = positive_array("alpha_v", x)
    return (1.0 + np.log1p(x) / x) * (-np.expm1(-x)) * 2.0 * (x + 1.0) / (2.0 * x + 1.0)


def paper_saving_bound(x) -> np.ndarray:
    """1 - 1/paper_ratio_bound(x) (negative where the bound is below 1)."""
    return 1.0 - 1.0 / paper_ratio_bound(x)


@dataclass(frozen=True)
class Peak:
    """Where the exact saving is largest."""
    alpha_v: float
    saving: float
    ratio: float


def peak() -> Peak:
    """The exact peak: x = ln(1 + 2x), ratio exactly 2 (saving 50%)."""
    x = peak_alpha_v()
    return Peak(alpha_v=x, saving=float(exact_saving(x)), ratio=float(exact_ratio(x)))


def _intervals(func: Callable[[np.ndarray], np.ndarray], level: float, x_min: float,
               x_max: float, extra: tuple = ()) -> list[list[float]]:
    """Intervals of [x_min, x_max] where func(x) >= level (log grid + brentq at crossings)."""
    grid = np.geomspace(x_min, x_max, _GRID)
    extra_in = [e for e in extra if x_min <= e <= x_max]
    grid = np.unique(np.concatenate([grid, extra_in]))
    inside = func(grid) >= level
    out: list[list[float]] = []
    g = lambda x: float(func(np.array([x]))[0]) - level  # noqa: E731
    start = x_min if inside[0] else None
    for i in range(1, grid.size):
        if inside[i] and not inside[i - 1]:
            start = brentq(g, grid[i - 1], grid[i], xtol=1e-14, rtol=1e-14)
        elif inside[i - 1] and not inside[i]:
            assert start is not None          # set when the interval opened
            out.append([float(start), brentq(g, grid[i - 1], grid[i], xtol=1e-14, rtol=1e-14)])
            start = None
    if start is not None:
        out.append([float(start), x_max])
    return out


def region(threshold: float = THEOREM1_SAVING, kind: str = "exact", x_min: float = X_MIN,
           x_max: float = X_MAX) -> list[list[float]]:
    """Intervals [lo, hi] of alpha*V in [x_min, x_max] where the saving reaches `threshold`.

    kind="exact": the exact saving 1 - T_PSD/T_SD; kind="paper": the saving implied by the
    paper's bound (Lemma 1 lower bound over Lemma 2).  threshold in (0, 0.5]; at 0.5 the exact
    region is the single point x_peak.  An interval ending at x_min or x_max is cut by the scan.
    """
    threshold = threshold_value(threshold)
    x_min, x_max = check_positive("x_min", x_min), check_positive("x_max", x_max)
    if x_max <= x_min:
        raise ValueError(f"x_max: must be > x_min = {x_min:g}, got {x_max!r}")
    if kind == "exact":
        level = 1.0 / (1.0 - threshold)
        x_pk = peak_alpha_v()
        if level >= 2.0 - 1e-12:
            return [[x_pk, x_pk]] if x_min <= x_pk <= x_max else []
        return _intervals(exact_ratio, level, x_min, x_max, extra=(x_pk,))
    if kind == "paper":
        return _intervals(paper_ratio_bound, 1.0 / (1.0 - threshold), x_min, x_max)
    raise ValueError(f"kind: must be one of exact, paper, got {kind!r}")


@dataclass(frozen=True)
class Theorem1Check:
    """Theorem 1 ("x >= x0 implies T_SD > 1.59 T_PSD") against the exact ratio."""
    holds_as_stated: bool
    threshold_alpha_v: float        # x0 = -W_{-1}(-1/(2e)) - 1
    holds_on: list                  # intervals of [x0, x_max] where exact ratio > 1.59
    fails_above: float | None       # smallest x >= x0 where the exact ratio drops to 1.59
    ratio_at_threshold: float
    ratio_at_x_max: float
    paper_bound_at_threshold: float
    proof_step: str


def theorem1_check(x_max: float = 1e6) -> Theorem1Check:
    """Check Theorem 1 on [x0, x_max] (x_max large, since the claim is for all x >= x0)."""
    x_max = check_positive("x_max", x_max)
    x0 = theorem1_threshold()
    if x_max <= x0:
        raise ValueError(f"x_max: must be > {x0:.4f} (Theorem 1's threshold), got {x_max!r}")
    holds_on = _intervals(exact_ratio, np.nextafter(THEOREM1_RATIO, 3.0), x0, x_max)
    holds = len(holds_on) == 1 and holds_on[0][0] == x0 and holds_on[0][1] == x_max
    fails = None if holds or not holds_on or holds_on[0][0] != x0 else holds_on[0][1]
    step = ("ln(1+x)/x is decreasing, so for x >= x0 it is <= its value at x0: that bounds the "
            "paper's ratio bound from above, not below (the bound tends to 1)")
    return Theorem1Check(holds_as_stated=bool(holds), threshold_alpha_v=x0, holds_on=holds_on,
                         fails_above=fails, ratio_at_threshold=float(exact_ratio(x0)),
                         ratio_at_x_max=float(exact_ratio(x_max)),
                         paper_bound_at_threshold=float(paper_ratio_bound(x0)), proof_step=step)
