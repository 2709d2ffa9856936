"""Exact T_SD and T_PSD for any drafting frontier, by robust numeric minimisation.

A *frontier* is any vectorised callable f(t) >= 0 (expected useful tokens per step, or the
paper's VSR when the verified tokens per step C are fixed), optionally with an attribute
`t_scale` (a characteristic drafting time, used to place the search grid).  With R the work in
the unit that f counts (R = 1 by default):

    T_SD  = min_t R (t + V) / f(t)        (draft, then verify)
    T_PSD = min_t R max(t, V) / f(t)      (draft one batch while the other is verified)

Continuous t: a log-spaced grid over ~15 decades around V and t_scale, then bounded Brent
refinement between the neighbours of the best grid point.  For PSD the two pieces t <= V
(V/f(t)) and t >= V (t/f(t)) are searched separately and t = V itself is a candidate, so the
kink is hit exactly.  Discrete t (e.g. t = c*k, k = 1, 2, ...): pass `candidates`.

Whatever f is, T_PSD <= T_SD <= 2 T_PSD, because max(t, V) <= t + V <= 2 max(t, V).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from scipy.optimize import minimize_scalar

from psdlab.analysis.checks import check_int, check_positive
from psdlab.analysis.theory._checks import positive_array

__all__ = ["Optimum", "KOptimum", "optimal_times", "optimal_k", "sd_objective", "psd_objective"]

Frontier = Callable[[np.ndarray], Any]
_GRID = 4001
_DECADES_BELOW = 9.0
_DECADES_ABOVE = 6.0


@dataclass(frozen=True)
class Optimum:
    """Optimal drafting times per step (t_sd, t_psd) and total times (T_sd, T_psd)."""
    t_sd: Any
    T_sd: Any
    t_psd: Any
    T_psd: Any

    @property
    def ratio(self) -> Any:
        """T_SD / T_PSD (>= 1)."""
        return np.asarray(self.T_sd) / np.asarray(self.T_psd)

    @property
    def saving(self) -> Any:
        """1 - T_PSD / T_SD: the fraction of time PSD saves (<= 0.5)."""
        return 1.0 - np.asarray(self.T_psd) / np.asarray(self.T_sd)


@dataclass(frozen=True)
class KOptimum:
    """Optimal integer draft lengths for SD and PSD, and the corresponding `Optimum`."""
    k_sd: int
    k_psd: int
    optimum: Optimum


def _f(frontier: Frontier, t: np.ndarray) -> np.ndarray:
    return np.broadcast_to(np.asarray(frontier(t), dtype=float), np.shape(t))


def sd_objective(frontier: Frontier, t, V: float, R: float = 1.0) -> np.ndarray:
    """R (t + V) / f(t); +inf where f(t) <= 0."""
    t = np.asarray(t, dtype=float)
    f = _f(frontier, t)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(f > 0, R * (t + V) / np.where(f > 0, f, 1.0), np.inf)


def psd_objective(frontier: Frontier, t, V: float, R: float = 1.0) -> np.ndarray:
    """R max(t, V) / f(t); +inf where f(t) <= 0."""
    t = np.asarray(t, dtype=float)
    f = _f(frontier, t)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(f > 0, R * np.maximum(t, V) / np.where(f > 0, f, 1.0), np.inf)


def _refine(obj: Callable[[np.ndarray], np.ndarray], grid: np.ndarray,
            prefer_last: bool = False) -> tuple[float, float]:
    """Grid argmin (ties: first, or last with prefer_last), then bounded Brent between its
    neighbours; returns (t, value)."""
    values = obj(grid)
    i = int(grid.size - 1 - np.argmin(values[::-1])) if prefer_last else int(np.argmin(values))
    best_t, best_v = float(grid[i]), float(values[i])
    if not np.isfinite(best_v):
        return best_t, best_v
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    if hi > lo:
        res = minimize_scalar(lambda t: float(obj(np.array([t]))[0]), bounds=(lo, hi),
                              method="bounded", options={"xatol": 1e-13 * hi})
        if res.success and float(res.fun) < best_v:
            best_t, best_v = float(res.x), float(res.fun)
    return best_t, best_v


def _scale(frontier: Frontier, V: float) -> tuple[float, float]:
    hint = float(getattr(frontier, "t_scale", V) or V)
    if not np.isfinite(hint) or hint <= 0:
        hint = V
    return min(V, hint) * 10 ** -_DECADES_BELOW, max(V, hint) * 10 ** _DECADES_ABOVE


def _continuous(frontier: Frontier, V: float, R: float) -> Optimum:
    lo, hi = _scale(frontier, V)
    grid = np.unique(np.append(np.geomspace(lo, hi, _GRID), V))
    t_sd, T_sd = _refine(lambda t: sd_objective(frontier, t, V, R), grid)
    below, above = grid[grid <= V], grid[grid >= V]
    t_a, T_a = _refine(lambda t: psd_objective(frontier, np.minimum(t, V), V, R), below,
                       prefer_last=True)
    t_b, T_b = _refine(lambda t: psd_objective(frontier, np.maximum(t, V), V, R), above)
    t_psd, T_psd = (t_a, T_a) if T_a <= T_b else (t_b, T_b)
    return Optimum(t_sd=t_sd, T_sd=T_sd, t_psd=t_psd, T_psd=T_psd)


def _discrete(frontier: Frontier, V: float, R: float, candidates) -> Optimum:
    t = np.unique(positive_array("candidates", candidates).ravel())
    sd, psd = sd_objective(frontier, t, V, R), psd_objective(frontier, t, V, R)
    i, j = int(np.argmin(sd)), int(np.argmin(psd))
    return Optimum(t_sd=float(t[i]), T_sd=float(sd[i]), t_psd=float(t[j]), T_psd=float(psd[j]))


def optimal_times(frontier: Frontier, V: float, R: float = 1.0, *,
                  candidates=None) -> Optimum:
    """Exact T_SD, T_PSD and their optimal drafting times for any frontier f(t).

    frontier: vectorised callable t -> f(t) (`analysis.theory.frontiers` has ready ones).
    V: verification time per step (> 0).  R: work in the unit f counts (> 0).
    candidates: optional drafting times to choose from (discrete case, e.g. c*k); if None the
    minimisation is over continuous t > 0.
    """
    V = check_positive("V", V)
    R = check_positive("R", R)
    if candidates is not None:
        return _discrete(frontier, V, R, candidates)
    return _continuous(frontier, V, R)


def optimal_k(frontier: Any, V: float, R: float = 1.0, k_max: int = 64) -> KOptimum:
    """Optimal integer draft length k in 1..k_max for a frontier with per-token draft time `c`
    (e.g. `LeviathanFrontier`): drafting time per step t = c*k."""
    k_max = check_int("k_max", k_max, minimum=1)
    c = check_positive("c", frontier.c)
    ks = np.arange(1, k_max + 1)
    opt = optimal_times(frontier, V, R, candidates=c * ks)
    return KOptimum(k_sd=int(round(opt.t_sd / c)), k_psd=int(round(opt.t_psd / c)), optimum=opt)
