"""The theory's side of `psdlab frontier`: envelope, exponential fit and predicted optima.

Input: one `FrontierPoint` per drafter, the means of its measured quantities (SD-separate run,
steady-state decode steps): drafting time t, verification time V, per-step overhead o (mean
step - t - V), the CVs of t and V, the VSR (accepted / verified draft tokens) and the tokens
the target emits per step (all sequences, bonus included).  Everything here is numpy/scipy.

- `upper_envelope`: the drafters no other one beats (drafting time <= and VSR >=, one
  strictly): the measured Pareto frontier f(t) = best VSR reachable within time t.
- `fit_exponential`: least-squares alpha of the paper's f(t) = 1 - exp(-alpha t) on the
  envelope points (scale fixed at 1, as the paper), with its rms residual and R^2.
- Two models of the time per generated token (system-wide, iso-batch: PSD verifies one
  batch of m per step as SD does):
    paper: SD (t + V) / (C f), PSD max(t, V) / (C f), C = m k tokens verified per step,
           one constant V, no bonus token, no overhead, no jitter;
    batch: psdlab's batch-aware model (``analysis.theory.batch``): SD (t + V + o) / T,
           PSD (E[max(s_t t, s_V V)] + o) / T with T = m (1 + k f) emitted tokens per step
           (bonus token), each drafter's own V (V at this k and m), its per-step overhead o,
           E[max] for gamma-distributed t and V with the measured CVs (jitter) and the
           overlap slowdowns s_t, s_V of two phases that share the machine (contention,
           `contention`: leave-one-out over the other drafters' PSD runs).  SD's prediction
           reproduces its own measurement by construction (t + V + o is its mean step);
           the content is PSD's, from SD-separate inputs and the others' contention.
  Each model is evaluated at the measured points ("points": the drafter's own VSR / tokens
  per step) and on the fitted curve ("fit": f from the fit at the drafter's t; overhead and
  CVs pooled), and for the fit also over continuous t (the optimum the theory would ask for).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import minimize_scalar

from psdlab.analysis.checks import check_int
from psdlab.analysis.theory import (exact_ratio, expected_max, peak_alpha_v,
                                    sd_draft_time_exponential)
from psdlab.validation.frontier.prediction_results import (PREDICTION_MODELS, BatchOptimum,
                                                           BestDrafter, ContentionSlowdowns,
                                                           ContinuousOptima, FitSummary,
                                                           FrontierPrediction, ModelPrediction,
                                                           PaperOptimum, PooledInputs,
                                                           TheoryAtAlphaV)

MODELS = ("paper", "batch")


@dataclass(frozen=True)
class FrontierPoint:
    """One drafter's measured means (seconds; tokens_per_step over all m sequences)."""
    name: str
    t: float
    V: float
    vsr: float
    tokens_per_step: float
    overhead: float = 0.0
    t_cv: float = 0.0
    V_cv: float = 0.0
    t_overlapped: float | None = None   # mean t / V of the overlapped steps of its PSD runs
    V_overlapped: float | None = None


@dataclass(frozen=True)
class ExpFit:
    """f(t) = 1 - exp(-alpha t) fitted to the envelope; quality on envelope and all points."""
    alpha: float
    rms_envelope: float
    r2_envelope: float | None
    rms_all: float
    r2_all: float | None

    def __call__(self, t) -> np.ndarray:
        return -np.expm1(-self.alpha * np.asarray(t, dtype=float))


def upper_envelope(t: ArrayLike, vsr: ArrayLike) -> list[int]:
    """Indices of the non-dominated points (no other point has t' <= t and vsr' >= vsr with
    one strict), sorted by t; of exact duplicates the first is kept."""
    t_a, y_a = np.asarray(t, dtype=float), np.asarray(vsr, dtype=float)
    if t_a.shape != y_a.shape or t_a.size == 0:
        raise ValueError("t, vsr: need the same, nonzero number of points")
    keep = []
    for i in range(t_a.size):
        dominated = False
        for j in range(t_a.size):
            if j == i:
                continue
            weakly = t_a[j] <= t_a[i] and y_a[j] >= y_a[i]
            strictly = t_a[j] < t_a[i] or y_a[j] > y_a[i]
            if weakly and (strictly or j < i):
                dominated = True
                break
        if not dominated:
            keep.append(i)
    return sorted(keep, key=lambda i: (t_a[i], i))


def _quality(alpha: float, t: np.ndarray, y: np.ndarray) -> tuple[float, float | None]:
    res = y + np.expm1(-alpha * t)
    ss = float(np.sum((y - y.mean()) ** 2))
    return float(np.sqrt(np.mean(res ** 2))), (1.0 - float(np.sum(res ** 2)) / ss
                                                if ss > 0 else None)


def fit_exponential(t_env: ArrayLike, y_env: ArrayLike, t_all: ArrayLike | None = None,
                    y_all: ArrayLike | None = None) -> ExpFit:
    """Least-squares alpha of 1 - exp(-alpha t) on (t_env, y_env) (1-D search over log
    alpha between 1e-6 and 1e6 over the median t)."""
    t, y = np.asarray(t_env, dtype=float), np.asarray(y_env, dtype=float)
    if t.size == 0 or t.shape != y.shape or np.any(t <= 0) or not np.all(np.isfinite(y)):
        raise ValueError("t: the fit needs drafting times > 0 and finite VSRs")
    scale = float(np.median(t))

    def sse(log_a: float) -> float:
        return float(np.sum((y + np.expm1(-np.exp(log_a) * t)) ** 2))

    grid = np.log(1.0 / scale) + np.linspace(-14.0, 14.0, 561)
    i = int(np.argmin([sse(g) for g in grid]))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    res = minimize_scalar(sse, bounds=(lo, hi), method="bounded", options={"xatol": 1e-12})
    alpha = float(np.exp(res.x if res.fun <= sse(grid[i]) else grid[i]))
    rms_e, r2_e = _quality(alpha, t, y)
    ta = t if t_all is None else np.asarray(t_all, dtype=float)
    ya = y if y_all is None else np.asarray(y_all, dtype=float)
    rms_a, r2_a = _quality(alpha, ta, ya)
    return ExpFit(alpha=alpha, rms_envelope=rms_e, r2_envelope=r2_e, rms_all=rms_a,
                  r2_all=r2_a)


def paper_times(t: np.ndarray, V: float, f: np.ndarray, k: int, m: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """The paper's time per generated token, SD and PSD: (t + V) / (m k f), max(t, V) / (m k f)
    (inf where f <= 0)."""
    c = float(m * k)
    with np.errstate(divide="ignore"):
        good = f > 0
        den = np.where(good, c * f, 1.0)
        return (np.where(good, (t + V) / den, np.inf),
                np.where(good, np.maximum(t, V) / den, np.inf))


def batch_times(t: ArrayLike, V: ArrayLike, tokens: ArrayLike, o: ArrayLike,
                t_cv: ArrayLike, V_cv: ArrayLike, slow_t: ArrayLike = 1.0, slow_V: ArrayLike = 1.0
                ) -> tuple[np.ndarray, np.ndarray]:
    """psdlab's batch-aware time per generated token, SD and PSD (module doc); in PSD the
    overlapped phases take ``slow_t`` / ``slow_V`` times as long as alone (contention)."""
    t, V, tokens, o, tc, vc, st, sv = np.broadcast_arrays(*(
        np.asarray(a, dtype=float) for a in (t, V, tokens, o, t_cv, V_cv, slow_t, slow_V)))
    e_max = np.array([expected_max(max(a * b, 1e-12), max(c * d, 1e-12), e, f, "gamma")
                      for a, b, c, d, e, f in zip(t.ravel(), st.ravel(), V.ravel(), sv.ravel(),
                                                  tc.ravel(), vc.ravel())])
    return (t + V + o) / tokens, (e_max.reshape(t.shape) + o) / tokens


def contention(points: Sequence[FrontierPoint]) -> tuple[np.ndarray, np.ndarray]:
    """Per drafter, the overlap slowdowns (drafting, verification) it is predicted with: the
    median over the *other* drafters of overlapped-PSD time / SD-separate time (leave one out,
    so no drafter's PSD prediction uses its own PSD run); 1 where nothing is known."""
    st = np.array([p.t_overlapped / p.t if p.t_overlapped and p.t > 0 else np.nan
                   for p in points])
    sv = np.array([p.V_overlapped / p.V if p.V_overlapped and p.V > 0 else np.nan
                   for p in points])
    out_t, out_v = np.ones(len(points)), np.ones(len(points))
    for i in range(len(points)):
        others = np.arange(len(points)) != i
        if np.isfinite(st[others]).any():
            out_t[i] = float(np.nanmedian(st[others]))
        if np.isfinite(sv[others]).any():
            out_v[i] = float(np.nanmedian(sv[others]))
    return out_t, out_v


def _best(names: Sequence[str], t: np.ndarray, times: np.ndarray) -> BestDrafter:
    i = int(np.argmin(times))
    return BestDrafter(drafter=names[i], t_s=float(t[i]), time_per_token_s=float(times[i]))


def _prediction(names: Sequence[str], t: np.ndarray, sd: np.ndarray,
                psd: np.ndarray) -> ModelPrediction:
    best_sd, best_psd = _best(names, t, sd), _best(names, t, psd)
    return ModelPrediction(sd_time_per_token_s=tuple(float(x) for x in sd),
                           psd_time_per_token_s=tuple(float(x) for x in psd),
                           best_sd=best_sd, best_psd=best_psd,
                           ratio_sd_over_psd=best_sd.time_per_token_s
                           / best_psd.time_per_token_s)


def _continuous_batch(fit: ExpFit, V: float, o: float, tcv: float, vcv: float, k: int,
                      m: int, t_max: float, slow: tuple[float, float]) -> BatchOptimum:
    grid = np.linspace(t_max / 400.0, t_max, 400)
    tokens = m * (1.0 + k * fit(grid))
    sd, psd = batch_times(grid, np.full_like(grid, V), tokens, np.full_like(grid, o), tcv, vcv,
                          slow[0], slow[1])
    i, j = int(np.argmin(sd)), int(np.argmin(psd))
    return BatchOptimum(t_sd_s=float(grid[i]), t_psd_s=float(grid[j]),
                        sd_time_per_token_s=float(sd[i]), psd_time_per_token_s=float(psd[j]),
                        ratio_sd_over_psd=float(sd[i] / psd[j]), grid_max_s=float(t_max))


def predict_optima(points: Sequence[FrontierPoint], k: int, m: int) -> FrontierPrediction:
    """Envelope, fit and both models' predictions (points and fitted curve)."""
    k, m = check_int("k", k, minimum=1), check_int("batch", m, minimum=1)
    if len(points) < 2:
        raise ValueError("points: the frontier needs at least two drafters")
    names = [p.name for p in points]
    t = np.array([p.t for p in points])
    V = np.array([p.V for p in points])
    vsr = np.array([p.vsr for p in points])
    tokens = np.array([p.tokens_per_step for p in points])
    o = np.array([p.overhead for p in points])
    tcv, vcv = np.array([p.t_cv for p in points]), np.array([p.V_cv for p in points])
    env = upper_envelope(t, vsr)
    V0 = float(np.median(V))
    fit = fit_exponential(t[env], vsr[env], t, vsr)
    x = fit.alpha * V0
    f_fit = fit(t)
    o0, tc0, vc0 = float(np.median(o)), float(np.median(tcv)), float(np.median(vcv))
    theory = TheoryAtAlphaV(
        exact_ratio=float(exact_ratio(x)), saving=float(1.0 - 1.0 / exact_ratio(x)),
        t_sd_opt_s=float(sd_draft_time_exponential(fit.alpha, V0)), t_psd_opt_s=V0,
        peak_alpha_v=peak_alpha_v())
    sd_p, psd_p = paper_times(t, V0, vsr, k, m)
    sd_pf, psd_pf = paper_times(t, V0, f_fit, k, m)
    slow_t, slow_V = contention(points)
    sd_b, psd_b = batch_times(t, V, tokens, o, tcv, vcv, slow_t, slow_V)
    sd_n, psd_n = batch_times(t, V, tokens, o, tcv, vcv)
    st0, sv0 = float(np.median(slow_t)), float(np.median(slow_V))
    sd_bf, psd_bf = batch_times(t, V, m * (1.0 + k * f_fit), o0, tc0, vc0, st0, sv0)
    times = dict(zip(PREDICTION_MODELS, ((sd_p, psd_p), (sd_pf, psd_pf), (sd_b, psd_b),
                                         (sd_n, psd_n), (sd_bf, psd_bf))))
    return FrontierPrediction(
        k=k, m=m, drafters=tuple(names), V_s=V0, V_range_s=(float(V.min()), float(V.max())),
        envelope=tuple(names[i] for i in env),
        fit=FitSummary(alpha_per_s=fit.alpha, alpha_v=x, rms_envelope=fit.rms_envelope,
                       r2_envelope=fit.r2_envelope, rms_all=fit.rms_all, r2_all=fit.r2_all,
                       vsr_fit=tuple(float(v) for v in f_fit)),
        theory_at_alpha_v=theory,
        pooled=PooledInputs(overhead_s=o0, t_cv=tc0, V_cv=vc0, slow_t=st0, slow_V=sv0),
        contention=ContentionSlowdowns(slow_t=tuple(float(x) for x in slow_t),
                                       slow_V=tuple(float(x) for x in slow_V)),
        predictions={key: _prediction(names, t, sd, psd) for key, (sd, psd) in times.items()},
        continuous=ContinuousOptima(
            paper_fit=PaperOptimum(t_sd_s=theory.t_sd_opt_s, t_psd_s=V0,
                                   ratio_sd_over_psd=theory.exact_ratio),
            batch_fit=_continuous_batch(fit, V0, o0, tc0, vc0, k, m, 2.0 * float(t.max()),
                                        (st0, sv0))))
