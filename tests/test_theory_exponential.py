"""Closed forms for the exponential frontier against brute force and known limits."""
from __future__ import annotations

import math

import numpy as np
import pytest

from psdlab.analysis.theory import (ExponentialFrontier, exact_ratio, exact_saving,
                                    exponential_optimum, optimal_times, peak_alpha_v,
                                    psd_draft_time_exponential, sd_draft_time_exponential,
                                    sd_opt_draft, t_psd_exponential, t_sd_exponential)

WIDE = np.geomspace(1e-3, 1e3, 25)


@pytest.mark.parametrize("alpha", [0.3, 7.0])
def test_closed_forms_match_numeric_minimisation(alpha):
    for x in WIDE:
        V = x / alpha
        num = optimal_times(ExponentialFrontier(alpha), V)
        assert abs(num.T_sd / t_sd_exponential(alpha, V) - 1) < 1e-6
        assert abs(num.T_psd / t_psd_exponential(alpha, V) - 1) < 1e-6
        assert abs(num.t_sd / sd_draft_time_exponential(alpha, V) - 1) < 1e-3


@pytest.mark.parametrize("x", [1e-3, 0.05, 1.0, 1.2564, 4.0, 50.0, 1e3])
def test_closed_forms_match_dense_grid(x):
    """Plain grid brute force (no refinement): 4e5 log-spaced drafting times.  PSD's objective
    has a kink at t = V (first-order grid error), so t = V is added as a grid point, and the
    grid alone must come within 1e-4 and never beat the closed form."""
    alpha, V = 2.0, x / 2.0
    t = np.geomspace(1e-7, 1e3, 400_000) / alpha
    f = -np.expm1(-alpha * t)
    sd_min = np.min((t + V) / f)
    grid_psd = np.min(np.maximum(t, V) / f)
    psd_min = min(grid_psd, V / -np.expm1(-alpha * V))
    assert abs(sd_min / t_sd_exponential(alpha, V) - 1) < 1e-6
    assert abs(psd_min / t_psd_exponential(alpha, V) - 1) < 1e-6
    assert -1e-12 < grid_psd / t_psd_exponential(alpha, V) - 1 < 1e-4
    assert abs(sd_min / psd_min / exact_ratio(x) - 1) < 1e-6


def test_stationarity_and_value_identity():
    x = np.geomspace(1e-10, 1e6, 2001)
    s = sd_opt_draft(x)
    assert np.all(s > 0)
    np.testing.assert_allclose(s, np.log1p(s + x), rtol=1e-13)           # e^s = 1 + s + x
    # T_SD from the objective at t* equals the closed form 1 + x + s (alpha = R = 1)
    np.testing.assert_allclose((s + x) / -np.expm1(-s), t_sd_exponential(1.0, x), rtol=1e-12)


def test_newton_and_lambertw_methods_agree():
    x = np.geomspace(1e-12, 1e8, 5001)
    np.testing.assert_allclose(sd_opt_draft(x), sd_opt_draft(x, method="lambertw"), rtol=1e-13)


def test_against_mpmath():
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 40
    for x in [1e-12, 3e-5, 1e-4, 0.01, 1.0, 1.2564, 9.9, 699.0, 701.0, 1e5]:
        ref = mp.findroot(lambda u, x=x: mp.e ** u - 1 - u - mp.mpf(x),
                          mp.mpf(math.log1p(x) + 1e-3))
        assert abs(float(sd_opt_draft(x)) / float(ref) - 1) < 1e-13


def test_ratio_range_and_limits():
    x = np.geomspace(1e-12, 1e12, 4001)
    r = exact_ratio(x)
    assert np.all((r >= 1.0) & (r <= 2.0))
    small = 1e-10   # r = 1 + sqrt(2x) + O(x)
    assert abs((float(exact_ratio(small)) - 1) / math.sqrt(2 * small) - 1) < 1e-3
    big = 1e6       # (r - 1) x = 1 + s*, s* = ln(x) + O(ln x / x)
    assert abs((float(exact_ratio(big)) - 1) * big - (1 + math.log(big))) < 1e-3
    np.testing.assert_allclose(exact_saving(x), 1 - 1 / r)


def test_peak_is_exactly_two_at_root():
    xp = peak_alpha_v()
    assert abs(xp - math.log1p(2 * xp)) < 1e-13
    assert abs(float(exact_ratio(xp)) - 2.0) < 1e-12
    assert abs(float(sd_opt_draft(xp)) - xp) < 1e-12          # SD's optimal t equals V there
    grid = np.geomspace(1e-3, 1e3, 100_001)
    assert abs(grid[np.argmax(exact_ratio(grid))] / xp - 1) < 1e-3


def test_broadcasting_and_optimum_object():
    alpha = np.array([0.5, 1.0, 2.0])
    opt = exponential_optimum(alpha, 1.5, R=10.0)
    assert opt.T_sd.shape == (3,)
    np.testing.assert_allclose(opt.ratio, exact_ratio(alpha * 1.5))
    np.testing.assert_allclose(opt.T_psd, t_psd_exponential(alpha, 1.5, 10.0))
    np.testing.assert_allclose(psd_draft_time_exponential(alpha, 1.5), 1.5)
    assert np.all(opt.saving <= 0.5) and np.all(opt.T_sd >= opt.T_psd)


@pytest.mark.parametrize("call, name", [
    (lambda: t_sd_exponential(0.0, 1.0), "alpha"),
    (lambda: t_sd_exponential(-1.0, 1.0), "alpha"),
    (lambda: t_psd_exponential(1.0, 0.0), "V"),
    (lambda: t_psd_exponential(1.0, float("nan")), "V"),
    (lambda: t_sd_exponential(np.array([1.0, np.nan]), 1.0), "alpha"),
    (lambda: exact_ratio(-2.0), "alpha_v"),
    (lambda: exact_ratio([1.0, 0.0]), "alpha_v"),
    (lambda: t_sd_exponential(1.0, 1.0, R=0), "R"),
    (lambda: sd_opt_draft(1.0, method="bisect"), "method"),
])
def test_bad_input_names_parameter(call, name):
    with pytest.raises(ValueError) as err:
        call()
    msg = str(err.value)
    assert msg.startswith(name + ":") and "\n" not in msg
