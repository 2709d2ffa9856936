"""Step-time jitter: E[max(t, V)] for random drafting and verification times.

With t and V independent, SD's mean step E[t + V] = mu_t + mu_V is unaffected by jitter, but
PSD's mean step E[max(t, V)] exceeds max(mu_t, mu_V) (Jensen), which eats into PSD's gain.

* normal: Clark's exact formula E[max] = mu_t Phi(d) + mu_V Phi(-d) + s phi(d), with
  s^2 = sigma_t^2 + sigma_V^2 and d = (mu_t - mu_V)/s (a normal time can be negative: use it
  for CVs up to ~0.3).
* gamma: E[max] = int_0^inf (1 - F_t(z) F_V(z)) dz by quadrature (shape 1/cv^2, scale mu cv^2;
  cv = 0 is a constant).

`jitter_gain` reports the deterministic PSD speedup (mu_t + mu_V)/max(mu_t, mu_V), the jittered
one (mu_t + mu_V)/E[max], and the fraction of the deterministic gain lost,
(speedup_det - speedup_jitter)/(speedup_det - 1).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import integrate, stats

from psdlab.analysis.checks import check_choice, check_nonnegative, check_positive

__all__ = ["DISTRIBUTIONS", "expected_max", "JitterResult", "jitter_gain"]

DISTRIBUTIONS = ("normal", "gamma")


def _normal_max(mt: float, mv: float, st: float, sv: float) -> float:
    s = float(np.hypot(st, sv))
    if s == 0.0:
        return max(mt, mv)
    d = (mt - mv) / s
    return float(mt * stats.norm.cdf(d) + mv * stats.norm.cdf(-d) + s * stats.norm.pdf(d))


def _gamma_cdf(mean: float, cv: float):
    if cv == 0.0:
        return lambda z: float(z >= mean)
    dist = stats.gamma(a=1.0 / cv ** 2, scale=mean * cv ** 2)
    return dist.cdf


def _gamma_max(mt: float, mv: float, ct: float, cv: float) -> float:
    ft, fv = _gamma_cdf(mt, ct), _gamma_cdf(mv, cv)
    g = lambda z: 1.0 - ft(z) * fv(z)  # noqa: E731
    top = max(mt, mv) * (1.0 + 50.0 * max(ct, cv, 0.1) ** 2 + 20.0 * max(ct, cv))
    head, _ = integrate.quad(g, 0.0, top, points=sorted({mt, mv}), limit=400, epsabs=0.0,
                             epsrel=1e-11)
    tail, _ = integrate.quad(g, top, np.inf, limit=200, epsabs=1e-14 * top)
    return float(head + tail)


def expected_max(t_mean: float, v_mean: float, t_cv: float, v_cv: float,
                 dist: str = "normal") -> float:
    """E[max(t, V)] for independent t, V with the given means (> 0) and CVs (>= 0)."""
    mt, mv = check_positive("t_mean", t_mean), check_positive("V_mean", v_mean)
    ct, cv = check_nonnegative("t_cv", t_cv), check_nonnegative("V_cv", v_cv)
    check_choice("dist", dist, DISTRIBUTIONS)
    if dist == "normal":
        return _normal_max(mt, mv, ct * mt, cv * mv)
    return _gamma_max(mt, mv, ct, cv)


@dataclass(frozen=True)
class JitterResult:
    """PSD's mean step with and without jitter, and the share of its gain that jitter costs."""
    dist: str
    e_max: float
    det_max: float
    sd_step: float
    speedup_det: float
    speedup_jitter: float
    gain_lost: float


def jitter_gain(t_mean: float, v_mean: float, t_cv: float, v_cv: float,
                dist: str = "normal") -> JitterResult:
    """PSD-over-SD speedup per step, deterministic vs jittered (same means)."""
    e_max = expected_max(t_mean, v_mean, t_cv, v_cv, dist)
    det = max(float(t_mean), float(v_mean))
    sd_step = float(t_mean) + float(v_mean)
    s_det, s_jit = sd_step / det, sd_step / e_max
    return JitterResult(dist=dist, e_max=e_max, det_max=det, sd_step=sd_step, speedup_det=s_det,
                        speedup_jitter=s_jit, gain_lost=(s_det - s_jit) / (s_det - 1.0))
