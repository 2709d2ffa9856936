"""Non-negative least squares with 95% confidence intervals and a held-out error.

The one regression routine calibration uses.  Rows are phases, columns are the cost-model
features (sequences, tokens, context, ...), and the target is the phase time.  The fit
minimises the *relative* squared error (each row weighted by 1/y), because phase times span
orders of magnitude (a prefill of a long prompt vs a one-token draft step) and what matters for
prediction is the relative error.

- Columns that are all zero, or that the others already explain exactly (e.g. verified tokens
  = sequences * (k + 1) when a trace has one k), are *not identifiable*: their coefficient is
  fixed at 0 and reported as such.  Columns are considered in the order given, so put the ones
  to keep first.
- Coefficients are constrained >= 0 (scipy's NNLS).  The 95% interval is estimate +/- t * se,
  with se from the covariance of the (weighted) least-squares estimate on the identified
  columns, and the lower end clipped at 0.
- Held-out error: the rows are shuffled with a fixed seed, a fraction ``holdout`` is set aside,
  the model is fitted on the rest and its mean absolute relative error on the set-aside rows is
  reported (plus the relative error of their total time).  The returned coefficients come from
  a fit on all rows.
- ``match_total``: the relative-error minimiser is biased low for the *mean* when times are
  noisy (for one constant column it is sum(1/y) / sum(1/y^2) < mean(y)), and throughput and
  latency depend on total time.  With ``match_total`` the fitted coefficients (and their
  intervals) are rescaled so that the predicted total equals the measured total over the rows
  fitted: the relative-error fit gives the shape across phase sizes, the total gives the level.
  The held-out error uses the same procedure on the training rows only.
- ``fixed``: coefficients known from elsewhere (``within_group_slope``: a context slope read
  off the variation at fixed shape, where it is not confounded with the shape's own terms).
  Their columns' contribution is taken off the times, the other columns are fitted to the rest
  (rows still weighted by 1/y, the whole phase time), and the fixed value and its interval are
  reported as identified.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Mapping, Sequence

import numpy as np
from scipy import optimize, stats

from psdlab.analysis.checks import check_range

#: condition threshold: a column is dependent when the smallest singular value of the
#: normalised design with it added falls below this fraction of the largest
_RANK_TOL = 1e-7


@dataclass(frozen=True)
class LinearFit:
    """A fitted non-negative linear model y ~ X @ coef."""
    names: tuple[str, ...]
    coef: tuple[float, ...]
    ci_low: tuple[float, ...]
    ci_high: tuple[float, ...]
    identified: tuple[bool, ...]
    n: int                           # rows used
    heldout_error: float             # mean |pred - y| / y on held-out rows (nan if too few)
    heldout_total_error: float       # |sum pred - sum y| / sum y on held-out rows
    n_heldout: int
    fit_error: float                 # mean |pred - y| / y on all rows (in-sample)
    residual_cv: float               # coefficient of variation of y / pred (in-sample)

    def coefficients(self) -> dict[str, float]:
        return dict(zip(self.names, self.coef))

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(X, dtype=float) @ np.asarray(self.coef)

    def to_dict(self) -> dict:
        return {
            "coef": self.coefficients(),
            "ci95": {n: [lo, hi] for n, lo, hi in zip(self.names, self.ci_low, self.ci_high)},
            "identified": dict(zip(self.names, self.identified)),
            "n": self.n, "n_heldout": self.n_heldout,
            "heldout_error": _nan_to_none(self.heldout_error),
            "heldout_total_error": _nan_to_none(self.heldout_total_error),
            "fit_error": _nan_to_none(self.fit_error),
            "residual_cv": _nan_to_none(self.residual_cv),
        }


def _nan_to_none(x: float) -> float | None:
    return None if not np.isfinite(x) else float(x)


def identifiable_columns(X: np.ndarray) -> np.ndarray:
    """Boolean mask of the columns kept, greedily in order, while the design stays full rank."""
    X = np.asarray(X, dtype=float)
    norms = np.linalg.norm(X, axis=0)
    keep = np.zeros(X.shape[1], dtype=bool)
    for j in range(X.shape[1]):
        if norms[j] == 0:
            continue
        trial = keep.copy()
        trial[j] = True
        cols = X[:, trial] / norms[trial]
        sv = np.linalg.svd(cols, compute_uv=False)
        if sv[-1] > _RANK_TOL * sv[0] and trial.sum() <= X.shape[0]:
            keep = trial
    return keep


def _nnls(X: np.ndarray, y: np.ndarray, keep: np.ndarray,
          offset: np.ndarray | None = None) -> np.ndarray:
    """Relative-error NNLS of y - offset on the kept columns (rows weighted by 1/y); zeros
    elsewhere."""
    if not keep.any():
        return np.zeros(X.shape[1])
    w = 1.0 / y
    Xk = X[:, keep] * w[:, None]
    scale = np.linalg.norm(Xk, axis=0)
    rhs = np.ones_like(y) if offset is None else (y - offset) * w
    sol, _ = optimize.nnls(Xk / scale, rhs)
    coef = np.zeros(X.shape[1])
    coef[keep] = sol / scale
    return coef


def total_scale(X: np.ndarray, y: np.ndarray, coef: np.ndarray,
                offset: np.ndarray | None = None) -> float:
    """(measured total) / (predicted total) over the rows, of the part of y the columns
    explain (y - offset); 1 when nothing is predicted."""
    pred = float(np.sum(X @ coef))
    rest = float(np.sum(y if offset is None else y - offset))
    return rest / pred if pred > 0 and rest > 0 else 1.0


def _intervals(X: np.ndarray, y: np.ndarray, keep: np.ndarray, coef: np.ndarray,
               offset: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = coef.copy(), coef.copy()
    p = int(keep.sum())
    dof = len(y) - p
    if p == 0:
        return lo, hi
    if dof <= 0:
        lo[keep], hi[keep] = 0.0, np.inf
        return lo, hi
    w = 1.0 / y
    Xw = X[:, keep] * w[:, None]
    resid = Xw @ coef[keep] - (1.0 if offset is None else (y - offset) * w)
    s2 = float(resid @ resid) / dof
    cov = s2 * np.linalg.pinv(Xw.T @ Xw)
    se = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    half = stats.t.ppf(0.975, dof) * se
    lo[keep] = np.maximum(coef[keep] - half, 0.0)
    hi[keep] = coef[keep] + half
    return lo, hi


def _rel_errors(X: np.ndarray, y: np.ndarray, coef: np.ndarray,
                offset: np.ndarray | None = None) -> tuple[float, float]:
    if len(y) == 0:
        return float("nan"), float("nan")
    pred = X @ coef if offset is None else X @ coef + offset
    return float(np.mean(np.abs(pred - y) / y)), float(abs(pred.sum() - y.sum()) / y.sum())


def fit_nonneg(X, y, names: tuple[str, ...] | list[str], *, holdout: float = 0.2,
               seed: int = 0, match_total: bool = False,
               fixed: Mapping[str, tuple[float, float, float]] | None = None) -> LinearFit:
    """Fit y ~ X @ coef with coef >= 0 (see the module docstring); ``fixed`` maps column names
    to (value, ci low, ci high) given from elsewhere.  Rows with y <= 0 must have been removed
    by the caller."""
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float)
    holdout = check_range("holdout", holdout, 0.0, 0.9)
    if X.ndim != 2 or X.shape[0] != y.shape[0] or X.shape[1] != len(names):
        raise ValueError(f"design matrix shape {X.shape} does not match {len(y)} rows and "
                         f"{len(names)} columns")
    if len(y) == 0:
        raise ValueError("no data to fit")
    if np.any(y <= 0) or not np.all(np.isfinite(y)):
        raise ValueError("phase times must be finite and > 0")
    given = np.zeros(len(names))
    is_fixed = np.zeros(len(names), dtype=bool)
    at = {name: list(names).index(name) for name in (fixed or {})}
    for name, (value, _, _) in (fixed or {}).items():
        given[at[name]] = check_range(f"fixed[{name}]", value, 0.0, np.inf)
        is_fixed[at[name]] = True
    offset = X[:, is_fixed] @ given[is_fixed] if is_fixed.any() else None
    free = np.where(is_fixed[None, :], 0.0, X)
    keep = identifiable_columns(free)
    coef = _nnls(free, y, keep, offset)
    lo, hi = _intervals(free, y, keep, coef, offset)
    if match_total:
        level = total_scale(free, y, coef, offset)
        coef, lo, hi = coef * level, lo * level, hi * level
    for name, (value, low, high) in (fixed or {}).items():
        j = at[name]
        coef[j], lo[j], hi[j], keep[j] = value, max(low, 0.0), high, True
    fit_err, _ = _rel_errors(X, y, coef)
    pred = X @ coef
    ratio = y[pred > 0] / pred[pred > 0]
    cv = float(np.std(ratio) / np.mean(ratio)) if len(ratio) > 1 else float("nan")
    held_err, held_total, n_test = _heldout(free, y, holdout, seed, match_total, offset)
    return LinearFit(names=tuple(names), coef=tuple(map(float, coef)),
                     ci_low=tuple(map(float, lo)), ci_high=tuple(map(float, hi)),
                     identified=tuple(map(bool, keep)), n=len(y), heldout_error=held_err,
                     heldout_total_error=held_total, n_heldout=n_test, fit_error=fit_err,
                     residual_cv=cv)


def _heldout(X: np.ndarray, y: np.ndarray, holdout: float, seed: int,
             match_total: bool = False, offset: np.ndarray | None = None
             ) -> tuple[float, float, int]:
    n_test = int(round(holdout * len(y)))
    if n_test < 1 or len(y) - n_test < 2:
        return float("nan"), float("nan"), 0
    off = np.zeros(len(y)) if offset is None else offset
    order = np.random.default_rng(seed).permutation(len(y))
    test, train = order[:n_test], order[n_test:]
    keep = identifiable_columns(X[train])
    coef = _nnls(X[train], y[train], keep, off[train])
    if match_total:
        coef = coef * total_scale(X[train], y[train], coef, off[train])
    err, total = _rel_errors(X[test], y[test], coef, off[test])
    return err, total, n_test


def within_group_slope(x, y, groups: Sequence[Hashable], *, min_rows: int = 3
                       ) -> tuple[float, float, int]:
    """The slope of y on x from the variation inside groups only (each group's means taken
    off, rows weighted by 1/y^2 as in the relative-error fit): (slope, standard error, rows
    used).  Groups with fewer than ``min_rows`` rows or one value of x add nothing; (nan, nan,
    0) when none is left.  Groups are the shapes of a cost fit (sequences, tokens): inside
    one, only the context varies, so its slope is not mixed up with the shape's own terms --
    across shapes context grows with the sequences, and a joint fit splits that growth
    between the two as the noise falls."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    by: dict[Hashable, list[int]] = {}
    for i, g in enumerate(groups):
        by.setdefault(g, []).append(i)
    dx, dy, wts = [], [], []
    for idx in by.values():
        if len(idx) < min_rows or np.ptp(x[idx]) == 0:
            continue
        w = 1.0 / y[idx] ** 2
        dx.append(x[idx] - np.sum(w * x[idx]) / np.sum(w))
        dy.append(y[idx] - np.sum(w * y[idx]) / np.sum(w))
        wts.append(w)
    if not dx:
        return float("nan"), float("nan"), 0
    ex, ey, ew = np.concatenate(dx), np.concatenate(dy), np.concatenate(wts)
    sxx = float(np.sum(ew * ex * ex))
    slope = float(np.sum(ew * ex * ey)) / sxx
    dof = len(ex) - len(dx) - 1
    if dof <= 0:
        return slope, float("inf"), len(ex)
    s2 = float(np.sum(ew * (ey - slope * ex) ** 2)) / dof
    return slope, float(np.sqrt(s2 / sxx)), len(ex)
