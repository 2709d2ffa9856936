"""Closed forms for the exponential frontier f(t) = 1 - exp(-alpha t).

Everything reduces to the dimensionless x = alpha*V (time measured in units of 1/alpha, R = 1):

* SD: minimising (s + x)/(1 - e^{-s}) over s = alpha*t gives the stationarity condition
  e^s = 1 + s + x.  With u = 1 + s + x this is u e^{-u} = e^{-(1+x)}, u > 1, so
  u = -W_{-1}(-e^{-(1+x)}) (Lambert W, lower branch) and s* = u - 1 - x = ln(u).
  At the optimum 1 - e^{-s*} = (s* + x)/u, hence **alpha*T_SD/R = u = 1 + x + s*** exactly.
* PSD: max(s, x)/(1 - e^{-s}) falls for s < x and rises for s > x (s/(1-e^{-s}) is increasing),
  so s = x and **alpha*T_PSD/R = x/(1 - e^{-x})** (the paper's Lemma 2 is right).
* Ratio r(x) = (1 + x + s*)(1 - e^{-x})/x; saving = 1 - 1/r.  r -> 1 as x -> 0 and as
  x -> infinity.  r = 2 exactly when s* = x, i.e. x = ln(1 + 2x):
  **x_peak = -W_{-1}(-1/(2 sqrt(e))) - 1/2 = 1.25643...**, where PSD saves exactly 50%.

Numerics: W_{-1} near its branch point (small x) loses about half the digits and
e^{-(1+x)} underflows for x > ~700, so `sd_opt_draft(x, method="lambertw")` polishes the
Lambert-W value with Newton steps on e^s = 1 + s + x (series form for small s, log form for
large s).  The default method="newton" skips scipy's complex-valued lambertw (the slow part)
and starts Newton from a series / asymptotic guess instead; both give ~1e-15 relative accuracy
(tests check them against each other and against mpmath).  All functions are vectorised.

API (R = total work in C-token steps, default 1; every T is a time in the unit of V):
    sd_opt_draft(x)                     alpha*t*_SD for x = alpha*V
    exact_ratio(x), exact_saving(x)     T_SD/T_PSD and 1 - T_PSD/T_SD
    peak_alpha_v()                      x where the ratio is 2 (saving 50%)
    t_sd_exponential(alpha, V, R=1)     T_SD  (the optimal *total time*, not a drafting time)
    t_psd_exponential(alpha, V, R=1)    T_PSD
    sd_draft_time_exponential(alpha, V) the SD-optimal drafting time per step t*
    psd_draft_time_exponential(alpha, V) the PSD-optimal drafting time per step (= V)
    exponential_optimum(alpha, V, R=1)  all of the above as an `Optimum`
"""
from __future__ import annotations

import numpy as np
from scipy.special import lambertw

from psdlab.analysis.theory._checks import positive_array
from psdlab.analysis.theory.optimum import Optimum

__all__ = ["sd_opt_draft", "exact_ratio", "exact_saving", "peak_alpha_v", "t_sd_exponential",
           "t_psd_exponential", "sd_draft_time_exponential", "psd_draft_time_exponential",
           "exponential_optimum"]

_SMALL_X = 1e-4     # below: series start (W_{-1} loses digits near its branch point)
_LARGE_X = 700.0    # above: e^{-(1+x)} underflows; start from the asymptotic expansion


def _expm1_minus_id(s: np.ndarray) -> np.ndarray:
    """e^s - 1 - s without cancellation for small s."""
    small = np.abs(s) < 1e-2
    ss = np.where(small, s, 0.0)
    series = ss * ss * (1 / 2 + ss * (1 / 6 + ss * (1 / 24 + ss * (1 / 120 + ss * (
        1 / 720 + ss / 5040)))))
    return np.where(small, series, np.expm1(np.where(small, 0.0, s)) - s)


def _start_lambertw(x: np.ndarray) -> np.ndarray:
    """s0 from scipy's W_{-1} (the closed form), with series/asymptotic starts at the ends."""
    mid = (x >= _SMALL_X) & (x < _LARGE_X)
    xm = np.where(mid, x, 1.0)
    s_mid = -lambertw(-np.exp(-(1.0 + xm)), -1).real - 1.0 - xm
    s = np.where(mid, s_mid, _start_series(x))
    return np.where(s > 0, s, _start_series(x))


def _start_series(x: np.ndarray) -> np.ndarray:
    """Cheap start: s = p - p^2/6 + p^3/36 (p = sqrt(2x)) below x = 1, else the asymptotic
    s = ln(1 + x + ln(1 + x)); within 15% everywhere, so 4 Newton steps reach 1e-15."""
    p = np.sqrt(2.0 * x)
    small = p * (1.0 + p * (-1.0 / 6.0 + p / 36.0))
    large = np.log(1.0 + x + np.log1p(x))
    return np.where(x < 1.0, small, large)


def _newton(x: np.ndarray, s: np.ndarray, steps: int) -> np.ndarray:
    for _ in range(steps):
        low = s < 1.0
        g_low = _expm1_minus_id(s) - x                   # e^s - 1 - s - x
        g_high = s - np.log1p(s + x)                     # s - ln(1 + s + x)
        d_high = (s + x) / (1.0 + s + x)
        s = s - np.where(low, g_low / np.expm1(s), g_high / d_high)
    return s


def sd_opt_draft(x, method: str = "newton") -> np.ndarray:
    """SD-optimal alpha*t for x = alpha*V: the root s > 0 of e^s = 1 + s + x, i.e.
    s = -W_{-1}(-e^{-(1+x)}) - 1 - x.

    method="lambertw": scipy.special.lambertw, polished by 2 Newton steps; method="newton"
    (default, ~2x faster, same accuracy: both agree with 40-digit mpmath to ~1e-14): series or
    asymptotic start and 4 Newton steps."""
    x = positive_array("alpha_v", x)
    if method == "lambertw":
        return _newton(x, _start_lambertw(x), 2)
    if method == "newton":
        return _newton(x, _start_series(x), 4)
    raise ValueError(f"method: must be one of newton, lambertw, got {method!r}")


def exact_ratio(x) -> np.ndarray:
    """T_SD / T_PSD for the exponential frontier as a function of x = alpha*V; clipped to its
    analytic range [1, 2] against last-bit rounding."""
    x = positive_array("alpha_v", x)
    s = sd_opt_draft(x)
    return np.clip((1.0 + x + s) * (-np.expm1(-x)) / x, 1.0, 2.0)


def exact_saving(x) -> np.ndarray:
    """1 - T_PSD / T_SD: the fraction of time PSD saves (in [0, 0.5])."""
    return 1.0 - 1.0 / exact_ratio(x)


def peak_alpha_v() -> float:
    """The x = alpha*V of maximal saving: x = ln(1 + 2x), i.e. -W_{-1}(-1/(2 sqrt e)) - 1/2."""
    return float(-lambertw(-0.5 * np.exp(-0.5), -1).real - 0.5)


def _alpha_v(alpha, V) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = positive_array("alpha", alpha)
    v = positive_array("V", V)
    return a, v, a * v


def t_sd_exponential(alpha, V, R=1.0) -> np.ndarray:
    """Optimal standard-SD total time T_SD = min_t R (t + V) / (1 - e^{-alpha t})."""
    a, _, x = _alpha_v(alpha, V)
    r = positive_array("R", R)
    return r * (1.0 + x + sd_opt_draft(x)) / a


def t_psd_exponential(alpha, V, R=1.0) -> np.ndarray:
    """Optimal parallel-SD total time T_PSD = R V / (1 - e^{-alpha V})."""
    _, v, x = _alpha_v(alpha, V)
    r = positive_array("R", R)
    return r * v / (-np.expm1(-x))


def sd_draft_time_exponential(alpha, V) -> np.ndarray:
    """The SD-optimal drafting time per step t* (Lemma 1's t*), in the unit of V."""
    a, _, x = _alpha_v(alpha, V)
    return sd_opt_draft(x) / a


def psd_draft_time_exponential(alpha, V) -> np.ndarray:
    """The PSD-optimal drafting time per step: t = V."""
    _, v, x = _alpha_v(alpha, V)
    return v * np.ones_like(x)


def exponential_optimum(alpha, V, R=1.0) -> Optimum:
    """All optima for the exponential frontier at once (arrays broadcast over alpha, V, R)."""
    a, v, x = _alpha_v(alpha, V)
    r = positive_array("R", R)
    s = sd_opt_draft(x)
    return Optimum(t_sd=s / a, T_sd=r * (1.0 + x + s) / a,
                   t_psd=v * np.ones_like(x), T_psd=r * v / (-np.expm1(-x)))
