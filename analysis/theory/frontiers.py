"""Drafting frontiers: expected useful tokens per step as a function of drafting time t.

A frontier is any vectorised callable f(t) (numpy in, numpy out), optionally with `t_scale`
(a characteristic drafting time that helps the optimiser place its grid).  Ready-made ones:

* `ExponentialFrontier(alpha, scale=1)`: scale * (1 - exp(-alpha t)), the paper's frontier.
  `ExponentialFrontier.fit(t, y)` fits it to measured points (least squares).
* `LeviathanFrontier(a, c, count="accepted")`: per-token acceptance a, per-token draft time c,
  draft length k = t/c (continuous here; use `optimum.optimal_k` for integer k).
  **Conventions**: the expected number of tokens a step *emits* (accepted draft tokens plus the
  target's bonus token) is (1 - a^(k+1))/(1 - a); the expected number of *accepted draft tokens*
  is that minus 1, = a (1 - a^k)/(1 - a); the paper's VSR (accepted / verified draft tokens) is
  accepted / k.  VSR falls with k, so it is not itself a frontier: in the paper's model the
  tokens per step are C * VSR with C = k verified draft tokens, i.e. the accepted count.
  `count="accepted"` (default) uses a (1 - a^k)/(1 - a) = (a/(1-a)) (1 - exp(-alpha_eq t)) with
  alpha_eq = ln(1/a)/c: exactly a scaled exponential frontier, so for continuous k the PSD/SD
  ratio equals the exponential one at x = alpha_eq V.  `count="emitted"` adds the bonus token
  (what a real engine emits per sequence per step); then f(0) = 1 (plain autoregression).
* `EmpiricalFrontier.fit(t, y)`: the least-squares fit among nondecreasing concave piecewise-
  linear functions (through the origin by default), from measured (t, VSR or tokens) points.
  Flat beyond the last knot; without the origin, linear (clipped at 0) before the first knot.
* `MixtureFrontier(exp_weights, exp_rates, lin_weights, lin_rates)`: a positive mixture of
  1 - exp(-a_i t) and min(1, b_j t) pieces; increasing and concave (used by property tests).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import curve_fit, lsq_linear

from psdlab.analysis.checks import (check_choice, check_int, check_nonnegative, check_positive,
                             check_range)

__all__ = ["ExponentialFrontier", "LeviathanFrontier", "EmpiricalFrontier", "MixtureFrontier"]


@dataclass(frozen=True)
class ExponentialFrontier:
    """f(t) = scale * (1 - exp(-alpha t))."""
    alpha: float
    scale: float = 1.0

    def __post_init__(self) -> None:
        check_positive("alpha", self.alpha)
        check_positive("scale", self.scale)

    @property
    def t_scale(self) -> float:
        return 1.0 / self.alpha

    def __call__(self, t) -> np.ndarray:
        return self.scale * -np.expm1(-self.alpha * np.asarray(t, dtype=float))

    @classmethod
    def fit(cls, t, y) -> "ExponentialFrontier":
        """Least-squares fit of scale * (1 - exp(-alpha t)) to measured points."""
        t_arr, y_arr = _points(t, y)
        guess = (1.0 / max(float(np.median(t_arr[t_arr > 0])) if (t_arr > 0).any() else 1.0,
                           1e-300), max(float(y_arr.max()), 1e-12))
        popt, _ = curve_fit(lambda tt, a, s: s * -np.expm1(-a * tt), t_arr, y_arr, p0=guess,
                            bounds=([1e-300, 1e-300], [np.inf, np.inf]), maxfev=20000)
        return cls(alpha=float(popt[0]), scale=float(popt[1]))


@dataclass(frozen=True)
class LeviathanFrontier:
    """Leviathan et al.'s i.i.d. acceptance model as a frontier of t = c*k (see module doc)."""
    a: float
    c: float
    count: str = "accepted"

    def __post_init__(self) -> None:
        check_range("a", self.a, 0.0, 1.0, lo_open=True, hi_open=True)
        check_positive("c", self.c)
        check_choice("count", self.count, ("accepted", "emitted"))

    @property
    def t_scale(self) -> float:
        return self.c

    @property
    def alpha_equivalent(self) -> float:
        """alpha of the exponential frontier this model equals (count="accepted")."""
        return float(np.log(1.0 / self.a) / self.c)

    def expected_emitted(self, k) -> np.ndarray:
        """(1 - a^(k+1)) / (1 - a): tokens per step including the bonus token."""
        k = np.asarray(k, dtype=float)
        return -np.expm1((k + 1.0) * np.log(self.a)) / (1.0 - self.a)

    def expected_accepted(self, k) -> np.ndarray:
        """a (1 - a^k) / (1 - a): accepted draft tokens per step (emitted minus the bonus)."""
        k = np.asarray(k, dtype=float)
        return self.a * -np.expm1(k * np.log(self.a)) / (1.0 - self.a)

    def vsr(self, k) -> np.ndarray:
        """The paper's VSR: expected accepted / k drafted-and-verified tokens (k >= 1)."""
        k = np.asarray(k, dtype=float)
        if np.any(~np.isfinite(k)) or np.any(k < 1):
            raise ValueError(f"k: must be >= 1, got {k!r}")
        return self.expected_accepted(k) / k

    def draft_times(self, k_max: int) -> np.ndarray:
        """t = c*k for k = 1..k_max (the candidates of the integer-k problem)."""
        k_max = check_int("k_max", k_max, minimum=1)
        return self.c * np.arange(1, k_max + 1)

    def __call__(self, t) -> np.ndarray:
        k = np.maximum(np.asarray(t, dtype=float), 0.0) / self.c
        if self.count == "emitted":
            return self.expected_emitted(k)
        return self.expected_accepted(k)


@dataclass(frozen=True)
class EmpiricalFrontier:
    """Nondecreasing concave piecewise-linear frontier through (knots, values)."""
    knots: tuple
    values: tuple
    first_slope: float = 0.0

    def __post_init__(self) -> None:
        k, v = np.asarray(self.knots, dtype=float), np.asarray(self.values, dtype=float)
        if k.ndim != 1 or k.size < 1 or k.shape != v.shape:
            raise ValueError("knots, values: need the same, nonzero number of points")
        if not (np.all(np.isfinite(k)) and np.all(np.isfinite(v))) or np.any(np.diff(k) <= 0):
            raise ValueError("knots: must be finite and strictly increasing")
        check_nonnegative("first_slope", self.first_slope)

    @property
    def t_scale(self) -> float:
        k = np.asarray(self.knots, dtype=float)
        return float(np.median(k[k > 0])) if (k > 0).any() else 1.0

    def __call__(self, t) -> np.ndarray:
        t = np.asarray(t, dtype=float)
        k, v = np.asarray(self.knots, dtype=float), np.asarray(self.values, dtype=float)
        inside = np.interp(t, k, v)
        before = np.maximum(v[0] + self.first_slope * (t - k[0]), 0.0)
        return np.where(t < k[0], before, inside)

    @classmethod
    def fit(cls, t, y, origin: bool = True) -> "EmpiricalFrontier":
        """Least-squares nondecreasing concave piecewise-linear fit to (t, y) points.

        origin=True pins f(0) = 0 (no drafting, no accepted tokens)."""
        t_arr, y_arr = _points(t, y)
        knots = np.unique(np.append(t_arr, 0.0) if origin else t_arr)
        # merge knots closer than float noise: a slope over a 1e-18 gap is meaningless
        gap_ok = np.diff(knots) > 1e-9 * np.maximum(1.0, np.abs(knots[1:]))
        knots = knots[np.concatenate([[True], gap_ok])]
        if knots.size < 2:
            raise ValueError("t: need at least two distinct drafting times (or origin=True)")
        idx = np.searchsorted(knots, t_arr, side="right") - 1
        rel = knots - knots[0]
        # value at knot j = v0 + sum_i d_i * rel[min(j, i+1)], slopes sum_{i>=l} d_i, d_i >= 0
        n_seg = knots.size - 1
        design = rel[np.minimum(np.arange(knots.size)[:, None], np.arange(n_seg)[None, :] + 1)]
        cols = design if origin else np.hstack([np.ones((knots.size, 1)), design])
        lo = np.zeros(cols.shape[1])
        sol = lsq_linear(cols[idx], y_arr, bounds=(lo, np.full(cols.shape[1], np.inf)),
                         method="bvls")
        values = cols @ sol.x
        first_slope = float(sol.x[-n_seg:].sum())
        return cls(knots=tuple(map(float, knots)), values=tuple(map(float, values)),
                   first_slope=first_slope)


@dataclass(frozen=True)
class MixtureFrontier:
    """sum_i w_i (1 - exp(-a_i t)) + sum_j v_j min(1, b_j t), all weights and rates > 0."""
    exp_weights: tuple = ()
    exp_rates: tuple = ()
    lin_weights: tuple = ()
    lin_rates: tuple = ()

    def __post_init__(self) -> None:
        if len(self.exp_weights) != len(self.exp_rates) or len(self.lin_weights) != len(
                self.lin_rates):
            raise ValueError("weights and rates: must have the same length")
        if not (self.exp_weights or self.lin_weights):
            raise ValueError("weights: need at least one component")
        for name in ("exp_weights", "exp_rates", "lin_weights", "lin_rates"):
            for value in getattr(self, name):
                check_positive(name, value)

    @property
    def t_scale(self) -> float:
        rates = list(self.exp_rates) + list(self.lin_rates)
        return float(1.0 / np.median(rates))

    def __call__(self, t) -> np.ndarray:
        t = np.asarray(t, dtype=float)[..., None]
        out = np.zeros(t.shape[:-1])
        if self.exp_weights:
            out = out + (np.asarray(self.exp_weights) * -np.expm1(
                -np.asarray(self.exp_rates) * t)).sum(-1)
        if self.lin_weights:
            out = out + (np.asarray(self.lin_weights) * np.minimum(
                1.0, np.asarray(self.lin_rates) * t)).sum(-1)
        return out


def _points(t, y) -> tuple[np.ndarray, np.ndarray]:
    t_arr = np.asarray(t, dtype=float).ravel()
    y_arr = np.asarray(y, dtype=float).ravel()
    if t_arr.size != y_arr.size or t_arr.size == 0:
        raise ValueError("t, y: need the same, nonzero number of points")
    if not np.all(np.isfinite(t_arr)) or np.any(t_arr < 0):
        raise ValueError("t: drafting times must be finite and >= 0")
    if not np.all(np.isfinite(y_arr)) or np.any(y_arr < 0):
        raise ValueError("y: frontier values must be finite and >= 0")
    return t_arr, y_arr
