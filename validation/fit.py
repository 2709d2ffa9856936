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
"""
from __future__ import annotations

from dataclasses import dataclass

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


def _nnls(X: np.ndarray, y: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Relative-error NNLS on the kept columns; zeros elsewhere."""
    w = 1.0 / y
    Xk = X[:, keep] * w[:, None]
    scale = np.linalg.norm(Xk, axis=0)
    sol, _ = optimize.nnls(Xk / scale, np.ones_like(y))
    coef = np.zeros(X.shape[1])
    coef[keep] = sol / scale
    return coef


def total_scale(X: np.ndarray, y: np.ndarray, coef: np.ndarray) -> float:
    """(measured total) / (predicted total) over the rows; 1 when nothing is predicted."""
    pred = float(np.sum(X @ coef))
    return float(np.sum(y)) / pred if pred > 0 else 1.0


def _intervals(X: np.ndarray, y: np.ndarray, keep: np.ndarray,
               coef: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
    resid = Xw @ coef[keep] - 1.0
    s2 = float(resid @ resid) / dof
    cov = s2 * np.linalg.pinv(Xw.T @ Xw)
    se = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    half = stats.t.ppf(0.975, dof) * se
    lo[keep] = np.maximum(coef[keep] - half, 0.0)
    hi[keep] = coef[keep] + half
    return lo, hi


def _rel_errors(X: np.ndarray, y: np.ndarray, coef: np.ndarray) -> tuple[float, float]:
    if len(y) == 0:
        return float("nan"), float("nan")
    pred = X @ coef
    return float(np.mean(np.abs(pred - y) / y)), float(abs(pred.sum() - y.sum()) / y.sum())


def fit_nonneg(X, y, names: tuple[str, ...] | list[str], *, holdout: float = 0.2,
               seed: int = 0, match_total: bool = False) -> LinearFit:
    """Fit y ~ X @ coef with coef >= 0 (see the module docstring).  Rows with y <= 0 must have
    been removed by the caller."""
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
    keep = identifiable_columns(X)
    coef = _nnls(X, y, keep)
    lo, hi = _intervals(X, y, keep, coef)
    if match_total:
        level = total_scale(X, y, coef)
        coef, lo, hi = coef * level, lo * level, hi * level
    fit_err, _ = _rel_errors(X, y, coef)
    pred = X @ coef
    ratio = y[pred > 0] / pred[pred > 0]
    cv = float(np.std(ratio) / np.mean(ratio)) if len(ratio) > 1 else float("nan")
    held_err, held_total, n_test = _heldout(X, y, holdout, seed, match_total)
    return LinearFit(names=tuple(names), coef=tuple(map(float, coef)),
                     ci_low=tuple(map(float, lo)), ci_high=tuple(map(float, hi)),
                     identified=tuple(map(bool, keep)), n=len(y), heldout_error=held_err,
                     heldout_total_error=held_total, n_heldout=n_test, fit_error=fit_err,
                     residual_cv=cv)


def _heldout(X: np.ndarray, y: np.ndarray, holdout: float, seed: int,
             match_total: bool = False) -> tuple[float, float, int]:
    n_test = int(round(holdout * len(y)))
    if n_test < 1 or len(y) - n_test < 2:
        return float("nan"), float("nan"), 0
    order = np.random.default_rng(seed).permutation(len(y))
    test, train = order[:n_test], order[n_test:]
    keep = identifiable_columns(X[train])
    coef = _nnls(X[train], y[train], keep)
    if match_total:
        coef = coef * total_scale(X[train], y[train], coef)
    err, total = _rel_errors(X[test], y[test], coef)
    return err, total, n_test
